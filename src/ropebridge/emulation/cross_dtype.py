"""The predicted error of a plan whose checkpoint, stored in the plan's dtype P, runs in another dtype D.

A conversion is planned for one dtype, but a user may run it in another (``verify --dtype``). Its values are
those stored in P; the arithmetic is D's. So, per head, the error model's terms with:

- **storage** in the coarser of P and D: the values P stored, rounded again where D is coarser;
- **arithmetic** in D: tables, products, the dot product and the scores (``error_model.rounding_bound``,
  ``ladder_fit.predicted_rounding`` and ``cast_rounding`` at D).

The ladder's approximation error is recomputed on its stored amplitudes (``ladder_fit.approximation_error``),
re-stored in D where D is coarser (nearest, as a cast does). A single pair or a fixed base takes ``error_model.predict``
at D, plus the relative rounding of P's stored amplitudes where P is the coarser (``storage_rounding``). In P itself
every head's prediction is the plan's own (the tests hold them equal); a value stored beyond D's range makes it inf.

Over fewer positions than the window (``positions`` n <= L: what ``verify`` measures on n tokens), every term is
taken over positions 0..n instead of 0..L: the distances d <= n, the float32 angles up to n theta and the
extremes of n (query, key) pairs (the plan's amplitudes unchanged). Each term grows with the positions (tested
non-decreasing in n, up to the plan's own at L).
"""

from __future__ import annotations

import math

import numpy as np

from ..numerics import Numerics, half_ulp, largest, unit_roundoff
from .error_model import PairSpec, matter_distance, predict
from .ladder_fit import approximation_error, cast_rounding, predicted_rounding, stored_amplitudes
from .plan import EmulationPlan, HeadPlan


def coarser(a: str, b: str) -> str:
    """Of two dtypes, the one with the larger unit roundoff (``a`` where equal)."""
    return b if unit_roundoff(b) > unit_roundoff(a) else a


def storage_rounding(slope: float, pairs: list[PairSpec], scale: float, cutoff: float, window: int, split: float,
                     stored: str) -> float:
    """The largest error, over the distances whose bias matters (d <= min(L, cutoff/m)), of amplitudes stored in
    ``stored``: each pair's term ``N scale sin(theta d)`` off by the relative rounding of q = N/s and of s."""
    d = np.arange(matter_distance(slope, window, cutoff) + 1, dtype=np.float64)  # (n,)
    out = np.zeros_like(d)
    for p in pairs:
        qa = abs(p.N) / split
        relative = float(half_ulp(qa, stored)) / qa + (float(half_ulp(split, stored)) / split if split != 1 else 0)
        out += np.abs(p.N * scale * np.sin(p.theta * d)) * relative
    return float(out.max())


def _ladder_head(plan: EmulationPlan, head: HeadPlan, dtype: str, positions: int) -> float:
    """The ladder head's fit error on its amplitudes as D holds them, plus D's rounding, over ``positions``
    (module doc)."""
    scale = 1 / math.sqrt(plan.head_dim)
    stored_scale = 1 / math.sqrt(plan.head_dim + plan.rotary_dim)
    thetas = np.array([p.theta for p in head.pairs])  # (P,)
    a = np.array([-p.N * scale for p in head.pairs])  # (P,) logits, as P stored them
    b = np.array([p.M * scale for p in head.pairs])
    if max(np.abs(a).max(), np.abs(b).max()) / stored_scale > largest(dtype):
        return math.inf
    if coarser(plan.dtype, dtype) != plan.dtype:  # D rounds the stored values again
        a, b = (stored_amplitudes(x, stored_scale, dtype, toward=False) for x in (a, b))
    ladder = head.ladder
    fit = approximation_error(head.slope, a, b, thetas, positions, ladder.floor, ladder.shift)
    level = max(ladder.shift, min(ladder.floor, head.slope * positions) - ladder.shift)
    return fit + predicted_rounding(a, b, thetas, positions, dtype) + cast_rounding(level, stored_scale, dtype)


def _pairs_head(plan: EmulationPlan, head: HeadPlan, dtype: str, positions: int) -> float:
    """A single pair's or a fixed base's head: ``predict`` at D on its pairs (the opposed pairs' at the target
    head's scale, as ``pairs.evaluate_opposed`` plans them), plus P's storage rounding where P is coarser, over
    ``positions``."""
    scale = 1 / math.sqrt(plan.head_dim)
    specs = head.specs()
    if any(p.opposed for p in specs):  # stored at the target head's logit scale 1/sqrt(hd')
        stored_scale = 1 / math.sqrt(plan.head_dim + plan.rotary_dim)
        specs = [PairSpec(p.theta, p.N * scale / stored_scale, p.opposed) for p in specs]
        scale = stored_scale
    if max(abs(p.N) for p in specs) / head.split > largest(dtype) or head.split > largest(dtype):
        return math.inf
    num = Numerics(scale=scale, window=positions, dtype=dtype, cutoff=plan.cutoff)
    error = predict(head.slope, specs, num, split=head.split).total
    if coarser(plan.dtype, dtype) != dtype:
        error += storage_rounding(head.slope, specs, scale, plan.cutoff, positions, head.split, plan.dtype)
    return error


def predicted_in(plan: EmulationPlan, dtype: str, positions: int | None = None) -> float:
    """The plan's worst predicted score error over its heads (logits) when its checkpoint (stored in
    ``plan.dtype``) runs in ``dtype``, over the first ``positions`` positions (None: the window; module doc); in
    ``plan.dtype`` over the window, the plan's own worst prediction."""
    n = plan.window if positions is None else positions
    if not 0 < n <= plan.window:
        raise ValueError(f"positions must be in 1..{plan.window} (the plan's window), got {positions}")
    if dtype == plan.dtype and n == plan.window:  # the plan's own number, not its recomputation (equal to ~1e-15)
        return plan.worst_head.predicted_error
    head_error = _ladder_head if plan.strategy == "ladder" else _pairs_head
    return max(head_error(plan, head, dtype, n) for head in plan.heads)
