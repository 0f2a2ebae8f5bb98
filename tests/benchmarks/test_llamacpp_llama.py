"""benchmarks/engines/llamacpp_llama.py: the stored llama.cpp runs of the llama target (its own converter with its
defaults) are what the README of benchmarks/engines shows, every conversion is within its limit with the
reading's greedy tokens, and llama.cpp's native Refact is the RMSNorm reading of it."""

import json
from pathlib import Path

from benchmarks.engines import llamacpp_llama

ROOT = Path(__file__).resolve().parents[2]


def test_the_stored_runs_are_documented_and_pass():
    stored = json.loads(llamacpp_llama.RESULTS.read_text())
    rows = stored["rows"]
    assert llamacpp_llama.table(stored) in (ROOT / "benchmarks" / "engines" / "README.md").read_text()
    assert {(r["family"], r["strategy"]) for r in rows} == set(llamacpp_llama.CASES)
    converted = [r for r in rows if r["strategy"] != "native"]
    assert all(r["passes"] == (r["max_abs_vs_oracle"] <= r["limit"] and r["greedy_identical"]) is True
               for r in converted)
    assert {r["kv_heads"] for r in rows if r["family"] == "refact"} == {1}  # multi-query kept through the GGUF
    # llama.cpp's own Refact is the RMSNorm reading of it, not its published code: the one place they differ
    native = next(r for r in rows if r["strategy"] == "native")
    assert native["max_abs_vs_rmsnorm_reading"] <= native["limit"] < 1.0 < native["max_abs_vs_oracle"]


def test_a_failing_case_reads_as_one():
    row = {"family": "refact", "dtype": "float32", "strategy": "single", "head_dim": 18, "kv_heads": 1,
           "llama_cpp_python": "0.3.36", "max_abs_vs_oracle": 2.0, "max_abs_vs_rmsnorm_reading": None,
           "limit": 1e-3, "greedy_identical": False,
           "passes": False}
    assert llamacpp_llama.table({"rows": [row]}).splitlines()[-1].endswith("| differs | no |")
