"""Tables in the documentation, generated from ``benchmarks/results/*.json``.

    python benchmarks/tables.py          # rewrite every generated table in README.md, docs/ and benchmarks/
    python benchmarks/tables.py --check  # exit 1 where a table differs from its results file

A generated table sits between ``<!-- table: NAME -->`` and ``<!-- /table -->``; NAME is a key of ``TABLES``,
which formats ``benchmarks/results/<file>.json`` as markdown. ``tests/test_repo.py`` runs the check.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "benchmarks").glob("**/README.md"))]
BLOCK = re.compile(r"(<!-- table: (\S+) -->\n)(.*?)(<!-- /table -->)", re.S)


def _rows(name: str) -> list[dict]:
    return json.loads((RESULTS / f"{name}.json").read_text())["rows"]


def window_guide() -> str:
    """What a window costs: per model shape and window, the rotary dims R the bfloat16 ladder takes, the head
    dim it serves at, the worst predicted error, and the plan's time on one core and on all."""
    rows = [r for r in _rows("plan_time") if r.get("exit") == 0]
    jobs = sorted({r["jobs"] for r in rows})
    out = ["| heads × head dim | window | R | served head dim | worst predicted (logits) | "
           + " | ".join(f"plan s, {j} core{'s' if j > 1 else ''}" for j in jobs) + " | load before |",
           "|---|---:|---:|---:|---:|" + "---:|" * len(jobs) + "---:|"]
    keys = sorted({(r["heads"], r["head_dim"], r["window"]) for r in rows})
    for heads, hd, window in keys:
        same = {r["jobs"]: r for r in rows if (r["heads"], r["head_dim"], r["window"]) == (heads, hd, window)}
        first = next(iter(same.values()))
        times = " | ".join(f"{same[j]['seconds']:.1f}" if j in same else "" for j in jobs)
        load = max(r["load_before"] for r in same.values())
        out.append(f"| {heads} × {hd} | {window:,} | {first['rotary_dim']} | {hd + first['rotary_dim']} | "
                   f"{first['worst_predicted']:.3g} | {times} | {load:.1f} |")
    return "\n".join(out) + "\n"


def verdicts() -> str:
    """Convert's verdict against verify's for the real-text models (``benchmarks/verdicts.py``)."""
    out = ["| model | dtype | window | convert | predicted | tolerance | verify: converted | native | verdict |",
           "|---|---|---:|---|---:|---:|---:|---:|---|"]
    for r in _rows("verdicts"):
        if not r["accepted"]:
            out.append(f"| {r['model']} | {r['dtype']} | {r['window']:,} | refused | | | | | {r['refusal']} |")
            continue
        verdict = "PASSED" if r.get("passed") else f"FAILED: {r.get('failures') or r.get('verify_error')}"
        out.append(f"| {r['model']} | {r['dtype']} | {r['window']:,} | accepted (R = {r['rotary_dim']}) | "
                   f"{r['predicted']:.3g} | {r['tolerance']:.3g} | {r.get('measured', float('nan')):.3g} | "
                   f"{r.get('native', float('nan')):.3g} | {verdict} |")
    return "\n".join(out) + "\n"


def default_shapes() -> str:
    """The default float32 conversion of the larger supported shapes, end to end (``default_shapes.py``)."""
    out = ["| shape (one layer) | convert | predicted | verify: max \\|Δlogit\\| | threshold | against | verdict |",
           "|---|---|---:|---:|---:|---|---|"]
    for r in _rows("default_shapes"):
        if r["convert_exit"] != 0:
            out.append(f"| {r['shape']} | refused: {r.get('refusal', '')} | | | | | |")
            continue
        verdict = "PASSED" if r.get("passed") else f"exit {r.get('verify_exit')}"
        out.append(f"| {r['shape']} | accepted at {r['window']:,} | {r['predicted']:.3g} | "
                   f"{r.get('max_abs_logit_diff', float('nan')):.3g} | {r.get('threshold', float('nan')):g} | "
                   f"{r.get('against', '')} | {verdict} |")
    return "\n".join(out) + "\n"


TABLES = {"window-guide": window_guide, "verdicts": verdicts, "default-shapes": default_shapes}


def render(text: str) -> str:
    return BLOCK.sub(lambda m: m.group(1) + TABLES[m.group(2)]() + m.group(4), text)


def main() -> int:
    check = "--check" in sys.argv[1:]
    stale = []
    for path in DOCS:
        if not path.exists():
            continue
        text = path.read_text()
        new = render(text)
        if new != text:
            stale.append(path.relative_to(ROOT))
            if not check:
                path.write_text(new)
    for path in stale:
        print(f"{'differs' if check else 'updated'}: {path}")
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
