"""The single pair: one slow rotary pair per head, q = (-N/s, 0), k = (0, s), N = m sqrt(hd)/theta.

The pair adds ``-(N/sqrt(hd)) sin(theta d)`` to the logit, which matches ALiBi's ``-m d`` in the small-angle
limit (A. Litzenberger, "Emulating ALiBi with RoPE"). Example from that text: BLOOM-560M (16 heads, hd 64),
window 65536, phase 0.1: steepest head m ~ 0.7071, theta ~ 1.526e-6, N ~ 3.707e6. Every head shares one theta
(a stock target's heads share their frequencies), chosen by one rule (``plan.THETA_RULES``):

- ``theta``: given; ``max-phase``: theta = phase / L (the source text's rule);
- ``exact-rotation`` (float32 default): theta = 2^-k with theta L <= 2^-12, where float32's rotation is exact
  (``exact_rotation_theta``);
- ``error-optimal`` (half-precision default): the theta minimising the worst head's predicted error
  (``shared_theta``), the largest within 1% of the minimum, which keeps N smallest.

float16 cannot hold N > 65504: N is then split, q = (-N/s, 0), k = (0, s), s = sqrt(N) by default. A target that
rotates a block of ``base^(-2r/R)`` pairs (gpt-neox) realises theta as pair 1 of rotary dim 4 at base theta^-2.

The ``llama`` target rotates the whole head, pair k on dims (k, k + hd'/2), so the content dims lie between a
pair's two dims, where the dot product holds the pair's first product, of size m sqrt(hd') i: a float32 sum of
content there rounds at the query's position. It carries the bias as two **opposed pairs** instead
(``pairs.evaluate_opposed``): pair 0 at theta, q = (-N_0/s, 0), k = (0, s), and pair 1 at the slower theta_1 the
llama3 band gives it, q = (0, N_1/s), k = (s, 0), each adding about half the bias (``pairs.opposed_amplitudes``:
N_0 theta_0 is m sqrt(hd')/2 to a short significand, so the key's product is exact; pair 1 takes the rest). Dim 0
then carries the key's product N_0 theta_0 j and dim 1 the query's -N_1 theta_1 i, which cancel to the size of
the bias before any content is summed (``targets.llama_rope.opposed_rope``; hd' = hd + 4; docs/decisions.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .. import _checks
from ..numerics import Numerics
from .error_model import EXACT_TABLE_ANGLE
from .fixed_base import check_engine_frequencies, fixed_base_heads
from .pairs import evaluate, evaluate_opposed
from .plan import HALF_PI, EmulationPlan
from .strategy import Strategy, base_words, refuse_ladder_options

_PLACED = {  # per placement (``targets.SinglePair``), the heads (slopes (h,), head dim, the pair, Numerics)
    "opposed": lambda slopes, hd, pair, num: [  # stated at the served head's scale 1/sqrt(hd + 4)
        evaluate_opposed(h, m, pair.thetas, num, 1 / math.sqrt(hd + pair.rotary_dim)) for h, m in enumerate(slopes)],
    "block": lambda slopes, hd, pair, num: fixed_base_heads(slopes, pair.base, pair.rotary_dim, 1, num),
    "free": lambda slopes, hd, pair, num: [evaluate(h, m, [pair.thetas[0]], [None], num) for h, m in enumerate(slopes)],
}


def exact_rotation_theta(window: int) -> float:
    """theta = 2^-k, the largest power of two with theta * window <= 2^-12: every float32 angle p * theta
    (p <= window) is exact (a power of two only shifts the exponent), cos(p theta) rounds to exactly 1 and
    sin(p theta) to p theta itself (their next terms fall below half an ulp), so the rotation is exact and
    only the products with N round. The sine approximation costs m theta^2 d^3 / 6 <= m d 2^-24 / 6, below
    float32's own rounding of m d."""
    return math.ldexp(EXACT_TABLE_ANGLE, -(window - 1).bit_length())  # bit_length: ceil(log2(window))


def shared_theta(slopes: Sequence[float], num: Numerics) -> float:
    """One theta for every head: the theta in (0, pi/(2L)) minimising the worst head's predicted error, the
    largest within 1% of that minimum. A log grid over 12 decades, refined around its best point; the search
    runs on the heads that can be worst (rounding grows with m: the steepest head; the sine term with m D^3,
    D = min(L, cutoff/m): the shallowest, and the steepest whose D is still L), and its five best candidates
    are then scored on every head, best first, until the critical heads alone put one beyond 1% of the minimum
    (a subset's worst error bounds the whole's from below, so those could not be chosen)."""
    top = HALF_PI * (1 - 1e-6) / num.window
    ms = sorted(set(slopes))
    critical = {ms[0], ms[-1], max((m for m in ms if m <= num.cutoff / num.window), default=ms[0])}

    def worst(t: float, heads) -> float:
        return max(evaluate(0, m, [t], [None], num).predicted_error for m in heads)

    grid = list(top * 10.0 ** (-np.arange(49) / 4))
    errors = [worst(t, critical) for t in grid]
    best = int(np.argmin(errors))
    fine = list(np.geomspace(grid[min(best + 1, 48)], grid[max(best - 1, 0)], 9))
    grid, errors = grid + fine, errors + [worst(t, critical) for t in fine]
    keep = sorted(range(len(grid)), key=lambda k: errors[k])[:5]
    exact: dict[float, float] = {}
    for k in keep:  # in order of the critical heads' worst error, which bounds every head's from below
        if exact and errors[k] > 1.01 * min(exact.values()):
            break  # this one's and the rest's worst error exceeds 1.01 x the minimum: none can be chosen
        exact[grid[k]] = worst(grid[k], ms)
    floor = min(exact.values())
    return float(max(t for t, e in exact.items() if e <= 1.01 * floor))


def choose_theta(request, slopes: Sequence[float], num: Numerics) -> tuple[str, float]:
    """(rule, theta) of ``THETA_RULES`` for the request (``resolved.Resolved``: ``theta``, ``max_phase``, ``dtype``)."""
    if request.theta is not None:
        rule, theta = "theta", request.theta
    elif request.max_phase is not None:
        rule, theta = "max-phase", request.max_phase / num.window
    elif num.dtype == "float32":
        rule, theta = "exact-rotation", exact_rotation_theta(num.window)
    else:
        rule, theta = "error-optimal", shared_theta(slopes, num)
    theta = _checks.positive("theta", theta)
    if theta * num.window >= HALF_PI:
        raise ValueError(f"theta * window = {theta * num.window:.4g} must be < pi/2")
    return rule, theta


def plan_single(source, request) -> EmulationPlan:
    """The single-pair plan of ``source`` (``slopes`` ``(h,)``, ``head_dim``, ``family``) for a ``resolved.Resolved``;
    the target places it (``Target.single_pair``): pair 1 of a rotary block at base theta^-2, one free pair, or the
    whole head's two opposed pairs."""
    num = Numerics.of(source, request)
    rule, theta = choose_theta(request, source.slopes, num)
    pair = request.target_row.single_pair(theta, source.head_dim, num.window)
    heads = _PLACED[pair.placement](source.slopes, source.head_dim, pair, num)
    plan = EmulationPlan(source.head_dim, num.window, num.dtype, "single", tuple(heads), num.cutoff, request.tolerance,
                         theta_rule=rule, family=source.family, **pair.plan_fields())
    return check_engine_frequencies(plan, f"the base theta^-2 of theta {theta:.6g}")


def check_single(request) -> None:
    """What the single pair refuses: the ladder's options, and a rotary dim or several pairs without a fixed base
    (a request with ``rope_base`` is the fixed base's)."""
    refuse_ladder_options(request)
    if request.rotary_dim is not None:
        raise ValueError("--rotary-dim needs --rope-base with --strategy single (the free-theta pair uses 4 dims)")
    if request.pairs != 1:
        raise ValueError("--pairs > 1 needs a fixed base (--rope-base), whose frequency set provides the pairs")


def single_rope(plan: EmulationPlan) -> str:
    """The single pair in words: as a rotary block's base, one pair's theta, or the llama target's opposed pairs."""
    if plan.base is not None:
        return base_words(plan)
    pairs = plan.worst_head.pairs
    if len(pairs) == 1:  # the compact targets scale one pair
        return f"theta {pairs[0].theta:.6g} on one pair"
    return f"thetas {' and '.join(f'{p.theta:.6g}' for p in pairs)} on two opposed pairs"


STRATEGY = Strategy("single", plan_single, check_single, single_rope)
