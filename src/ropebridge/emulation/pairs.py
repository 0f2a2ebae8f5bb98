"""A head's ALiBi bias on given rotary pairs, shared by the single pair and the fixed base: the amplitudes that
match the bias's first odd Taylor moments, the check that the bias never rises, the split of N between q and k,
and the head's plan with the error model's prediction.

K pairs with logit amplitudes A_k add ``-sum_k A_k sin(theta_k d)``; matching ``sum_k A_k theta_k^(2n+1) =
m [n = 0]`` for n < K makes the error O((theta d)^(2K+1)) (A. Litzenberger, "Emulating ALiBi with RoPE",
https://alexlitzenberger.com/blog/emulating_alibi_with_rope; ``fixed_base`` module doc).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from .. import _checks
from ..numerics import Numerics, largest, round_significand
from .error_model import PairSpec, predict
from .plan import HeadPlan, PairTerm


def multi_pair_amplitudes(slope: float, thetas: Sequence[float]) -> np.ndarray:
    """Logit amplitudes A_k with ``sum_k A_k theta_k^(2n+1) = m [n = 0]`` for n = 0 .. K-1, float64 ``(K,)``.

    Rows are divided by theta_max^(2n+1) so the (Vandermonde-like) system is solved in O(1) units.
    """
    t = np.asarray(thetas, dtype=np.float64)
    if len(np.unique(t)) != len(t) or (t <= 0).any():
        raise ValueError(f"pair frequencies must be distinct and > 0, got {list(t)}")
    top = t.max()
    powers = 2 * np.arange(len(t))[:, None] + 1  # (K, 1)
    system = (t[None, :] / top) ** powers  # (K, K)
    rhs = np.zeros(len(t))
    rhs[0] = slope / top
    return np.linalg.solve(system, rhs)


def is_non_increasing(amplitudes: Sequence[float], thetas: Sequence[float], window: int) -> bool:
    """Whether the emulated bias ``-sum A_k sin(theta_k d)`` never rises over d in [0, window].

    Its derivative is ``-sum A_k theta_k cos(theta_k d)``; checked on a grid of 4097 points, and at the end.
    One pair: equivalent to theta * window <= pi/2.
    """
    d = np.linspace(0.0, float(window), 4097)
    a, t = np.asarray(amplitudes)[:, None], np.asarray(thetas)[:, None]
    return bool((np.sum(a * t * np.cos(t * d[None, :]), axis=0) >= 0).all())


def split_for(n_max: float, dtype: str, split: float | str | None) -> float:
    """The k value s: None splits N only where the dtype cannot hold it (s = sqrt(N)), "sqrt" always, a number is s."""
    if split is None:
        return math.sqrt(n_max) if n_max > largest(dtype) else 1.0
    if split == "sqrt":
        return math.sqrt(n_max)
    return _checks.positive("split", split)


def opposed_amplitudes(slope: float, thetas: tuple[float, float], stored_scale: float,
                       window: int) -> tuple[float, float]:
    """The opposed pairs' amplitudes N'_0, N'_1 as the target head stores them (its logit scale
    ``stored_scale`` = 1/sqrt(hd')), each adding about half the bias: K_0 = N'_0 theta_0 is m / (2 stored_scale)
    rounded to 24 - ceil(log2 L) significant bits, so that with theta_0 a power of two the key's product K_0 j and
    the query's K_0 i are exact float32 integers times K_0's last bit for every position below L; K_1 = N'_1
    theta_1 carries the rest, m / stored_scale - K_0, so N'_0 theta_0 + N'_1 theta_1 = m / stored_scale."""
    total = slope / stored_scale
    k0 = round_significand(total / 2, max(1, 24 - (window - 1).bit_length()))
    return k0 / thetas[0], (total - k0) / thetas[1]


def evaluate_opposed(head: int, slope: float, thetas: tuple[float, float], num: Numerics,
                     stored_scale: float) -> HeadPlan:
    """The head's plan on two pairs, the second opposed (``single`` module doc), with ``opposed_amplitudes``
    (amplitude A_k ~ m / (2 theta_k) logits, so ``-sum_k A_k sin(theta_k d)`` ~ -m d and, on the first two dims,
    the key's product N_0 theta_0 j and the query's N_1 theta_1 i are equal in size and cancel). The plan holds N
    in the source head's units (N' stored_scale / scale; the writer's sqrt(hd'/hd) gives N' back), the error
    model sees N' at ``stored_scale``, as the engine computes it."""
    stored = opposed_amplitudes(slope, thetas, stored_scale, num.window)
    pairs = tuple(PairTerm(float(t), n * stored_scale / num.scale, k, opposed=k == 1)
                  for k, (t, n) in enumerate(zip(thetas, stored)))
    s = split_for(max(p.N for p in pairs), num.dtype, num.split)
    target = dataclasses.replace(num, scale=stored_scale)
    err = predict(slope, [PairSpec(p.theta, n, p.opposed) for p, n in zip(pairs, stored)], target, split=s)
    return HeadPlan(head, slope, pairs, s, err.sine, err.rounding, err.total)


def evaluate(head: int, slope: float, thetas: Sequence[float], indices: Sequence[int | None],
             num: Numerics) -> HeadPlan | None:
    """The head's plan on the given pairs ``(K,)`` (amplitudes from ``multi_pair_amplitudes``; ``indices`` their
    places in the target's rotary block, None for a free theta), or None when their bias would rise somewhere in
    the window."""
    amplitudes = multi_pair_amplitudes(slope, thetas)  # (K,) logits
    if len(thetas) > 1 and not is_non_increasing(amplitudes, thetas, num.window):
        return None
    ns = amplitudes / num.scale
    s = split_for(float(np.abs(ns).max()), num.dtype, num.split)
    specs = [PairSpec(float(t), float(n)) for t, n in zip(thetas, ns)]
    err = predict(slope, specs, num, split=s)
    pairs = tuple(PairTerm(float(t), float(n), i) for t, n, i in zip(thetas, ns, indices))
    return HeadPlan(head, slope, pairs, s, err.sine, err.rounding, err.total)
