"""The ladder's fit: exact where it matters, its objective, the shift, the solver's retries, directed rounding,
and the error model against measurement."""

import math

import numpy as np
import pytest
import torch
from oracles import measure_ladder

from ropebridge.alibi import slopes as alibi_slopes
from ropebridge.emulation import ladder, ladder_fit
from ropebridge.emulation.error_model import matter_distance
from ropebridge.emulation.fixed_base import engine_frequencies
from ropebridge.numerics import DTYPES, TOLERANCE, Numerics
from ropebridge.rope import apply_rope, cos_sin


def test_rotation_in_float64_adds_the_ladder_bias():
    # reference written from the construction: q = (a, b)/scale, k = (0, 1) on every pair, rotated by RoPE
    rng = np.random.default_rng(0)
    thetas = engine_frequencies(5000.0, 8)
    a, b, scale = rng.normal(size=4) * 30, rng.normal(size=4) * 30, 1 / math.sqrt(40)
    pos = torch.arange(300)
    q = torch.tensor(np.concatenate([a, b]) / scale).expand(300, 8)
    k = torch.tensor(np.concatenate([np.zeros(4), np.ones(4)])).expand(300, 8)
    cos, sin = cos_sin(torch.tensor(thetas), pos, dtype=torch.float64)
    logits = scale * apply_rope(q, cos, sin, layout="half") @ apply_rope(k, cos, sin, layout="half").T  # (s, t)
    d = (pos[:, None] - pos[None, :]).double()
    expected = ladder_fit.ladder_bias(a, b, thetas, d.numpy().ravel()).reshape(300, 300)
    torch.testing.assert_close(logits, torch.tensor(expected), rtol=0, atol=1e-9)  # float64 rounding of O(100)
    # it depends only on n - m
    torch.testing.assert_close(logits[200, 150], logits[60, 10], rtol=0, atol=1e-9)


@pytest.mark.parametrize("slope", [0.5, 0.0625, 2**-8])
def test_fit_is_exact_where_it_matters_and_below_the_floor_beyond(slope):
    window, floor = 4096, 60.0
    thetas = engine_frequencies(ladder.free_base(window, 16), 16)
    fit = ladder_fit.fit_head(slope, thetas, window, floor, "float16", stored_scale=1 / math.sqrt(48))
    d = np.arange(window + 1.0)
    f = ladder_fit.ladder_bias(fit.a, fit.b, thetas, d) - fit.shift  # a constant no softmax sees
    assert 0 <= fit.shift <= floor
    w = fit.exact_distance
    assert w == min(window, math.floor(floor / slope))
    near, far = np.abs(f[: w + 1] + slope * d[: w + 1]).max(), (f[w + 1:] + floor).max(initial=-np.inf)
    assert max(near, far, 0) == pytest.approx(fit.approximation_error, rel=1e-12)
    assert fit.approximation_error < 0.05  # float16 weighting: the fit is far below a logit
    # amplitudes of order C, independent of the window: nothing near float16's range (65504) once scaled
    assert max(np.abs(fit.a).max(), np.abs(fit.b).max()) < 10 * floor


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_fit_minimises_its_objective_not_the_fit_alone(dtype):
    # the LP's objective is fit + w * (rounding's standard deviation): the float32 ladder (rounding ~1e-7 per
    # unit amplitude: nearly the fit alone) stored in the dtype is a candidate for the same constraints, so the
    # fit's objective cannot exceed it; it also spreads the amplitude, so its rounding is lower by a clear
    # margin (a fit that ignored the dtype's rounding would fail this). The scores' cast (eager attention) is
    # not the LP's: it is a bound added to the prediction.
    window, floor, slope = 2048, 33.0, 0.25
    thetas = engine_frequencies(ladder.free_base(window, 32), 32)
    scale = 1 / math.sqrt(64)
    w = ladder_fit.rounding_weight(window, dtype) / ladder_fit.extreme_factor(window)

    def objective(a, b, shift):
        return (ladder_fit.approximation_error(slope, a, b, thetas, window, floor, shift)
                + w * ladder_fit.predicted_rounding(a, b, thetas, window, dtype))

    fit = ladder_fit.fit_head(slope, thetas, window, floor, dtype, stored_scale=scale)
    f32 = ladder_fit.fit_head(slope, thetas, window, floor, "float32", stored_scale=scale)
    a, b = ((torch.tensor(x) / scale).to(DTYPES[dtype]).double().numpy() * scale for x in (f32.a, f32.b))
    assert objective(fit.a, fit.b, fit.shift) <= objective(a, b, f32.shift)
    assert ladder_fit.predicted_rounding(fit.a, fit.b, thetas, window, dtype) < 0.8 * ladder_fit.predicted_rounding(
        a, b, thetas, window, dtype)
    if dtype == "float16":  # there the objective is the predicted error itself, less the cast's bound
        level = max(fit.shift, floor - fit.shift)  # the logits that matter lie within [s - C, s]
        cast = ladder_fit.cast_rounding(level, scale, dtype)
        assert objective(fit.a, fit.b, fit.shift) + cast == pytest.approx(fit.predicted_error, rel=1e-12)


def test_bfloat16_weighs_rounding_by_its_standard_deviation(monkeypatch):
    # bfloat16 counts the rounding by its standard deviation, not its extreme over the window's scores: the
    # fit keeps a smaller residual and accepts more rounding than the predicted error alone would choose
    window, floor, slope, dtype = 2048, 33.0, 0.25, "bfloat16"
    thetas = engine_frequencies(ladder.free_base(window, 32), 32)
    assert ladder_fit.rounding_weight(window, dtype) == 1.0
    assert ladder_fit.rounding_weight(window, "float16") == ladder_fit.extreme_factor(window)
    std = ladder_fit.fit_head(slope, thetas, window, floor, dtype, stored_scale=1 / 8)
    monkeypatch.setattr(ladder_fit, "rounding_weight", lambda n, dt: ladder_fit.extreme_factor(n))
    extreme = ladder_fit.fit_head(slope, thetas, window, floor, dtype, stored_scale=1 / 8)
    assert std.approximation_error < 0.8 * extreme.approximation_error, (std.approximation_error,
                                                                         extreme.approximation_error)
    assert std.rounding_error > extreme.rounding_error


@pytest.mark.parametrize("slope", [0.25, 2**-6])
def test_the_shift_spares_the_ladder_a_level(slope):
    # a softmax ignores a constant added to every logit of a query, so the ladder need only equal s - m d (s in
    # [0, C]): its amplitudes come out well below those of a ladder pinned to -m d itself (s = 0)
    window, floor, dtype = 2048, 30.0, "bfloat16"
    thetas = engine_frequencies(ladder.free_base(window, 32), 32)
    free, pinned = (ladder_fit.fit_head(slope, thetas, window, floor, dtype, stored_scale=1 / 8, max_shift=s)
                    for s in (None, 0.0))
    assert pinned.shift == 0 and 0 < free.shift <= floor
    rss = [math.hypot(*f.a, *f.b) for f in (free, pinned)]
    assert rss[0] < 0.8 * rss[1], rss
    assert free.predicted_error < pinned.predicted_error
    # what the model computes in float64 is s - m d near, and at most s - C beyond W
    assert max(measure_ladder(free, thetas, Numerics(1 / 8, window, "float32"))) <= free.approximation_error + 1e-3


SWEEP = [(L, R) for L in (256, 4096, 131072) for R in (16, 32, 64)]


@pytest.mark.slow
@pytest.mark.parametrize("window, rotary_dim", SWEEP)
def test_the_fit_succeeds_everywhere_with_a_small_residual(window, rotary_dim):
    # the conic fit over a grid of slopes, floors and dtypes, including the case where HiGHS's simplex and its
    # interior point method both ended "model status unknown" (float32, window 512, slope 0.125): every fit
    # ends with its reported residual equal to the stored ladder's, measured on every integer distance, and
    # below the dtype's plan tolerance (where the pairs can carry the window at all)
    thetas = engine_frequencies(ladder.free_base(window, rotary_dim), rotary_dim)
    d = np.arange(window + 1.0)
    for dtype in DTYPES:
        for slope in (0.7071, 0.125, 2**-8):
            for advantage in (5.0, 45.0):
                floor = ladder.default_cutoff(window, dtype) + advantage
                fit = ladder_fit.fit_head(slope, thetas, window, floor, dtype,
                                          stored_scale=1 / math.sqrt(64 + rotary_dim))
                f = ladder_fit.ladder_bias(fit.a, fit.b, thetas, d) - fit.shift
                w = fit.exact_distance
                residual = max(np.abs(f[: w + 1] + slope * d[: w + 1]).max(), (f[w + 1:] + floor).max(initial=0), 0)
                eps = 64 * 2.0**-52 * (np.abs(fit.a).sum() + np.abs(fit.b).sum())  # float64 sums of O(amplitude)
                assert fit.approximation_error == pytest.approx(residual, rel=1e-12, abs=eps)
                if (window, rotary_dim, dtype) != (131072, 16, "float32"):  # 8 pairs over 131072 tokens: 1.4e-3
                    assert fit.approximation_error < TOLERANCE[dtype], (dtype, slope, floor, fit.approximation_error)


def test_the_highs_stall_case_fits():
    window = 512  # the plan the README's test command failed on with scipy 1.16/1.17 and HiGHS
    thetas = engine_frequencies(ladder.free_base(window, 32), 32)
    for slope in (0.25, 0.125):
        fit = ladder_fit.fit_head(slope, thetas, window, 42.87385695847819, "float32", stored_scale=1 / math.sqrt(96))
        assert fit.approximation_error < fit.rounding_error and fit.predicted_error < TOLERANCE["float32"]


def test_a_failed_solve_is_tried_again_with_the_next_settings(monkeypatch):
    window, floor = 1024, 60.0
    thetas = engine_frequencies(ladder.free_base(window, 32), 32)
    plain = ladder_fit.fit_head(0.25, thetas, window, floor, "bfloat16", stored_scale=1 / 8)
    monkeypatch.setattr(ladder_fit, "_ATTEMPTS", ({"max_iter": 1}, {}))  # the first attempt cannot finish
    assert ladder_fit.fit_head(0.25, thetas, window, floor, "bfloat16", stored_scale=1 / 8) == plain
    monkeypatch.setattr(ladder_fit, "_ATTEMPTS", ({"max_iter": 1},))
    with pytest.raises(ValueError, match="conic solver ended MaxIterations"):
        ladder_fit.fit_head(0.25, thetas, window, floor, "bfloat16", stored_scale=1 / 8)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_directed_rounding_stores_neighbours_and_cancels_their_errors(dtype):
    # each stored q value is one of the two dtype numbers around the solver's value, and the choice leaves the
    # fit error no larger than rounding every amplitude to its nearest
    window, floor, slope, scale = 4096, 60.0, 0.125, 1 / math.sqrt(96)
    thetas = engine_frequencies(ladder.free_base(window, 32), 32)
    basis = ladder_fit._basis(tuple(thetas.tolist()), window)
    rng = np.random.default_rng(0)
    x = rng.normal(size=32) * 40
    shift, w = 30.0, matter_distance(slope, window, floor)
    got = ladder_fit._directed_rounding(x, basis, slope, floor, shift, w, scale, dtype)
    dt = DTYPES[dtype]
    for value, exact in zip((got / scale).tolist(), (x / scale).tolist()):
        assert torch.tensor(value).to(dt).double().item() == pytest.approx(value, rel=1e-12)  # a dtype number
        up, down = (torch.nextafter(torch.tensor(exact).to(dt), torch.tensor(v).to(dt)).double().item()
                    for v in (math.inf, -math.inf))
        assert abs(value - exact) <= (up - down) * (1 + 1e-9)  # within one spacing: one of the two neighbours
    nearest = (torch.tensor(x / scale).to(DTYPES[dtype]).double() * scale).numpy()
    half = len(thetas)
    errors = [ladder_fit.approximation_error(slope, v[:half], v[half:], thetas, window, floor, shift)
              for v in (got, nearest)]
    assert errors[0] <= errors[1], errors


def test_fit_uses_stored_amplitudes():
    thetas = engine_frequencies(ladder.free_base(1024, 16), 16)
    scale = 1 / math.sqrt(80)
    fit = ladder_fit.fit_head(0.25, thetas, 1024, 60.0, "bfloat16", stored_scale=scale)
    for amps in (fit.a, fit.b):
        stored = torch.tensor(amps, dtype=torch.float64) / scale  # the q values the checkpoint holds
        # already bfloat16 numbers: a round trip moves them by float64 rounding of a / scale * scale only
        torch.testing.assert_close(stored.to(torch.bfloat16).double(), stored, rtol=1e-12, atol=0)


GRID = [(m, L, dt) for m in (0.5, 0.0442, 2**-8) for L in (512, 4096) for dt in ("bfloat16", "float16")]


@pytest.mark.parametrize("slope, window, dtype", GRID)
def test_error_model_against_measurement(slope, window, dtype):
    # the prediction (fit + statistical rounding) covers the worst measured error over the window's query
    # and key positions, computed as a model computes it, and stays within 3x of it: a useful prediction
    r = 16
    thetas = engine_frequencies(ladder.free_base(window, r), r)
    scale = 1 / math.sqrt(64 + r)
    fit = ladder_fit.fit_head(slope, thetas, window, 60.0, dtype, stored_scale=scale)
    err, rise = measure_ladder(fit, thetas, Numerics(scale, window, dtype))
    measured = max(err, rise)
    assert measured <= fit.predicted_error, (measured, fit)
    assert fit.predicted_error <= 3 * measured, (measured, fit)


PLANNED_GRID = [(hd, L, dt) for hd in (32, 64, 128) for L in (256, 8192, 65536) for dt in ("bfloat16", "float16")]


@pytest.mark.parametrize("head_dim, window, dtype", PLANNED_GRID)
def test_error_model_against_measurement_as_planned(head_dim, window, dtype):
    # as the planner fits them (R = 32, the free base, the default floor) for the largest slope of 112 heads and
    # the smallest of 4, over head dims 32-128 and windows 256-64K: measured <= predicted <= 3 x measured
    # (1.3-2.5x measured over heads 4, 32, 112)
    r = 32
    thetas = engine_frequencies(ladder.free_base(window, r), r)
    scale = 1 / math.sqrt(head_dim + r)
    floor = ladder.default_cutoff(window, dtype) + ladder.DEFAULT_ADVANTAGE
    for slope in (float(alibi_slopes(112)[0]), 2**-8):
        fit = ladder_fit.fit_head(slope, thetas, window, floor, dtype, stored_scale=scale)
        measured = max(measure_ladder(fit, thetas, Numerics(scale, window, dtype), queries=64))
        assert measured <= fit.predicted_error <= 3 * measured, (slope, measured, fit.predicted_error)


def test_rounding_does_not_grow_with_the_window_like_the_single_pair():
    # the single pair's rounding is ~ u m position; the ladder's stays ~ u C
    m, scale = 0.5, 1 / math.sqrt(80)
    errs = []
    for window in (1024, 8192):
        thetas = engine_frequencies(ladder.free_base(window, 16), 16)
        fit = ladder_fit.fit_head(m, thetas, window, 60.0, "bfloat16", stored_scale=scale)
        errs.append(max(measure_ladder(fit, thetas, Numerics(scale, window, "bfloat16"), queries=32)))
    assert errs[1] < 2 * errs[0]
    assert errs[1] < 2**-8 * m * 8192  # below the single pair's u m L


def test_a_pinned_ladder_that_cannot_stay_below_the_floor_is_refused():
    # with s = 0 the slowest pair of base 10000, R = 8 (1e-3 rad/token) turns too fast to keep -C from 160 to 4096
    thetas = engine_frequencies(10000.0, 8)
    with pytest.raises(ValueError, match="keeps the bias"):
        ladder_fit.fit_head(0.25, thetas, 4096, 40.0, "float16", stored_scale=1 / 8, max_shift=0.0)
