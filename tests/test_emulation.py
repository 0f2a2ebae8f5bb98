"""The planner: the source text's numbers, the modes, fixed-base limits, the multi-pair fit, half precision."""

import json
import math

import numpy as np
import pytest

from ropebridge.emulation import EmulationPlan, plan_emulation
from ropebridge.error_model import emulated_bias
from ropebridge.fixed_base import frequency_set, max_window_for_phase, multi_pair_amplitudes
from ropebridge.sources import family_slopes, from_config, from_heads

BLOOM_560M = from_heads(16, 64)


def test_source_text_example():
    # BLOOM-560M, head_dim 64, L = 65536, phase 0.1: m ~ 0.7071, theta ~ 1.526e-6, N ~ 3.707e6
    plan = plan_emulation(BLOOM_560M.slopes, 64, 65536, max_phase=0.1)
    steep = plan.heads[0]
    assert steep.slope == pytest.approx(0.7071, abs=1e-4)
    assert steep.theta == pytest.approx(1.526e-6, rel=1e-3)
    assert steep.N == pytest.approx(3.707e6, rel=1e-3)
    assert steep.N == pytest.approx(steep.slope * math.sqrt(64) / steep.theta, rel=1e-15)
    assert all(h.phase == pytest.approx(0.1) for h in plan.heads)


def test_emulated_bias_is_alibi_in_the_small_angle_limit():
    plan = plan_emulation(BLOOM_560M.slopes, 64, 4096, max_phase=1e-3)
    d = np.arange(0, 4097, 64.0)
    for h in plan.heads:
        np.testing.assert_allclose(emulated_bias(h.specs(), plan.scale, d), -h.slope * d, rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_error_optimal_beats_the_fixed_rules(dtype):
    slopes = BLOOM_560M.slopes[::5]
    best = plan_emulation(slopes, 64, 2048, dtype=dtype)
    assert best.mode == "error-optimal"
    for phase in (1e-3, 0.1, 1.0):
        other = plan_emulation(slopes, 64, 2048, dtype=dtype, max_phase=phase)
        for a, b in zip(best.heads, other.heads):
            assert a.predicted_error <= b.predicted_error * 1.01


def test_float16_optimum_is_interior():
    # float16: the sine term grows with theta, the subnormal-table term like 1/theta; the optimum lies between
    m = [2**-8]
    best = plan_emulation(m, 64, 4096, dtype="float16").heads[0]
    assert 1e-9 < best.theta * 4096 < 1.5
    for factor in (0.1, 10.0):
        t = best.theta * factor
        if t * 4096 < math.pi / 2:
            other = plan_emulation(m, 64, 4096, dtype="float16", theta=t).heads[0]
            assert other.predicted_error > best.predicted_error


def test_fixed_base_limits():
    # slowest pair's phase over L ~ L/base: base 10000, R = 64 -> ~750; base 500000, R = 128 -> ~40.7K
    assert max_window_for_phase(10000, 64, 0.1) == pytest.approx(750, abs=2)
    assert max_window_for_phase(500000, 128, 0.1) == pytest.approx(40700, rel=2e-3)


def test_multi_pair_fit_cancels_the_cubic_term():
    thetas = frequency_set(10000.0, 16)[-2:]  # ~1e-3 and ~3.2e-4
    assert thetas == pytest.approx([1e-3, 10**-3.5])
    a = multi_pair_amplitudes(0.25, thetas)
    assert a @ thetas == pytest.approx(0.25, rel=1e-14)
    assert a @ thetas**3 == pytest.approx(0.0, abs=1e-14 * abs(a[1]) * thetas[1] ** 3)
    three = multi_pair_amplitudes(0.25, frequency_set(10000.0, 16)[-3:])
    t3 = frequency_set(10000.0, 16)[-3:]
    assert three @ t3**5 == pytest.approx(0.0, abs=1e-12 * abs(three).max() * t3.max() ** 5)


def test_multi_pair_moves_the_limit():
    slopes = from_heads(8, 64).slopes
    one = plan_emulation(slopes, 64, 512, base=10000, rope_dim=16, pairs=1)
    two = plan_emulation(slopes, 64, 512, base=10000, rope_dim=16, pairs=2)
    assert two.worst_head.predicted_error < one.worst_head.predicted_error / 20
    assert all(len(h.pairs) == 2 and [p.index for p in h.pairs] == [6, 7] for h in two.heads)
    assert two.max_window > 5 * one.max_window
    # the window limit is consistent with the plan at that window
    at_limit = plan_emulation(slopes, 64, two.max_window, base=10000, rope_dim=16, pairs=2)
    assert at_limit.meets_tolerance
    beyond = plan_emulation(slopes, 64, 2 * two.max_window, base=10000, rope_dim=16, pairs=2)
    assert not beyond.meets_tolerance


def test_float16_splits_n_and_refuses_the_unrepresentable():
    plan = plan_emulation(BLOOM_560M.slopes[:1], 64, 65536, dtype="float16", max_phase=0.1)
    h = plan.heads[0]
    assert h.N > 65504 and h.split == pytest.approx(math.sqrt(h.N))
    assert plan_emulation(BLOOM_560M.slopes[:1], 64, 65536, dtype="float32", max_phase=0.1).heads[0].split == 1.0
    with pytest.raises(ValueError, match="float16"):
        plan_emulation(BLOOM_560M.slopes[:1], 64, 65536, dtype="float16", max_phase=0.1, split=1.0)


def test_plan_is_frozen_and_round_trips_through_json():
    plan = plan_emulation(from_heads(4, 64).slopes, 64, 1024, base=10000, rope_dim=16, pairs=2)
    data = json.loads(plan.to_json())
    assert {"heads", "window", "dtype", "max_window"} <= set(data)
    assert {"head", "slope", "theta", "N", "predicted_error"} <= set(data["heads"][0])
    assert EmulationPlan.from_dict(data) == plan
    with pytest.raises(AttributeError):
        plan.window = 3


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"window": 0}, "window"),
        ({"window": -5}, "window"),
        ({"theta": 0.0}, "theta"),
        ({"theta": -1e-5}, "theta"),
        ({"theta": 1.0}, "theta"),  # theta * L >= pi/2
        ({"max_phase": math.pi / 2}, "max_phase"),
        ({"max_phase": 2.0}, "max_phase"),
        ({"pairs": 2}, "base"),
        ({"base": 10000.0}, "rope_dim"),
        ({"dtype": "float8"}, "dtype"),
        ({"base": 10000.0, "rope_dim": 16, "window": 100000}, "window"),
    ],
)
def test_bad_input(kwargs, match):
    args = {"window": 1024, **kwargs}
    window = args.pop("window")
    with pytest.raises(ValueError, match=match):
        plan_emulation([0.5, 0.25], 64, window, **args)


def test_sources_from_configs():
    bloom = from_config({"model_type": "bloom", "n_head": 12, "hidden_size": 1152})
    assert (bloom.family, bloom.n_heads, bloom.head_dim) == ("bloom", 12, 96)
    mpt = from_config({"model_type": "mpt", "n_heads": 8, "d_model": 512, "attn_config": {"alibi": True,
                                                                                          "alibi_bias_max": 16}})
    assert mpt.slopes[0] == pytest.approx(2**-2)
    falcon = from_config({"model_type": "falcon", "alibi": True, "num_attention_heads": 16, "hidden_size": 1024})
    # Falcon: bfloat16-rounded slope, divided by sqrt(head_dim) like its scores
    assert falcon.slopes[0] == pytest.approx(0.70703125 / 8, rel=1e-12)
    assert family_slopes("falcon", 16, 64)[1] == 0.5 / 8
    for bad, match in [
        ({"model_type": "llama", "num_attention_heads": 8, "hidden_size": 512}, "llama"),
        ({"model_type": "gpt2", "n_head": 8, "n_embd": 512}, "gpt2"),
        ({"model_type": "mpt", "n_heads": 8, "d_model": 512, "attn_config": {"alibi": False}}, "alibi"),
        ({"model_type": "falcon", "alibi": False, "num_attention_heads": 8, "hidden_size": 512}, "alibi"),
        ({"model_type": "bloom", "n_head": 7, "hidden_size": 512}, "multiple"),
    ]:
        with pytest.raises(ValueError, match=match):
            from_config(bad)
