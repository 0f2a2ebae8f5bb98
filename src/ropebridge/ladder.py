"""The frequency ladder: ALiBi emulated on every pair of a RoPE rotary block, exact where it matters.

The single-pair emulation (``emulation``) rotates q = (-N, 0) at a tiny theta: the bias is the small
difference of two products of size ~ m sqrt(hd) * position, so in a 16-bit dtype its rounding grows with
the absolute position (and N overflows float16). The ladder uses instead all R/2 pairs of a GPT-NeoX
rotary block, ``theta_r = base^(-2r/R)`` (pair 0 at 1 rad/token), each head with its own amplitudes:
with q = (-N_r/s, M_r/s), k = (0, s) on pair r the pair adds ``sigma (M_r cos(theta_r d) - N_r sin(theta_r d))``
to the logit (sigma the logit scale), a function of the distance d alone. In logit units, head h gets

    f_h(d) = sum_r a_r sin(theta_r d) + b_r cos(theta_r d),     a_r = -sigma N_r, b_r = sigma M_r.

A softmax needs the bias right only where a key can carry weight, and only up to a constant: adding s
to every logit of a query changes nothing. With a floor C_h (``floor``: the cutoff plus the largest
content-score advantage a far key has over the best near one), the exact bias -m d is below -C_h beyond
``W_h = C_h/m``; so the ladder must equal s - m d on d <= W_h and only stay <= s - C_h on W_h < d <= L,
for a shift s of its choice. Per head, linear programs (scipy's HiGHS) find the amplitudes and the shift
that minimise the fit residual plus the rounding (``fit_head``):

    minimise   max_{d <= W} |f(d) - s + m d|  +  w sqrt(sum_r sigma_r^2 (a_r^2 + b_r^2))
    subject to f(d) <= s - C  for every integer W < d <= L,   0 <= s <= C.

with sigma_r the rounding per unit amplitude (``rounding_sigma``). The rounding term is a root sum of
squares because pairs round independently: it favours many moderate amplitudes over a few large ones (an
L1 penalty, used before, gave sparse ladders with 1.3-2.4x the measured logit error of the demo model in
bfloat16). Its weight w (``rounding_weight``) is the extreme factor sqrt(2 ln n) of the error model below for
float32 and float16, which makes the objective the predicted error itself, and 1 for bfloat16: there the
rounding counts by its standard deviation. A softmax averages independent per-score rounding over the keys it
weighs, while the fit residual is the same for every query at a given distance and does not average; weighed
by its extreme, the rounding pushed bfloat16 fits to residuals of 0.01-0.06 logits that cost the model more
than the rounding they saved (``benchmarks/rounding_budget.py``: with no rounding at all those checkpoints
were 2.9-5.3x the floor). With w = 1 the three real-text demo models in bfloat16 measured a KL 1.1-2.8x lower
(README, fidelity); float16, whose residuals are already small, gained nothing (mixed within +-16%) and keeps
the predicted error as its objective. The shift is free for a softmax, and it spares the ladder a level: with
s = 0 its cos terms must cancel at d = 0 and its slowest pairs carry the mean -C/2 over the window, while with
s ~ C the bias is a falling bump, the shape slow cosines have (1.3-1.8x smaller amplitudes on the demo model's
heads). Bounding s by C keeps every logit that matters within C of zero, as without the shift, for attention
that rounds its scores (eager attention in 16 bits). The amplitudes stay of order C (tens to hundreds of
logits) whatever L is: fast pairs wrap instead of growing, so the rounding is ~ u C, independent of the
context, and no value comes near float16's range. Beyond L the bias is unconstrained: the window is a hard
limit.

**The cutoff** (``default_cutoff``): a key more than ``cutoff`` logits below the best one has weight
below e^-cutoff, the L keys of the window together at most ``L e^-cutoff``. The ladder's default makes that
the dtype's unit roundoff u, ``cutoff = ln(L / u)`` (bfloat16 at 2K: 13.2 logits, float16 at 32K: 17.9):
the far keys move the attention output by less than one rounding of it. A larger cutoff costs rounding in
proportion (the amplitudes scale with C). Source of the idea: this project's half-precision issue;
the emulation itself: A. Litzenberger, "Emulating ALiBi with RoPE",
https://alexlitzenberger.com/blog/emulating_alibi_with_rope.

**Error model.** fit error (exact arithmetic, amplitudes rounded as stored, every integer d; beyond W the
amount by which f rises above s - C) plus rounding. The rounding of a pair is a sum of many independent
roundings (tables cast to the dtype, the rotation's products and sums, float32 angles): its standard
deviation is ``A_r (u K_DTYPE + angle term)``, A_r = sqrt(a_r^2 + b_r^2), u = 2^-p the dtype's
relative precision, and ``K_DTYPE`` measured once with the real rotation (``tests/test_ladder.py`` checks
it). Pairs round independently, so the predicted worst rounding over the n (query, key) pairs of the
window is ``sqrt(2 ln n) sqrt(sum_r sigma_r^2)`` (the Gaussian extreme over n draws), plus the rounding of the
scores themselves where attention keeps them in the dtype (``cast_rounding``: eager attention does, as
``measure`` does; flash kernels do not). This is a
statistical prediction, not a worst-case bound (which would add 4R roundings of the same sign and
overstate the measured error ten-fold); the suite checks it against measurement.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from . import _checks
from .error_model import DTYPES, _FORMATS, half_ulp, model_logits, sample_positions

# Content advantage assumed without calibration. Real-text models measure 1-17 logits (the three demo models;
# 1.25x that with calibration's margin), but random-weight picos up to 93: uncalibrated, the floor stays near
# 60 (the value verify passes on every test model) and ``--calibration-text`` is what lowers it.
DEFAULT_ADVANTAGE = 45.0
# R = 8 fits the demo model's shallow heads to 1.6 logits at 8K. R = 16 fits, but its pairs are a factor
# ~3 apart in frequency: on the three real-text demo models in bfloat16 at 2K it measured 1.2-3.6x the logit
# error and 2-7x the KL of R = 32, more than its predicted rounding (1.5x) says; hence 32.
MIN_ROTARY_DIM = 32
DEFAULT_HEAD_DIM_MULTIPLE = 16  # 80 / 96 for hd 64, 144 / 160 for hd 128: sizes fast kernels accept
# Rounding standard deviation of one pair per unit amplitude and unit precision 2^-p (model doc).
K_DTYPE = {"float32": 1.0, "bfloat16": 0.55, "float16": 0.55}


def rotary_dim_for(head_dim: int, multiple: int = DEFAULT_HEAD_DIM_MULTIPLE, minimum: int = MIN_ROTARY_DIM) -> int:
    """The smallest even R >= ``minimum`` with ``head_dim + R`` a multiple of ``multiple`` (GPT-NeoX head
    hd' = R + hd). hd 64 -> 32 (96), hd 32 -> 32 (64), hd 128 -> 32 (160), hd 80 -> 32 (112); multiple 64:
    hd 64 -> 64 (128)."""
    head_dim = _checks.positive_int("head_dim", head_dim)
    multiple = _checks.positive_int("head_dim_multiple", multiple, even=True)
    r = _checks.positive_int("rotary_dim", minimum, even=True)
    while (head_dim + r) % multiple:
        r += 2
    return r


def default_cutoff(window: int, dtype: str) -> float:
    """``ln(L / u)``: the L keys of the window below -cutoff carry at most u of the softmax weight together,
    u = 2^-p the dtype's unit roundoff (module doc). bfloat16: 13.2 at 2K, 16.0 at 32K; float16: 15.2, 17.9."""
    p, _ = _FORMATS[_checks.choice("dtype", dtype, tuple(DTYPES))]
    return math.log(_checks.positive_int("window", window)) + p * math.log(2)


def free_base(window: int, rotary_dim: int) -> float:
    """The base whose slowest pair turns one radian over the window: ``base^(-(R-2)/R) * L = 1``."""
    return float(window) ** (rotary_dim / (rotary_dim - 2))


def engine_frequencies(base: float, rotary_dim: int) -> np.ndarray:
    """``theta_r = base^(-2r/R)`` as transformers computes them (float32: ``1/base**(arange(0, R, 2)/R)``),
    returned as float64 values of those float32 numbers, shape ``(R/2,)``. The fit uses the frequencies
    the engine will use, so their rounding is no error."""
    base = _checks.number("base", base)
    if base <= 1:
        raise ValueError(f"base must be > 1, got {base!r}")
    rotary_dim = _checks.positive_int("rotary_dim", rotary_dim, even=True)
    exps = torch.arange(0, rotary_dim, 2, dtype=torch.int64).to(torch.float32) / rotary_dim
    return (1.0 / (base**exps)).to(torch.float64).numpy()


def ladder_bias(a: np.ndarray, b: np.ndarray, thetas: np.ndarray, d: np.ndarray) -> np.ndarray:
    """``f(d) = sum_r a_r sin(theta_r d) + b_r cos(theta_r d)`` in float64, shape of ``d``."""
    ang = np.multiply.outer(np.asarray(d, np.float64), np.asarray(thetas, np.float64))  # (n, P)
    return np.sin(ang) @ np.asarray(a, np.float64) + np.cos(ang) @ np.asarray(b, np.float64)


def exact_distance(slope: float, floor: float, window: int) -> int:
    """W = min(L, floor(C/m)): the distances on which the bias must equal -m d."""
    return int(min(window, math.floor(floor / slope)))


def fit_error(slope: float, a, b, thetas, window: int, floor: float, shift: float = 0.0) -> float:
    """Worst of ``|f(d) - s + m d|`` on d <= W and ``f(d) - s + C`` (where positive) on W < d <= L, every
    integer d; s the ``shift``."""
    w = exact_distance(slope, floor, window)
    d = np.arange(window + 1, dtype=np.float64)
    f = ladder_bias(a, b, thetas, d) - shift
    near = np.abs(f[: w + 1] + slope * d[: w + 1]).max()
    far = (f[w + 1 :] + floor).max() if w < window else 0.0
    return float(max(near, far, 0.0))


def rounding_sigma(thetas: np.ndarray, window: int, dtype: str) -> np.ndarray:
    """Standard deviation of a pair's rounding per unit amplitude A_r, shape ``(P,)``: the dtype's roundings
    (``K_DTYPE`` u) plus the float32 angles at the last position, ``2 hu32(L theta_r)/sqrt(3)`` (query and key
    angles round independently, uniformly within half an ulp)."""
    p, _ = _FORMATS[dtype]
    angle = 2 * half_ulp(window * np.asarray(thetas), "float32") / math.sqrt(3)
    return K_DTYPE[dtype] * 2.0**-p + angle


def extreme_factor(window: int) -> float:
    """``sqrt(2 ln n)``, n the (query, key) pairs of the window: the Gaussian extreme over n draws."""
    n = max(window, 2) * min(window, 4096)
    return math.sqrt(2 * math.log(n))


def rounding_weight(window: int, dtype: str) -> float:
    """The weight of the rounding's standard deviation in the fit's objective (module doc): the extreme factor
    for float32 and float16 (the objective is the predicted error), 1 for bfloat16."""
    return 1.0 if dtype == "bfloat16" else extreme_factor(window)


def predicted_rounding(a, b, thetas, window: int, dtype: str) -> float:
    """``sqrt(2 ln n) * sqrt(sum_r (A_r sigma_r)^2)`` (module doc), logits."""
    amp = np.hypot(np.asarray(a, np.float64), np.asarray(b, np.float64))
    return float(extreme_factor(window) * np.sqrt(np.sum((amp * rounding_sigma(thetas, window, dtype)) ** 2)))


def cast_rounding(level: float, scale: float, dtype: str) -> float:
    """The scores' own rounding where the attention keeps them in the dtype (eager attention: ``q.k`` rounded,
    then times the scale, rounded again; flash kernels keep them in float32): half an ulp of the largest
    score that matters at each step, ``|logit| <= level`` (C, or m L when W = L). A bound, not a statistic:
    it adds to ``predicted_rounding``."""
    return float(half_ulp(level / scale, dtype) * scale + half_ulp(level, dtype))


def _grid(lo: int, hi: int, points: int) -> np.ndarray:
    if hi < lo:
        return np.zeros(0)
    if hi - lo + 1 <= points:
        return np.arange(lo, hi + 1, dtype=np.float64)
    return np.unique(np.concatenate([np.arange(lo, min(hi, lo + 256) + 1), np.linspace(lo, hi, points).round()]))


def _solve(slope, thetas, near, far, floor, square_cost, tangents, max_shift):
    """The LP on the given distances; returns (a, b, t, s). Variables: x+, x- (2P each; x = [a, b] = x+ - x-),
    q (2P, q_i >= x_i^2 through tangent lines at ``tangents``), t, the shift s in [0, max_shift]. Minimises
    t + sum_i square_cost_i q_i."""
    from scipy.optimize import linprog

    P = len(thetas)
    n = 2 * P

    def basis(d):  # (k, n): f = [sin, cos] @ x
        ang = np.multiply.outer(d, thetas)
        return np.hstack([np.sin(ang), np.cos(ang)])

    def rows(B, t_coef, s_coef):  # (k, 3n + 2): B x+ - B x- + t_coef t + s_coef s
        return np.hstack([B, -B, np.zeros((len(B), n)), t_coef, np.full((len(B), 1), s_coef)])

    bn, bf = basis(near), basis(far)
    eye = np.eye(n)
    # tangent of x^2 at c, divided by 2c (rows of unit size): |x| - x^2/(2c) <= c/2, |x| <= x+ + x- (equal at
    # the optimum, q costs)
    tan = np.vstack([np.zeros((0, 3 * n + 2))]
                    + [np.hstack([eye, eye, -eye / (2 * c), np.zeros((n, 2))]) for c in tangents])
    t_near = -np.ones((len(near), 1))
    A = np.vstack([rows(bn, t_near, -1.0), rows(-bn, t_near, 1.0), rows(bf, np.zeros((len(far), 1)), -1.0), tan])
    rhs = np.concatenate([-slope * near, slope * near, np.full(len(far), -floor),
                          np.repeat(np.asarray(tangents) / 2, n)])
    tie = 1e-9 * np.ones(2 * n)  # keeps x+ and x- apart; far below any rounding cost
    cost = np.concatenate([tie, np.tile(square_cost, 2), [1.0, 0.0]])
    bounds = [(0, None)] * (3 * n + 1) + [(0, max_shift)]
    res = linprog(cost, A_ub=A, b_ub=rhs, bounds=bounds, method="highs")
    if res.status not in (0, 2):  # simplex stalls now and then on these (status 4, "model status unknown")
        res = linprog(cost, A_ub=A, b_ub=rhs, bounds=bounds, method="highs-ipm")
    if res.status != 0:
        raise ValueError(f"the ladder fit failed: {res.message}")
    x = res.x[:n] - res.x[n : 2 * n]
    return x[:P], x[P:], float(res.x[-2]), float(res.x[-1])


@dataclass(frozen=True)
class HeadFit:
    """One head's ladder: amplitudes (logits) ``a``, ``b`` of shape ``(P,)``, W, C, the shift s (the bias
    equals s - m d on d <= W; a constant no softmax sees) and the predicted errors."""

    slope: float
    floor: float
    exact_distance: int
    a: tuple[float, ...]
    b: tuple[float, ...]
    fit_error: float
    rounding_error: float
    shift: float = 0.0

    @property
    def predicted_error(self) -> float:
        return self.fit_error + self.rounding_error


def fit_head(
    slope: float, thetas: Sequence[float], window: int, floor: float, dtype: str, *, stored_scale: float,
    iterations: int = 30, rounds: int = 3, max_shift: float | None = None,
) -> HeadFit:
    """Fit one head (module doc): minimise ``fit error + w sqrt(sum_r sigma_r^2 A_r^2)``, w the
    ``rounding_weight``. The square root is linearised (``rounds`` LPs, each ``fit + lam sum sigma^2 A^2``
    with ``lam = w / (2 sqrt(S))`` at the previous round's S, its gradient there; the round with the least
    objective is kept), the squares are tangent lines, and the distances are cutting planes: solve on a grid,
    add the integer distances that violate, repeat until none does. ``stored_scale`` is the target's logit scale: the
    amplitudes are stored as q values ``a / stored_scale`` in ``dtype``, and the errors are those of the
    stored values. The shift s is bounded by ``max_shift`` (default C; 0 fits -m d itself)."""
    thetas = np.asarray(thetas, np.float64)
    max_shift = floor if max_shift is None else _checks.at_least("max_shift", max_shift, 0.0)
    w = exact_distance(slope, floor, window)
    near, far = _grid(0, w, 1024), _grid(w + 1, window, 1024)
    sigma2 = rounding_sigma(thetas, window, dtype) ** 2
    weight = rounding_weight(window, dtype)
    d_all = np.arange(window + 1, dtype=np.float64)
    ang = np.multiply.outer(d_all, thetas)
    sin_all, cos_all = np.sin(ang), np.cos(ang)  # (L + 1, P)
    dt = DTYPES[dtype]
    spread = floor**2 * float(sigma2.mean())  # S of one pair of amplitude C: the first round's guess
    best = None
    for _ in range(rounds):
        cost = sigma2 * weight / (2 * math.sqrt(spread))
        # tangents from C/1000 to 20 C, ratio 1.26: x^2 within 1.5 % between them. Where an amplitude of C
        # costs under 1e-9 logits of rounding the fit alone decides (such tiny costs can also stall HiGHS).
        tangents = floor * np.geomspace(1e-3, 20.0, 44) if cost.max() * floor**2 > 1e-9 else np.zeros(0)
        for _ in range(iterations):
            try:
                a, b, t, shift = _solve(slope, thetas, near, far, floor, cost, tangents, max_shift)
            except ValueError as exc:
                if max_shift >= floor:  # s = C with no amplitude is always feasible: the solver itself failed
                    raise ValueError(f"{exc} (slope {slope:.4g}, floor {floor:g}, window {window})") from None
                raise ValueError(
                    f"no ladder on these {len(thetas)} pairs (slowest {thetas.min():.3g} rad/token) keeps the bias of "
                    f"slope {slope:.4g} below -{floor:g} up to {window} tokens: give a larger --rotary-dim, a larger "
                    "(or no) --rope-base, or a shorter --window") from None
            f = sin_all @ a + cos_all @ b - shift
            slack = 1e-6 * (1 + np.abs(a).sum() + np.abs(b).sum())  # HiGHS's feasibility tolerance, in logits
            err_near = np.abs(f[: w + 1] + slope * d_all[: w + 1])
            bad_near = np.flatnonzero(err_near > t + slack)
            bad_far = np.flatnonzero(f[w + 1 :] > -floor + slack) + w + 1
            top_near = d_all[bad_near[np.argsort(-err_near[bad_near])[:256]]]
            top_far = d_all[bad_far[np.argsort(-f[bad_far])[:256]]]
            if not len(np.setdiff1d(top_near, near)) and not len(np.setdiff1d(top_far, far)):
                break
            near, far = np.union1d(near, top_near), np.union1d(far, top_far)
        spread = max(float(np.sum(sigma2 * (a**2 + b**2))), 1e-300)
        a = (torch.tensor(a / stored_scale).to(dt).double() * stored_scale).numpy()
        b = (torch.tensor(b / stored_scale).to(dt).double() * stored_scale).numpy()
        # the logits that matter lie within [s - min(C, m L), s]
        level = max(shift, min(floor, slope * window) - shift)
        noise, cast = predicted_rounding(a, b, thetas, window, dtype), cast_rounding(level, stored_scale, dtype)
        fit = HeadFit(float(slope), float(floor), w, tuple(a.tolist()), tuple(b.tolist()),
                      fit_error(slope, a, b, thetas, window, floor, shift), noise + cast, shift)
        # the LP's objective plus the cast's bound (float16: the prediction itself)
        objective = fit.fit_error + noise * weight / extreme_factor(window) + cast
        if best is None or objective < best[0]:
            best = (objective, fit)
    return best[1]


def measure(
    fit: HeadFit, thetas: Sequence[float], window: int, dtype: str, *, scale: float, queries: int = 128,
    seed: int = 0,
) -> tuple[float, float]:
    """The head's emulated logits computed as a model does in ``dtype`` (float32 angles, tables cast to the
    dtype, the rotation in the dtype, q.k with float32 accumulation, the scale): (worst |logit - s + m d| on
    d <= W, worst rise above s - C beyond W; s the fit's shift), over the last ``queries`` positions and as many random ones.

    Rounding only: the fit error is included (it is exact arithmetic), so subtract ``fit.fit_error`` bounds."""
    P = len(thetas)
    qpos, kpos = sample_positions(window, queries, seed)
    q_pairs = torch.tensor([*fit.a, *fit.b], dtype=torch.float64) / scale  # x: sin amplitudes, y: cos amplitudes
    k_pairs = torch.cat([torch.zeros(P, dtype=torch.float64), torch.ones(P, dtype=torch.float64)])
    logits = model_logits(q_pairs, k_pairs, thetas, qpos, kpos, dtype, scale)  # (s, t)
    d = (qpos[:, None] - kpos[None, :]).double()  # (s, t)
    near = (d >= 0) & (d <= fit.exact_distance)
    far = (d > fit.exact_distance)
    err = float((logits - fit.shift + fit.slope * d)[near].abs().max())
    rise = float((logits[far] - fit.shift + fit.floor).max()) if far.any() else 0.0
    return err, max(rise, 0.0)


def plan_ladder(
    slopes: Sequence[float],
    head_dim: int,
    window: int,
    *,
    dtype: str = "bfloat16",
    base: float | None = None,
    rotary_dim: int | None = None,
    head_dim_multiple: int = DEFAULT_HEAD_DIM_MULTIPLE,
    floors: float | Sequence[float] | None = None,
    advantages: float | Sequence[float] | None = None,
    cutoff: float | None = None,
    tolerance: float = 1e-3,
    family: str | None = None,
    source: str | None = None,
):
    """The ladder plan of every head, as an ``emulation.EmulationPlan`` (mode ``ladder``) for the GPT-NeoX target.

    Args:
        slopes: per-logit ALiBi slopes ``(h,)``; head_dim: the source head dim (N, M stated for 1/sqrt(head_dim)).
        window: L, the longest context served; beyond it the bias is unconstrained.
        base: a fixed RoPE base (an engine's, e.g. 10000), or None for ``free_base(L, R)``.
        rotary_dim: R; default ``rotary_dim_for(head_dim, head_dim_multiple)``, and where that plan misses
            ``tolerance`` the next size that keeps the rule, if it does better.
        floors: C per head (or one for all); default ``cutoff + advantages``.
        advantages: the content advantage per head (or one for all) the floor adds to the cutoff
            (``convert.calibration``); default ``DEFAULT_ADVANTAGE``.
        cutoff: default ``default_cutoff(window, dtype)``.
    """
    from .emulation import EmulationPlan, HeadPlan, PairTerm

    window = _checks.positive_int("window", window)
    head_dim = _checks.positive_int("head_dim", head_dim)
    _checks.choice("dtype", dtype, tuple(DTYPES))
    slopes = [_checks.positive(f"slope[{i}]", m) for i, m in enumerate(slopes)]
    cutoff = default_cutoff(window, dtype) if cutoff is None else _checks.positive("cutoff", cutoff)

    def per_head(name: str, value) -> list:  # one value for every head, or one per head
        values = [value] * len(slopes) if np.ndim(value) == 0 else list(value)
        if len(values) != len(slopes):
            raise ValueError(f"{len(values)} {name} for {len(slopes)} heads")
        return values

    if floors is not None and advantages is not None:
        raise ValueError("give floors or advantages, not both")
    if floors is None:
        advantages = per_head("advantages", DEFAULT_ADVANTAGE if advantages is None else advantages)
        floors = [cutoff + _checks.at_least(f"advantage[{i}]", a, 0.0) for i, a in enumerate(advantages)]
    floors = [_checks.at_least(f"floor[{i}]", c, cutoff) for i, c in enumerate(per_head("floors", floors))]
    if rotary_dim is not None:
        sizes = [_checks.positive_int("rotary_dim", rotary_dim, even=True)]
    else:
        first = rotary_dim_for(head_dim, head_dim_multiple)
        sizes = [first, first + _checks.positive_int("head_dim_multiple", head_dim_multiple, even=True)]
    if sizes[0] < 4:
        raise ValueError(f"rotary_dim must be >= 4 for a ladder, got {sizes[0]}")

    def plan_for(r: int):
        b = free_base(window, r) if base is None else base
        thetas = engine_frequencies(b, r)
        scale, stored = 1 / math.sqrt(head_dim), 1 / math.sqrt(head_dim + r)
        cache: dict[tuple[float, float], HeadFit] = {}
        heads = []
        for h, (m, c) in enumerate(zip(slopes, floors)):
            if (m, c) not in cache:
                cache[m, c] = fit_head(m, thetas, window, c, dtype, stored_scale=stored)
            f = cache[m, c]
            pairs = tuple(PairTerm(float(t), -a / scale, i, bb / scale) for i, (t, a, bb) in enumerate(zip(thetas, f.a, f.b)))
            heads.append(HeadPlan(h, m, pairs, 1.0, float(thetas[-1] * window), f.fit_error, f.rounding_error,
                                  f.predicted_error, f.floor, f.exact_distance, f.shift))
        return EmulationPlan(head_dim, window, dtype, "ladder", tuple(heads), cutoff, tolerance, base=float(b),
                             rope_dim=r, pairs_per_head=r // 2, family=family, source=source)

    plans = []
    for r in sizes:
        plans.append(plan_for(r))
        if plans[-1].meets_tolerance:
            break
    return min(plans, key=lambda p: (not p.meets_tolerance, p.worst_head.predicted_error if not p.meets_tolerance else 0))
