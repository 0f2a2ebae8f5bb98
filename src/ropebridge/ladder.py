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
for a shift s of its choice. Per head, a second-order-cone program (clarabel, an interior-point conic solver)
finds the amplitudes and the shift that minimise the fit residual plus the rounding (``fit_head``):

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

import functools
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


MAX_WINDOW = 2**24  # float32 holds every integer position up to 2^24 exactly (engines compute angles from them)


def check_window(window) -> int:
    """``window`` as a positive int no larger than ``MAX_WINDOW``, else ``ValueError`` naming ``--window``."""
    window = _checks.positive_int("window", window)
    if window > MAX_WINDOW:
        raise ValueError(f"--window {window} is beyond {MAX_WINDOW} (2^24), the last position float32 holds exactly")
    return window


def default_cutoff(window: int, dtype: str) -> float:
    """``ln(L / u)``: the L keys of the window below -cutoff carry at most u of the softmax weight together,
    u = 2^-p the dtype's unit roundoff (module doc). bfloat16: 13.2 at 2K, 16.0 at 32K; float16: 15.2, 17.9."""
    p, _ = _FORMATS[_checks.choice("dtype", dtype, tuple(DTYPES))]
    return math.log(_checks.positive_int("window", window)) + p * math.log(2)


def free_base(window: int, rotary_dim: int) -> float:
    """The base whose slowest pair turns one radian over the window: ``base^(-(R-2)/R) * L = 1`` (a window
    of one token is planned as two: any base turns a pair less than a radian there)."""
    return float(max(window, 2)) ** (rotary_dim / (rotary_dim - 2))


def engine_frequencies(base: float, rotary_dim: int) -> np.ndarray:
    """``theta_r = base^(-2r/R)`` as transformers computes them (float32: ``1/base**(arange(0, R, 2)/R)``),
    returned as float64 values of those float32 numbers, shape ``(R/2,)``. The fit uses the frequencies
    the engine will use, so their rounding is no error."""
    base = _checks.number("base", base)
    if base <= 1:
        raise ValueError(f"base must be > 1, got {base!r}")
    rotary_dim = _checks.positive_int("rotary_dim", rotary_dim, even=True)
    exps = torch.arange(0, rotary_dim, 2, dtype=torch.int64).to(torch.float32) / rotary_dim
    thetas = (1.0 / (base**exps)).to(torch.float64).numpy()
    bad = np.flatnonzero(~np.isfinite(thetas) | (thetas <= 0) | (thetas < np.finfo(np.float32).tiny))
    if len(bad):
        raise ValueError(f"transformers computes the frequencies 1/base^(2r/R) in float32, where base {base:g} "
                         f"gives pair {bad[0]} of rotary dim {rotary_dim} the frequency {thetas[bad[0]]:g}, below "
                         "float32's normal range: give a smaller base")
    return thetas


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
    d = np.arange(window + 1, dtype=np.float64)
    return _worst(ladder_bias(a, b, thetas, d) - shift, slope, floor, exact_distance(slope, floor, window))


def _worst(f: np.ndarray, slope: float, floor: float, w: int) -> float:
    """``fit_error`` of the shifted bias ``f(d) - s`` given on every integer distance 0..L, shape ``(L + 1,)``."""
    near = np.abs(f[: w + 1] + slope * np.arange(w + 1, dtype=np.float64)).max()
    return float(max(near, (f[w + 1:] + floor).max(initial=0.0), 0.0))


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


GRID_POINTS = 256  # the first cutting planes per range (near, far); violated distances are added as found


def _grid(lo: int, hi: int, points: int) -> np.ndarray:
    """Integer distances of ``[lo, hi]``: all of them up to ``points``, else ``points`` spread evenly plus the
    first ``points / 4`` one by one (where the near fit bends), float64."""
    if hi < lo:
        return np.zeros(0)
    if hi - lo + 1 <= points:
        return np.arange(lo, hi + 1, dtype=np.float64)
    return np.unique(np.concatenate([np.arange(lo, min(hi, lo + points // 4) + 1), np.linspace(lo, hi, points).round()]))


@functools.lru_cache(maxsize=1)
def _basis(thetas: tuple[float, ...], window: int) -> np.ndarray:
    """``[sin(theta_r d), cos(theta_r d)]`` on every integer distance, shape ``(L + 1, 2P)``, float64; kept for
    the next head of the same plan (one entry: 256 MB at L = 2^20, R = 32)."""
    ang = np.multiply.outer(np.arange(window + 1, dtype=np.float64), np.asarray(thetas, np.float64))  # (L + 1, P)
    return np.hstack([np.sin(ang), np.cos(ang)])


_ACCEPTED = ("Solved", "AlmostSolved")
# clarabel's settings for each attempt at a solve: its defaults, then more iterations and stronger regularisation
_ATTEMPTS = ({}, {"max_iter": 1000, "static_regularization_constant": 1e-6})


def _solve(slope: float, near: np.ndarray, b_near: np.ndarray, b_far: np.ndarray, floor: float,
           rounding: np.ndarray, max_shift: float) -> tuple[np.ndarray, float, float, str]:
    """The second-order-cone program of the fit on the given distances, solved by clarabel (an interior-point
    conic solver). Variables z = [x (2P), t, s, u], x = [a, b]; ``b_near`` ``(k, 2P)`` and ``b_far`` ``(j, 2P)``
    the basis at the ``near`` distances and the far ones:

        minimise t + u   subject to   |B_near x - s + m d| <= t,   B_far x - s <= -C,   0 <= s <= max_shift,
                                      u >= || rounding * x ||_2                      (a second-order cone)

    Returns (x, t, s, status), s clipped to its bounds (an interior point ends within ~1e-9 of them). A solve
    that ends neither Solved nor AlmostSolved is tried again with the next settings of ``_ATTEMPTS``; the last
    status is returned either way."""
    import clarabel
    import scipy.sparse as sp

    k, j, n = len(b_near), len(b_far), b_near.shape[1]
    one_n, one_f = np.ones((k, 1)), np.ones((j, 1))
    # rows of A z <= b (nonnegative cone), then the cone (u, rounding * x) as b - A z
    a_lin = np.vstack([
        np.hstack([b_near, -one_n, -one_n, 0 * one_n]),     # B x - t - s <= -m d
        np.hstack([-b_near, -one_n, one_n, 0 * one_n]),     # -B x - t + s <= m d
        np.hstack([b_far, 0 * one_f, -one_f, 0 * one_f]),   # B x - s <= -C
        np.eye(1, n + 3, n + 1) * [[-1.0]], np.eye(1, n + 3, n + 1),  # -s <= 0, s <= max_shift
    ])
    a_cone = -np.vstack([np.eye(1, n + 3, n + 2), np.hstack([np.diag(rounding), np.zeros((n, 3))])])
    A = sp.csc_matrix(np.vstack([a_lin, a_cone]))
    rhs = np.concatenate([-slope * near, slope * near, np.full(j, -floor), [0.0, max_shift], np.zeros(n + 1)])
    cost = np.zeros(n + 3)
    cost[n], cost[n + 2] = 1.0, 1.0
    cones = [clarabel.NonnegativeConeT(len(a_lin)), clarabel.SecondOrderConeT(n + 1)]
    for attempt in _ATTEMPTS:
        settings = clarabel.DefaultSettings()
        settings.verbose = False
        for key, value in attempt.items():
            setattr(settings, key, value)
        sol = clarabel.DefaultSolver(sp.csc_matrix((n + 3, n + 3)), cost, A, rhs, cones, settings).solve()
        status = str(sol.status)
        if status in _ACCEPTED:
            break
    z = np.asarray(sol.x, np.float64)
    return z[:n], float(z[n]), float(np.clip(z[n + 1], 0.0, max_shift)), status  # s on its bounds, not 1e-15 past


def _stored(x: np.ndarray, stored_scale: float, dtype: str, toward: bool) -> np.ndarray:
    """The amplitudes ``x`` (logits) as the checkpoint stores them, q = x / stored_scale in ``dtype``, rounded
    to the nearest (``toward`` False) or to the neighbour on the other side of x (``toward`` True), in logits."""
    dt = DTYPES[dtype]
    q = torch.tensor(x / stored_scale, dtype=torch.float64)
    near = q.to(dt)
    if toward:
        other = torch.nextafter(near, torch.where(near.double() < q, torch.inf, -torch.inf).to(dt))
        near = torch.where(near.double() == q, near, other)
    return near.double().numpy() * stored_scale


def _directed_rounding(x, basis, slope, floor, shift, w, stored_scale, dtype) -> np.ndarray:
    """Store the amplitudes ``x`` ``(2P,)`` in the dtype, choosing for each (largest first) the neighbour below or
    above whichever leaves the smaller fit error given the choices made so far: the stored values move by at
    most one ulp each, as nearest rounding does, but their errors are steered to cancel on the fit instead of
    adding at random."""
    options = np.stack([_stored(x, stored_scale, dtype, False), _stored(x, stored_scale, dtype, True)])  # (2, 2P)
    chosen = options[0].copy()
    f = basis @ chosen - shift  # (L + 1,)
    error = _worst(f, slope, floor, w)
    for i in np.argsort(-np.abs(x)):
        delta = options[1, i] - chosen[i]
        if not delta:
            continue
        other = f + delta * basis[:, i]
        other_error = _worst(other, slope, floor, w)
        if other_error < error:
            f, error, chosen[i] = other, other_error, options[1, i]
    return chosen


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
    iterations: int = 30, max_shift: float | None = None,
) -> HeadFit:
    """Fit one head (module doc): minimise ``fit error + w sqrt(sum_r sigma_r^2 A_r^2)``, w the
    ``rounding_weight``, as the second-order-cone program it is (``_solve``). The distances are cutting planes:
    solve on a grid, add the integer distances that violate (at most 256 of each kind per round), repeat until
    none does. ``stored_scale`` is the target's logit scale: the amplitudes are stored as q values
    ``a / stored_scale`` in ``dtype`` (``_directed_rounding``), and the errors are those of the stored values.
    The shift s is bounded by ``max_shift`` (default C; 0 fits -m d itself)."""
    thetas = np.asarray(thetas, np.float64)
    max_shift = floor if max_shift is None else _checks.at_least("max_shift", max_shift, 0.0)
    w = exact_distance(slope, floor, window)
    basis = _basis(tuple(thetas.tolist()), window)  # (L + 1, 2P)
    near, far = _grid(0, w, GRID_POINTS), _grid(w + 1, window, GRID_POINTS)
    rounding = np.tile(rounding_sigma(thetas, window, dtype), 2) * rounding_weight(window, dtype)
    for _ in range(iterations):
        x, t, shift, status = _solve(slope, near, basis[near.astype(np.int64)], basis[far.astype(np.int64)],
                                     floor, rounding, max_shift)
        if status not in _ACCEPTED:
            if max_shift < floor and "Infeasible" in status:
                raise ValueError(
                    f"no ladder on these {len(thetas)} pairs (slowest {thetas.min():.3g} rad/token) keeps the bias of "
                    f"slope {slope:.4g} below -{floor:g} up to {window} tokens: give a larger --rotary-dim, a larger "
                    "(or no) --rope-base, or a shorter --window")
            raise ValueError(f"the ladder fit failed: the conic solver ended {status} (slope {slope:.4g}, floor "
                             f"{floor:g}, window {window})")
        f = basis @ x - shift
        slack = 1e-6 * (1 + np.abs(x).sum())  # the solver's feasibility tolerance, in logits
        err_near = np.abs(f[: w + 1] + slope * np.arange(w + 1))
        bad_near = np.flatnonzero(err_near > t + slack)
        bad_far = np.flatnonzero(f[w + 1:] > -floor + slack) + w + 1
        top_near = bad_near[np.argsort(-err_near[bad_near])[:256]].astype(np.float64)
        top_far = bad_far[np.argsort(-f[bad_far])[:256]].astype(np.float64)
        if not len(np.setdiff1d(top_near, near)) and not len(np.setdiff1d(top_far, far)):
            break
        near, far = np.union1d(near, top_near), np.union1d(far, top_far)
    x = _directed_rounding(x, basis, slope, floor, shift, w, stored_scale, dtype)
    P = len(thetas)
    a, b = x[:P], x[P:]
    level = max(shift, min(floor, slope * window) - shift)  # the logits that matter lie within [s - min(C, m L), s]
    rounding_error = predicted_rounding(a, b, thetas, window, dtype) + cast_rounding(level, stored_scale, dtype)
    return HeadFit(float(slope), float(floor), w, tuple(a.tolist()), tuple(b.tolist()),
                   _worst(basis @ x - shift, slope, floor, w), rounding_error, shift)


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


# A pool pays off once the fits outweigh its start (each worker imports torch, ~2 s): distinct heads times window.
PARALLEL_WORK = 2**16


def fit_heads(
    keys: Sequence[tuple[float, float]], thetas: np.ndarray, window: int, dtype: str, stored_scale: float, *,
    jobs: int = 1, progress: bool = False,
) -> dict[tuple[float, float], HeadFit]:
    """``fit_head`` for every distinct (slope, floor) in ``keys``, in ``jobs`` processes where the work is worth
    a pool (``PARALLEL_WORK``); each fit is a pure function of its arguments, so the result is the same whatever
    ``jobs``. ``progress`` shows a bar on stderr once the fits have run two seconds."""
    from ._progress import progress_bar

    distinct = list(dict.fromkeys((float(m), float(c)) for m, c in keys))
    args = [(m, tuple(np.asarray(thetas, np.float64).tolist()), window, c, dtype, stored_scale) for m, c in distinct]
    jobs = min(jobs, len(distinct)) if len(distinct) * window >= PARALLEL_WORK else 1
    bar = progress_bar(len(distinct), "plan", enabled=progress, unit="head", delay=2.0)
    fits: dict[tuple[float, float], HeadFit] = {}
    try:
        if jobs == 1:
            for key, arg in zip(distinct, args):
                fits[key] = _fit((key, arg))[1]
                bar.update()
        else:
            # spawn, not fork: a forked child of a process whose torch threads have run can hang. The workers
            # ignore Ctrl-C (the terminal sends it to them too): this process answers it and ends them.
            pool = _pool(jobs)
            try:
                for key, fit in pool.imap_unordered(_fit, list(zip(distinct, args))):
                    fits[key] = fit
                    bar.update()
            finally:
                pool.terminate()
                pool.join()
    finally:
        bar.close()
    return fits


def _pool(jobs: int):
    """A spawn pool whose workers ignore SIGINT from their first instant: an ignored signal stays ignored
    through exec, and Python then installs no handler of its own, so SIGINT is ignored here while they start
    (from the main thread; elsewhere their initializer ignores it once their imports are done)."""
    import multiprocessing
    import signal
    import threading

    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
    try:
        return multiprocessing.get_context("spawn").Pool(jobs, initializer=_ignore_interrupt)
    finally:
        if main:
            signal.signal(signal.SIGINT, previous)


def _ignore_interrupt() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _fit(item: tuple) -> tuple[tuple[float, float], HeadFit]:
    key, (slope, thetas, window, floor, dtype, stored_scale) = item
    return key, fit_head(slope, thetas, window, floor, dtype, stored_scale=stored_scale)


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
    jobs: int = 1,
    progress: bool = False,
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
        jobs: processes fitting distinct heads at once (``fit_heads``); the plan is the same whatever ``jobs``.
        progress: a progress bar on stderr for plans that take more than two seconds.
    """
    from .emulation import EmulationPlan, HeadPlan, PairTerm

    window = check_window(window)
    head_dim = _checks.positive_int("head_dim", head_dim)
    _checks.choice("dtype", dtype, tuple(DTYPES))
    jobs = _checks.positive_int("jobs", jobs)
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
        try:
            thetas = engine_frequencies(b, r)
        except ValueError as exc:
            raise ValueError(f"--rope-base {b:g}: {exc}" if base is not None else str(exc)) from None
        scale, stored = 1 / math.sqrt(head_dim), 1 / math.sqrt(head_dim + r)
        fits = fit_heads(list(zip(slopes, floors)), thetas, window, dtype, stored, jobs=jobs, progress=progress)
        heads = []
        for h, (m, c) in enumerate(zip(slopes, floors)):
            f = fits[m, c]
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
