"""The engine studies' one judgement against the exact model (``benchmarks/engines/scoring.py``): a run's
perplexity, |Δ log p| and greedy partings, and what a row says of the conversion it ran."""

import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "engines"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import scoring  # noqa: E402


def _ref(logprobs, greedy, margins):
    return {"logprobs": logprobs, "greedy": greedy, "margins": margins}


def test_a_run_passes_within_the_perplexity_limit_and_parts_only_at_near_ties():
    ref = _ref([-1.0, -2.0, -3.0], [[1, 2, 3], [4, 5, 6]], [[1.0, 0.01, 1.0], [1.0, 1.0, 1.0]])
    same = scoring.judge({"logprobs": [-1.0, -2.0, -3.0], "greedy": [[1, 2, 3], [4, 5, 6]]}, ref)
    assert same["passes"] and same["ppl_rel"] == 0 and same["greedy_partings"] == []
    near = scoring.judge({"logprobs": [-1.0, -2.0, -3.006], "greedy": [[1, 9, 9], [4, 5, 6]]}, ref)
    assert near["passes"] and near["greedy_partings"] == [
        {"prompt": 0, "step": 1, "exact_margin": 0.01, "near_tie": True}]  # 0.01 <= 2 x 0.006
    far = scoring.judge({"logprobs": [-1.0, -2.0, -3.006], "greedy": [[1, 2, 3], [9, 9, 9]]}, ref)
    assert not far["passes"] and not far["greedy_partings"][0]["near_tie"]  # margin 1.0 is no tie
    worse = scoring.judge({"logprobs": [-1.0, -2.0, -3.1], "greedy": [[1, 2, 3], [4, 5, 6]]}, ref)
    assert not worse["passes"] and math.isclose(worse["ppl_rel"], math.exp(0.1 / 3) - 1)  # beyond 0.5%
    nan = scoring.judge({"logprobs": [-1.0, float("nan"), -3.0], "greedy": [[1, 2, 3], [4, 5, 6]]}, ref)
    assert not nan["passes"]  # a non-finite measurement is a failure
    refused = scoring.judge({"refused": "ValueError: no"}, ref)
    assert refused == {"refused": "ValueError: no", "passes": None}


def test_a_row_names_the_conversion_it_ran(tmp_path):
    (tmp_path / "ropebridge.json").write_text(json.dumps({"target": "persimmon", "plan": {
        "strategy": "ladder", "rotary_dim": 32, "heads": [{"predicted_error": 0.01}, {"predicted_error": 0.03}]}}))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "persimmon", "hidden_size": 384,
                                                      "num_attention_heads": 6}))
    assert scoring.conversion(tmp_path) == {"target": "persimmon", "strategy": "ladder", "rotary_dim": 32,
                                            "predicted": 0.03, "served_head_dim": 64}
