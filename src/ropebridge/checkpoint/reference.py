"""An exact float64 ALiBi forward pass of a source checkpoint, independent of transformers' code.

The canonical block of ``checkpoint.model`` with ALiBi applied exactly: logit = qk_scale * q.k - m (i - j),
positions from the cumulative attention mask (so left padding does not shift distances), slopes as
the family applies them (Falcon's bfloat16-rounded slopes included, but not its bfloat16 rounding of
m*j). One forward, ``reference_states``: each matrix a block of rows at a time, giving the final hidden
states, whose logits a caller forms a block of vocabulary rows at a time (``SourceModel.head_rows``);
``reference_logits`` multiplies them by the whole head at once (small models, the tests' whole-model forward).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .model import SourceModel

BLOCK_BYTES = 128 << 20  # a linear map's rows read at once, in float64


@dataclass(frozen=True)
class Blocks:
    """What the reference computes at once: attention ``queries`` at a time, and each linear map's rows
    ``weight_bytes`` of float64 at a time (None: each map whole, a layer's weights at once)."""

    queries: int = 512
    weight_bytes: int | None = BLOCK_BYTES


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


def _residual(x: torch.Tensor, h1: torch.Tensor, attn: torch.Tensor, layer: _Weights, r=_same) -> torch.Tensor:
    """The block's residual update from its attention output ``attn`` (…, D): sequential
    ``x + a + MLP(N2(x + a))``, or parallel ``x + a + MLP(h1)`` (h1 = N1(x), shared) when the family is parallel;
    the MLP plain, act(up h), or gated, act(gate h) * up h, before ``down``. ``r`` rounds each op's result
    (``reference_hidden(round_to=…)``)."""
    info = layer.info
    if info.parallel:
        h2, x = h1, r(x + attn)
    else:
        x = r(x + attn)
        h2 = r(_ln(x, layer.norm("ln2"), info))
    up = layer.linear(h2, "up")  # (…, F)
    if not info.gated:
        inner = r(_act(up, info.activation))
    else:
        inner = r(r(_act(layer.linear(h2, "gate"), info.activation)) * up)
    del up
    return r(x + layer.linear(inner, "down"))


class _Weights:
    """Block ``i``'s weights as the reference applies them: each linear map read a block of its rows at a time
    (at most ``block_bytes`` of float64; None: whole), so a layer is never held whole. Every tensor is read in
    float64, rounded by ``r``, moved to ``device``; each block's product is accumulated exactly and rounded once,
    ``r(x W_rows^T + b_rows)``, written into its columns of the output."""

    def __init__(self, src: SourceModel, i: int, r, device: str, block_bytes: int | None):
        self.src, self.i, self.r, self.device, self.info = src, i, r, device, src.info
        self.block_bytes = block_bytes

    def _rows(self, width: int, total: int) -> int:
        """Rows of ``width`` float64 values per block, at least one."""
        return total if self.block_bytes is None else max(1, min(total, self.block_bytes // (8 * width)))

    def _on(self, t: torch.Tensor) -> torch.Tensor:
        return self.r(t if str(self.device) == "cpu" else t.to(self.device))

    def norm(self, which: str) -> tuple[torch.Tensor, torch.Tensor]:
        """LayerNorm ``which`` ('ln1' or 'ln2'): weight and bias ``(D,)``."""
        return _map(self._on, self.src.norm(self.i, which))

    def heads(self, h: torch.Tensor, part: int) -> torch.Tensor:
        """q (part 0), k (1) or v (2) of ``h`` ``(b, s, D)``: ``(b, heads, s, hd)``, a block of heads at a time."""
        info = self.info
        n = self._rows(info.head_dim * info.hidden_size, info.n_heads)
        out = h.new_empty(h.shape[0], info.n_heads, h.shape[1], info.head_dim)  # (b, h, s, hd)
        for a in range(0, info.n_heads, n):
            e = min(info.n_heads, a + n)
            w = self._on(self.src.qkv_part(self.i, part, (a, e)))  # (e - a, hd, D)
            bias = self._on(self.src.qkv_part(self.i, part, (a, e), suffix=".bias"))  # (e - a, hd)
            out[:, a:e] = self.r(torch.einsum("bsd,hed->bhse", h, w) + bias[None, :, None, :])
            del w
        return out

    def linear(self, x: torch.Tensor, which: str) -> torch.Tensor:
        """``x W^T + b`` of the block's linear ``which`` ('o', 'up', 'gate', 'down'): ``(…, in)`` -> ``(…, out)``,
        a block of W's rows at a time."""
        rows, width = self.src.weight_shape(self.i, which)
        bias = self._on(self.src.bias(self.i, which))  # (out,)
        n, out = self._rows(width, rows), x.new_empty(*x.shape[:-1], rows)  # (…, out)
        for a in range(0, rows, n):
            e = min(rows, a + n)
            w = self._on(self.src.weight(self.i, which, rows=(a, e)))  # (e - a, in)
            out[..., a:e] = self.r(x @ w.T + bias[a:e])
            del w
        return out


@torch.no_grad()
def reference_hidden(
    src: SourceModel, input_ids: torch.Tensor, *, blocks: Blocks = Blocks(),
    observe: Callable[[int, torch.Tensor, torch.Tensor], None] | None = None, round_to: torch.dtype | None = None,
) -> torch.Tensor:
    """Final (LayerNorm-ed) hidden states ``(s, D)`` of one unpadded sequence ``input_ids`` ``(s,)``, float64:
    ``reference_states`` of the batch of one (``blocks`` as there). Multiply by ``src.head_rows`` to get logits.
    ``observe(layer, content, dist)``, if given, sees each block's content logits ``qk_scale q.k`` ``(h, block, t)``
    (before the bias and the causal mask) and distances ``(block, t)``.

    ``round_to`` (bfloat16 or float16) gives the **baseline** of that dtype instead: weights and the result of
    every op (projections, LayerNorms, GELU, residual sums; each accumulated exactly, rounded once, as kernels with
    float32 accumulation do) rounded to the dtype, while attention, its softmax and the ALiBi bias stay exact.
    A positional encoding in that dtype owes its error to itself only above this baseline."""
    seen = None if observe is None else (lambda i, start, content, dist, weights: observe(i, content[0], dist[0]))
    return reference_states(src, input_ids[None], blocks=blocks, observe=seen, round_to=round_to)[0]


@torch.no_grad()
def reference_states(
    src: SourceModel, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, *, blocks: Blocks = Blocks(),
    observe: Callable[[int, int, torch.Tensor, torch.Tensor, torch.Tensor], None] | None = None,
    round_to: torch.dtype | None = None, on_layer: Callable[[int], None] | None = None, device: str = "cpu",
) -> torch.Tensor:
    """Final (LayerNorm-ed) hidden states ``(b, s, D)``, float64, of ``input_ids`` ``(b, s)`` with
    ``attention_mask`` ``(b, s)`` (1 real, 0 left padding; positions from its cumulative sum, as
    ``reference_logits``), in bounded memory (``blocks``): each linear map's rows a block at a time, the
    embedding rows of the ids only, and attention a block of queries at a time (O(b h s block), not
    O(b h s^2)); so what it holds is one layer's activations and one block of weights.
    Rows at padding positions are meaningless. ``observe(layer, start, content, dist, weights)`` sees each block
    of queries ``start … start + block``: its content logits ``(b, h, block, t)``, distances ``(b, block, t)`` and
    attention probabilities ``(b, h, block, t)``, t = start + block; ``round_to`` as ``reference_hidden``;
    ``on_layer(i)`` is called after each layer (progress); ``device``: where it runs (each block read on the CPU,
    moved; the result stays there)."""
    info = src.info
    if round_to is None:
        r = _same
    else:
        def r(t: torch.Tensor) -> torch.Tensor:
            return t.to(round_to).to(torch.float64)
    b, s = input_ids.shape
    mask = (torch.ones_like(input_ids) if attention_mask is None else attention_mask).to(device)
    pos = (mask.cumsum(-1) - 1).clamp(min=0).to(torch.float64)  # (b, s)
    padded = None if bool(mask.all()) else mask == 0  # (b, s)
    slopes = torch.tensor(info.slopes, dtype=torch.float64, device=device)[None, :, None, None]  # (1, h, 1, 1)
    x = r(src.embedding_of(input_ids.cpu()).to(device))  # (b, s, D)
    for i in range(info.n_layers):
        layer = _Weights(src, i, r, device, blocks.weight_bytes)
        h1 = r(_ln(x, layer.norm("ln1"), info))
        q, k, v = (layer.heads(h1, part) for part in range(3))  # (b, h, s, hd) each
        ctx = torch.empty_like(q)
        for a in range(0, s, blocks.queries):
            e = min(s, a + blocks.queries)
            dist = pos[:, a:e, None] - pos[:, None, :e]  # (b, block, t)
            content = info.qk_scale * q[:, :, a:e] @ k[:, :, :e].transpose(-1, -2)  # (b, h, block, t)
            weights = _softmax(content, slopes, dist, padded, a, keep=observe is not None)  # (b, h, block, t)
            if observe is not None:
                observe(i, a, content, dist, weights)
            ctx[:, :, a:e] = weights @ v[:, :, :e]
        del q, k, v
        attn = layer.linear(r(ctx).transpose(1, 2).reshape(b, s, -1), "o")  # (b, s, D)
        del ctx
        x = _residual(x, h1, attn, layer, r)
        del h1, attn
        if on_layer is not None:
            on_layer(i)
    return r(_ln(x, _map(r, _map(lambda t: t.to(device), src.final_norm())), info))


def _softmax(content: torch.Tensor, slopes: torch.Tensor, dist: torch.Tensor, padded: torch.Tensor | None,
             start: int, *, keep: bool) -> torch.Tensor:
    """Attention weights ``(b, h, block, t)`` of queries ``start … start + block`` over keys ``0 … t``:
    softmax(content - m dist) with the future (a key after its query: only in the last ``block`` keys) and padding
    keys (``padded`` ``(b, s)``, None: none; a padding query still sees itself, so no row is empty) at -inf.
    ``content`` ``(b, h, block, t)`` is overwritten unless ``keep``; then the bias is subtracted after rounding
    m dist, otherwise in one fused multiply-add (the two differ in float64's last bits only)."""
    block, t = content.shape[-2:]
    if keep:
        logits = content - slopes * dist[:, None]
    else:
        logits = content.addcmul_(slopes, dist[:, None], value=-1)  # (b, h, block, t)
    logits[..., start:].masked_fill_(torch.ones(block, block, dtype=torch.bool, device=logits.device).triu_(1),
                                     float("-inf"))
    if padded is not None:
        index = torch.arange(t, device=logits.device)
        blocked = padded[:, None, :t] & (index[None, start:, None] != index[None, None, :])  # (b, block, t)
        logits.masked_fill_(blocked[:, None], float("-inf"))
    return torch.ops.aten._softmax.out(logits, -1, False, out=logits)  # in place


def _map(r, value):
    """``r`` on a tensor, or on each tensor of a tuple (LayerNorm weight and bias); None stays None."""
    if value is None:
        return None
    return tuple(r(t) for t in value) if isinstance(value, tuple) else r(value)


@torch.no_grad()
def reference_logits(
    src: SourceModel, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, *,
                     probs_out: list | None = None
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
