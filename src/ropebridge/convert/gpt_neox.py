"""Target: stock GPT-NeoX (``GPTNeoXForCausalLM``) with a padded residual stream.

GPT-NeoX ties the head dim to ``hidden_size / heads`` and rotates the *first* ``r`` dims of each head
(half layout within them: pair k is dims (k, k + r/2), theta_k = base^(-2k/r)). Each head becomes
``hd' = r + hd`` dims: ``r`` rotary dims carrying the emulation pairs (zero weights, constant biases:
q = (-N'/s, M'/s), k = (0, s) on each planned pair, zero elsewhere; M = 0 but in the frequency ladder,
which plans every pair), then the ``hd`` content dims, unrotated.
So the residual stream grows by ``P = h*r`` pad dims, D' = D + P. Every residual writer (embedding,
attention output, MLP output) writes the mean of its real rows into each pad dim, so each pad dim
carries the mean mu of the real dims. LayerNorm over D' then keeps the mean mu and sees the variance
``var * D/D'``; ``eps' = eps * D/D'`` and ``gamma' = gamma * sqrt(D/D')`` undo that exactly, and gamma,
beta are zero on the pad dims, so every LayerNorm output equals the source's on the real dims and is
zero on the pads; readers (QKV, MLP input, output head) have zero columns there.

Scales: GPT-NeoX applies 1/sqrt(hd'); the source applies ``qk_scale`` to q.k (1/sqrt(hd) for BLOOM and
Falcon, ``softmax_scale`` for MPT), so the content q is multiplied by ``qk_scale * sqrt(hd')``, and the
plan's N and M (stated for 1/sqrt(hd)) become ``N' = N sqrt(hd'/hd)``, ``M' = M sqrt(hd'/hd)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..emulation import EmulationPlan
from .families import SourceModel
from .tensor_io import ShardWriter, row_blocks, single

EMBED_BLOCK_ROWS = 2048  # rows per block of the embedding and output head: bounds the working set
# Tensors that are only copied, zero-padded or row-averaged are handled in float32, which holds any
# float32/bfloat16/float16 source exactly (means are summed in float64); q (scaled) and LayerNorms
# (folded) are computed in float64. Either way every output value is rounded once, at the end.
WORK = torch.float32


def robust_fraction(numerator: int, denominator: int) -> float:
    """A float f with ``int(denominator * f) == numerator`` and ``round(...) == numerator`` (readers truncate)."""
    f = numerator / denominator
    while int(denominator * f) != numerator:
        f = math.nextafter(f, math.inf)
    assert round(denominator * f) == numerator
    return f


@dataclass(frozen=True)
class NeoxLayout:
    """Geometry of the padded target and the emulation biases. ``q_rot``, ``k_rot``: ``(h, r)``."""

    rotary_dim: int
    head_dim: int  # hd' = r + hd
    hidden_size: int  # D' = D + h*r
    base: float
    q_rot: torch.Tensor
    k_rot: torch.Tensor
    content_scale: float

    @property
    def rotary_pct(self) -> float:
        return robust_fraction(self.rotary_dim, self.head_dim)


def layout_for(src: SourceModel, plan: EmulationPlan) -> NeoxLayout:
    """Place each head's planned pairs on the target's rotary dims."""
    info = src.info
    if plan.base is None or plan.rope_dim is None:
        raise ValueError("the GPT-NeoX target needs a plan on a fixed frequency set (base and rope_dim)")
    if plan.head_dim != info.head_dim or len(plan.heads) != info.n_heads:
        raise ValueError(f"the plan is for {len(plan.heads)} heads of dim {plan.head_dim}, "
                         f"the model has {info.n_heads} of dim {info.head_dim}")
    r, h = plan.rope_dim, info.n_heads
    hd_out = r + info.head_dim
    q_rot = torch.zeros(h, r, dtype=torch.float64)
    k_rot = torch.zeros(h, r, dtype=torch.float64)
    n_scale = math.sqrt(hd_out / info.head_dim)
    for hp in plan.heads:
        for pair in hp.pairs:
            q_rot[hp.head, pair.index] = -pair.N * n_scale / hp.split  # x of the pair
            q_rot[hp.head, pair.index + r // 2] = pair.M * n_scale / hp.split  # y (nonzero in the ladder)
            k_rot[hp.head, pair.index + r // 2] = hp.split  # y of the pair
    return NeoxLayout(r, hd_out, info.hidden_size + h * r, plan.base, q_rot, k_rot, info.qk_scale * math.sqrt(hd_out))


def _pad_rows_with_mean(w: torch.Tensor, pads: int) -> torch.Tensor:
    """Residual writer ``(D, …)`` -> ``(D + P, …)``: each pad row is the mean of the real rows (summed in float64)."""
    mean = w.mean(0, keepdim=True, dtype=torch.float64).to(w.dtype)
    return torch.cat([w, mean.expand(pads, *w.shape[1:])], 0)


def _pad_cols_with_zeros(w: torch.Tensor, pads: int) -> torch.Tensor:
    """Residual reader ``(…, D)`` -> ``(…, D + P)`` with zero columns on the pads."""
    return torch.cat([w, w.new_zeros(*w.shape[:-1], pads)], -1)


def _norm(w: torch.Tensor, b: torch.Tensor, d: int, pads: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = math.sqrt(d / (d + pads))
    return torch.cat([w * g, w.new_zeros(pads)]), torch.cat([b, b.new_zeros(pads)])


def _qkv(src: SourceModel, i: int, lay: NeoxLayout) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused QKV ``(3 h hd', D')`` laid out per head as (h, 3, hd'), and its bias ``(3 h hd',)``."""
    info = src.info
    h, r, pads = info.n_heads, lay.rotary_dim, lay.hidden_size - info.hidden_size
    qw, kw, vw, qb, kb, vb = src.qkv(i)
    weight = torch.zeros(h, 3, lay.head_dim, lay.hidden_size, dtype=torch.float64)
    bias = torch.zeros(h, 3, lay.head_dim, dtype=torch.float64)
    for part, (w, b) in enumerate(((qw * lay.content_scale, qb * lay.content_scale), (kw, kb), (vw, vb))):
        weight[:, part, r:, :] = _pad_cols_with_zeros(w, pads)  # (h, hd, D')
        bias[:, part, r:] = b
    bias[:, 0, :r], bias[:, 1, :r] = lay.q_rot, lay.k_rot
    return weight.reshape(3 * h * lay.head_dim, lay.hidden_size), bias.reshape(-1)  # (3 h hd', D'), (3 h hd',)


def _attn_out(src: SourceModel, i: int, lay: NeoxLayout) -> tuple[torch.Tensor, torch.Tensor]:
    info = src.info
    h, hd, r, pads = info.n_heads, info.head_dim, lay.rotary_dim, lay.hidden_size - info.hidden_size
    w, b = src.linear(i, "o", WORK)
    per_head = torch.zeros(info.hidden_size, h, lay.head_dim, dtype=WORK)
    per_head[:, :, r:] = w.view(info.hidden_size, h, hd)  # (D, h, hd'): zero columns on the rotary dims
    return _pad_rows_with_mean(per_head.reshape(info.hidden_size, h * lay.head_dim), pads), _pad_rows_with_mean(b, pads)


def add_tensors(src: SourceModel, lay: NeoxLayout, writer: ShardWriter) -> None:
    """Describe every target tensor to ``writer``; each is computed from the source when written."""
    info = src.info
    d, pads, dp, v = info.hidden_size, lay.hidden_size - info.hidden_size, lay.hidden_size, info.vocab_size


    last: dict = {}

    def qkv(i: int):  # weight and bias come from one read of the fused source tensor
        if last.get("i") != i:
            last.update(i=i, value=_qkv(src, i, lay))
        return last["value"]


    def embed_rows(a: int, b: int) -> torch.Tensor:  # (rows, D'): each pad column holds the row's mean
        x = src.embedding_rows(a, b)  # (rows, D), float64
        out = torch.empty(b - a, dp, dtype=writer.dtype)
        out[:, :d], out[:, d:] = x, x.mean(1, keepdim=True)
        return out

    def head_rows(a: int, b: int) -> torch.Tensor:  # (rows, D'): zero columns on the pads
        out = torch.zeros(b - a, dp, dtype=writer.dtype)
        out[:, :d] = src.head_rows(a, b, WORK)
        return out

    writer.add("gpt_neox.embed_in.weight", (v, dp), row_blocks(embed_rows, v, EMBED_BLOCK_ROWS))
    for i in range(info.n_layers):
        p = f"gpt_neox.layers.{i}."
        ln2 = "ln1" if info.parallel else "ln2"  # parallel: both read the same LayerNorm
        for name, which in (("input_layernorm", "ln1"), ("post_attention_layernorm", ln2)):
            writer.add(p + name + ".weight", (dp,), single(lambda i=i, w=which: _norm(*src.norm(i, w), d, pads)[0]))
            writer.add(p + name + ".bias", (dp,), single(lambda i=i, w=which: _norm(*src.norm(i, w), d, pads)[1]))
        n_qkv = 3 * info.n_heads * lay.head_dim
        writer.add(p + "attention.query_key_value.weight", (n_qkv, dp), single(lambda i=i: qkv(i)[0]))
        writer.add(p + "attention.query_key_value.bias", (n_qkv,), single(lambda i=i: qkv(i)[1]))
        writer.add(p + "attention.dense.weight", (dp, info.n_heads * lay.head_dim), single(lambda i=i: _attn_out(src, i, lay)[0]))
        writer.add(p + "attention.dense.bias", (dp,), single(lambda i=i: _attn_out(src, i, lay)[1]))
        f = info.intermediate_size
        writer.add(p + "mlp.dense_h_to_4h.weight", (f, dp), single(lambda i=i: _pad_cols_with_zeros(src.linear(i, "up", WORK)[0], pads)))
        writer.add(p + "mlp.dense_h_to_4h.bias", (f,), single(lambda i=i: src.linear(i, "up", WORK)[1]))
        writer.add(p + "mlp.dense_4h_to_h.weight", (dp, f), single(lambda i=i: _pad_rows_with_mean(src.linear(i, "down", WORK)[0], pads)))
        writer.add(p + "mlp.dense_4h_to_h.bias", (dp,), single(lambda i=i: _pad_rows_with_mean(src.linear(i, "down", WORK)[1], pads)))
    writer.add("gpt_neox.final_layer_norm.weight", (dp,), single(lambda: _norm(*src.final_norm(), d, pads)[0]))
    writer.add("gpt_neox.final_layer_norm.bias", (dp,), single(lambda: _norm(*src.final_norm(), d, pads)[1]))
    writer.add("embed_out.weight", (v, dp), row_blocks(head_rows, v, EMBED_BLOCK_ROWS))


def config_for(src: SourceModel, lay: NeoxLayout, plan: EmulationPlan, dtype: str) -> dict:
    """config.json of the target. Carries the legacy ``rotary_pct``/``rotary_emb_base`` keys too, so
    transformers 4.x (which ignores ``rope_parameters``) reads the same rotary setting."""
    info, c = src.info, src.config
    d, pads = info.hidden_size, lay.hidden_size - info.hidden_size
    pct = lay.rotary_pct
    return {
        "architectures": ["GPTNeoXForCausalLM"],
        "model_type": "gpt_neox",
        "vocab_size": info.vocab_size,
        "hidden_size": lay.hidden_size,
        "num_attention_heads": info.n_heads,
        "num_hidden_layers": info.n_layers,
        "intermediate_size": info.intermediate_size,
        "hidden_act": info.activation,
        "rotary_pct": pct,
        "rotary_emb_base": lay.base,
        "rope_parameters": {"rope_type": "default", "rope_theta": lay.base, "partial_rotary_factor": pct},
        "max_position_embeddings": plan.window,
        "layer_norm_eps": info.eps * d / (d + pads),
        "use_parallel_residual": info.parallel,
        "tie_word_embeddings": False,
        "attention_bias": True,
        "attention_dropout": 0.0,
        "hidden_dropout": 0.0,
        "initializer_range": 0.02,
        "use_cache": True,
        "bos_token_id": c.get("bos_token_id"),
        "eos_token_id": c.get("eos_token_id"),
        "pad_token_id": c.get("pad_token_id"),
        "torch_dtype": dtype,
        "dtype": dtype,
    }
