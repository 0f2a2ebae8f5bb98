"""A head's bias on given pairs: the amplitudes against the Taylor moments they must match (float64), the
monotonicity check against its one-pair closed form, the split of N, and the head's plan."""

import math

import numpy as np
import pytest
import torch

from ropebridge.emulation.fixed_base import frequency_set
from ropebridge.emulation.pairs import evaluate, is_non_increasing, multi_pair_amplitudes, split_for
from ropebridge.numerics import Numerics


def test_multi_pair_fit_cancels_the_cubic_term():
    thetas = frequency_set(10000.0, 16)[-2:]  # ~1e-3 and ~3.2e-4
    assert thetas == pytest.approx([1e-3, 10**-3.5])
    a = multi_pair_amplitudes(0.25, thetas)
    assert a @ thetas == pytest.approx(0.25, rel=1e-14)
    assert a @ thetas**3 == pytest.approx(0.0, abs=1e-14 * abs(a[1]) * thetas[1] ** 3)
    t3 = frequency_set(10000.0, 16)[-3:]
    three = multi_pair_amplitudes(0.25, t3)
    assert three @ t3**5 == pytest.approx(0.0, abs=1e-12 * abs(three).max() * t3.max() ** 5)


def test_one_pair_is_the_slope_over_theta_and_equal_thetas_are_refused():
    assert multi_pair_amplitudes(0.5, [1e-3]) == pytest.approx([500.0], rel=1e-15)
    with pytest.raises(ValueError, match="distinct"):
        multi_pair_amplitudes(0.5, [1e-3, 1e-3])


@pytest.mark.parametrize("phase", [0.5, 1.5, 1.57, 1.58, 2.0, 3.0])
def test_one_pair_never_rises_exactly_while_theta_L_is_at_most_pi_over_2(phase):
    window = 1000
    theta = phase / window
    assert is_non_increasing([1.0], [theta], window) == (phase <= math.pi / 2)


def test_the_split_holds_n_where_the_dtype_cannot():
    big = 1e6  # above float16's 65504
    assert split_for(big, "float16", None) == math.sqrt(big) and split_for(big, "float32", None) == 1.0
    assert split_for(100.0, "float32", "sqrt") == 10.0 and split_for(100.0, "float32", 4.0) == 4.0
    q, k = big / split_for(big, "float16", None), split_for(big, "float16", None)
    assert q <= torch.finfo(torch.float16).max and k <= torch.finfo(torch.float16).max


def test_a_head_plan_carries_its_pairs_and_a_rising_pair_set_is_none():
    num = Numerics(1 / 8, 2048, "float32")
    head = evaluate(3, 0.25, [1e-4], [None], num)
    assert head.head == 3 and head.pairs[0].N == pytest.approx(0.25 / 1e-4 * 8) and head.split == 1.0
    assert head.predicted_error >= max(head.approximation_error, head.rounding_error)
    thetas = np.array([1e-3, 2e-3])  # fast pairs over 2048 tokens: the fitted bias turns back up
    assert not is_non_increasing(multi_pair_amplitudes(0.25, thetas), thetas, num.window)
    assert evaluate(0, 0.25, list(thetas), [0, 1], num) is None
