"""benchmarks/engines/vllm_rope.py: the stored engine-parity results are what the README of benchmarks/engines
shows, every case's frequencies are vLLM's own as planned, and the emulated bias through vLLM's rotation is
within each head's prediction."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "engines"))

import vllm_rope  # noqa: E402


def test_the_stored_parity_is_documented_and_holds():
    rows = json.loads(vllm_rope.RESULTS.read_text())
    assert vllm_rope.table(rows) in (ROOT / "benchmarks" / "engines" / "README.md").read_text()
    assert {(r["heads"], r["head_dim"], r["dtype"], r["window"]) for r in rows} == set(vllm_rope.CASES)
    for r in rows:
        assert r["inv_freq_equal"] and r["vllm_head_size"] == r["served_head_dim"] == r["vllm_rotary_dim"]
        assert all(h["measured"] <= h["predicted"] for h in r["per_head"]) == r["within_prediction"] is True


def test_the_table_says_when_a_case_fails():
    row = {"heads": 8, "head_dim": 128, "dtype": "bfloat16", "window": 4096, "strategy": "ladder",
           "vllm_rope": "Llama3RotaryEmbedding", "vllm_head_size": 160, "inv_freq_equal": False,
           "rotation_max_diff_vs_transformers": 0.5, "worst_measured": 2.0, "worst_predicted": 1.0,
           "within_prediction": False}
    line = vllm_rope.table([row]).splitlines()[-1]
    assert "DIFFERS" in line and line.endswith("| no |")
