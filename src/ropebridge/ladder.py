"""The frequency ladder: ALiBi emulated on every pair of a RoPE rotary block, exact where it matters.

The single-pair emulation (``emulation``) rotates q = (-N, 0) at a tiny theta: the bias is the small
difference of two products of size ~ m sqrt(hd) * position, so in a 16-bit dtype its rounding grows with
the absolute position (and N overflows float16). The ladder uses instead all R/2 pairs of a GPT-NeoX
rotary block, ``theta_r = base^(-2r/R)`` (pair 0 at 1 rad/token), each head with its own amplitudes:
with q = (-N_r/s, M_r/s), k = (0, s) on pair r the pair adds ``sigma (M_r cos(theta_r d) - N_r sin(theta_r d))``
to the logit (sigma the logit scale), a function of the distance d alone. In logit units, head h gets

    f_h(d) = sum_r a_r sin(theta_r d) + b_r cos(theta_r d),     a_r = -sigma N_r, b_r = sigma M_r.

A softmax needs the bias right only where a key can carry weight. With a floor C_h (``floor``: 40 logits
plus the largest content-score advantage a far key has over the best near one), the exact bias -m d is
below -C_h beyond ``W_h = C_h/m``; so the ladder must equal -m d on d <= W_h and only stay <= -C_h on
W_h < d <= L. Per head a linear program (scipy's HiGHS) finds the amplitudes:

    minimise   max_{d <= W} |f(d) + m d|  +  sum_r k_r (|a_r| + |b_r|)
    subject to f(d) <= -C  for every integer W < d <= L,

with k_r the rounding cost per unit amplitude (``rounding_sigma``). The amplitudes stay of order C
(tens to hundreds of logits) whatever L is: fast pairs wrap instead of growing, so the rounding is
~ u C, independent of the context, and no value comes near float16's range. Beyond L the bias is
unconstrained: the window is a hard limit. Source of the idea: this project's half-precision issue;
the emulation itself: A. Litzenberger, "Emulating ALiBi with RoPE",
https://alexlitzenberger.com/blog/emulating_alibi_with_rope.

**Error model.** fit error (exact arithmetic, amplitudes rounded as stored, every integer d; beyond W the
amount by which f rises above -C) plus rounding. The rounding of a pair is a sum of many independent
roundings (tables cast to the dtype, the rotation's products and sums, float32 angles): its standard
deviation is ``A_r (u K_DTYPE + angle term)``, A_r = sqrt(a_r^2 + b_r^2), u = 2^-p the dtype's
relative precision, and ``K_DTYPE`` measured once with the real rotation (``tests/test_ladder.py`` checks
it). Pairs round independently, so the predicted worst rounding over the n (query, key) pairs of the
window is ``sqrt(2 ln n) sqrt(sum_r sigma_r^2)`` (the Gaussian extreme over n draws). This is a
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

DEFAULT_CUTOFF = 40.0  # logits below -cutoff carry no softmax weight (e^-40 ~ 4e-18)
DEFAULT_ADVANTAGE = 20.0  # content advantage assumed without calibration (the demo model measures 5.4-15)
MIN_ROTARY_DIM = 16  # R = 8 fits the demo model's shallow heads to 1.6 logits at 8K; 16 to 0.05
DEFAULT_HEAD_DIM_MULTIPLE = 16  # 80 / 96 for hd 64, 144 / 160 for hd 128: sizes fast kernels accept
# Rounding standard deviation of one pair per unit amplitude and unit precision 2^-p (model doc).
K_DTYPE = {"float32": 1.0, "bfloat16": 0.55, "float16": 0.55}


def rotary_dim_for(head_dim: int, multiple: int = DEFAULT_HEAD_DIM_MULTIPLE, minimum: int = MIN_ROTARY_DIM) -> int:
    """The smallest even R >= ``minimum`` with ``head_dim + R`` a multiple of ``multiple`` (GPT-NeoX head
    hd' = R + hd). hd 64 -> 16 (80), hd 32 -> 16 (48), hd 128 -> 16 (144); multiple 32: hd 64 -> 32 (96)."""
    head_dim = _checks.positive_int("head_dim", head_dim)
    multiple = _checks.positive_int("head_dim_multiple", multiple, even=True)
    r = _checks.positive_int("rotary_dim", minimum, even=True)
    while (head_dim + r) % multiple:
        r += 2
    return r


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


def fit_error(slope: float, a, b, thetas, window: int, floor: float) -> float:
    """Worst of ``|f(d) + m d|`` on d <= W and ``f(d) + C`` (where positive) on W < d <= L, every integer d."""
    w = exact_distance(slope, floor, window)
    d = np.arange(window + 1, dtype=np.float64)
    f = ladder_bias(a, b, thetas, d)
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


def predicted_rounding(a, b, thetas, window: int, dtype: str) -> float:
    """``sqrt(2 ln n) * sqrt(sum_r (A_r sigma_r)^2)`` (module doc), logits."""
    amp = np.hypot(np.asarray(a, np.float64), np.asarray(b, np.float64))
    return float(extreme_factor(window) * np.sqrt(np.sum((amp * rounding_sigma(thetas, window, dtype)) ** 2)))


def _grid(lo: int, hi: int, points: int) -> np.ndarray:
    if hi < lo:
        return np.zeros(0)
    if hi - lo + 1 <= points:
        return np.arange(lo, hi + 1, dtype=np.float64)
    return np.unique(np.concatenate([np.arange(lo, min(hi, lo + 256) + 1), np.linspace(lo, hi, points).round()]))


def _solve(slope, thetas, near, far, floor, weights):
    """The LP on the given distances; returns (a, b, t). Variables: a+, a-, b+, b- (P each), t."""
    from scipy.optimize import linprog

    P = len(thetas)

    def basis(d):  # (n, 4P + 1): f = [sin, cos] @ (x+ - x-)
        ang = np.multiply.outer(d, thetas)
        sc = np.hstack([np.sin(ang), np.cos(ang)])
        return np.hstack([sc, -sc])

    bn, bf = basis(near), basis(far)
    ones = np.ones((len(near), 1))
    A = np.vstack([np.hstack([bn, -ones]), np.hstack([-bn, -ones]), np.hstack([bf, np.zeros((len(far), 1))])])
    rhs = np.concatenate([-slope * near, slope * near, np.full(len(far), -floor)])
    cost = np.concatenate([np.tile(weights, 4), [1.0]])
    res = linprog(cost, A_ub=A, b_ub=rhs, bounds=(0, None), method="highs")
    if res.status != 0:
        raise ValueError(f"the ladder fit failed: {res.message}")
    x = res.x[: 2 * P] - res.x[2 * P : 4 * P]
    return x[:P], x[P:], float(res.x[-1])


@dataclass(frozen=True)
class HeadFit:
    """One head's ladder: amplitudes (logits) ``a``, ``b`` of shape ``(P,)``, W, C and the predicted errors."""

    slope: float
    floor: float
    exact_distance: int
    a: tuple[float, ...]
    b: tuple[float, ...]
    fit_error: float
    rounding_error: float

    @property
    def predicted_error(self) -> float:
        return self.fit_error + self.rounding_error


def fit_head(
    slope: float, thetas: Sequence[float], window: int, floor: float, dtype: str, *, stored_scale: float,
    iterations: int = 30,
) -> HeadFit:
    """Fit one head (module doc) by cutting planes: solve on a grid of distances, add the integer distances
    that violate, repeat until none does. ``stored_scale`` is the target's logit scale: the amplitudes are
    stored as q values ``a / stored_scale`` in ``dtype``, and the fit error is that of the stored values."""
    thetas = np.asarray(thetas, np.float64)
    w = exact_distance(slope, floor, window)
    near, far = _grid(0, w, 1024), _grid(w + 1, window, 1024)
    weights = rounding_sigma(thetas, window, dtype) * extreme_factor(window) / math.sqrt(len(thetas))
    d_all = np.arange(window + 1, dtype=np.float64)
    ang = np.multiply.outer(d_all, thetas)
    sin_all, cos_all = np.sin(ang), np.cos(ang)  # (L + 1, P)
    for _ in range(iterations):
        try:
            a, b, t = _solve(slope, thetas, near, far, floor, weights)
        except ValueError:
            raise ValueError(
                f"no ladder on these {len(thetas)} pairs (slowest {thetas.min():.3g} rad/token) keeps the bias of slope "
                f"{slope:.4g} below -{floor:g} up to {window} tokens: give a larger --rotary-dim, a larger (or no) "
                "--rope-base, or a shorter --window") from None
        f = sin_all @ a + cos_all @ b
        slack = 1e-6 * (1 + np.abs(a).sum() + np.abs(b).sum())  # HiGHS's feasibility tolerance, in logits
        err_near = np.abs(f[: w + 1] + slope * d_all[: w + 1])
        bad_near = np.flatnonzero(err_near > t + slack)
        bad_far = np.flatnonzero(f[w + 1 :] > -floor + slack) + w + 1
        top_near = d_all[bad_near[np.argsort(-err_near[bad_near])[:256]]]
        top_far = d_all[bad_far[np.argsort(-f[bad_far])[:256]]]
        if not len(np.setdiff1d(top_near, near)) and not len(np.setdiff1d(top_far, far)):
            break
        near, far = np.union1d(near, top_near), np.union1d(far, top_far)
    dt = DTYPES[dtype]
    a = (torch.tensor(a / stored_scale).to(dt).double() * stored_scale).numpy()
    b = (torch.tensor(b / stored_scale).to(dt).double() * stored_scale).numpy()
    return HeadFit(float(slope), float(floor), w, tuple(a.tolist()), tuple(b.tolist()),
                   fit_error(slope, a, b, thetas, window, floor), predicted_rounding(a, b, thetas, window, dtype))


def measure(
    fit: HeadFit, thetas: Sequence[float], window: int, dtype: str, *, scale: float, queries: int = 128,
    seed: int = 0,
) -> tuple[float, float]:
    """The head's emulated logits computed as a model does in ``dtype`` (float32 angles, tables cast to the
    dtype, the rotation in the dtype, q.k with float32 accumulation, the scale): (worst |logit + m d| on
    d <= W, worst rise above -C beyond W), over the last ``queries`` positions and as many random ones.

    Rounding only: the fit error is included (it is exact arithmetic), so subtract ``fit.fit_error`` bounds."""
    P = len(thetas)
    qpos, kpos = sample_positions(window, queries, seed)
    q_pairs = torch.tensor([*fit.a, *fit.b], dtype=torch.float64) / scale  # x: sin amplitudes, y: cos amplitudes
    k_pairs = torch.cat([torch.zeros(P, dtype=torch.float64), torch.ones(P, dtype=torch.float64)])
    logits = model_logits(q_pairs, k_pairs, thetas, qpos, kpos, dtype, scale)  # (s, t)
    d = (qpos[:, None] - kpos[None, :]).double()  # (s, t)
    near = (d >= 0) & (d <= fit.exact_distance)
    far = (d > fit.exact_distance)
    err = float((logits + fit.slope * d)[near].abs().max())
    rise = float((logits[far] + fit.floor).max()) if far.any() else 0.0
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
    cutoff: float = DEFAULT_CUTOFF,
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
        floors: C per head (or one for all); default ``cutoff + DEFAULT_ADVANTAGE``.
    """
    from .emulation import EmulationPlan, HeadPlan, PairTerm

    window = _checks.positive_int("window", window)
    head_dim = _checks.positive_int("head_dim", head_dim)
    _checks.choice("dtype", dtype, tuple(DTYPES))
    slopes = [_checks.positive(f"slope[{i}]", m) for i, m in enumerate(slopes)]
    cutoff = _checks.positive("cutoff", cutoff)
    if floors is None:
        floors = cutoff + DEFAULT_ADVANTAGE
    floors = [floors] * len(slopes) if np.ndim(floors) == 0 else list(floors)
    if len(floors) != len(slopes):
        raise ValueError(f"{len(floors)} floors for {len(slopes)} heads")
    floors = [_checks.at_least(f"floor[{i}]", c, cutoff) for i, c in enumerate(floors)]
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
                                  f.predicted_error, f.floor, f.exact_distance))
        return EmulationPlan(head_dim, window, dtype, "ladder", tuple(heads), cutoff, tolerance, base=float(b),
                             rope_dim=r, pairs_per_head=r // 2, family=family, source=source)

    plans = []
    for r in sizes:
        plans.append(plan_for(r))
        if plans[-1].meets_tolerance:
            break
    return min(plans, key=lambda p: (not p.meets_tolerance, p.worst_head.predicted_error if not p.meets_tolerance else 0))
