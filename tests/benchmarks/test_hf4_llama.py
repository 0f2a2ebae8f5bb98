"""benchmarks/engines/hf4_llama.py: the stored transformers 4.x runs of the llama target are what the README of
benchmarks/engines shows, every case passes with the config as written (within the plan against the source's
code; in float32 also transformers 5.x's logits and greedy tokens exactly), and the rope_scaling key is what makes it
pass (without it transformers 4.x runs the default rope)."""

import json
from pathlib import Path

from benchmarks.engines import hf4_llama

ROOT = Path(__file__).resolve().parents[2]


def test_the_stored_runs_are_documented_and_the_written_config_passes():
    stored = json.loads(hf4_llama.RESULTS.read_text())
    rows = stored["rows"]
    assert hf4_llama.table(stored) in (ROOT / "benchmarks" / "engines" / "README.md").read_text()
    written = [r for r in rows if r["config"] == "as written"]
    assert {(r["family"], r["dtype"]) for r in written} == set(hf4_llama.CASES)
    assert all(r["passes"] and r["transformers"].startswith("4.") and r["max_abs_vs_oracle"] <= r["limit"]
               for r in written)
    assert all(r["greedy_identical"] and r["max_abs_vs_transformers5"] == 0 for r in written if r["dtype"] == "float32")
    assert all(not r["passes"] for r in rows if r["config"] == "without rope_scaling")


def test_a_failing_case_reads_as_one():
    row = {"family": "refact", "dtype": "float32", "strategy": "single", "config": "as written",
           "transformers": "4.57.6", "max_abs_vs_oracle": 13.1, "limit": 1e-3, "max_abs_vs_transformers5": 13.1,
           "greedy_identical": False,
           "passes": False}
    assert hf4_llama.table({"rows": [row]}).splitlines()[-1].endswith("| differs | no |")
