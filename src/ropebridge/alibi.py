"""ALiBi: attention with linear biases (Press, Smith & Lewis 2022, "Train Short, Test Long").

Head h adds ``-m_h * (i - j)`` to the logit of query position i and key position j <= i
(§3, Figure 3). Slopes are geometric: for n a power of two, ``m_k = 2^(-max_bias * k / n)``,
k = 1..n (max_bias = 8 in the paper); for other n, the slopes of the largest power of two
c < n followed by every other slope of the 2c set (k = 1, 3, 5, …), the first n - c of them
(the paper's reference code, adopted by BLOOM, MPT and Falcon).
"""

from __future__ import annotations

import math

import torch

from . import _checks


def slopes(n_heads: int, max_bias: float = 8.0) -> torch.Tensor:
    """ALiBi slopes for any head count, float64, shape ``(h,)``, steepest first.

    ``m_k = 2^(-max_bias * k / n)`` evaluated directly (not as a power of a rounded start),
    so the values are correctly rounded float64.
    """
    n_heads = _checks.positive_int("n_heads", n_heads)
    max_bias = _checks.positive("max_bias", max_bias)

    def geometric(n: int, ks: range) -> list[float]:
        return [2.0 ** (-max_bias * k / n) for k in ks]

    closest = 2 ** int(math.floor(math.log2(n_heads)))
    values = geometric(closest, range(1, closest + 1))
    values += geometric(2 * closest, range(1, 2 * closest + 1, 2))[: n_heads - closest]
    return torch.tensor(values, dtype=torch.float64)


def distance(q_len: int, k_len: int | None = None, *, q_offset: int | None = None) -> torch.Tensor:
    """Query-key distances ``i - j``, int64, shape ``(s, t)``; query i sits at ``q_offset + i``.

    ``q_offset`` defaults to ``t - s`` (the queries are the last s of t positions, as in a KV-cached decode).
    """
    q_len = _checks.positive_int("q_len", q_len)
    k_len = q_len if k_len is None else _checks.positive_int("k_len", k_len)
    q_offset = k_len - q_len if q_offset is None else _checks.non_negative_int("q_offset", q_offset)
    i = torch.arange(q_offset, q_offset + q_len)
    j = torch.arange(k_len)
    return i[:, None] - j[None, :]  # (s, t)


def bias(
    head_slopes: torch.Tensor, q_len: int, k_len: int | None = None, *, q_offset: int | None = None, causal: bool = True
) -> torch.Tensor:
    """ALiBi bias ``-m_h * (i - j)``, with ``-inf`` above the diagonal when ``causal``.

    Args:
        head_slopes: slopes, shape ``(h,)``.
        q_len, k_len, q_offset: see ``distance``.

    Returns:
        bias of shape ``(h, s, t)`` in the dtype of ``head_slopes``.
    """
    d = distance(q_len, k_len, q_offset=q_offset).to(head_slopes.dtype)  # (s, t)
    out = -head_slopes[:, None, None] * d  # (h, s, t)
    if causal:
        out = out.masked_fill(d < 0, float("-inf"))
    return out


def attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    head_slopes: torch.Tensor,
    *,
    scale: float | None = None,
    key_padding: torch.Tensor | None = None,
) -> torch.Tensor:
    """Exact causal ALiBi attention in float64: ``softmax(q k^T * scale + bias) v``.

    Args:
        q: queries, shape ``(b, h, s, d)``; the last s of t positions.
        k, v: keys and values, shape ``(b, h, t, d)``.
        head_slopes: shape ``(h,)``.
        scale: logit scale, default ``1/sqrt(d)``.
        key_padding: optional bool mask, shape ``(b, t)``, True where a key is padding.

    Returns:
        attention output, float64, shape ``(b, h, s, d)``.
    """
    q, k, v = (t.to(torch.float64) for t in (q, k, v))
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-1, -2) * scale  # (b, h, s, t)
    scores = scores + bias(head_slopes.to(torch.float64), q.shape[-2], k.shape[-2])  # (h, s, t) broadcast
    if key_padding is not None:
        scores = scores.masked_fill(key_padding[:, None, None, :], float("-inf"))
    return torch.softmax(scores, dim=-1) @ v  # (b, h, s, d)
