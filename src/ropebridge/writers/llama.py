"""Writer of the ``llama`` target: ``LlamaForCausalLM`` for the gated-MLP families (Baichuan 13B, Refact).

Each head grows by its emulation dims (hd' = hd + R for the ladder, hd + 4 for the single strategy's two opposed
pairs; ``head_dim`` is free of ``hidden_size / heads``), the residual keeps its width: only q, k, v and the output
projection widen (``compact``). Llama rotates the whole head, pair k on dims (k, k + hd'/2): the ladder's pairs
are pairs 0 .. R/2 - 1, the opposed pairs are pairs 0 and 1 (``emulation.single``), and the rope the plan chose
(``EmulationPlan.rope_parameters``, ``targets.llama_rope``) silences every other pair. ``attention_bias`` carries q's
and k's constants; v's and the output's biases are zero. A multi-query source keeps its one kv head
(``num_key_value_heads``): its k constants are the heads' (with one split s they are the same on every dim a head uses;
a head without a pair has q = 0 there). RMSNorm weights, the gated MLP (gate, up, down) and the embedding move over with
one cast each; the output head is the source's (Baichuan2's NormHead rows normalised in float64, cast once).

A LayerNorm without bias (Refact) becomes an RMSNorm exactly by keeping the residual stream centred: LN(x) =
(x - mean x) / sqrt(var x + eps) w equals RMSNorm(x) w = x / sqrt(mean x^2 + eps) w when mean x = 0, and every
write into the stream (the embedding rows, the attention output and MLP down projections, their biases) has its
mean over the D channels removed in float64 before the one cast. LayerNorm ignores that mean, so the source's
function is unchanged (the centring TransformerLens calls ``center_writing_weights``).
"""

from __future__ import annotations

import functools

import torch

from ..checkpoint.model import SourceModel
from ..checkpoint.tensor_io import ShardWriter, row_blocks, single
from ..emulation import EmulationPlan
from ..targets import Target
from . import compact
from .blocks import WORK
from .protocol import Writer


def layout(src: SourceModel, plan: EmulationPlan, target: Target) -> compact.CompactLayout:
    """``compact.layout``, with k's constants checked to be shareable by each kv head's group of query heads."""
    lay = compact.layout(src, plan, target)
    shared_k(src, lay)
    return lay


def shared_k(src: SourceModel, lay: compact.CompactLayout) -> torch.Tensor:
    """k's constants per kv head ``(kv, hd')``: where the heads of a group use a dim their constants are equal
    (one split s); else ``ValueError`` naming ``--split``."""
    kv = src.info.kv_heads
    groups = lay.k_rot.view(kv, -1, lay.head_dim)  # (kv, h/kv, hd')
    shared = groups.abs().amax(dim=1)  # (kv, hd'): k's constants are s > 0 or 0
    if not torch.all((groups == 0) | (groups == shared[:, None])):
        raise ValueError(f"this {src.info.family} model shares k between {groups.shape[1]} query heads, and the plan "
                         "gives their k different constants (a split s per head): pass --split with one value")
    return shared


def centred(t: torch.Tensor) -> torch.Tensor:
    """``t`` ``(D, ...)`` (a projection writing into the residual, or its bias) less its mean over the D channels
    (float64)."""
    return t - t.mean(dim=0, keepdim=True)


def add_tensors(src: SourceModel, lay: compact.CompactLayout, shards: ShardWriter) -> None:
    """Describe every target tensor to ``shards``, large ones in row (or head) blocks (at most
    ``checkpoint.tensor_io.BLOCK_BYTES`` of float64 each)."""
    info = src.info
    d, v, f, h, hd = info.hidden_size, info.vocab_size, info.intermediate_size, info.n_heads, lay.head_dim
    kv, group = info.kv_heads, info.n_heads // info.kv_heads
    centre = info.norm == "layernorm"  # a LayerNorm without bias: the residual kept centred (module doc)
    ones = torch.ones(d, dtype=torch.float64)
    k_shared = shared_k(src, lay)

    def rows_of(i: int, which: str):  # moved: one cast from the source
        return lambda a, b: src.weight(i, which, shards.dtype, (a, b))

    @functools.cache
    def written_mean(i: int, which: str) -> torch.Tensor:  # (1, in): block i's projection's mean over D, once
        return src.weight(i, which).mean(dim=0, keepdim=True)

    def writing(i: int, which: str):  # the attention output ('o') or MLP down rows, centred where needed
        if not centre:
            return rows_of(i, which)
        return lambda a, b: (src.weight(i, which, rows=(a, b)) - written_mean(i, which)).to(shards.dtype)

    def proj(i: int, part: int, a: int, b: int) -> torch.Tensor:  # q's heads [a, b), or k's/v's kv heads [a, b)
        if part == 0 or group == 1:
            return compact.proj_heads(src, i, lay, part, a, b, shards.dtype, ones)
        return torch.cat([compact.proj_heads(src, i, lay, part, g * group, g * group + 1, shards.dtype, ones)
                          for g in range(a, b)])

    def bias(i: int, part: int) -> torch.Tensor:
        b = compact.proj_bias(src, i, lay, part).view(h, hd)
        if part == 0:
            return b.reshape(-1)
        b = b[::group].clone()  # (kv, hd'): a group's representative (its content rows are the group's)
        if part == 1:
            b[:, lay.emulation] = k_shared[:, lay.emulation]
        return b.reshape(-1)

    def embedding(a: int, b: int) -> torch.Tensor:
        rows = src.embedding_rows(a, b)  # (rows, D), float64
        return rows - rows.mean(dim=1, keepdim=True) if centre else rows

    shards.add("model.embed_tokens.weight", (v, d), row_blocks(embedding, v, 8 * d))
    for i in range(info.n_layers):
        p = f"model.layers.{i}."
        for name, which in (("input_layernorm", "ln1"), ("post_attention_layernorm", "ln2")):
            shards.add(p + name + ".weight", (d,), single(lambda i=i, w=which: src.norm(i, w)[0]))
        for part, x in enumerate("qkv"):
            heads = h if part == 0 else kv
            shards.add(p + f"self_attn.{x}_proj.weight", (heads * hd, d),
                       row_blocks(lambda a, b, i=i, part=part: proj(i, part, a, b), heads, 8 * hd * d))
            shards.add(p + f"self_attn.{x}_proj.bias", (heads * hd,), single(lambda i=i, part=part: bias(i, part)))
        shards.add(p + "self_attn.o_proj.weight", (d, h * hd),
                   row_blocks(lambda a, b, i=i: compact.o_rows(src, i, lay, a, b, shards.dtype,
                                                               writing(i, "o")), d, 8 * h * hd))
        shards.add(p + "self_attn.o_proj.bias", (d,),
                   single(lambda i=i: centred(src.bias(i, "o")) if centre else src.bias(i, "o", WORK)))
        for which in ("gate", "up"):
            shards.add(p + f"mlp.{which}_proj.weight", (f, d), row_blocks(rows_of(i, which), f, 8 * d))
        shards.add(p + "mlp.down_proj.weight", (d, f), row_blocks(writing(i, "down"), d, 8 * f))
    shards.add("model.norm.weight", (d,), single(lambda: src.final_norm()[0]))
    shards.add("lm_head.weight", (v, d), row_blocks(lambda a, b: src.head_rows(a, b, shards.dtype), v, 8 * d))


def config(src: SourceModel, lay: compact.CompactLayout, plan: EmulationPlan) -> dict:
    """config.json: the compact keys, Llama's own, and the plan's llama3 rope as ``rope_parameters`` (transformers
    5.x, vLLM, SGLang) and as the legacy ``rope_theta`` + ``rope_scaling`` (transformers 4.x, which without them
    loads the checkpoint with the default rope, silently wrong; TensorRT-LLM's ``RopeParams.from_config``;
    llama.cpp's converter). transformers 5.x reads both as one."""
    rope = dict(plan.rope_parameters)
    legacy = {k: v for k, v in rope.items() if k != "rope_theta"}
    return {**compact.common_config(src, lay, plan), "architectures": [lay.target.architecture],
            "model_type": lay.target.model_type, "num_key_value_heads": src.info.kv_heads,
            "rms_norm_eps": src.info.eps, "attention_bias": True,
            "mlp_bias": False, "pretraining_tp": 1, "rope_theta": rope["rope_theta"], "rope_parameters": rope,
            "rope_scaling": legacy}


def geometry(src: SourceModel, lay: compact.CompactLayout) -> dict:
    """The layout's numbers, as ``ropebridge.json`` records them: head dim, emulation dims, the q scale."""
    return {"head_dim": lay.head_dim, "rotary_dim": lay.rotary_dim, "pair_dims": lay.emulation.tolist(),
            "content_q_scale": lay.content_scale}


WRITER = Writer("llama", layout, add_tensors, config, geometry, compact.shapes)
