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

from . import _checks


def frequency_set(base: float, rope_dim: int) -> np.ndarray:
    """``theta_r = base^(-2r/R)`` for r = 0 .. R/2 - 1, float64, shape ``(R/2,)``, fastest first."""
    base = _checks.number("base", base)
    if base <= 1:
        raise ValueError(f"base must be > 1, got {base!r}")
    rope_dim = _checks.positive_int("rope_dim", rope_dim, even=True)
    return base ** (-2.0 * np.arange(rope_dim // 2) / rope_dim)


def max_window_for_phase(base: float, rope_dim: int, phase: float) -> int:
    """Longest window L whose phase on the slowest available pair stays within ``phase``: floor(phase/theta_min)."""
    phase = _checks.positive("phase", phase)
    return int(math.floor(phase / frequency_set(base, rope_dim)[-1]))


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
