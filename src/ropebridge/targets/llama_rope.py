"""The ``llama`` target's rope: the whole head rotated, ``rope_type: llama3``, its bands chosen per plan.

transformers' Llama rotates every pair of the head (no partial rotary): pair k is dims (k, k + hd/2) at
``theta_k = base^(-2k/hd)``, which Llama 3.1's scaling (Meta 2024) then sorts by wavelength lambda = 2 pi/theta
against C = ``original_max_position_embeddings``: lambda < C/high kept, lambda > C/low divided by ``factor``, and in
between the blend (1 - a) theta/factor + a theta, a = (C/lambda - low)/(high - low). Every engine that runs Llama
computes this form (transformers, vLLM, SGLang, TensorRT-LLM, llama.cpp's converter through ``rope_freqs``), so the
emulation is planned on it:

- the ladder: base' = b^(hd'/R) puts the ladder's R/2 pairs (b^(-2k/R)) on pairs 0 .. R/2 - 1, kept; every content
  pair beyond has a wavelength above C/low and is divided by ``SILENCE`` = 2^100 (an exact power of two): its
  angles stay below 1e-22 rad over any window (2^-100 times at most 2^24 positions), so its cos rounds to 1 and
  its sin times q vanishes beside q in every dtype;
- the single strategy's two opposed pairs (``emulation.single``): pairs 0 and 1 (1 and 1/2 before scaling, at a
  base near 2^(hd/2)) both in the blend band, at theta and theta/8, exactly for theta = 2^-k (float32's
  exact-rotation rule), so every angle of both is exact; pairs 2 on silenced (``opposed_parameters``).

``inv_freq_float32`` is the formula as transformers and vLLM compute it, in float32 and in their order of
operations, so a plan's pairs turn at the frequencies the engine will use (tests compare it with transformers'
``ROPE_INIT_FUNCTIONS["llama3"]`` bit for bit).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from ..frequencies import geometric
from ..numerics import is_power_of_two

SILENCE = 2.0**100  # the llama3 factor that silences the content pairs
F32_MAX = float(np.finfo(np.float32).max)


def inv_freq_float32(head_dim: int, params: Mapping[str, Any]) -> torch.Tensor:
    """``theta_k`` ``(hd/2,)`` float32 of a ``rope_type: llama3`` rope over the whole head, as transformers
    computes them (module doc)."""
    factor = params["factor"]
    low, high, old = params["low_freq_factor"], params["high_freq_factor"], params["original_max_position_embeddings"]
    inv = geometric(params["rope_theta"], head_dim, dtype=torch.float32)  # (hd/2,): before the scaling
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > old / low, inv / factor, inv)
    blend = (old / wavelen - low) / (high - low)
    blended = (1 - blend) * scaled / factor + blend * scaled
    medium = ~(wavelen < old / high) * ~(wavelen > old / low)
    return torch.where(medium, blended, scaled)


def _params(base: float, low: float, high: float, old: int) -> dict[str, Any]:
    return {"rope_type": "llama3", "rope_theta": base, "factor": SILENCE, "low_freq_factor": low,
            "high_freq_factor": high, "original_max_position_embeddings": old}


def ladder_parameters(base: float, rotary_dim: int, head_dim: int, window: int) -> dict[str, Any]:
    """The llama3 rope of a ladder on ``rotary_dim`` dims at ``base`` in a head of ``head_dim`` = hd + R dims:
    base' = base^(hd'/R), C/high and C/low at a third and two thirds (in log) of the gap between the ladder's
    slowest pair and the first content pair; ``ValueError`` when base' leaves float32."""
    wide = base ** (head_dim / rotary_dim)
    if not wide < F32_MAX:
        raise ValueError(f"the llama target rotates the whole head: its base {base:g}^({head_dim}/{rotary_dim}) "
                         f"= {wide:.3g} is beyond float32; give a larger --rotary-dim or a smaller --window")
    old = _old(window)
    wl = (2 * math.pi / geometric(wide, head_dim, dtype=torch.float32)).double()
    slow, first = float(wl[rotary_dim // 2 - 1]), float(wl[rotary_dim // 2])  # ladder's slowest, content's first
    gap = first / slow
    return _params(wide, old / (slow * gap ** (2 / 3)), old / (slow * gap ** (1 / 3)), old)


def opposed_parameters(theta: float, head_dim: int, window: int) -> dict[str, Any]:
    """The llama3 rope that turns pair 0 at ``theta``, pair 1 at theta/8 and silences pairs 2 on (module doc).

    The base is the float32 number near 2^(hd/2) at which the engine's pair 1 is exactly 1/2 (``halving_base``):
    then C/lambda_1 = x_0/2 exactly (x_0 = C/lambda_0 as the engine computes it), and C/low = 3 lambda_0 (low =
    x_0/3) puts pair 1 (lambda 4 pi) in the blend band at a_1 = a_0/4 (x_0/2 - low = (x_0 - low)/4) and pair 2
    (lambda ~ 8 pi) beyond it; high - low = (x_0 - low)/theta gives a_0 = theta. For theta = 2^-k the float32
    neighbours of low are tried until the engine's formula gives theta and theta/8 exactly (every head size and
    window tried finds one within a few steps). Heads beyond 254 dims (no such base in float32) take base 10000
    and C/low halfway (in log) between pair 1's wavelength and pair 2's, pair 1 at what the band gives it."""
    old = _old(window)
    x0 = float(np.float32(np.float32(old) / np.float32(2 * math.pi)))  # C / lambda_0, as the engine computes it
    base = halving_base(head_dim)
    if base is None:
        inv1 = float(geometric(10000.0, head_dim, dtype=torch.float32)[1])
        x1 = float(np.float32(np.float32(old) / np.float32(2 * math.pi / np.float32(inv1))))  # C / lambda_1
        return _band(float(np.float32(x1 / 10000.0 ** (1.0 / head_dim))), x0, theta, 10000.0, old)
    low = np.float32(x0 / 3)
    if is_power_of_two(theta):
        for k in sorted(range(-32, 33), key=abs):
            params = _band(float(_float32_steps(low, k)), x0, theta, base, old)
            inv = inv_freq_float32(head_dim, params)
            if float(inv[0]) == theta and float(inv[1]) == theta / 8:
                return params
    return _band(float(low), x0, theta, base, old)


def halving_base(head_dim: int) -> float | None:
    """A float32 base near 2^(hd/2) at which the engine's float32 ``1 / base^(2/hd)`` is exactly 1/2, or None
    where 2^(hd/2) is beyond float32 (hd > 254) or none of its 128 nearest float32 neighbours gives it."""
    if head_dim // 2 > 127:
        return None
    nominal = np.float32(2.0 ** (head_dim / 2))
    for k in sorted(range(-64, 65), key=abs):
        base = float(_float32_steps(nominal, k))
        if float(geometric(base, head_dim, dtype=torch.float32)[1]) == 0.5:
            return base
    return None


def _band(low: float, x0: float, theta: float, base: float, old: int) -> dict[str, Any]:
    """The llama3 parameters with C/low at ``low`` and high - low = (x0 - low)/theta, float32 values."""
    span = float(np.float32(float(np.float32(x0) - np.float32(low)) / float(np.float32(theta))))
    return _params(float(base), low, low + span, old)


def _float32_steps(x: np.float32, k: int) -> np.float32:
    """The float32 number ``k`` steps from ``x`` (negative: below)."""
    out = np.float32(x)
    for _ in range(abs(k)):
        out = np.nextafter(out, np.float32(np.inf if k > 0 else -np.inf))
    return out


def _old(window: int) -> int:
    """C = ``original_max_position_embeddings``: an integer below ``max_position_embeddings`` (= the window), as
    transformers asks (the bands are set relative to it, so its value is free)."""
    return max(1, window // 2)


def ladder_rope(base: float, rotary_dim: int, head_dim: int, window: int) -> tuple[dict[str, Any], np.ndarray]:
    """The ladder's rope (``ladder_parameters``) and the frequencies the engine gives its R/2 pairs ``(R/2,)``
    (float64 values of float32 numbers), the content pairs checked silent (``check_bands``)."""
    params = ladder_parameters(base, rotary_dim, head_dim, window)
    inv = inv_freq_float32(head_dim, params)
    check_bands(inv, rotary_dim // 2, window)
    return params, inv[: rotary_dim // 2].double().numpy()


def opposed_rope(theta: float, head_dim: int, window: int) -> tuple[dict[str, Any], tuple[float, float]]:
    """The opposed pairs' rope (``opposed_parameters``) and the thetas the engine gives pairs 0 and 1 (float64
    values of float32 numbers), the other pairs checked silent (``check_bands``)."""
    params = opposed_parameters(theta, head_dim, window)
    inv = inv_freq_float32(head_dim, params)
    check_bands(inv, 2, window)
    t0, t1 = float(inv[0]), float(inv[1])
    if not 0 < t1 < t0:
        raise ValueError(f"the llama target's opposed pairs need 0 < theta_1 < theta_0, the band gives {t0:.6g} and "
                         f"{t1:.6g} (head dim {head_dim})")
    return params, (t0, t1)


def check_bands(inv: torch.Tensor, kept: int, window: int) -> None:
    """``ValueError`` unless the pairs past the first ``kept`` turn less than 1e-20 rad over the window."""
    fastest = float(inv[kept:].double().max()) * window if len(inv) > kept else 0.0
    if not fastest < 1e-20:
        raise ValueError(f"the llama target's content pairs would turn {fastest:.3g} rad over the window")
