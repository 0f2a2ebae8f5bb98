"""benchmarks/engines/engine_rope.py: the stored engine-parity results (vLLM's and SGLang's) are what the README
of benchmarks/engines shows, every case's frequencies are the engine's own as planned and its rotation
transformers', and the emulated bias through the engine's rotation is within each head's prediction in every
case."""

import json
from pathlib import Path

import pytest

from benchmarks.engines import engine_rope

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("engine", engine_rope.ENGINES)
def test_the_stored_parity_is_documented_and_holds(engine):
    stored = json.loads(engine_rope.results(engine).read_text())
    rows = stored["rows"]
    assert engine_rope.table(stored) in (ROOT / "benchmarks" / "engines" / "README.md").read_text()
    assert {(r["family"], r["target"], r["heads"], r["head_dim"], r["dtype"], r["window"])
            for r in rows} == set(engine_rope.cases(engine))
    for r in rows:
        assert r["engine"] == engine and r["inv_freq_equal"] and r["engine_head_size"] == r["served_head_dim"]
        assert r["engine_rotary_dim"] == r["served_rotary_dim"]  # the whole head (llama), the block's R (others)
        assert all(h["measured"] <= h["predicted"] for h in r["per_head"]) == r["within_prediction"]
        assert r["within_prediction"], r  # every head of every case within its prediction


def test_the_table_says_when_a_case_fails():
    row = {"family": "baichuan", "target": "llama", "heads": 8, "kv_heads": 8, "head_dim": 128, "dtype": "bfloat16",
           "window": 4096,
           "strategy": "ladder", "engine": "sglang", "engine_rope": "Llama3RotaryEmbedding", "engine_head_size": 160,
           "inv_freq_equal": False, "rotation_max_diff_vs_transformers": 0.5, "worst_measured": 2.0,
           "worst_predicted": 1.0, "within_prediction": False}
    lines = engine_rope.table({"rows": [row]}).splitlines()
    assert "SGLang rope" in lines[0] and "DIFFERS" in lines[-1] and lines[-1].endswith("| no |")
