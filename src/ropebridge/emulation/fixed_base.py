"""Emulation when theta must come from a fixed RoPE frequency set, and the multi-pair fit.

A checkpoint whose engine fixes the base (llama.cpp's GPT-NeoX converter writes none, so 10000
applies) offers only ``theta_r = base^(-2r/R)``, r = 0 .. R/2 - 1 (R the rotary dim). The slowest,
``base^(-(R-2)/R) ~ 1/base``, sets the longest window: its phase over L is ~ L/base
("Emulating ALiBi with RoPE", limits of a fixed base). Base 10000, R = 64, phase 0.1: ~750 tokens;
base 500000, R = 128: ~40.7K tokens.

Several pairs move that limit. Spread a head's bias over K pairs with logit amplitudes A_k:

    -sum_k A_k sin(theta_k d) = -sum_n (-1)^n d^(2n+1)/(2n+1)! * sum_k A_k theta_k^(2n+1)

and choose A so that ``sum_k A_k theta_k = m`` and the next K - 1 odd moments vanish
(two pairs: ``A_a theta_a^3 + A_b theta_b^3 = 0``). The error is then O((theta d)^(2K+1)) instead
of m theta^2 d^3/6, at the price of amplitudes of both signs: the rounding error scales with
``sum_k |A_k theta_k|`` instead of m.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .. import _checks
from ..frequencies import engine_frequencies, geometric
from ..numerics import Numerics
from .pairs import evaluate
from .plan import HALF_PI, EmulationPlan
from .strategy import Strategy, base_words, refuse_ladder_options

ROTARY_DIM = 16  # the rotary dim of a fixed base unless --rotary-dim says otherwise
MAX_ROTARY_DIM = 1024  # a fixed base's rotary dims at most (``check_fixed_base``)


def frequency_set(base: float, rotary_dim: int) -> np.ndarray:
    """``theta_r = base^(-2r/R)`` for r = 0 .. R/2 - 1 in float64 (``frequencies.geometric``), shape ``(R/2,)``,
    fastest first."""
    return geometric(base, _checks.positive_int("rotary_dim", rotary_dim, even=True)).numpy()


def check_engine_frequencies(plan: EmulationPlan, base_from: str) -> EmulationPlan:
    """``plan``, or ``ValueError`` when a planned pair's theta is not the frequency transformers computes for its
    index (``engine_frequencies``) to within 2^-20: the engine would rotate at another speed than the error model
    predicted for. ``base_from`` says where the base came from."""
    if plan.base is None:
        return plan
    try:
        engine = engine_frequencies(plan.base, plan.rotary_dim)
    except ValueError as exc:
        raise ValueError(f"{base_from}: {exc}") from None
    for h in plan.heads:
        for p in h.pairs:
            got = engine[p.index]
            if not abs(got - p.theta) <= 2.0**-20 * p.theta:
                raise ValueError(
                    f"{base_from}: transformers' float32 frequency of pair {p.index} is {got:.6g}, "
                    f"the plan's {p.theta:.6g}; the converted model would not carry this plan")
    return plan


def max_window_for_phase(base: float, rotary_dim: int, phase: float) -> int:
    """Longest window L whose phase on the slowest available pair stays within ``phase``: floor(phase/theta_min)."""
    phase = _checks.positive("phase", phase)
    return int(math.floor(phase / frequency_set(base, rotary_dim)[-1]))


def _candidates(base: float, rotary_dim: int, k: int) -> list[tuple[list[float], list[int]]]:
    """Every run of ``k`` consecutive pairs of the set: (frequencies, indices)."""
    freqs = frequency_set(base, rotary_dim)
    if k > len(freqs):
        raise ValueError(f"pairs={k} exceeds the {len(freqs)} pairs of rotary dim {rotary_dim}")
    return [(list(freqs[r : r + k]), list(range(r, r + k))) for r in range(len(freqs) - k + 1)]


def _best(head: int, slope: float, candidates, num: Numerics):
    """The head's plan on its best run of pairs (least predicted error), or None when no run keeps it monotone."""
    plans = []
    for thetas, idx in candidates:
        if len(thetas) == 1 and thetas[0] * num.window >= HALF_PI:
            continue
        p = evaluate(head, slope, thetas, idx, num)
        if p is not None:
            plans.append(p)
    return min(plans, key=lambda p: p.predicted_error) if plans else None


def fixed_base_heads(slopes: Sequence[float], base: float, rotary_dim: int, pairs: int, num: Numerics) -> list:
    """Every head on its best ``pairs`` consecutive pairs of ``base^(-2r/R)`` (``HeadPlan`` each)."""
    candidates = _candidates(base, rotary_dim, pairs)
    heads = []
    for h, m in enumerate(slopes):
        p = _best(h, m, candidates, num)
        if p is None:
            raise ValueError(
                f"window {num.window} is beyond what base {base:g} with rotary dim {rotary_dim} can emulate "
                f"monotonically (the slowest pair reaches pi/2 at ~{max_window_for_phase(base, rotary_dim, HALF_PI)} "
                "tokens)")
        heads.append(p)
    return heads


def fixed_base_max_window(slopes: Sequence[float], base: float, rotary_dim: int, pairs: int, num: Numerics,
                          tolerance: float) -> int:
    """Longest window in which every head, on its best ``pairs`` consecutive pairs, has a predicted error <=
    ``tolerance`` (bisection; the 4 slowest runs of pairs are tried, faster ones only add sine error)."""
    import dataclasses

    candidates = _candidates(base, rotary_dim, pairs)[-4:]
    order = sorted(set(slopes), key=lambda m: -m)

    def ok(window: int) -> bool:
        at = dataclasses.replace(num, window=window)
        for m in order:
            p = _best(0, m, candidates, at)
            if p is None or p.predicted_error > tolerance:
                return False
        return True

    lo, hi = 0, 1
    theta_min = min(t for c, _ in candidates for t in c)
    limit = int(8 * HALF_PI / theta_min)
    while hi < limit and ok(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def plan_fixed_base(source, request) -> EmulationPlan:
    """The fixed-base plan of ``source`` for a ``resolved.Resolved`` (``rope_base``, ``rotary_dim``, ``pairs``): every
    head on its best run of pairs, and the longest window within the tolerance (``max_window``)."""
    num = Numerics.of(source, request)
    base, r, k = request.rope_base, request.rotary_dim or ROTARY_DIM, request.pairs
    heads = fixed_base_heads(source.slopes, base, r, k, num)
    plan = EmulationPlan(source.head_dim, num.window, num.dtype, "fixed-base", tuple(heads), num.cutoff,
                         request.tolerance, base=float(base), rotary_dim=int(r), pairs_per_head=k,
                         max_window=fixed_base_max_window(source.slopes, base, r, k, num, request.tolerance),
                         family=source.family)
    return check_engine_frequencies(plan, f"--rope-base {base:g}")


def check_fixed_base(request) -> None:
    """What the fixed base needs (``--rope-base``) and refuses (a free theta, the ladder's options)."""
    refuse_ladder_options(request)
    if request.rope_base is None:
        raise ValueError("--strategy fixed-base needs --rope-base")
    if request.theta is not None or request.max_phase is not None:
        raise ValueError("give either --rope-base (with --rotary-dim) or --theta/--max-phase, not both")
    if request.rotary_dim is not None and request.rotary_dim > MAX_ROTARY_DIM:
        raise ValueError(f"--rotary-dim {request.rotary_dim}: a fixed base takes at most {MAX_ROTARY_DIM} rotary dims "
                         "(the served head is hd + R; the largest any attention kernel runs is 512, "
                         "targets.kernels)")


STRATEGY = Strategy("fixed-base", plan_fixed_base, check_fixed_base, base_words)
