"""How each engine's cell of the docs' engine tables is known: **run** (the engine served the conversion here and
it was measured against the exact float64 ALiBi model, the numbers from ``benchmarks/results/*.json``) or **read**
(from the engine's source at the version the row names). ``benchmarks/tables.py`` writes the marks. This module is
the one source of "run": a cell of ``targets.engine_facts`` says what the engine's code does (read, measured, tested)
and never whether it was run (``tests/benchmarks/test_known.py``).

- vLLM: ``engines/vllm_run.py`` (``vllm_engine.json``): the family's conversion to that target in bfloat16 and
  float16, both APIs, every row passing; the worst |Δ perplexity| from exact.
- llama.cpp: ``engines/run.py`` (``engines.json``, BLOOM), ``engines/llamacpp_families.py``
  (``llamacpp_families.json``: MPT, Jais, Baichuan) and ``engines/llamacpp_llama.py`` (``llamacpp_llama.json``:
  Baichuan and Refact picos on the llama target): F32 GGUFs, max |Δlogit| from exact.
- transformers: every family's conversion to every target it takes runs in the test suite against the exact model.
- SGLang: ``engines/sglang_run.py`` (``sglang_engine.json``): sglang 0.5.23 on this CPU (``--device cpu``), the
  family's conversion to that target in bfloat16 and float16, both APIs, every row passing; the worst |Δ perplexity|.
- TensorRT-LLM: read (no CPU build).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from ropebridge.targets.support import RUN

RESULTS = Path(__file__).resolve().parent / "results"


def _load(name: str):
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


@cache
def _family_of(model: str) -> str:
    from ropebridge.checkpoint.config import from_config
    from ropebridge.demo import data_dir

    return from_config(data_dir(model)).family


SERVED = {"vllm": "vllm_engine", "sglang": "sglang_engine"}  # the engines whose serving of the conversions is scored


@cache
def served_runs(engine: str) -> dict[tuple[str, str], float]:
    """(family, target) -> the worst |Δ perplexity| (relative) of its half-precision conversions served by ``engine``
    (a key of ``SERVED``), where every one of them passed."""
    out: dict[tuple[str, str], float] = {}
    failed = set()
    for r in (_load(SERVED[engine]) or {}).get("rows", []):
        if r["kind"] != "converted" or r["dtype"] == "float32" or r.get("refused") or not r.get("target"):
            continue
        key = (_family_of(r["model"]), r["target"])
        if not r["passes"]:
            failed.add(key)
        out[key] = max(out.get(key, 0.0), abs(r["ppl_rel"]))
    return {k: v for k, v in out.items() if k not in failed}


@cache
def llamacpp_runs() -> dict[tuple[str, str], str]:
    """(family, target) -> what llama.cpp measured of the family's float32 conversion to that target."""
    out = {}
    for r in (_load("engines") or {}).get("rows", []):
        if r["engine"] == "llama.cpp" and r["model"] == "demo" and r["label"].endswith("(recommended)"):
            out[("bloom", "gpt-neox")] = f"{r['ratio_vs_exact']:.2g}× native's error"
    for r in (_load("llamacpp_families") or {}).get("rows", []):
        c = r["converted"]
        out[(r["family"], r["target"])] = (f"{r['ratio_vs_exact']:.2g}× native's error" if r["ratio_vs_exact"]
                                           else f"{c['max_abs_logit_diff']:.2g} from exact")
    for r in (_load("llamacpp_llama") or {}).get("rows", []):
        if r["strategy"] == "single" and r["passes"] and (r["family"], "llama") not in out:
            out[(r["family"], "llama")] = f"{r['max_abs_vs_oracle']:.2g} from exact (pico)"
    return out


def mark(family: str, parallel: bool, target: str, engine: str, short: bool = False) -> str:
    """How ``engine`` running ``target`` for ``family`` (with a parallel residual or not) is known, in a few words
    (``short``: vLLM's Δ perplexity alone)."""
    if engine == "transformers":
        return "run"
    if engine in SERVED and not parallel and (family, target) in served_runs(engine):
        return f"run{'' if short else ':'} ≤ {100 * served_runs(engine)[(family, target)]:.2f}%"
    if engine == "llama.cpp" and not parallel and (family, target) in llamacpp_runs():
        return "run" if short else f"run: {llamacpp_runs()[(family, target)]}"
    return "read"


def target_runs(target: str, engine: str) -> str | None:
    """What was run of ``target`` on ``engine`` over every family, in a few words; None where nothing was."""
    if engine in SERVED:
        found = {f: v for (f, t), v in served_runs(engine).items() if t == target}
        if found:
            worst = 100 * max(found.values())
            return f"run: {RUN[engine]}, {', '.join(sorted(found))}, Δ perplexity ≤ {worst:.2f}%"
    if engine == "llama.cpp":
        found = {f: v for (f, t), v in llamacpp_runs().items() if t == target}
        if found:
            return "run: " + "; ".join(f"{f} {v}" for f, v in sorted(found.items()))
    return None
