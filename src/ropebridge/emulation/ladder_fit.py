"""The ladder's fit: one head's amplitudes on every pair of a rotary block, as a second-order-cone program.

Head h gets ``f(d) = sum_r a_r sin(theta_r d) + b_r cos(theta_r d)`` (logits), theta_r = base^(-2r/R) (the
target's rotary block; ``ladder`` chooses the base). A softmax needs the bias right only where a key can carry
weight, and only up to a constant: with a floor C (the cutoff plus the largest content advantage a far key has),
the exact bias -m d is below -C beyond W = C/m, so the ladder must equal δ - m d on d <= W and stay <= δ - C on
W < d <= L, for a shift δ of its choice (``fit_head``):

    minimise   max_{d <= W} |f(d) - δ + m d|  +  w sqrt(sum_r sigma_r^2 (a_r^2 + b_r^2))
    subject to f(d) <= δ - C  for every integer W < d <= L,   0 <= δ <= C,

sigma_r the rounding per unit amplitude (``rounding_sigma``) and w its weight (``rounding_weight``). Pairs round
independently, so the rounding is a root sum of squares: it favours many moderate amplitudes. The amplitudes stay
of order C whatever L is (fast pairs wrap instead of growing), so the rounding is ~ u C, independent of the
context. Beyond L the bias is unconstrained: the window is a hard limit. Why the objective is weighed this way, and
what was measured against other choices: ``docs/decisions.md``.

**Error model.** fit error (exact arithmetic, amplitudes as stored, every integer d; beyond W the amount by which
f rises above s - C) plus rounding. A pair's rounding is a sum of many independent roundings (tables cast to the
dtype, the rotation's products and sums, float32 angles): standard deviation ``A_r (u K_DTYPE + angle term)``,
A_r = sqrt(a_r^2 + b_r^2), u = 2^-p, ``K_DTYPE`` measured once with the real rotation. The predicted worst rounding
over the n (query, key) pairs of the window is ``sqrt(2 ln n) sqrt(sum_r sigma_r^2 A_r^2)`` (the Gaussian extreme
of n draws), plus the scores' own rounding where attention keeps them in the dtype (``cast_rounding``). A
statistical prediction, not a bound; the tests check it against the rotation computed in the dtype
(``tests/oracles.py``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .. import _checks
from ..numerics import DTYPES, half_ulp, unit_roundoff
from .error_model import matter_distance

# Rounding standard deviation of one pair per unit amplitude and unit precision 2^-p (module doc).
K_DTYPE = {"float32": 1.0, "bfloat16": 0.55, "float16": 0.55}


def ladder_bias(a: np.ndarray, b: np.ndarray, thetas: np.ndarray, d: np.ndarray) -> np.ndarray:
    """``f(d) = sum_r a_r sin(theta_r d) + b_r cos(theta_r d)`` in float64, shape of ``d``."""
    ang = np.multiply.outer(np.asarray(d, np.float64), np.asarray(thetas, np.float64))  # (n, P)
    return np.sin(ang) @ np.asarray(a, np.float64) + np.cos(ang) @ np.asarray(b, np.float64)


def approximation_error(slope: float, a, b, thetas, window: int, floor: float, shift: float = 0.0) -> float:
    """Worst of ``|f(d) - δ + m d|`` on d <= W and ``f(d) - δ + C`` (where positive) on W < d <= L, every
    integer d; δ the ``shift``."""
    d = np.arange(window + 1, dtype=np.float64)
    return _worst(ladder_bias(a, b, thetas, d) - shift, slope, floor, matter_distance(slope, window, floor))


def _worst(f: np.ndarray, slope: float, floor: float, w: int) -> float:
    """``approximation_error`` of the shifted bias ``f(d) - δ`` given on every integer distance 0..L,
    shape ``(L + 1,)``."""
    near = np.abs(f[: w + 1] + slope * np.arange(w + 1, dtype=np.float64)).max()
    return float(max(near, (f[w + 1:] + floor).max(initial=0.0), 0.0))


def rounding_sigma(thetas: np.ndarray, window: int, dtype: str) -> np.ndarray:
    """Standard deviation of a pair's rounding per unit amplitude A_r, shape ``(P,)``: the dtype's roundings
    (``K_DTYPE`` u) plus the float32 angles at the last position, ``2 hu32(L theta_r)/sqrt(3)`` (query and key
    angles round independently, uniformly within half an ulp)."""
    angle = 2 * half_ulp(window * np.asarray(thetas), "float32") / math.sqrt(3)
    return K_DTYPE[dtype] * unit_roundoff(dtype) + angle


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
    return np.unique(np.concatenate([np.arange(lo, min(hi, lo + points // 4) + 1),
                                     np.linspace(lo, hi, points).round()]))


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
    conic solver). Variables z = [x (2P), t, δ, u], x = [a, b]; ``b_near`` ``(k, 2P)`` and ``b_far`` ``(j, 2P)``
    the basis at the ``near`` distances and the far ones:

        minimise t + u   subject to   |B_near x - δ + m d| <= t,   B_far x - δ <= -C,   0 <= δ <= max_shift,
                                      u >= || rounding * x ||_2                      (a second-order cone)

    Returns (x, t, δ, status), δ clipped to its bounds (an interior point ends within ~1e-9 of them). A solve
    that ends neither Solved nor AlmostSolved is tried again with the next settings of ``_ATTEMPTS``; the last
    status is returned either way."""
    import clarabel
    import scipy.sparse as sp

    k, j, n = len(b_near), len(b_far), b_near.shape[1]
    one_n, one_f = np.ones((k, 1)), np.ones((j, 1))
    # rows of A z <= b (nonnegative cone), then the cone (u, rounding * x) as b - A z
    a_lin = np.vstack([
        np.hstack([b_near, -one_n, -one_n, 0 * one_n]),     # B x - t - δ <= -m d
        np.hstack([-b_near, -one_n, one_n, 0 * one_n]),     # -B x - t + δ <= m d
        np.hstack([b_far, 0 * one_f, -one_f, 0 * one_f]),   # B x - δ <= -C
        np.eye(1, n + 3, n + 1) * [[-1.0]], np.eye(1, n + 3, n + 1),  # -δ <= 0, δ <= max_shift
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
    return z[:n], float(z[n]), float(np.clip(z[n + 1], 0.0, max_shift)), status  # δ on its bounds, not 1e-15 past


def stored_amplitudes(x: np.ndarray, stored_scale: float, dtype: str, toward: bool) -> np.ndarray:
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
    options = np.stack([stored_amplitudes(x, stored_scale, dtype, toward) for toward in (False, True)])  # (2, 2P)
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
    """One head's ladder: amplitudes (logits) ``a``, ``b`` of shape ``(P,)``, W, C, the shift δ (the bias
    equals δ - m d on d <= W; a constant no softmax sees) and the predicted errors."""

    slope: float
    floor: float
    exact_distance: int
    a: tuple[float, ...]
    b: tuple[float, ...]
    approximation_error: float
    rounding_error: float
    shift: float = 0.0

    @property
    def predicted_error(self) -> float:
        return self.approximation_error + self.rounding_error


def _violations(f: np.ndarray, slope: float, floor: float, w: int, t: float,
                slack: float) -> tuple[np.ndarray, np.ndarray]:
    """The integer distances where the shifted bias ``f`` ``(L + 1,)`` breaks the program beyond ``slack``: near
    (|f + m d| > t on d <= W) and far (f > -C beyond W), the 256 worst of each, float64."""
    err_near = np.abs(f[: w + 1] + slope * np.arange(w + 1))
    bad_near = np.flatnonzero(err_near > t + slack)
    bad_far = np.flatnonzero(f[w + 1:] > -floor + slack) + w + 1
    return (bad_near[np.argsort(-err_near[bad_near])[:256]].astype(np.float64),
            bad_far[np.argsort(-f[bad_far])[:256]].astype(np.float64))


def _cutting_planes(slope: float, thetas: np.ndarray, window: int, floor: float, dtype: str, max_shift: float,
                    iterations: int) -> tuple[np.ndarray, float]:
    """The program's solution (x = [a, b] ``(2P,)`` in logits, shift δ) on every integer distance: solved on a grid
    (``_grid``), the violated distances added (``_violations``), until none is new."""
    w = matter_distance(slope, window, floor)
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
        slack = 1e-6 * (1 + np.abs(x).sum())  # the solver's feasibility tolerance, in logits
        top_near, top_far = _violations(basis @ x - shift, slope, floor, w, t, slack)
        if not len(np.setdiff1d(top_near, near)) and not len(np.setdiff1d(top_far, far)):
            break
        near, far = np.union1d(near, top_near), np.union1d(far, top_far)
    return x, shift


def fit_head(
    slope: float, thetas: Sequence[float], window: int, floor: float, dtype: str, *, stored_scale: float,
    iterations: int = 30, max_shift: float | None = None,
) -> HeadFit:
    """Fit one head (module doc) on the pairs ``thetas`` ``(P,)``: the program solved by cutting planes
    (``_cutting_planes``), then the amplitudes stored as the checkpoint will store them, q = a / ``stored_scale``
    (the target's logit scale) in ``dtype``, by ``_directed_rounding``; the errors are those of the stored values.
    The shift δ is bounded by ``max_shift`` (default C; 0 fits -m d itself)."""
    thetas = np.asarray(thetas, np.float64)
    max_shift = floor if max_shift is None else _checks.at_least("max_shift", max_shift, 0.0)
    w = matter_distance(slope, window, floor)
    x, shift = _cutting_planes(slope, thetas, window, floor, dtype, max_shift, iterations)
    basis = _basis(tuple(thetas.tolist()), window)  # (L + 1, 2P)
    x = _directed_rounding(x, basis, slope, floor, shift, w, stored_scale, dtype)
    P = len(thetas)
    a, b = x[:P], x[P:]
    level = max(shift, min(floor, slope * window) - shift)  # the logits that matter lie within [δ - min(C, m L), δ]
    rounding_error = predicted_rounding(a, b, thetas, window, dtype) + cast_rounding(level, stored_scale, dtype)
    return HeadFit(float(slope), float(floor), w, tuple(a.tolist()), tuple(b.tolist()),
                   _worst(basis @ x - shift, slope, floor, w), rounding_error, shift)
