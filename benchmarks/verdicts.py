"""Convert's verdict against verify's, as a user meets them: every real-text model converted with the defaults
for each dtype and window, then verified in that dtype on its own held-out text.

    python -m benchmarks.verdicts [--models demo,demo-mpt,demo-falcon] [--dtypes float32,bfloat16,float16]
                                  [--windows 8192,32768,131072] [--context 2048]

Each row: the plan's predicted worst error and its tolerance (convert accepts the plan or refuses it), then
``ropebridge verify`` at CONTEXT tokens of the held-out text: the converted model's max |logit error| from
exact float64 ALiBi, the source's own (reported), in half precision the baseline (the source in that dtype,
attention and bias exact), verify's limit (``limit.limit``: the largest of the dtype's default tolerance, 4x the
prediction and 3x the baseline), the source's error over its first 256 tokens (the reading of the source, judged
in float32) and the verdict. The promise checked: what convert accepts, verify passes.
Prints a table and writes benchmarks/results/verdicts.json; ``python -m benchmarks.tables`` puts the table into
docs/verify.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._common import save, started_as, table


def run(src: Path, dtype: str, window: int, context: int, work: Path) -> dict:
    dst, text = work / f"{src.name}-{dtype}-{window}", work / "text.txt"
    text.write_text((src / "heldout.txt").read_text()[:30_000])  # ~8,500 tokens: CONTEXT of them are read
    row = {"model": src.name, "dtype": dtype, "window": window, "context": context}
    start = time.perf_counter()
    conv = subprocess.run([sys.executable, "-m", "ropebridge", "convert", str(src), str(dst), "--dtype", dtype,
                           "--window", str(window), "--json", "--force"], capture_output=True, text=True)
    row["convert_seconds"] = time.perf_counter() - start
    if conv.returncode != 0:
        return {**row, "accepted": False, "refusal": conv.stderr.strip().splitlines()[-1]}
    plan = json.loads((dst / "ropebridge.json").read_text())["plan"]
    row.update(accepted=True, predicted=plan["worst_predicted_error"], tolerance=plan["tolerance"],
               rotary_dim=plan["rotary_dim"])
    start = time.perf_counter()
    ver = subprocess.run([sys.executable, "-m", "ropebridge", "verify", str(src), str(dst), "--context",
                          str(context), "--text", str(text), "--greedy-tokens", "8", "--json"],
                         capture_output=True, text=True)
    row["verify_seconds"] = time.perf_counter() - start
    if ver.returncode not in (0, 1):
        return {**row, "verify_error": ver.stderr.strip().splitlines()[-1]}
    report = json.loads(ver.stdout)
    row.update(measured=report["reference_converted_max_err"], source=report["reference_source_max_err"],
               threshold=report["thresholds"]["max_abs_logit_diff"], limit=report["thresholds"].get("limit"),
               reading=report.get("source_reading_max_err"), baseline=report.get("baseline_max_err"),
               byte_check=report["byte_check"].get("mode"),
               passed=report["passed"],
               failures="; ".join(report["failures"]))
    return row


def main() -> int:
    from ropebridge.demo import data_dir

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="demo,demo-mpt,demo-falcon")
    p.add_argument("--dtypes", default="float32,bfloat16,float16")
    p.add_argument("--windows", default="8192,32768,131072")
    p.add_argument("--context", type=int, default=2048)
    p.add_argument("--out", default="verdicts", help="results file name (default verdicts: the docs' table)")
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name in args.models.split(","):
            for dtype in args.dtypes.split(","):
                for window in (int(w) for w in args.windows.split(",")):
                    rows.append(run(data_dir(name), dtype, window, args.context, Path(work)))
                    print(table(rows[-1:], list(rows[-1])), flush=True)
    cols = ["model", "dtype", "window", "accepted", "predicted", "tolerance", "measured", "baseline", "source", "limit",
            "reading", "passed"]
    print(table(rows, cols))
    print(f"wrote {save(args.out, {'command': started_as(), 'rows': rows})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
