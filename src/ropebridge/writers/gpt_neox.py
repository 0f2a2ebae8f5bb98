"""Writer of the ``gpt-neox`` target: stock GPT-NeoX (``GPTNeoXForCausalLM``) with a padded residual stream.

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
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from ..checkpoint.model import SourceModel
from ..checkpoint.tensor_io import Producer, ShardWriter, row_blocks, rows_per_block, single
from ..emulation import EmulationPlan
from ..targets import Target
from .protocol import Writer

# Tensors that are only copied or zero-padded are cast once from the source into the output dtype; those
# whose rows are also averaged (the residual writers' pad rows) are read in float32, which holds any
# float32/bfloat16/float16 source exactly, and their means summed in float64; q (scaled) and LayerNorms
# (folded) are computed in float64. Either way every output value is rounded once.
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


def check_plan(src: SourceModel, plan: EmulationPlan) -> None:
    """``ValueError`` when the plan is for another head count or head dim than the source has."""
    info = src.info
    if plan.head_dim != info.head_dim or len(plan.heads) != info.n_heads:
        raise ValueError(f"the plan is for {len(plan.heads)} heads of dim {plan.head_dim}, "
                         f"the model has {info.n_heads} of dim {info.head_dim}")


def block_constants(plan: EmulationPlan, n_scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """q's and k's constants on a rotary block of R dims, ``(h, R)`` each, half layout: pair k of a head is dims
    (k, k + R/2) with q = (-N' / s, M' / s), k = (0, s), N' = N n_scale (likewise M)."""
    r = plan.rotary_dim
    q_rot = torch.zeros(len(plan.heads), r, dtype=torch.float64)
    k_rot = torch.zeros(len(plan.heads), r, dtype=torch.float64)
    for hp in plan.heads:
        for pair in hp.pairs:
            q_rot[hp.head, pair.index] = -pair.N * n_scale / hp.split  # x of the pair
            q_rot[hp.head, pair.index + r // 2] = pair.M * n_scale / hp.split  # y (nonzero in the ladder)
            k_rot[hp.head, pair.index + r // 2] = hp.split  # y of the pair
    return q_rot, k_rot


def layout(src: SourceModel, plan: EmulationPlan, target: Target) -> NeoxLayout:
    """Place each head's planned pairs on the target's rotary dims."""
    info = src.info
    if plan.base is None or plan.rotary_dim is None:
        raise ValueError("the GPT-NeoX target needs a plan on a fixed frequency set (base and rotary_dim)")
    check_plan(src, plan)
    r, h = plan.rotary_dim, info.n_heads
    hd_out = r + info.head_dim
    q_rot, k_rot = block_constants(plan, math.sqrt(hd_out / info.head_dim))
    return NeoxLayout(r, hd_out, info.hidden_size + h * r, plan.base, q_rot, k_rot, info.qk_scale * math.sqrt(hd_out))


def _pad_rows_with_mean(w: torch.Tensor, pads: int) -> torch.Tensor:
    """Small residual writer ``(D, …)`` -> ``(D + P, …)`` float64: each pad row is the mean of the real rows."""
    w = w.to(torch.float64)
    return torch.cat([w, w.mean(0, keepdim=True).expand(pads, *w.shape[1:])], 0)


def mean_padded_rows(read: Callable[[int, int], torch.Tensor], n_real: int, pads: int, width: int) -> Producer:
    """Residual writer ``(D + P, width)`` in row blocks: the real rows ``read(a, b)``, then ``P`` rows each the
    mean of the real rows. The sum runs row by row in float64, so its bytes do not depend on the block size."""

    def gen() -> Iterator[torch.Tensor]:
        total = torch.zeros(width, dtype=torch.float64)
        block = rows_per_block(8 * width)
        for a in range(0, n_real, block):
            rows = read(a, min(n_real, a + block))  # (rows, width)
            for row in rows:
                total.add_(row)
            yield rows
        mean = total / n_real  # float64: rounded once, by the writer
        for a in range(0, pads, block):
            yield mean.expand(min(pads, a + block) - a, width)

    return gen


def padded_norm(w: torch.Tensor, b: torch.Tensor, d: int, pads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A LayerNorm's weight and bias ``(D,)`` on the padded stream ``(D + P,)``: gamma * sqrt(D / D') on the real
    dims (module doc), zero on the pads."""
    g = math.sqrt(d / (d + pads))
    return torch.cat([w * g, w.new_zeros(pads)]), torch.cat([b, b.new_zeros(pads)])


def _qkv_heads(src: SourceModel, i: int, lay: NeoxLayout, a: int, b: int, dtype: torch.dtype) -> torch.Tensor:
    """Rows of the fused QKV ``(3 h hd', D')`` for heads ``[a, b)`` in the output ``dtype``: ``((b - a) 3 hd', D')``,
    laid out per head as (h, 3, hd'); the content q scaled in float64 and rounded once, k and v cast once, zero
    on the rotary dims and the pad columns."""
    d, r = src.info.hidden_size, lay.rotary_dim
    weight = torch.zeros(b - a, 3, lay.head_dim, lay.hidden_size, dtype=dtype)
    weight[:, 0, r:, :d] = src.qkv_part(i, 0, (a, b)) * lay.content_scale  # (n, hd, D)
    for part in (1, 2):
        weight[:, part, r:, :d] = src.qkv_part(i, part, (a, b), dtype=dtype)
    return weight.view((b - a) * 3 * lay.head_dim, lay.hidden_size)  # (n 3 hd', D')


def _qkv_bias(src: SourceModel, i: int, lay: NeoxLayout) -> torch.Tensor:
    """Fused QKV bias ``(3 h hd',)``: content biases, and the emulation's constant q and k on the rotary dims."""
    h, r = src.info.n_heads, lay.rotary_dim
    bias = torch.zeros(h, 3, lay.head_dim, dtype=torch.float64)
    for part in range(3):
        b = src.qkv_part(i, part, suffix=".bias")  # (h, hd)
        bias[:, part, r:] = b * lay.content_scale if part == 0 else b
    bias[:, 0, :r], bias[:, 1, :r] = lay.q_rot, lay.k_rot
    return bias.reshape(-1)  # (3 h hd',)


# The tensor names of the padded GPT-NeoX block: block i's prefix (``{i}``) and its parts, and the globals. A target
# with the same block and other names (``persimmon``) passes its own.
NAMES = {"embed": "gpt_neox.embed_in.weight", "block": "gpt_neox.layers.{i}.", "ln1": "input_layernorm",
         "ln2": "post_attention_layernorm", "qkv": "attention.query_key_value", "o": "attention.dense",
         "up": "mlp.dense_h_to_4h", "down": "mlp.dense_4h_to_h", "final": "gpt_neox.final_layer_norm",
         "head": "embed_out.weight"}


def add_tensors(src: SourceModel, lay: NeoxLayout, writer: ShardWriter, names: Mapping[str, str] = NAMES) -> None:
    """Describe every target tensor to ``writer`` under ``names`` (``NAMES``); each is computed from the source when
    written, in row (or head) blocks of at most ``checkpoint.tensor_io.BLOCK_BYTES`` of float64, so memory is
    bounded by a block, not a tensor."""
    info = src.info
    d, pads, dp, v, h = info.hidden_size, lay.hidden_size - info.hidden_size, lay.hidden_size, info.vocab_size, info.n_heads
    r, hd, f = lay.rotary_dim, info.head_dim, info.intermediate_size

    def embed_rows(a: int, b: int) -> torch.Tensor:  # (rows, D'): each pad column holds the row's mean
        x = src.embedding_rows(a, b)  # (rows, D), float64
        out = torch.empty(b - a, dp, dtype=torch.float64)
        out[:, :d], out[:, d:] = x, x.mean(1, keepdim=True)
        return out

    def head_rows(a: int, b: int) -> torch.Tensor:  # (rows, D'): zero columns on the pads
        out = torch.zeros(b - a, dp, dtype=writer.dtype)
        out[:, :d] = src.head_rows(a, b, writer.dtype)  # moved, not computed: one cast from the source
        return out

    def attn_out_rows(i: int, a: int, b: int) -> torch.Tensor:  # (rows, h hd'): zero columns on the rotary dims
        out = torch.zeros(b - a, h, lay.head_dim, dtype=WORK)
        out[:, :, r:] = src.weight(i, "o", WORK, (a, b)).view(b - a, h, hd)  # (rows, h, hd')
        return out.view(b - a, h * lay.head_dim)

    def up_rows(i: int, a: int, b: int) -> torch.Tensor:  # (rows, D'): zero columns on the pads
        out = torch.zeros(b - a, dp, dtype=writer.dtype)
        out[:, :d] = src.weight(i, "up", writer.dtype, (a, b))  # one cast from the source
        return out

    def bias(i: int, which: str, padded: bool) -> Producer:
        return single(lambda: _pad_rows_with_mean(src.bias(i, which, WORK), pads) if padded else src.bias(i, which, WORK))

    n = names
    writer.add(n["embed"], (v, dp), row_blocks(embed_rows, v, 8 * dp))
    for i in range(info.n_layers):
        p = n["block"].format(i=i)
        ln2 = "ln1" if info.parallel else "ln2"  # parallel: both read the same LayerNorm
        for name, which in ((n["ln1"], "ln1"), (n["ln2"], ln2)):
            writer.add(p + name + ".weight", (dp,), single(lambda i=i, w=which: padded_norm(*src.norm(i, w), d, pads)[0]))
            writer.add(p + name + ".bias", (dp,), single(lambda i=i, w=which: padded_norm(*src.norm(i, w), d, pads)[1]))
        n_qkv = 3 * h * lay.head_dim
        # a block of whole heads: each head's q, k and v rows are contiguous in the target
        writer.add(p + n["qkv"] + ".weight", (n_qkv, dp),
                   row_blocks(lambda a, b, i=i: _qkv_heads(src, i, lay, a, b, writer.dtype), h, 8 * 3 * lay.head_dim * dp))
        writer.add(p + n["qkv"] + ".bias", (n_qkv,), single(lambda i=i: _qkv_bias(src, i, lay)))
        writer.add(p + n["o"] + ".weight", (dp, h * lay.head_dim),
                   mean_padded_rows(lambda a, b, i=i: attn_out_rows(i, a, b), d, pads, h * lay.head_dim))
        writer.add(p + n["o"] + ".bias", (dp,), bias(i, "o", True))
        writer.add(p + n["up"] + ".weight", (f, dp), row_blocks(lambda a, b, i=i: up_rows(i, a, b), f, 8 * dp))
        writer.add(p + n["up"] + ".bias", (f,), bias(i, "up", False))
        writer.add(p + n["down"] + ".weight", (dp, f),
                   mean_padded_rows(lambda a, b, i=i: src.weight(i, "down", WORK, (a, b)), d, pads, f))
        writer.add(p + n["down"] + ".bias", (dp,), bias(i, "down", True))
    writer.add(n["final"] + ".weight", (dp,), single(lambda: padded_norm(*src.final_norm(), d, pads)[0]))
    writer.add(n["final"] + ".bias", (dp,), single(lambda: padded_norm(*src.final_norm(), d, pads)[1]))
    writer.add(n["head"], (v, dp), row_blocks(head_rows, v, 8 * dp))


def config(src: SourceModel, lay: NeoxLayout, plan: EmulationPlan) -> dict:
    """config.json of the target, in ``plan.dtype``. Carries the legacy ``rotary_pct``/``rotary_emb_base`` keys
    too, so transformers 4.x (which ignores ``rope_parameters``) reads the same rotary setting."""
    info, c, dtype = src.info, src.config, plan.dtype
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


def shapes(config: Mapping[str, Any]) -> dict:
    """What a GPT-NeoX ``config.json`` serves: head dim hidden / heads (the residual padded to h hd'), one key/value
    head per head."""
    d, h = config["hidden_size"], config["num_attention_heads"]
    return {"layers": config["num_hidden_layers"], "heads": h, "kv_heads": h, "head_dim": d // h, "hidden": d,
            "intermediate": config["intermediate_size"]}


def geometry(src: SourceModel, lay: NeoxLayout) -> dict:
    """The layout's numbers, as ``ropebridge.json`` records them."""
    return {"rotary_dim": lay.rotary_dim, "head_dim": lay.head_dim, "hidden_size": lay.hidden_size,
            "pad_dims": lay.hidden_size - src.info.hidden_size, "rope_base": lay.base,
            "content_q_scale": lay.content_scale}


WRITER = Writer("gpt-neox", layout, add_tensors, config, geometry, shapes)
