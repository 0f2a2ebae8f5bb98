"""RoPE inverse frequencies and attention factors for every context-extension method.

One source of truth: ``inv_freq(head_dim, rope_parameters, seq_len=...)`` dispatches through
``ROPE_TYPES``, a registry of pure functions ``fn(head_dim, params, seq_len) -> (inv_freq,
attention_factor)`` that mirrors ``transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS`` (same
keys, same semantics) but computes in float64 and validates strictly: transformers warns on bad
parameters, ropebridge refuses them with a ``ValueError`` naming the key and value.

Notation: the rotary dimension ``r = int(head_dim * partial_rotary_factor)`` (truncated, exactly
as transformers does), pair ``i`` in ``0 .. r/2 - 1`` rotates at ``theta_i = base^(-2i/r)``
(Su et al. 2021, RoFormer §3.2.2, eq. 15). ``inv_freq`` has shape ``(r/2,)`` (``(head_dim/2,)``
for ``proportional``), dtype float64.

The attention factor is returned separately and never folded into the rotation: transformers
multiplies its cos/sin tables by it, which scales every q·k logit by ``attention_factor**2``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from . import _checks

Params = Mapping[str, Any]
MAX_HEAD_DIM = 2**16  # far above any model's (512 is the largest served); its tables stay a few MiB
MAX_POSITIONS = 2**53  # a context or sequence length: every integer up to it is exact in float64
RopeFn = Callable[[int, Params, "int | None"], "tuple[torch.Tensor, float]"]

KNOWN_KEYS = frozenset(
    {
        "rope_type",
        "type",  # legacy alias of rope_type in old Hugging Face configs
        "rope_theta",
        "factor",
        "original_max_position_embeddings",
        "max_position_embeddings",
        "partial_rotary_factor",
        "beta_fast",
        "beta_slow",
        "mscale",
        "mscale_all_dim",
        "attention_factor",
        "truncate",
        "low_freq_factor",
        "high_freq_factor",
        "short_factor",
        "long_factor",
    }
)


def rotary_dim(head_dim: int, partial_rotary_factor: float = 1.0) -> int:
    """``int(head_dim * partial_rotary_factor)``, truncated like transformers; must be even and >= 2.

    Beware the truncation: head_dim 96 with factor 2/98 gives 1, not 2 (refused here as odd).
    """
    head_dim = _checks.positive_int("head_dim", head_dim, even=True, high=MAX_HEAD_DIM)
    prf = _checks.number("partial_rotary_factor", partial_rotary_factor)
    if not 0.0 < prf <= 1.0:
        raise ValueError(f"partial_rotary_factor must be in (0, 1], got {partial_rotary_factor!r}")
    dim = int(head_dim * prf)
    if dim < 2 or dim % 2:
        raise ValueError(
            f"partial_rotary_factor={partial_rotary_factor!r} gives rotary dim int({head_dim}*{prf!r}) = {dim}; "
            "it must be even and >= 2"
        )
    return dim


def _base(params: Params) -> float:
    base = _checks.number("rope_theta", _checks.require(params, "rope_theta", "RoPE"))
    if base <= 1.0:
        raise ValueError(f"rope_theta must be > 1, got {params['rope_theta']!r}")
    return base


def _dim(head_dim: int, params: Params) -> int:
    return rotary_dim(head_dim, params.get("partial_rotary_factor", 1.0))


def geometric(base: float, dim: int, exponent_dim: int | None = None,
              dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """``theta_i = 1 / base^(2i/exponent_dim)`` for ``i = 0 .. dim/2 - 1``, shape ``(dim/2,)``, computed in ``dtype``:
    float64 for exact references, float32 as transformers computes them (``inv_freq``; Su et al. 2021, eq. 15).
    The one source of RoPE's frequency set in ropebridge."""
    base = _checks.number("base", base)
    if base <= 1:
        raise ValueError(f"base must be > 1, got {base!r}")
    exponent_dim = dim if exponent_dim is None else exponent_dim
    i = torch.arange(0, dim, 2, dtype=torch.int64).to(dtype)
    return 1.0 / (base ** (i / exponent_dim))


def engine_frequencies(base: float, rotary_dim: int) -> np.ndarray:
    """``theta_r`` as transformers and the engines compute a rotary block's (``geometric`` in float32), returned as
    float64 values of those float32 numbers, shape ``(R/2,)``; ``ValueError`` when one is below float32's normal
    range."""
    rotary_dim = _checks.positive_int("rotary_dim", rotary_dim, even=True)
    thetas = geometric(base, rotary_dim, dtype=torch.float32).to(torch.float64).numpy()
    bad = np.flatnonzero(~np.isfinite(thetas) | (thetas <= 0) | (thetas < np.finfo(np.float32).tiny))
    if len(bad):
        raise ValueError(f"transformers computes the frequencies 1/base^(2r/R) in float32, where base {base:g} "
                         f"gives pair {bad[0]} of rotary dim {rotary_dim} the frequency {thetas[bad[0]]:g}, below "
                         "float32's normal range: give a smaller base")
    return thetas


def _factor(params: Params, what: str, *, low: float = 1.0) -> float:
    return _checks.at_least("factor", _checks.require(params, "factor", what), low)


def _int_key(params: Params, key: str, what: str) -> int:
    return _checks.positive_int(key, _checks.require(params, key, what), high=MAX_POSITIONS)


def _default(head_dim: int, params: Params, seq_len: int | None) -> tuple[torch.Tensor, float]:
    """theta_i = base^(-2i/r). RoFormer (Su et al. 2021) §3.2.2, eq. 15."""
    return geometric(_base(params), _dim(head_dim, params)), 1.0


def _linear(head_dim: int, params: Params, seq_len: int | None) -> tuple[torch.Tensor, float]:
    """Position interpolation: positions m -> m/s, i.e. theta_i / s. Chen et al. 2023, §2.3, eq. 4."""
    factor = _factor(params, "rope_type 'linear'")
    return geometric(_base(params), _dim(head_dim, params)) / factor, 1.0


def ntk_base(base: float, factor: float, dim: int) -> float:
    """NTK-aware base: base * s^(r/(r-2)), so the slowest pair is exactly interpolated by s.

    bloc97, "NTK-Aware Scaled RoPE" (2023); YaRN (Peng et al. 2023) §3.1, eq. 14-15.
    Example: s = 4, r = 128, base 10000 -> 40890.
    """
    if dim <= 2:
        raise ValueError(f"NTK scaling needs a rotary dim > 2, got {dim}")
    return base * factor ** (dim / (dim - 2))


def _ntk(head_dim: int, params: Params, seq_len: int | None) -> tuple[torch.Tensor, float]:
    """Static NTK-aware scaling: default frequencies at base' = base * s^(r/(r-2))."""
    dim = _dim(head_dim, params)
    factor = _factor(params, "rope_type 'ntk'")
    return geometric(ntk_base(_base(params), factor, dim), dim), 1.0


def _dynamic(head_dim: int, params: Params, seq_len: int | None) -> tuple[torch.Tensor, float]:
    """Dynamic NTK (emozilla 2023; YaRN §3.3): NTK scaling with s' = s*L'/L - (s - 1), L' = max(seq_len, L).

    L is ``max_position_embeddings`` (transformers' convention); at L' <= L the frequencies are the default.
    """
    dim = _dim(head_dim, params)
    factor = _factor(params, "rope_type 'dynamic'")
    max_pos = _int_key(params, "max_position_embeddings", "rope_type 'dynamic'")
    length = max_pos if seq_len is None else max(seq_len, max_pos)
    base = _base(params) * ((factor * length / max_pos) - (factor - 1)) ** (dim / (dim - 2))
    return geometric(base, dim), 1.0


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN attention temperature: sqrt(1/t) = 0.1 * mscale * ln(s) + 1 for s > 1, else 1.

    Peng et al. 2023, YaRN §3.4, eq. 22 (mscale is DeepSeek's multiplier on 0.1 ln s).
    """
    if factor <= 1.0:
        return 1.0
    return 0.1 * mscale * math.log(factor) + 1.0


def yarn_correction_range(
    dim: int, base: float, original_max_position_embeddings: int, beta_fast: float, beta_slow: float, truncate: bool
) -> tuple[float, float]:
    """Pair-index range (low, high) between which YaRN ramps from extrapolation to interpolation.

    Pair index d with r(d) = L / lambda_d rotations in the training length: d(r) = r_dim*ln(L/(2*pi*r))/(2 ln base).
    low = d(beta_fast), high = d(beta_slow), floored/ceiled when ``truncate``, clamped to [0, r_dim - 1].
    YaRN §3.2, eq. 17-18 (NTK-by-parts).
    """

    def index(rotations: float) -> float:
        return dim * math.log(original_max_position_embeddings / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = index(beta_fast), index(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, dim - 1)


def _yarn(head_dim: int, params: Params, seq_len: int | None) -> tuple[torch.Tensor, float]:
    """YaRN: NTK-by-parts interpolation plus attention temperature. Peng et al. 2023, §3.2-3.4, eq. 17-22.

    theta'_i = theta_i/s * (1 - g_i) + theta_i * g_i with g_i = 1 - clamp((i - low)/(high - low), 0, 1).
    """
    base, dim = _base(params), _dim(head_dim, params)
    original = _int_key(params, "original_max_position_embeddings", "rope_type 'yarn'")
    if params.get("factor") is None:
        max_pos = _int_key(params, "max_position_embeddings", "rope_type 'yarn' without 'factor'")
        factor = _checks.at_least("factor", max_pos / original, 1.0)
    else:
        factor = _factor(params, "rope_type 'yarn'")
    beta_fast = _checks.positive("beta_fast", params.get("beta_fast") or 32)
    beta_slow = _checks.positive("beta_slow", params.get("beta_slow") or 1)
    if beta_fast <= beta_slow:
        raise ValueError(f"beta_fast must be > beta_slow, got beta_fast={beta_fast!r}, beta_slow={beta_slow!r}")
    truncate = params.get("truncate", True)
    if not isinstance(truncate, bool):
        raise ValueError(f"truncate must be a bool, got {truncate!r}")

    attention_factor = params.get("attention_factor")
    if attention_factor is None:
        mscale, mscale_all_dim = params.get("mscale"), params.get("mscale_all_dim")
        if mscale and mscale_all_dim:
            attention_factor = yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)
        else:
            attention_factor = yarn_mscale(factor)
    attention_factor = _checks.positive("attention_factor", attention_factor)

    extrapolated = geometric(base, dim)
    interpolated = extrapolated / factor
    low, high = yarn_correction_range(dim, base, original, beta_fast, beta_slow, truncate)
    if low == high:
        high += 0.001  # transformers' guard against a zero-width ramp; kept for equality
    ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    keep = 1 - ramp  # 1: pair kept as trained (extrapolated), 0: fully interpolated
    return interpolated * (1 - keep) + extrapolated * keep, float(attention_factor)


def _longrope(head_dim: int, params: Params, seq_len: int | None) -> tuple[torch.Tensor, float]:
    """LongRoPE (Ding et al. 2024): theta_i / lambda_i with searched per-pair factors.

    ``long_factor`` applies when ``seq_len > original_max_position_embeddings``, else ``short_factor``.
    Attention factor sqrt(1 + ln s / ln L) (Phi-3's choice), s = factor or max_position/original.
    """
    base, dim = _base(params), _dim(head_dim, params)
    original = _int_key(params, "original_max_position_embeddings", "rope_type 'longrope'")
    use_long = seq_len is not None and seq_len > original
    key = "long_factor" if use_long else "short_factor"
    factors = {}
    for name in ("short_factor", "long_factor"):
        values = _checks.require(params, name, "rope_type 'longrope'")
        if not isinstance(values, (list, tuple)) or len(values) != dim // 2:
            raise ValueError(f"{name} must be a list of {dim // 2} numbers (rotary dim / 2), got {values!r}")
        factors[name] = [_checks.positive(f"{name}[{i}]", v) for i, v in enumerate(values)]

    factor = params.get("factor")
    if factor is None:
        max_pos = _int_key(params, "max_position_embeddings", "rope_type 'longrope' without 'factor'")
        factor = max_pos / original
    factor = _checks.positive("factor", factor)
    attention_factor = params.get("attention_factor")
    if attention_factor is None:
        attention_factor = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
    attention_factor = _checks.positive("attention_factor", attention_factor)
    ext = torch.tensor(factors[key], dtype=torch.float64)
    return geometric(base, dim) / ext, float(attention_factor)


def _llama3(head_dim: int, params: Params, seq_len: int | None) -> tuple[torch.Tensor, float]:
    """Llama 3.1 scaling (Meta 2024): by wavelength lambda = 2*pi/theta against L = original length.

    lambda < L/high_freq_factor: kept; lambda > L/low_freq_factor: theta/s; between: linear blend
    (1 - a) theta/s + a theta with a = (L/lambda - low)/(high - low).
    """
    what = "rope_type 'llama3'"
    inv = geometric(_base(params), _dim(head_dim, params))
    factor = _factor(params, what)
    low = _checks.positive("low_freq_factor", _checks.require(params, "low_freq_factor", what))
    high = _checks.positive("high_freq_factor", _checks.require(params, "high_freq_factor", what))
    if high <= low:
        raise ValueError(f"high_freq_factor must be > low_freq_factor, got {high!r} <= {low!r}")
    original = _int_key(params, "original_max_position_embeddings", what)
    wavelen = 2 * math.pi / inv
    blend = ((original / wavelen - low) / (high - low)).clamp(0, 1)
    out = (1 - blend) * inv / factor + blend * inv
    out = torch.where(wavelen < original / high, inv, out)
    return torch.where(wavelen > original / low, inv / factor, out), 1.0


def _proportional(head_dim: int, params: Params, seq_len: int | None) -> tuple[torch.Tensor, float]:
    """Proportional RoPE (transformers' Gemma-style type): the first ``floor(prf*head_dim/2)`` pairs rotate at
    base^(-2i/head_dim)/factor (exponent over the *full* head_dim), the remaining pairs have theta = 0.

    Shape ``(head_dim/2,)`` always.
    """
    head_dim = _checks.positive_int("head_dim", head_dim, even=True, high=MAX_HEAD_DIM)
    base = _base(params)
    prf = _checks.number("partial_rotary_factor", params.get("partial_rotary_factor", 1.0))
    if not 0.0 <= prf <= 1.0:
        raise ValueError(f"partial_rotary_factor must be in [0, 1], got {prf!r}")
    factor = _checks.positive("factor", params.get("factor", 1.0))
    angles = int(prf * head_dim // 2)
    rotated = geometric(base, 2 * angles, exponent_dim=head_dim)
    still = torch.zeros(head_dim // 2 - angles, dtype=torch.float64)
    return torch.cat([rotated, still]) / factor, 1.0


ROPE_TYPES: dict[str, RopeFn] = {
    "default": _default,
    "linear": _linear,
    "ntk": _ntk,
    "dynamic": _dynamic,
    "yarn": _yarn,
    "longrope": _longrope,
    "llama3": _llama3,
    "proportional": _proportional,
}


def rope_type_of(rope_parameters: Params) -> str:
    """The ``rope_type`` (or legacy ``type``) of a parameter dict, validated against ``ROPE_TYPES``."""
    if not isinstance(rope_parameters, Mapping):
        raise ValueError(f"rope_parameters must be a dict, got {type(rope_parameters).__name__}")
    unknown = sorted(set(rope_parameters) - KNOWN_KEYS)
    if unknown:
        raise ValueError(f"unknown rope_parameters key {unknown[0]!r} (known: {', '.join(sorted(KNOWN_KEYS))})")
    rope_type = rope_parameters.get("rope_type", rope_parameters.get("type", "default"))
    return _checks.choice("rope_type", rope_type, tuple(ROPE_TYPES))


def inv_freq(head_dim: int, rope_parameters: Params, *, seq_len: int | None = None) -> tuple[torch.Tensor, float]:
    """Inverse frequencies theta_i and the attention factor for a Hugging Face style ``rope_parameters``.

    Args:
        head_dim: per-head dimension d (even, > 0).
        rope_parameters: ``rope_type`` (default 'default'), ``rope_theta`` (required) and the keys of that type.
        seq_len: current sequence length; used by ``dynamic`` and ``longrope`` only.

    Returns:
        ``(inv_freq, attention_factor)``: ``inv_freq`` float64 of shape ``(r/2,)``, r the rotary dim
        (``(d/2,)`` for ``proportional``); ``attention_factor`` a float that scales cos and sin
        (so every RoPE logit by its square) and is 1 for methods without a temperature.
    """
    rope_type = rope_type_of(rope_parameters)
    head_dim = _checks.positive_int("head_dim", head_dim, even=True, high=MAX_HEAD_DIM)
    if seq_len is not None:
        seq_len = _checks.non_negative_int("seq_len", seq_len)
    return ROPE_TYPES[rope_type](head_dim, rope_parameters, seq_len)
