"""A fixed base: the limits of the source text, the multi-pair fit, and frequencies the engine computes."""

import dataclasses

import numpy as np
import pytest
import torch

from ropebridge.checkpoint.config import from_heads
from ropebridge.emulation import PlanRequest, plan
from ropebridge.emulation.fixed_base import (
    check_engine_frequencies,
    engine_frequencies,
    frequency_set,
    max_window_for_phase,
)


def fixed(source, window, **kw):
    return plan(source, PlanRequest(window=window, dtype="float32", rope_base=10000.0, rotary_dim=16, **kw))


def test_fixed_base_limits():
    # slowest pair's phase over L ~ L/base: base 10000, R = 64 -> ~750; base 500000, R = 128 -> ~40.7K
    assert max_window_for_phase(10000, 64, 0.1) == pytest.approx(750, abs=2)
    assert max_window_for_phase(500000, 128, 0.1) == pytest.approx(40700, rel=2e-3)


def test_multi_pair_moves_the_limit():
    source = from_heads(8, 64)
    one, two = fixed(source, 512, pairs=1), fixed(source, 512, pairs=2)
    assert two.worst_head.predicted_error < one.worst_head.predicted_error / 20
    assert all(len(h.pairs) == 2 and [p.index for p in h.pairs] == [6, 7] for h in two.heads)
    assert two.max_window > 5 * one.max_window
    # the window limit is consistent with the plan at that window
    assert fixed(source, two.max_window, pairs=2).meets_tolerance
    assert not fixed(source, 2 * two.max_window, pairs=2).meets_tolerance


def test_the_float64_set_is_the_engines_within_float32_rounding():
    # GPT-NeoX computes inv_freq = 1 / base ** (arange(0, R, 2).float() / R) in float32
    ours = engine_frequencies(29678.75, 16)
    theirs = (1.0 / (29678.75 ** (torch.arange(0, 16, 2, dtype=torch.int64).float() / 16))).double().numpy()
    np.testing.assert_array_equal(ours, theirs)
    assert np.abs(frequency_set(29678.75, 16) / ours - 1).max() < 2**-22  # the float64 set, within float32's rounding


def test_a_plan_whose_theta_the_engine_would_not_compute_is_refused():
    p = fixed(from_heads(4, 64), 256)
    assert check_engine_frequencies(p, "--rope-base 10000") is p  # the engine's own frequencies
    head = p.heads[0]
    pair = dataclasses.replace(head.pairs[0], theta=head.pairs[0].theta * (1 + 1e-5))
    doctored = dataclasses.replace(p, heads=(dataclasses.replace(head, pairs=(pair,)), *p.heads[1:]))
    with pytest.raises(ValueError, match="would not carry this plan"):
        check_engine_frequencies(doctored, "--rope-base 10000")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_base_beyond_float32_is_refused_not_predicted(dtype):
    # 1e300 ** (2r/R) overflows float32: transformers' inv_freq is 0 from pair 1 on, whatever float64 says
    with pytest.raises(ValueError, match="--rope-base 1e\\+300"):
        plan(from_heads(4, 64), PlanRequest(window=2048, dtype=dtype, rope_base=1e300, rotary_dim=32))


def test_a_window_beyond_the_base_is_refused():
    with pytest.raises(ValueError, match="monotonically"):
        fixed(from_heads(2, 64), 100000)


def test_a_fixed_base_takes_at_most_1024_rotary_dims_in_one_line():
    from ropebridge.checkpoint.config import from_heads
    from ropebridge.emulation import PlanRequest, plan

    with pytest.raises(ValueError, match="--rotary-dim 100000000: a fixed base takes at most 1024 rotary dims"):
        plan(from_heads(6, 32), PlanRequest(rope_base=10000.0, rotary_dim=100_000_000, dtype="float32"))
