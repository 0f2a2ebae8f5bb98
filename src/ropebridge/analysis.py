"""What RoPE's pairs do over a context: wavelengths, turns and scaling effects.

Pair i turns at theta_i rad/token, so its wavelength is ``2*pi/theta_i`` tokens and it makes
``L*theta_i/(2*pi)`` turns in a context of L tokens. Pairs with wavelength > L never complete a
turn within L: their angles beyond L were never seen in training (Chen et al. 2023 §2.2;
YaRN §3.2). Head dim 128, base 10000: the fastest pair turns every 2*pi ~ 6.3 tokens, the slowest
every ~54k; at L = 4096, 18 of the 64 pairs never complete a turn.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch

from . import _checks
from .frequencies import MAX_POSITIONS, inv_freq, rope_type_of


def wavelengths(freqs: torch.Tensor) -> torch.Tensor:
    """``2*pi/theta_i`` tokens per turn, shape ``(r/2,)``; ``inf`` for a pair that does not rotate."""
    return (2 * math.pi) / freqs.to(torch.float64)


def pairs_without_full_turn(freqs: torch.Tensor, context: int) -> list[int]:
    """Indices of the pairs whose wavelength exceeds ``context`` (they never complete a turn within it)."""
    context = _checks.positive_int("context", context)
    return [i for i, w in enumerate(wavelengths(freqs).tolist()) if w > context]


@dataclass(frozen=True)
class PairInfo:
    """One rotary pair: its default and scaled frequency (rad/token), wavelengths (tokens) and turns in the context."""

    index: int
    inv_freq: float
    wavelength: float
    turns_in_context: float
    scaled_inv_freq: float
    scaled_wavelength: float
    scaled_turns_in_context: float
    scale: float  # scaled_inv_freq / inv_freq: 1 kept, 1/s fully interpolated

    @property
    def completes_turn(self) -> bool:
        return self.turns_in_context >= 1.0


@dataclass(frozen=True)
class RopeAnalysis:
    """Per-pair table of a RoPE configuration over a context; ``to_dict`` is JSON-ready."""

    head_dim: int
    context: int
    rope_parameters: dict
    attention_factor: float
    pairs: tuple[PairInfo, ...]

    @property
    def pairs_without_full_turn(self) -> list[int]:
        return [p.index for p in self.pairs if not p.completes_turn]

    @property
    def scaled_pairs_without_full_turn(self) -> list[int]:
        return [p.index for p in self.pairs if p.scaled_turns_in_context < 1.0]

    def to_dict(self) -> dict[str, Any]:
        def finite(x: float) -> float | None:
            return x if math.isfinite(x) else None  # JSON has no infinity

        pairs = []
        for p in self.pairs:
            row = {k: (finite(v) if isinstance(v, float) else v) for k, v in asdict(p).items()}
            row["completes_turn"] = p.completes_turn
            pairs.append(row)
        return {
            "head_dim": self.head_dim,
            "context": self.context,
            "rope_parameters": dict(self.rope_parameters),
            "attention_factor": self.attention_factor,
            "pairs": pairs,
            "pairs_without_full_turn": len(self.pairs_without_full_turn),
            "pairs_without_full_turn_indices": self.pairs_without_full_turn,
            "scaled_pairs_without_full_turn": len(self.scaled_pairs_without_full_turn),
        }


def _baseline(rope_parameters: Mapping[str, Any]) -> dict[str, Any]:
    """The unscaled configuration a scaled one is compared against (same base, same rotary pairs)."""
    if rope_type_of(rope_parameters) == "proportional":
        return {**rope_parameters, "factor": 1.0}
    keep = ("rope_theta", "partial_rotary_factor")
    return {"rope_type": "default", **{k: rope_parameters[k] for k in keep if k in rope_parameters}}


def analyse(head_dim: int, rope_parameters: Mapping[str, Any], context: int, *,
            seq_len: int | None = None) -> RopeAnalysis:
    """Per-pair frequencies, wavelengths and turns within ``context``, default against the chosen scaling.

    ``seq_len`` is passed to ``inv_freq`` (dynamic NTK, LongRoPE); it defaults to ``context``.
    """
    context = _checks.positive_int("context", context, high=MAX_POSITIONS)
    seq_len = context if seq_len is None else _checks.positive_int("seq_len", seq_len, high=MAX_POSITIONS)
    scaled, attention_factor = inv_freq(head_dim, rope_parameters, seq_len=seq_len)
    default, _ = inv_freq(head_dim, _baseline(rope_parameters))
    rows = []
    for i, (f0, f1) in enumerate(zip(default.tolist(), scaled.tolist())):
        w0 = 2 * math.pi / f0 if f0 > 0 else math.inf
        w1 = 2 * math.pi / f1 if f1 > 0 else math.inf
        rows.append(
            PairInfo(
                index=i,
                inv_freq=f0,
                wavelength=w0,
                turns_in_context=context * f0 / (2 * math.pi),
                scaled_inv_freq=f1,
                scaled_wavelength=w1,
                scaled_turns_in_context=context * f1 / (2 * math.pi),
                scale=f1 / f0 if f0 > 0 else 1.0,
            )
        )
    return RopeAnalysis(head_dim, context, dict(rope_parameters), attention_factor, tuple(rows))
