"""Rotary position embedding: cos/sin tables, the rotation in both pair layouts, partial rotary.

RoFormer (Su et al. 2021) §3.4.2, eq. 34: for pair i at position m,
``(x_a, x_b) -> (x_a cos(m theta_i) - x_b sin(m theta_i), x_b cos(m theta_i) + x_a sin(m theta_i))``,
so ``(R_m q) . (R_n k) = q . R_{n-m} k`` depends only on n - m (eq. 16).

Layouts (always explicit, never guessed):

- ``"half"`` (GPT-NeoX, Hugging Face ``rotate_half``): pair i is dims ``(i, i + r/2)``;
- ``"interleaved"`` (GPT-J, Meta's original Llama): pair i is dims ``(2i, 2i + 1)``.

``x[..., half_to_interleaved(r)]`` turns a half-layout vector into the interleaved one.

Angles are formed from integer positions in float64 by default (float32 allowed, to mirror
engines that do so) and cos/sin are cast once, at the end, to the requested dtype.
"""

from __future__ import annotations

import torch

from . import _checks
from .frequencies import inv_freq, rotary_dim  # noqa: F401  (re-exported: the math core's entry points)

# torch 2.13 on CPU (AVX-512, 2 threads) computes the first float64 cos/sin of a process to ~7e-9 instead of
# 1e-16 about one run in eight (measured; a race in its lazy set-up, gone with one thread). "Exact" tables
# must not depend on being first, so one tiny call of each comes first.
torch.ones(1, dtype=torch.float64).cos()
torch.ones(1, dtype=torch.float64).sin()

LAYOUTS = ("half", "interleaved")
_ANGLE_DTYPES = (torch.float32, torch.float64)


def rope_angles(freqs: torch.Tensor, positions: torch.Tensor, *,
                angle_dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Angles ``m * theta_i`` for integer positions.

    Args:
        freqs: inverse frequencies, shape ``(r/2,)``.
        positions: integer positions, shape ``(s,)`` or ``(b, s)``; any offset (KV cache) is allowed.
        angle_dtype: float64 (default) or float32; never narrower.

    Returns:
        angles of shape ``(s, r/2)`` or ``(b, s, r/2)`` in ``angle_dtype``.
    """
    if angle_dtype not in _ANGLE_DTYPES:
        raise ValueError(f"angle_dtype must be float32 or float64, got {angle_dtype}")
    if positions.is_floating_point() or positions.is_complex():
        raise ValueError(f"positions must be integers, got dtype {positions.dtype}")
    if freqs.dim() != 1:
        raise ValueError(f"freqs must have shape (r/2,), got {tuple(freqs.shape)}")
    return positions.to(angle_dtype)[..., None] * freqs.to(angle_dtype)  # (…, s, r/2)


def _expand(half_angles: torch.Tensor, layout: str) -> torch.Tensor:
    """Per-pair values ``(…, r/2)`` to per-dim values ``(…, r)`` in the given layout."""
    _checks.choice("layout", layout, LAYOUTS)
    if layout == "half":
        return torch.cat([half_angles, half_angles], dim=-1)  # (…, r)
    return half_angles.repeat_interleave(2, dim=-1)  # (…, r)


def cos_sin(
    freqs: torch.Tensor,
    positions: torch.Tensor,
    *,
    layout: str = "half",
    dtype: torch.dtype = torch.float32,
    angle_dtype: torch.dtype = torch.float64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables for ``apply_rope``.

    Args:
        freqs: inverse frequencies, shape ``(r/2,)`` (from ``inv_freq``).
        positions: integer positions, shape ``(s,)`` or ``(b, s)``.
        layout: ``"half"`` or ``"interleaved"``.
        dtype: dtype of the returned tables (the model's dtype); the cast happens once, last.
        angle_dtype: dtype in which angles and their cos/sin are computed (float64 or float32).

    Returns:
        ``(cos, sin)``, each of shape ``(s, r)`` or ``(b, s, r)``. No attention factor is applied:
        multiply the logits by ``attention_factor**2`` (or the tables by it) where a method has one.
    """
    angles = _expand(rope_angles(freqs, positions, angle_dtype=angle_dtype), layout)  # (…, s, r)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``(x1, x2) -> (-x2, x1)`` on the two halves of the last dim, shape kept ``(…, r)``."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def rotate_interleaved(x: torch.Tensor) -> torch.Tensor:
    """``(x0, x1, x2, x3, …) -> (-x1, x0, -x3, x2, …)``, shape kept ``(…, r)``."""
    pairs = x.unflatten(-1, (-1, 2))  # (…, r/2, 2)
    return torch.stack([-pairs[..., 1], pairs[..., 0]], dim=-1).flatten(-2)  # (…, r)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, layout: str) -> torch.Tensor:
    """Rotate the first ``r = cos.shape[-1]`` dims of ``x``; the remaining dims pass through (partial rotary).

    Args:
        x: queries or keys, shape ``(b, h, s, d)`` (or any ``(…, s, d)``), d >= r.
        cos, sin: tables from ``cos_sin``, shape ``(s, r)`` or ``(b, s, r)``.
        layout: ``"half"`` or ``"interleaved"``, matching the tables.

    Returns:
        tensor of the shape and dtype of ``x``.
    """
    _checks.choice("layout", layout, LAYOUTS)
    r = cos.shape[-1]
    if r % 2 or r > x.shape[-1]:
        raise ValueError(f"rotary dim {r} must be even and <= head dim {x.shape[-1]}")
    if cos.dim() == 3 and x.dim() == 4:
        cos, sin = cos[:, None], sin[:, None]  # (b, 1, s, r): shared by all heads
    rot, rest = x[..., :r], x[..., r:]
    turn = rotate_half if layout == "half" else rotate_interleaved
    return torch.cat([rot * cos + turn(rot) * sin, rest], dim=-1)


def half_to_interleaved(r: int) -> torch.Tensor:
    """Index ``p`` with ``x_interleaved = x_half[..., p]``: ``p = [0, r/2, 1, r/2 + 1, …]``, shape ``(r,)``."""
    r = _checks.positive_int("rotary_dim", r, even=True)
    return torch.arange(r).view(2, r // 2).t().reshape(-1)  # (r,)


def interleaved_to_half(r: int) -> torch.Tensor:
    """Inverse of ``half_to_interleaved``: ``x_half = x_interleaved[..., p]``, shape ``(r,)``."""
    return torch.argsort(half_to_interleaved(r))
