"""An exact float64 ALiBi forward pass of a source checkpoint, independent of transformers' code.

The canonical block of ``checkpoint.model`` with ALiBi applied exactly: logit = qk_scale * q.k - m (i - j),
positions from the cumulative attention mask (so left padding does not shift distances), slopes as
the family applies them (Falcon's bfloat16-rounded slopes included, but not its bfloat16 rounding of
m*j). One forward, ``reference_states``: one layer at a time, giving the final hidden states, whose logits a
caller forms a block of vocabulary rows at a time (``SourceModel.head_rows``); ``reference_logits`` multiplies
them by the whole head at once (small models, the tests' whole-model forward).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from .model import SourceModel


def _ln(x: torch.Tensor, wb: tuple[torch.Tensor, torch.Tensor], info) -> torch.Tensor:
    """The family's norm over the last dim, ``(..., D)``, in the dtype of ``x`` (torch's, independent of
    transformers): LayerNorm, or RMSNorm x / sqrt(mean(x^2) + eps) * w (Zhang & Sennrich 2019)."""
    if info.norm == "rmsnorm":
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + info.eps) * wb[0] + wb[1]
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), wb[0], wb[1], info.eps)


def _act(x: torch.Tensor, kind: str) -> torch.Tensor:
    """The MLP's activation as the family applies it: SiLU (``silu``), GELU with the tanh approximation
    (``gelu_pytorch_tanh``, BLOOM) or exact GELU (erf)."""
    if kind == "silu":
        return torch.nn.functional.silu(x)
    return torch.nn.functional.gelu(x, approximate="tanh" if kind == "gelu_pytorch_tanh" else "none")


def _same(x: torch.Tensor) -> torch.Tensor:
    return x


def _residual(x: torch.Tensor, h1: torch.Tensor, attn: torch.Tensor, layer, info, r=_same) -> torch.Tensor:
    """The block's residual update from its attention output ``attn`` (…, D): sequential
    ``x + a + MLP(N2(x + a))``, or parallel ``x + a + MLP(h1)`` (h1 = N1(x), shared) when ``layer.ln2`` is None;
    the MLP plain, act(up h), or gated, act(gate h) * up h, before ``down``. ``r`` rounds each op's result
    (``reference_hidden(round_to=…)``)."""
    if layer.ln2 is None:
        h2, x = h1, r(x + attn)
    else:
        x = r(x + attn)
        h2 = r(_ln(x, layer.ln2, info))
    up = r(h2 @ layer.up_w.T + layer.up_b)  # (…, F)
    if layer.gate_w is None:
        inner = r(_act(up, info.activation))
    else:
        inner = r(r(_act(r(h2 @ layer.gate_w.T + layer.gate_b), info.activation)) * up)
    return r(x + r(inner @ layer.down_w.T + layer.down_b))


@torch.no_grad()
def reference_hidden(
    src: SourceModel, input_ids: torch.Tensor, *, query_block: int = 512,
    observe: Callable[[int, torch.Tensor, torch.Tensor], None] | None = None, round_to: torch.dtype | None = None,
) -> torch.Tensor:
    """Final (LayerNorm-ed) hidden states ``(s, D)`` of one unpadded sequence ``input_ids`` ``(s,)``, float64:
    ``reference_states`` of the batch of one. Multiply by ``src.head_rows`` to get logits.
    ``observe(layer, content, dist)``, if given, sees each block's content logits ``qk_scale q.k`` ``(h, block, t)``
    (before the bias and the causal mask) and distances ``(block, t)``.

    ``round_to`` (bfloat16 or float16) gives the **floor** of that dtype instead: weights and the result of every
    op (projections, LayerNorms, GELU, residual sums; each accumulated exactly, rounded once, as kernels with
    float32 accumulation do) rounded to the dtype, while attention, its softmax and the ALiBi bias stay exact.
    A positional encoding in that dtype owes its error to itself only above this floor."""
    seen = None if observe is None else (lambda i, start, content, dist, weights: observe(i, content[0], dist[0]))
    return reference_states(src, input_ids[None], query_block=query_block, observe=seen, round_to=round_to)[0]


@torch.no_grad()
def reference_states(
    src: SourceModel, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, *, query_block: int = 512,
    observe: Callable[[int, int, torch.Tensor, torch.Tensor, torch.Tensor], None] | None = None,
    round_to: torch.dtype | None = None, on_layer: Callable[[int], None] | None = None, device: str = "cpu",
) -> torch.Tensor:
    """Final (LayerNorm-ed) hidden states ``(b, s, D)``, float64, of ``input_ids`` ``(b, s)`` with
    ``attention_mask`` ``(b, s)`` (1 real, 0 left padding; positions from its cumulative sum, as
    ``reference_logits``), in bounded memory: one layer's weights at a time (``SourceModel.layer``), the
    embedding rows of the ids only, and attention a block of queries at a time (O(b h s block), not O(b h s^2)).
    Rows at padding positions are meaningless. ``observe(layer, start, content, dist, weights)`` sees each block
    of queries ``start … start + block``: its content logits ``(b, h, block, t)``, distances ``(b, block, t)`` and
    attention probabilities ``(b, h, block, t)``, t = start + block; ``round_to`` as ``reference_hidden``;
    ``on_layer(i)`` is called after each layer (progress); ``device``: where it runs (each layer read on the CPU,
    moved once; the result stays there)."""
    info = src.info
    if round_to is None:
        r = _same
    else:
        def r(t: torch.Tensor) -> torch.Tensor:
            return t.to(round_to).to(torch.float64)
    b, s = input_ids.shape
    mask = (torch.ones_like(input_ids) if attention_mask is None else attention_mask).to(device)
    pos = (mask.cumsum(-1) - 1).clamp(min=0).to(torch.float64)  # (b, s)
    index = torch.arange(s, device=device)
    slopes = torch.tensor(info.slopes, dtype=torch.float64, device=device)[None, :, None, None]  # (1, h, 1, 1)
    x = r(src.embedding_of(input_ids.cpu()).to(device))  # (b, s, D)
    for i in range(info.n_layers):
        layer = _on(src.layer(i), device)
        if round_to is not None:
            layer = dataclasses.replace(layer, **{f.name: _map(r, getattr(layer, f.name))
                                                  for f in dataclasses.fields(layer)})
        h1 = r(_ln(x, layer.ln1, info))
        q = r(torch.einsum("bsd,hed->bhse", h1, layer.q_w) + layer.q_b[None, :, None, :])  # (b, h, s, hd)
        k = r(torch.einsum("bsd,hed->bhse", h1, layer.k_w) + layer.k_b[None, :, None, :])
        v = r(torch.einsum("bsd,hed->bhse", h1, layer.v_w) + layer.v_b[None, :, None, :])
        ctx = torch.empty_like(q)
        for a in range(0, s, query_block):
            e = min(s, a + query_block)
            dist = pos[:, a:e, None] - pos[:, None, :e]  # (b, block, t)
            blocked = (index[None, a:e, None] < index[None, None, :e]) | (mask[:, None, :e] == 0)  # (b, block, t)
            blocked &= index[None, a:e, None] != index[None, None, :e]  # a padding query sees itself: no NaN rows
            content = info.qk_scale * q[:, :, a:e] @ k[:, :, :e].transpose(-1, -2)  # (b, h, block, t)
            logits = (content - slopes * dist[:, None]).masked_fill(blocked[:, None], float("-inf"))
            weights = torch.softmax(logits, -1)  # (b, h, block, t)
            if observe is not None:
                observe(i, a, content, dist, weights)
            ctx[:, :, a:e] = weights @ v[:, :, :e]
        attn = r(r(ctx).transpose(1, 2).reshape(b, s, -1) @ layer.o_w.T + layer.o_b)  # (b, s, D)
        del q, k, v, ctx
        x = _residual(x, h1, attn, layer, info, r)
        del layer, h1, attn  # one layer's weights alive at a time: released before the next is read
        if on_layer is not None:
            on_layer(i)
    return r(_ln(x, _map(r, _map(lambda t: t.to(device), src.final_norm())), info))


def _on(layer, device: str):
    """``layer`` (a ``Layer``) with every tensor on ``device``."""
    if str(device) == "cpu":
        return layer
    return dataclasses.replace(layer, **{f.name: _map(lambda t: t.to(device), getattr(layer, f.name))
                                         for f in dataclasses.fields(layer)})


def _map(r, value):
    """``r`` on a tensor, or on each tensor of a tuple (LayerNorm weight and bias); None stays None."""
    if value is None:
        return None
    return tuple(r(t) for t in value) if isinstance(value, tuple) else r(value)


@torch.no_grad()
def reference_logits(
    src: SourceModel, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, *, probs_out: list | None = None
) -> torch.Tensor:
    """Exact ALiBi logits, float64: ``reference_states`` times every row of the head at once (small models, the
    tests' whole-model forward); with ``probs_out`` (a list), each layer's attention probabilities
    ``(b, h, s, t)`` are appended to it.

    Args:
        input_ids: ``(b, s)`` token ids.
        attention_mask: ``(b, s)``, 1 for real tokens, 0 for (left) padding; default all ones.

    Returns:
        logits ``(b, s, V)``; rows at padding positions are meaningless.
    """
    probs = None if probs_out is None else _probs_of(src, input_ids.shape)
    hidden = reference_states(src, input_ids, attention_mask, observe=None if probs is None else _keeper(probs))
    if probs_out is not None:
        probs_out.extend(probs)
    return hidden @ src.head_rows(0, src.info.vocab_size).T  # (b, s, V)


def _probs_of(src: SourceModel, shape: torch.Size) -> list[torch.Tensor]:
    """One zero ``(b, h, s, s)`` float64 tensor per layer, for ``_keeper`` to fill."""
    b, s = shape
    return [torch.zeros(b, src.info.n_heads, s, s, dtype=torch.float64) for _ in range(src.info.n_layers)]


def _keeper(probs: list[torch.Tensor]) -> Callable[[int, int, torch.Tensor, torch.Tensor, torch.Tensor], None]:
    """A ``reference_states`` observer that writes each block of queries' probabilities into ``probs[layer]``."""

    def keep(layer: int, start: int, content, dist, weights: torch.Tensor) -> None:
        probs[layer][:, :, start:start + weights.shape[2], :weights.shape[3]] = weights

    return keep


@torch.no_grad()
def attention_probs(src: SourceModel, input_ids: torch.Tensor) -> list[torch.Tensor]:
    """Each layer's exact attention probabilities ``(b, h, s, s)``, float64, of ``input_ids`` ``(b, s)``
    (``reference_states``, unpadded): O(L b h s^2) memory, for the short inputs of a report's figure."""
    probs = _probs_of(src, input_ids.shape)
    reference_states(src, input_ids, observe=_keeper(probs))
    return probs
