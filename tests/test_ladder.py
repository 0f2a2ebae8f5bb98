"""The frequency ladder: head-dim rule, frequencies as transformers computes them, the fit's guarantees, the
float64 rotation reference, the error model against measurement, and conversion end to end."""

import json
import math

import numpy as np
import pytest
import torch
import transformers as T
from pico import build

from ropebridge import ladder
from ropebridge.alibi import slopes as alibi_slopes
from ropebridge.convert import convert
from ropebridge.convert.families import SourceModel
from ropebridge.convert.reference import reference_logits
from ropebridge.emulation import EmulationPlan
from ropebridge.error_model import DTYPES, TOLERANCE
from ropebridge.rope import apply_rope, cos_sin
from ropebridge.sources import load_config


@pytest.mark.parametrize("head_dim, multiple, expected", [
    (64, 16, 32), (32, 16, 32), (128, 16, 32), (64, 64, 64), (128, 32, 32), (80, 16, 32), (100, 16, 44),
])
def test_rotary_dim_rule_gives_kernel_friendly_heads(head_dim, multiple, expected):
    r = ladder.rotary_dim_for(head_dim, multiple)
    assert r == expected and (head_dim + r) % multiple == 0 and r >= ladder.MIN_ROTARY_DIM


def test_frequencies_are_transformers_own():
    cfg = T.GPTNeoXConfig(hidden_size=80, num_attention_heads=1, rotary_pct=0.2,
                          rope_parameters={"rope_type": "default", "rope_theta": 29678.75, "partial_rotary_factor": 0.2})
    rope = T.models.gpt_neox.modeling_gpt_neox.GPTNeoXRotaryEmbedding(cfg)
    ours = ladder.engine_frequencies(29678.75, 16)
    assert torch.equal(rope.inv_freq.double(), torch.tensor(ours))  # bit for bit: the fit uses these values
    assert ours[0] == 1.0


def test_rotation_in_float64_adds_the_ladder_bias():
    # reference written from the construction: q = (a, b)/scale, k = (0, 1) on every pair, rotated by RoPE
    rng = np.random.default_rng(0)
    thetas = ladder.engine_frequencies(5000.0, 8)
    a, b, scale = rng.normal(size=4) * 30, rng.normal(size=4) * 30, 1 / math.sqrt(40)
    pos = torch.arange(300)
    q = torch.tensor(np.concatenate([a, b]) / scale).expand(300, 8)
    k = torch.tensor(np.concatenate([np.zeros(4), np.ones(4)])).expand(300, 8)
    cos, sin = cos_sin(torch.tensor(thetas), pos, dtype=torch.float64)
    logits = scale * apply_rope(q, cos, sin, layout="half") @ apply_rope(k, cos, sin, layout="half").T  # (s, t)
    d = (pos[:, None] - pos[None, :]).double()
    expected = ladder.ladder_bias(a, b, thetas, d.numpy().ravel()).reshape(300, 300)
    torch.testing.assert_close(logits, torch.tensor(expected), rtol=0, atol=1e-9)  # float64 rounding of O(100)
    # it depends only on n - m
    torch.testing.assert_close(logits[200, 150], logits[60, 10], rtol=0, atol=1e-9)


@pytest.mark.parametrize("slope", [0.5, 0.0625, 2**-8])
def test_fit_is_exact_where_it_matters_and_below_the_floor_beyond(slope):
    window, floor = 4096, 60.0
    thetas = ladder.engine_frequencies(ladder.free_base(window, 16), 16)
    fit = ladder.fit_head(slope, thetas, window, floor, "float16", stored_scale=1 / math.sqrt(48))
    d = np.arange(window + 1.0)
    f = ladder.ladder_bias(fit.a, fit.b, thetas, d) - fit.shift  # a constant no softmax sees
    assert 0 <= fit.shift <= floor
    w = fit.exact_distance
    assert w == min(window, math.floor(floor / slope))
    near, far = np.abs(f[: w + 1] + slope * d[: w + 1]).max(), (f[w + 1:] + floor).max(initial=-np.inf)
    assert max(near, far, 0) == pytest.approx(fit.fit_error, rel=1e-12)
    assert fit.fit_error < 0.05  # float16 weighting: the fit is far below a logit
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
    thetas = ladder.engine_frequencies(ladder.free_base(window, 32), 32)
    scale = 1 / math.sqrt(64)
    w = ladder.rounding_weight(window, dtype) / ladder.extreme_factor(window)

    def objective(a, b, shift):
        return (ladder.fit_error(slope, a, b, thetas, window, floor, shift)
                + w * ladder.predicted_rounding(a, b, thetas, window, dtype))

    fit = ladder.fit_head(slope, thetas, window, floor, dtype, stored_scale=scale)
    f32 = ladder.fit_head(slope, thetas, window, floor, "float32", stored_scale=scale)
    a, b = ((torch.tensor(x) / scale).to(DTYPES[dtype]).double().numpy() * scale for x in (f32.a, f32.b))
    assert objective(fit.a, fit.b, fit.shift) <= objective(a, b, f32.shift)
    assert ladder.predicted_rounding(fit.a, fit.b, thetas, window, dtype) < 0.8 * ladder.predicted_rounding(
        a, b, thetas, window, dtype)
    if dtype == "float16":  # there the objective is the predicted error itself, less the cast's bound
        level = max(fit.shift, floor - fit.shift)  # the logits that matter lie within [s - C, s]
        cast = ladder.cast_rounding(level, scale, dtype)
        assert objective(fit.a, fit.b, fit.shift) + cast == pytest.approx(fit.predicted_error, rel=1e-12)


def test_bfloat16_weighs_rounding_by_its_standard_deviation(monkeypatch):
    # bfloat16 counts the rounding by its standard deviation, not its extreme over the window's scores: the
    # fit keeps a smaller residual and accepts more rounding than the predicted error alone would choose
    window, floor, slope, dtype = 2048, 33.0, 0.25, "bfloat16"
    thetas = ladder.engine_frequencies(ladder.free_base(window, 32), 32)
    assert ladder.rounding_weight(window, dtype) == 1.0
    assert ladder.rounding_weight(window, "float16") == ladder.extreme_factor(window)
    std = ladder.fit_head(slope, thetas, window, floor, dtype, stored_scale=1 / 8)
    monkeypatch.setattr(ladder, "rounding_weight", lambda n, dt: ladder.extreme_factor(n))
    extreme = ladder.fit_head(slope, thetas, window, floor, dtype, stored_scale=1 / 8)
    assert std.fit_error < 0.8 * extreme.fit_error, (std.fit_error, extreme.fit_error)
    assert std.rounding_error > extreme.rounding_error


@pytest.mark.parametrize("slope", [0.25, 2**-6])
def test_the_shift_spares_the_ladder_a_level(slope):
    # a softmax ignores a constant added to every logit of a query, so the ladder need only equal s - m d (s in
    # [0, C]): its amplitudes come out well below those of a ladder pinned to -m d itself (s = 0)
    window, floor, dtype = 2048, 30.0, "bfloat16"
    thetas = ladder.engine_frequencies(ladder.free_base(window, 32), 32)
    free, pinned = (ladder.fit_head(slope, thetas, window, floor, dtype, stored_scale=1 / 8, max_shift=s)
                    for s in (None, 0.0))
    assert pinned.shift == 0 and 0 < free.shift <= floor
    rss = [math.hypot(*f.a, *f.b) for f in (free, pinned)]
    assert rss[0] < 0.8 * rss[1], rss
    assert free.predicted_error < pinned.predicted_error
    # what the model computes in float64 is s - m d near, and at most s - C beyond W
    assert max(ladder.measure(free, thetas, window, "float32", scale=1 / 8)) <= free.fit_error + 1e-3


SWEEP = [(L, R) for L in (256, 4096, 131072) for R in (16, 32, 64)]


@pytest.mark.parametrize("window, rotary_dim", SWEEP)
def test_the_fit_succeeds_everywhere_with_a_small_residual(window, rotary_dim):
    # the conic fit over a grid of slopes, floors and dtypes, including the case where HiGHS's simplex and its
    # interior point method both ended "model status unknown" (float32, window 512, slope 0.125): every fit
    # ends with its reported residual equal to the stored ladder's, measured on every integer distance, and
    # below the dtype's plan tolerance (where the pairs can carry the window at all)
    thetas = ladder.engine_frequencies(ladder.free_base(window, rotary_dim), rotary_dim)
    d = np.arange(window + 1.0)
    for dtype in DTYPES:
        for slope in (0.7071, 0.125, 2**-8):
            for advantage in (5.0, 45.0):
                floor = ladder.default_cutoff(window, dtype) + advantage
                fit = ladder.fit_head(slope, thetas, window, floor, dtype, stored_scale=1 / math.sqrt(64 + rotary_dim))
                f = ladder.ladder_bias(fit.a, fit.b, thetas, d) - fit.shift
                w = fit.exact_distance
                residual = max(np.abs(f[: w + 1] + slope * d[: w + 1]).max(), (f[w + 1:] + floor).max(initial=0), 0)
                eps = 64 * 2.0**-52 * (np.abs(fit.a).sum() + np.abs(fit.b).sum())  # float64 sums of O(amplitude)
                assert fit.fit_error == pytest.approx(residual, rel=1e-12, abs=eps)
                if (window, rotary_dim, dtype) != (131072, 16, "float32"):  # 8 pairs over 131072 tokens: 1.4e-3
                    assert fit.fit_error < TOLERANCE[dtype], (dtype, slope, floor, fit.fit_error)


def test_the_highs_stall_case_fits():
    window = 512  # the plan the README's test command failed on with scipy 1.16/1.17 and HiGHS
    thetas = ladder.engine_frequencies(ladder.free_base(window, 32), 32)
    for slope in (0.25, 0.125):
        fit = ladder.fit_head(slope, thetas, window, 42.87385695847819, "float32", stored_scale=1 / math.sqrt(96))
        assert fit.fit_error < fit.rounding_error and fit.predicted_error < TOLERANCE["float32"]


def test_a_failed_solve_is_tried_again_with_the_next_settings(monkeypatch):
    window, floor = 1024, 60.0
    thetas = ladder.engine_frequencies(ladder.free_base(window, 32), 32)
    plain = ladder.fit_head(0.25, thetas, window, floor, "bfloat16", stored_scale=1 / 8)
    monkeypatch.setattr(ladder, "_ATTEMPTS", ({"max_iter": 1}, {}))  # the first attempt cannot finish
    assert ladder.fit_head(0.25, thetas, window, floor, "bfloat16", stored_scale=1 / 8) == plain
    monkeypatch.setattr(ladder, "_ATTEMPTS", ({"max_iter": 1},))
    with pytest.raises(ValueError, match="conic solver ended MaxIterations"):
        ladder.fit_head(0.25, thetas, window, floor, "bfloat16", stored_scale=1 / 8)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_directed_rounding_stores_neighbours_and_cancels_their_errors(dtype):
    # each stored q value is one of the two dtype numbers around the solver's value, and the choice leaves the
    # fit error no larger than rounding every amplitude to its nearest
    window, floor, slope, scale = 4096, 60.0, 0.125, 1 / math.sqrt(96)
    thetas = ladder.engine_frequencies(ladder.free_base(window, 32), 32)
    basis = ladder._basis(tuple(thetas.tolist()), window)
    rng = np.random.default_rng(0)
    x = rng.normal(size=32) * 40
    shift, w = 30.0, ladder.exact_distance(slope, floor, window)
    got = ladder._directed_rounding(x, basis, slope, floor, shift, w, scale, dtype)
    dt = DTYPES[dtype]
    for value, exact in zip((got / scale).tolist(), (x / scale).tolist()):
        assert torch.tensor(value).to(dt).double().item() == pytest.approx(value, rel=1e-12)  # a dtype number
        up, down = (torch.nextafter(torch.tensor(exact).to(dt), torch.tensor(v).to(dt)).double().item()
                    for v in (math.inf, -math.inf))
        assert abs(value - exact) <= (up - down) * (1 + 1e-9)  # within one spacing: one of the two neighbours
    nearest = (torch.tensor(x / scale).to(DTYPES[dtype]).double() * scale).numpy()
    half = len(thetas)
    errors = [ladder.fit_error(slope, v[:half], v[half:], thetas, window, floor, shift) for v in (got, nearest)]
    assert errors[0] <= errors[1], errors


def test_the_plan_is_the_same_whatever_jobs():
    # 4 distinct heads over 16K tokens: enough work for the process pool (ladder.PARALLEL_WORK)
    slopes, window = alibi_slopes(4).tolist(), 16384
    assert len(slopes) * window >= ladder.PARALLEL_WORK
    one = ladder.plan_ladder(slopes, 64, window, dtype="bfloat16", tolerance=2.0, jobs=1)
    two = ladder.plan_ladder(slopes, 64, window, dtype="bfloat16", tolerance=2.0, jobs=2)
    assert one == two


def test_a_fit_the_solver_cannot_finish_is_one_line_and_exit_2(monkeypatch, tmp_path, capsys):
    from ropebridge.cli import main

    monkeypatch.setattr(ladder, "_ATTEMPTS", ({"max_iter": 1},))
    argv = ["plan", "--heads", "2", "--head-dim", "32", "--window", "256", "--dtype", "bfloat16",
            "--plot", str(tmp_path / "p.png")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the ladder fit failed: the conic solver ended MaxIterations" in err[0], err
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_windows_and_jobs_out_of_range_are_refused():
    with pytest.raises(ValueError, match="2\\^24"):
        ladder.plan_ladder([0.5], 32, 2**24 + 1)
    with pytest.raises(ValueError, match="jobs"):
        ladder.plan_ladder([0.5], 32, 256, jobs=0)


@pytest.mark.parametrize("window, dtype, expected", [(2048, "bfloat16", 13.17), (32768, "bfloat16", 15.94),
                                                     (2048, "float16", 15.25), (32768, "float16", 18.02)])
def test_default_cutoff_leaves_the_far_keys_one_unit_roundoff(window, dtype, expected):
    cutoff = ladder.default_cutoff(window, dtype)
    assert cutoff == pytest.approx(expected, abs=0.01)
    u = {"bfloat16": 2.0**-8, "float16": 2.0**-11}[dtype]
    assert window * math.exp(-cutoff) == pytest.approx(u, rel=1e-12)  # the L far keys' total weight


def test_floors_are_the_cutoff_plus_the_advantage():
    slopes = alibi_slopes(4).tolist()
    plan = ladder.plan_ladder(slopes, 32, 256, dtype="bfloat16", advantages=[1.0, 2.0, 3.0, 4.0], cutoff=15.0,
                              tolerance=2.0)
    assert [h.floor for h in plan.heads] == [16.0, 17.0, 18.0, 19.0] and plan.cutoff == 15.0
    default = ladder.plan_ladder(slopes, 32, 256, dtype="bfloat16", tolerance=2.0)
    assert default.cutoff == ladder.default_cutoff(256, "bfloat16")
    assert {h.floor for h in default.heads} == {default.cutoff + ladder.DEFAULT_ADVANTAGE}
    with pytest.raises(ValueError, match="not both"):
        ladder.plan_ladder(slopes, 32, 256, floors=60.0, advantages=1.0)
    with pytest.raises(ValueError, match="advantage"):
        ladder.plan_ladder(slopes, 32, 256, advantages=-1.0)


def test_fit_uses_stored_amplitudes():
    thetas = ladder.engine_frequencies(ladder.free_base(1024, 16), 16)
    scale = 1 / math.sqrt(80)
    fit = ladder.fit_head(0.25, thetas, 1024, 60.0, "bfloat16", stored_scale=scale)
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
    thetas = ladder.engine_frequencies(ladder.free_base(window, r), r)
    scale = 1 / math.sqrt(64 + r)
    fit = ladder.fit_head(slope, thetas, window, 60.0, dtype, stored_scale=scale)
    err, rise = ladder.measure(fit, thetas, window, dtype, scale=scale)
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
    thetas = ladder.engine_frequencies(ladder.free_base(window, r), r)
    scale = 1 / math.sqrt(head_dim + r)
    floor = ladder.default_cutoff(window, dtype) + ladder.DEFAULT_ADVANTAGE
    for slope in (float(alibi_slopes(112)[0]), 2**-8):
        fit = ladder.fit_head(slope, thetas, window, floor, dtype, stored_scale=scale)
        measured = max(ladder.measure(fit, thetas, window, dtype, scale=scale, queries=64))
        assert measured <= fit.predicted_error <= 3 * measured, (slope, measured, fit.predicted_error)


def test_rounding_does_not_grow_with_the_window_like_the_single_pair():
    # the single pair's rounding is ~ u m position; the ladder's stays ~ u C
    m, scale = 0.5, 1 / math.sqrt(80)
    errs = []
    for window in (1024, 8192):
        thetas = ladder.engine_frequencies(ladder.free_base(window, 16), 16)
        fit = ladder.fit_head(m, thetas, window, 60.0, "bfloat16", stored_scale=scale)
        errs.append(max(ladder.measure(fit, thetas, window, "bfloat16", scale=scale, queries=32)))
    assert errs[1] < 2 * errs[0]
    assert errs[1] < 2**-8 * m * 8192  # below the single pair's u m L


def test_plan_serialises_and_respects_a_fixed_base():
    plan = ladder.plan_ladder(alibi_slopes(4).tolist(), 32, 1024, dtype="float16", base=10000.0, rotary_dim=32,
                              tolerance=0.25, family="bloom")
    assert plan.mode == "ladder" and plan.base == 10000.0 and plan.rope_dim == 32 and plan.pairs_per_head == 16
    h = plan.heads[0]
    assert len(h.pairs) == 16 and h.floor == ladder.default_cutoff(1024, "float16") + ladder.DEFAULT_ADVANTAGE
    assert [p.theta for p in h.pairs] == ladder.engine_frequencies(10000.0, 32).tolist()
    again = EmulationPlan.from_dict(json.loads(plan.to_json()))
    assert again == plan


def test_plan_refuses_bad_values():
    with pytest.raises(ValueError, match="floor"):
        ladder.plan_ladder([0.5], 32, 256, floors=[10.0])
    with pytest.raises(ValueError, match="floors for"):
        ladder.plan_ladder([0.5, 0.25], 32, 256, floors=[50.0])
    with pytest.raises(ValueError, match="rotary_dim"):
        ladder.plan_ladder([0.5], 32, 256, rotary_dim=7)


@pytest.fixture(scope="module")
def bloom(tmp_path_factory):
    return build(tmp_path_factory.mktemp("ladder") / "bloom", "bloom-4heads")


def test_ladder_checkpoint_reproduces_the_exact_bias(bloom, tmp_path):
    # a float32 checkpoint with the ladder: what is left is the fit error, which the plan predicts
    res = convert(bloom, tmp_path / "rope", window=512, dtype="float32", emulation="ladder")
    assert res.plan.mode == "ladder"
    model = T.AutoModelForCausalLM.from_pretrained(res.destination).eval()
    cfg = model.config
    assert cfg.hidden_size // cfg.num_attention_heads == 32 + 32  # the head-dim rule: 64
    ids = torch.randint(0, 320, (1, 512), generator=torch.Generator().manual_seed(2))
    ref = reference_logits(SourceModel(bloom, load_config(bloom)), ids)
    with torch.no_grad():
        got = model(ids).logits.double()
    worst = max(h.sine_error for h in res.plan.heads)  # fit error of the bias, logits
    # a bias error e moves each attention output by at most ~e (softmax is 1-Lipschitz in its logits, scaled
    # by |v|); through two layers of this pico model a few-fold amplification, hence 10x the bias error
    assert float((got - ref).abs().max()) <= 10 * worst + 1e-3


def test_ladder_in_bfloat16_beats_native_bfloat16(bloom, tmp_path):
    res = convert(bloom, tmp_path / "rope16", window=1024, dtype="bfloat16")
    assert res.plan.mode == "ladder"  # the half-precision default
    ids = torch.randint(0, 320, (1, 1024), generator=torch.Generator().manual_seed(3))
    ref = reference_logits(SourceModel(bloom, load_config(bloom)), ids)
    errs = {}
    for name, path in (("native", bloom), ("converted", res.destination)):
        model = T.AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval()
        with torch.no_grad():
            errs[name] = float((model(ids).logits.double() - ref).abs().max())
    assert errs["converted"] <= errs["native"], errs


def test_cli_plan_ladder_and_convert_record_the_same_plan(bloom, tmp_path, capsys):
    from ropebridge.cli import main

    argv = ["--window", "512", "--dtype", "bfloat16"]
    assert main(["plan", "--model", str(bloom), *argv, "--json", "--plot", str(tmp_path / "l.png")]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert planned["mode"] == "ladder" and (tmp_path / "l.png").stat().st_size > 0
    assert main(["convert", str(bloom), str(tmp_path / "dst"), *argv, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    recorded = json.loads((tmp_path / "dst" / "ropebridge.json").read_text())["plan"]
    assert summary["emulation"] == "ladder"
    for key in ("base", "rope_dim", "window", "dtype", "mode"):
        assert recorded[key] == planned[key], key
    assert [h["pairs"] for h in recorded["heads"]] == [h["pairs"] for h in planned["heads"]]


def test_cli_refusals(bloom, tmp_path, capsys):
    from ropebridge.cli import main

    dst = tmp_path / "dst"
    assert main(["convert", str(bloom), str(dst), "--window", "256", "--dtype", "float16"]) == 0
    capsys.readouterr()
    cases = [
        (["convert", str(bloom), str(tmp_path / "x"), "--target", "starcoder2", "--emulation", "ladder"], "gpt-neox"),
        (["convert", str(bloom), str(tmp_path / "x"), "--emulation", "ladder", "--theta", "1e-5"], "single"),
        (["convert", str(bloom), str(tmp_path / "x"), "--dtype", "float16", "--floor", "5"], "floor"),
        (["convert", str(bloom), str(tmp_path / "x"), "--emulation", "single", "--floor", "60"], "ladder"),
        (["convert", str(bloom), str(tmp_path / "x"), "--calibration-text", str(tmp_path / "nope.txt")], "nope.txt"),
        (["verify", str(bloom), str(dst), "--context", "300"], "window 256"),
        (["plan", "--heads", "4", "--head-dim", "32", "--window", "64", "--ladder", "--theta", "1e-3"], "single"),
    ]
    for argv, needle in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert needle in err and len(err.strip().splitlines()) == 1, (argv, err)
    assert not (tmp_path / "x").exists()


def test_verify_follows_the_destination_dtype(bloom, tmp_path):
    from ropebridge.convert import verify

    res = convert(bloom, tmp_path / "dst", window=256, dtype="float16")
    report = verify(bloom, res.destination, context=128, greedy_tokens=4)
    assert report.dtype == "float16" and report.thresholds["max_abs_logit_diff"] == 0.25


def test_calibrated_floors_cover_the_content_advantage(bloom):
    from ropebridge.convert.calibration import content_advantage

    src = SourceModel(bloom, load_config(bloom))
    ids = torch.randint(0, 320, (256,), generator=torch.Generator().manual_seed(4))
    adv = content_advantage(src, ids)
    assert adv.shape == (4,) and (adv >= 0).all()
    # direct check on the exact attention of layer 0: A(i) from its definition, on a few queries
    from ropebridge.convert.reference import _ln

    layer = src.layer(0)
    h1 = _ln(src.embedding_rows(0, src.info.vocab_size)[ids], layer.ln1, src.info.eps)
    q = torch.einsum("sd,hed->hse", h1, layer.q_w) + layer.q_b[:, None, :]
    k = torch.einsum("sd,hed->hse", h1, layer.k_w) + layer.k_b[:, None, :]
    content = src.info.qk_scale * q @ k.transpose(-1, -2)  # (h, s, t)
    for head, m in enumerate(src.info.slopes):
        for i in (10, 100, 255):
            s = content[head, i, : i + 1]
            a = float(s.max() - (s - m * torch.arange(i, -1, -1.0, dtype=torch.float64)).max())
            assert a <= float(adv[head]) + 1e-12


def test_a_pinned_ladder_that_cannot_stay_below_the_floor_is_refused():
    # with s = 0 the slowest pair of base 10000, R = 8 (1e-3 rad/token) turns too fast to keep -C from 160 to 4096
    thetas = ladder.engine_frequencies(10000.0, 8)
    with pytest.raises(ValueError, match="keeps the bias"):
        ladder.fit_head(0.25, thetas, 4096, 40.0, "float16", stored_scale=1 / 8, max_shift=0.0)


def test_refusals_say_what_would_fit(bloom, tmp_path, capsys):
    from ropebridge.cli import main

    cases = [
        # too few pairs for the window: the prediction misses, and a larger R that fits is named
        (["--rotary-dim", "4", "--window", "8192"], "--rotary-dim 16 fits"),
        # a base whose slowest pair turns too fast for the window: the best fit misses by far, a larger R fits
        (["--rope-base", "10000", "--rotary-dim", "8", "--window", "4096"], "--rotary-dim 16 fits"),
    ]
    for flags, needle in cases:
        assert main(["convert", str(bloom), str(tmp_path / "x"), "--dtype", "float16", *flags]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], err
    assert not (tmp_path / "x").exists()


def test_calibrated_floors_are_the_cutoff_plus_the_measured_advantage():
    # convert/plan --calibration-text: C = cutoff + 1.25 A per head, with the cutoff given (or the default)
    from ropebridge.convert.calibration import DEFAULT_MARGIN, content_advantage
    from ropebridge.demo import data_dir
    from ropebridge.planning import checkpoint_plan

    src = data_dir("demo")
    text = (src / "heldout.txt").read_text()[:3000]
    ids = torch.tensor(T.AutoTokenizer.from_pretrained(src)(text)["input_ids"])
    adv = content_advantage(SourceModel(src, load_config(src)), ids)
    for cutoff in (10.0, None):
        plan = checkpoint_plan(src, dtype="bfloat16", window=512, calibration_text=text, cutoff=cutoff, tolerance=2.0)
        expected_cutoff = ladder.default_cutoff(512, "bfloat16") if cutoff is None else cutoff
        assert plan.mode == "ladder" and plan.cutoff == expected_cutoff
        for h, a in zip(plan.heads, adv.tolist()):
            assert h.floor == pytest.approx(expected_cutoff + DEFAULT_MARGIN * a, rel=1e-12)
