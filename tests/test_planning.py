"""planning: plans the engine can carry (its float32 frequencies), windows it can address, one plan for
plan and convert."""

import dataclasses

import pytest

from ropebridge import ladder
from ropebridge.planning import check_engine_frequencies, conversion_plan
from ropebridge.sources import from_heads


def test_a_plan_whose_theta_the_engine_would_not_compute_is_refused():
    plan = conversion_plan(from_heads(4, 64, "bloom"), window=256, dtype="float32", base=10000.0, rotary_dim=16)
    assert check_engine_frequencies(plan, "--rope-base 10000") is plan  # the engine's own frequencies
    head = plan.heads[0]
    pair = dataclasses.replace(head.pairs[0], theta=head.pairs[0].theta * (1 + 1e-5))
    doctored = dataclasses.replace(plan, heads=(dataclasses.replace(head, pairs=(pair,)), *plan.heads[1:]))
    with pytest.raises(ValueError, match="would not carry this plan"):
        check_engine_frequencies(doctored, "--rope-base 10000")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_base_beyond_float32_is_refused_not_predicted(dtype):
    # 1e300 ** (2r/R) overflows float32: transformers' inv_freq is 0 from pair 1 on, whatever float64 says
    with pytest.raises(ValueError, match="--rope-base 1e\\+300"):
        conversion_plan(from_heads(4, 64, "bloom"), window=2048, dtype=dtype, base=1e300, rotary_dim=32)


def test_a_one_token_window_plans():
    plan = conversion_plan(from_heads(4, 64, "bloom"), window=1, dtype="bfloat16")
    assert plan.mode == "ladder" and plan.meets_tolerance
    assert plan.base == ladder.free_base(2, plan.rope_dim)


def test_windows_beyond_float32_positions_are_refused():
    with pytest.raises(ValueError, match="2\\^24"):
        conversion_plan(from_heads(4, 64, "bloom"), window=2**24 + 1)
    assert conversion_plan(from_heads(4, 64, "bloom"), window=2**24).window == 2**24  # float32 exact rotation
