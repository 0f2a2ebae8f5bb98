"""Measurements the error model's predictions are checked against: the emulated logits computed with real
torch tensors in the dtype, as a model computes them (float32 angles from integer positions, cos/sin cast to
the dtype, the rotation in the dtype, q.k with float32 accumulation, the result in the dtype times the scale)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ropebridge.emulation.error_model import PairSpec, matter_distance
from ropebridge.emulation.ladder_fit import HeadFit
from ropebridge.numerics import DTYPES, Numerics
from ropebridge.rope import apply_rope, cos_sin


def press_reference(n: int) -> list[float]:
    """Press et al. 2022's slopes for ``n`` heads as their reference code computes them (get_slopes: the geometric
    slopes of the closest power of two, then every other slope of twice that), written out in float64; Baichuan's
    ``_get_interleave`` is the same code."""
    def power_of_2(k: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(k) - 3)))
        return [start * start**i for i in range(k)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + press_reference(2 * closest)[0::2][: n - closest]


def sample_positions(window: int, queries: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Query positions ``(s,)``: the last ``queries`` up to ``window`` and as many random ones; every key
    position 0..window ``(t,)``."""
    g = torch.Generator().manual_seed(seed)
    last = torch.arange(max(0, window - queries + 1), window + 1)
    rand = torch.randint(0, window + 1, (queries,), generator=g)
    return torch.unique(torch.cat([last, rand])), torch.arange(window + 1)


def model_logits(q_pairs: torch.Tensor, k_pairs: torch.Tensor, thetas: Sequence[float], qpos: torch.Tensor,
                 kpos: torch.Tensor, dtype: str, scale: float) -> torch.Tensor:
    """The logits constant rotary q and k entries produce, computed as a model does in ``dtype`` (module doc).
    ``q_pairs``, ``k_pairs``: ``(2K,)`` float64 values in the "half" layout (pair k is dims (k, k + K)), cast to
    the dtype once. Returns float64 ``(s, t)``."""
    dt = DTYPES[dtype]
    freqs = torch.tensor(list(thetas), dtype=torch.float64).float()  # engines keep inv_freq in float32
    q = q_pairs.to(dt).expand(len(qpos), -1)  # (s, 2K)
    k = k_pairs.to(dt).expand(len(kpos), -1)  # (t, 2K)
    q = apply_rope(q, *cos_sin(freqs, qpos, dtype=dt, angle_dtype=torch.float32), layout="half")  # (s, 2K)
    k = apply_rope(k, *cos_sin(freqs, kpos, dtype=dt, angle_dtype=torch.float32), layout="half")  # (t, 2K)
    return ((q @ k.T) * torch.tensor(scale, dtype=torch.float64).to(dt)).to(torch.float64)  # (s, t)


def measure(slope: float, pairs: Sequence[PairSpec], num: Numerics, *, split: float = 1.0, queries: int = 256,
            seed: int = 0) -> float:
    """Worst |computed logit + m d| over sampled queries (``sample_positions``) and every key with 0 <= d <= D
    (D from ``num.cutoff``), at ``num``'s scale, window and dtype: what ``error_model.predict`` bounds. Pair k
    carries q = (-N_k/s, 0), k = (0, s), s = ``split``, or q = (0, N_k/s), k = (s, 0) where it is opposed."""
    K = len(pairs)
    qpos, kpos = sample_positions(num.window, queries, seed)
    q_pairs = torch.zeros(2 * K, dtype=torch.float64)
    k_pairs = torch.zeros(2 * K, dtype=torch.float64)
    for k, p in enumerate(pairs):
        if p.opposed:
            q_pairs[K + k], k_pairs[k] = p.N / split, split
        else:
            q_pairs[k], k_pairs[K + k] = -p.N / split, split
    logits = model_logits(q_pairs, k_pairs, [p.theta for p in pairs], qpos, kpos, num.dtype, num.scale)  # (s, t)
    d = (qpos[:, None] - kpos[None, :]).to(torch.float64)  # (s, t)
    err = (logits + slope * d).abs()
    matters = (d >= 0) & (d <= matter_distance(slope, num.window, num.cutoff))
    return float(err[matters].max())


def measure_ladder(fit: HeadFit, thetas: Sequence[float], num: Numerics, *, queries: int = 128,
                   seed: int = 0) -> tuple[float, float]:
    """A ladder head's logits computed as a model does at ``num``'s scale, window and dtype: (worst |logit - s +
    m d| on d <= W, worst rise above s - C beyond W; s the fit's shift). The fit error is included (it is exact
    arithmetic): subtract ``fit.approximation_error`` to bound the rounding alone."""
    P = len(thetas)
    qpos, kpos = sample_positions(num.window, queries, seed)
    q_pairs = torch.tensor([*fit.a, *fit.b], dtype=torch.float64) / num.scale  # x: sin amplitudes, y: cos ones
    k_pairs = torch.cat([torch.zeros(P, dtype=torch.float64), torch.ones(P, dtype=torch.float64)])
    logits = model_logits(q_pairs, k_pairs, thetas, qpos, kpos, num.dtype, num.scale)  # (s, t)
    d = (qpos[:, None] - kpos[None, :]).double()  # (s, t)
    near = (d >= 0) & (d <= fit.exact_distance)
    far = d > fit.exact_distance
    err = float((logits - fit.shift + fit.slope * d)[near].abs().max())
    rise = float((logits[far] - fit.shift + fit.floor).max()) if far.any() else 0.0
    return err, max(rise, 0.0)
