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
    ({"dtype": "bfloat16", "target": "starcoder2", "strategy": "ladder"}, "ladder needs --target gpt-neox"),
    ({"dtype": "bfloat16", "strategy": "ladder", "theta": 1e-6}, "--strategy single"),
    ({"dtype": "float32", "floor": 30.0}, "--floor and --calibration-text are for --strategy ladder"),
    ({"dtype": "float32", "rotary_dim": 8}, "--rotary-dim needs --rope-base"),
    ({"dtype": "float32", "pairs": 2}, "--pairs > 1 needs a fixed base"),
    ({"dtype": "float32", "target": "starcoder2", "rope_base": 1e4}, "--rope-base and --pairs with the single pair are for gpt-neox"),
    ({"dtype": "float32", "rope_base": 1e4, "theta": 1e-6}, "not both"),
    ({"strategy": "fixed-base", "dtype": "float32"}, "needs --rope-base"),
    ({"dtype": "bfloat16", "strategy": "ladder", "rotary_dim": 4096}, "--rotary-dim 4096: the ladder is fitted on at most 128"),
    ({"dtype": "float16", "rotary_dim": 130}, "at most 128"),  # the ladder by default in half precision
]


def test_the_largest_ladder_is_taken():
    assert PlanRequest(dtype="bfloat16", rotary_dim=128).chosen_strategy == "ladder"


@pytest.mark.parametrize("kwargs, needle", BAD, ids=[str(k) for k, _ in BAD])
def test_bad_requests_are_refused_on_construction(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        PlanRequest(**kwargs)


def test_rules_that_need_the_dtype_are_checked_once_it_is_known():
    request = PlanRequest(floor=30.0)  # the ladder takes a floor: fine until the dtype says single pair
    assert request.chosen_strategy is None
    assert request.with_dtype("bfloat16").chosen_strategy == "ladder"
    with pytest.raises(ValueError, match="--floor"):
        request.with_dtype("float32")


@pytest.mark.parametrize("kwargs, strategy", [
    ({"dtype": "float32"}, "single"), ({"dtype": "bfloat16"}, "ladder"), ({"dtype": "float16"}, "ladder"),
    ({"dtype": "bfloat16", "target": "nemotron"}, "ladder"), ({"dtype": "bfloat16", "target": "starcoder2"}, "single"),
    ({"dtype": "bfloat16", "theta": 1e-6}, "single"),
    ({"dtype": "float32", "rope_base": 1e4}, "fixed-base"), ({"dtype": "bfloat16", "rope_base": 1e4}, "ladder"),
    ({"dtype": "float32", "strategy": "single", "rope_base": 1e4}, "fixed-base"),
])
def test_the_strategy_rule(kwargs, strategy):
    assert PlanRequest(**kwargs).chosen_strategy == strategy


def test_values_are_normalised_once():
    r = PlanRequest(window=4096.0, split="2", jobs=2.0)
    assert (r.window, r.split, r.jobs, r.chosen_strategy) == (4096, 2.0, 2, "single")
    ladder = PlanRequest(floor=[30, 40], dtype="bfloat16", calibration_text=None)
    assert ladder.floor == (30.0, 40.0) and "calibration_text" not in ladder.to_dict()
    assert check_window(2**24) == 2**24


def test_resolve_completes_a_request_once_for_its_source():
    from ropebridge.checkpoint.config import from_heads
    from ropebridge.emulation import resolve
    from ropebridge.emulation.ladder import default_cutoff
    from ropebridge.numerics import DEFAULT_CUTOFF, plan_tolerance

    source = from_heads(4, 64, family="baichuan")
    resolved = resolve(source, PlanRequest(window=1024, dtype="bfloat16"))
    assert (resolved.target, resolved.strategy) == ("llama", "ladder")  # the family's target, its default strategy
    assert resolved.tolerance == plan_tolerance("bfloat16", source.slopes, 1024)
    assert resolved.cutoff == default_cutoff(1024, "bfloat16")
    assert resolve(source, resolved) == resolved  # complete: nothing left to fill
    single = resolve(source, PlanRequest(window=1024, dtype="float32", tolerance=0.5, cutoff=30.0))
    assert (single.strategy, single.tolerance, single.cutoff) == ("single", 0.5, 30.0)  # given values kept
    assert resolve(from_heads(4, 64), PlanRequest(dtype="float32", strategy="single")).cutoff == DEFAULT_CUTOFF
    with pytest.raises(ValueError, match="names no dtype"):
        resolve(source, PlanRequest())
    from types import SimpleNamespace

    gated = SimpleNamespace(family="baichuan", block="rmsnorm-gated", slopes=source.slopes)
    with pytest.raises(ValueError, match="cannot carry this baichuan model"):
        resolve(gated, PlanRequest(dtype="float32", target="gpt-neox"))
