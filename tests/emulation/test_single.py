"""The single pair: the source text's numbers, the small-angle limit, the theta rules, float16's split."""

import math

import numpy as np
import pytest

from ropebridge.checkpoint.config import from_heads
from ropebridge.emulation import PlanRequest, plan
from ropebridge.emulation.error_model import emulated_bias
from ropebridge.emulation.pairs import evaluate
from ropebridge.emulation.single import exact_rotation_theta, shared_theta
from ropebridge.numerics import Numerics

BLOOM_560M = from_heads(16, 64)


def free(source, **kw):
    """The single pair at a free theta (a target that rotates one pair)."""
    return plan(source, PlanRequest(target="starcoder2", **{"dtype": "float32", **kw}))


def test_source_text_example():
    # BLOOM-560M, head_dim 64, L = 65536, phase 0.1: m ~ 0.7071, theta ~ 1.526e-6, N ~ 3.707e6
    p = free(BLOOM_560M, window=65536, max_phase=0.1)
    steep = p.heads[0]
    assert steep.slope == pytest.approx(0.7071, abs=1e-4)
    assert steep.theta == pytest.approx(1.526e-6, rel=1e-3)
    assert steep.N == pytest.approx(3.707e6, rel=1e-3)
    assert steep.N == pytest.approx(steep.slope * math.sqrt(64) / steep.theta, rel=1e-15)
    assert p.theta_rule == "max-phase" and all(h.phase(p.window) == pytest.approx(0.1) for h in p.heads)


def test_emulated_bias_is_alibi_in_the_small_angle_limit():
    p = free(BLOOM_560M, window=4096, max_phase=1e-3)
    d = np.arange(0, 4097, 64.0)
    for h in p.heads:
        np.testing.assert_allclose(emulated_bias(h.specs(), p.scale, d), -h.slope * d, rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_the_shared_error_optimal_theta_beats_the_fixed_rules_on_the_worst_head(dtype):
    source = from_heads(16, 64)
    num = Numerics(1 / 8, 2048, dtype)
    theta = shared_theta(source.slopes, num)
    best = max(evaluate(h, m, [theta], [None], num).predicted_error for h, m in enumerate(source.slopes))
    for phase in (1e-3, 0.1, 1.0):
        other = free(source, window=2048, dtype=dtype, max_phase=phase)
        assert best <= other.worst_head.predicted_error * 1.01
    assert free(source, window=2048, dtype=dtype, strategy="single").theta_rule == (
        "exact-rotation" if dtype == "float32" else "error-optimal")


def test_float16_optimum_is_interior():
    # float16: the sine term grows with theta, the subnormal-table term like 1/theta; the optimum lies between
    one = from_heads(1, 64)
    best = free(one, window=4096, dtype="float16").heads[0]
    assert 1e-9 < best.theta * 4096 < 1.5
    for factor in (0.1, 10.0):
        t = best.theta * factor
        if t * 4096 < math.pi / 2:
            other = free(one, window=4096, dtype="float16", theta=t).heads[0]
            assert other.predicted_error > best.predicted_error


def test_exact_rotation_theta_is_the_largest_power_of_two_within_2_to_the_minus_12():
    for window in (1, 2, 3, 1000, 1024, 1025, 2**20):
        t = exact_rotation_theta(window)
        assert math.frexp(t)[0] == 0.5  # a power of two
        assert t * window <= 2**-12 < 2 * t * window


def test_float16_splits_n_and_refuses_the_unrepresentable():
    one = from_heads(16, 64)
    p = free(one, window=65536, dtype="float16", max_phase=0.1)
    h = p.heads[0]
    assert h.N > 65504 and h.split == pytest.approx(math.sqrt(h.N))
    assert free(one, window=65536, max_phase=0.1).heads[0].split == 1.0
    with pytest.raises(ValueError, match="float16"):
        free(one, window=65536, dtype="float16", max_phase=0.1, split=1.0)


def test_on_a_rotary_block_the_pair_is_pair_1_of_4_dims_at_base_theta_squared_inverse():
    p = plan(BLOOM_560M, PlanRequest(window=2048, dtype="float32"))
    theta = exact_rotation_theta(2048)
    assert (p.strategy_label, p.rotary_dim, p.base) == ("single (exact-rotation)", 4, theta**-2.0)
    assert all([q.index for q in h.pairs] == [1] for h in p.heads)
    assert all(h.theta == pytest.approx(theta, rel=1e-15) for h in p.heads)


@pytest.mark.parametrize("heads, window, dtype", [(12, 2048, "float16"), (32, 8192, "bfloat16"), (16, 256, "bfloat16")])
def test_the_chosen_theta_is_the_largest_within_1_percent_of_the_fully_scored_minimum(heads, window, dtype,
                                                                                      monkeypatch):
    # the search scores at most five candidates on every head (best first, stopping where the critical heads
    # alone rule the rest out), and chooses by the 1% rule among those, every head counted
    import ropebridge.emulation.single as module

    source, num = from_heads(heads, 64), Numerics(1 / 8, window, dtype)
    calls = []
    real = module.evaluate
    monkeypatch.setattr(module, "evaluate", lambda *a: calls.append(a) or real(*a))
    chosen = shared_theta(source.slopes, num)
    ms = sorted(set(source.slopes))
    candidates = sorted({a[2][0] for a in calls})
    scored_on_all = [t for t in candidates if {a[1] for a in calls if a[2][0] == t} >= set(ms)]
    full = {t: max(real(0, m, [t], [None], num).predicted_error for m in ms) for t in scored_on_all}
    assert chosen == max(t for t, e in full.items() if e <= 1.01 * min(full.values()))
    assert len(scored_on_all) <= 5
