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


SHAPES = {  # attention shapes of the supported checkpoints: family, heads, head dim
    "bloom-560m": ("bloom", 16, 64), "bloom-1b7": ("bloom", 16, 128), "bloom-7b1": ("bloom", 32, 128),
    "bloom-176b": ("bloom", 112, 128), "mpt-7b": ("mpt", 32, 128), "mpt-30b": ("mpt", 64, 112),
    "falcon-rw-1b": ("falcon", 32, 64), "falcon-rw-7b": ("falcon", 71, 64),
}


@pytest.mark.parametrize("name", SHAPES)
def test_the_default_float32_plan_of_every_supported_shape_is_accepted(name):
    from ropebridge.planning import DEFAULT_WINDOW

    family, heads, head_dim = SHAPES[name]
    plan = conversion_plan(from_heads(heads, head_dim, family), dtype="float32")
    assert plan.window == DEFAULT_WINDOW and plan.mode == "exact-rotation"
    assert plan.meets_tolerance, (name, plan.worst_head.predicted_error)


def test_the_float32_tolerance_is_1e3_or_what_float32_resolves_of_the_bias():
    from ropebridge.error_model import half_ulp, plan_tolerance

    slopes = [0.5, 0.25]
    assert plan_tolerance("float32", slopes, 2048) == 1e-3  # 4 half-ulps of 1024: 2.4e-4
    assert plan_tolerance("float32", slopes, 65536) == 4 * half_ulp(0.5 * 65536, "float32") == 2.0**-7
    assert plan_tolerance("bfloat16", slopes, 65536) == 2.0  # half precision: fixed
    plan = conversion_plan(from_heads(6, 32, "bloom"), window=32768, dtype="float32")
    assert plan.tolerance == 4 * half_ulp(0.5 * 32768, "float32") and plan.meets_tolerance
    assert conversion_plan(from_heads(6, 32, "bloom"), window=32768, tolerance=1e-3).meets_tolerance is False
