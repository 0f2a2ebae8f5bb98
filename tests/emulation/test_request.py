"""PlanRequest: validated once on construction, every refusal naming the bad value; the strategy rule."""

import math

import pytest

from ropebridge.emulation import PlanRequest
from ropebridge.emulation.request import check_window

BAD = [
    ({"window": 0}, "window"),
    ({"window": 2**24 + 1}, "2\\^24"),
    ({"jobs": 0}, "jobs"),
    ({"dtype": "float8"}, "dtype"),
    ({"target": "mistral"}, "target"),
    ({"strategy": "guess"}, "strategy"),
    ({"theta": 0.0}, "theta"),
    ({"theta": 1.0}, "theta \\* window"),
    ({"theta": 1e-6, "max_phase": 0.1}, "not both"),
    ({"max_phase": math.pi / 2}, "max_phase"),
    ({"rope_base": 1.0}, "--rope-base"),
    ({"rotary_dim": 7}, "rotary_dim"),
    ({"split": "half"}, "split"),
    ({"floor": 30.0, "calibration_text": "text"}, "not both"),
    ({"floor": -1.0}, "floor"),
    ({"dtype": "bfloat16", "strategy": "ladder", "theta": 1e-6}, "--strategy single"),
    ({"strategy": "single", "floor": 30.0}, "--floor and --calibration-text are for --strategy ladder"),
    ({"theta": 1e-6, "rotary_dim": 8}, "--rotary-dim needs --rope-base"),
    ({"pairs": 2, "rope_base": None}, "--pairs > 1 needs a fixed base"),
    ({"strategy": "single", "rope_base": 1e4, "theta": 1e-6}, "not both"),
    ({"strategy": "fixed-base", "dtype": "float32"}, "needs --rope-base"),
    ({"dtype": "bfloat16", "strategy": "ladder", "rotary_dim": 4096},
     "--rotary-dim 4096: the ladder is fitted on at most 128"),
    ({"engine": "trtllm", "target": "gpt-neox"}, "does not run --target gpt-neox"),
]


@pytest.mark.parametrize("kwargs, needle", BAD, ids=[str(k) for k, _ in BAD])
def test_bad_requests_are_refused_on_construction(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        PlanRequest(**kwargs)


def test_the_named_strategy_is_what_the_request_says_and_nothing_more():
    assert PlanRequest().named_strategy is None and PlanRequest(dtype="float32").named_strategy is None
    assert PlanRequest(theta=1e-6).named_strategy == PlanRequest(split="sqrt").named_strategy == "single"
    assert PlanRequest(strategy="ladder").named_strategy == "ladder"
    assert PlanRequest(floor=30.0).floor == 30.0  # the ladder's option: checked against the strategy once resolved


def test_values_are_normalised_once():
    r = PlanRequest(window=4096.0, split="2", jobs=2.0)
    assert (r.window, r.split, r.jobs, r.named_strategy) == (4096, 2.0, 2, "single")
    ladder = PlanRequest(floor=[30, 40], dtype="bfloat16", calibration_text=None)
    assert ladder.floor == (30.0, 40.0) and "calibration_text" not in ladder.to_dict()
    assert check_window(2**24) == 2**24


def test_what_was_asked_is_kept_as_asked():
    asked = PlanRequest(engine="vllm")
    assert asked.kernel == "any" and asked.target is None and asked.dtype is None  # resolve chooses them
