"""Writer of the ``gpt-neox`` target: stock GPT-NeoX (``GPTNeoXForCausalLM``) on the padded residual stream
(``blocks`` module doc): heads of hd' = R + hd, the rotary block first (GPT-NeoX rotates the first ``rotary_pct``
of each head, half layout), the residual padded to D' = D + h R. Its tensor names are ``NAMES``; a target with the
same block and other names (``persimmon``) passes its own to ``add_tensors``.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from ..checkpoint.model import SourceModel
from ..checkpoint.tensor_io import Producer, ShardWriter, row_blocks, single
from ..emulation import EmulationPlan
from .blocks import (WORK, PaddedLayout, attention_out_rows, embedding_rows, head_rows, mean_padded_rows,
                     pad_rows_with_mean, padded_geometry, padded_layout, padded_norm, padded_shapes, proj_bias,
                     proj_rows, reader_rows)
from .protocol import Writer


def _qkv_heads(src: SourceModel, i: int, lay: PaddedLayout, a: int, b: int, dtype: torch.dtype) -> torch.Tensor:
    """Rows of the fused QKV ``(3 h hd', D')`` for heads ``[a, b)`` in ``dtype``, laid out per head as (h, 3, hd')
    (``blocks.proj_rows`` of each part)."""
    weight = torch.zeros(b - a, 3, lay.head_dim, lay.hidden_size, dtype=dtype)  # (heads, 3, hd', D')
    for part in range(3):
        proj_rows(src, i, lay, part, a, b, dtype, out=weight[:, part])
    return weight.view((b - a) * 3 * lay.head_dim, lay.hidden_size)  # (heads 3 hd', D')


def _qkv_bias(src: SourceModel, i: int, lay: PaddedLayout) -> torch.Tensor:
    """Fused QKV bias ``(3 h hd',)`` (``blocks.proj_bias`` of each part, per head)."""
    return torch.stack([proj_bias(src, i, lay, part) for part in range(3)], 1).reshape(-1)  # (h, 3, hd') flat


# The tensor names of the padded GPT-NeoX block: block i's prefix (``{i}``) and its parts, and the globals. A target
# with the same block and other names (``persimmon``) passes its own.
NAMES = {"embed": "gpt_neox.embed_in.weight", "block": "gpt_neox.layers.{i}.", "ln1": "input_layernorm",
         "ln2": "post_attention_layernorm", "qkv": "attention.query_key_value", "o": "attention.dense",
         "up": "mlp.dense_h_to_4h", "down": "mlp.dense_4h_to_h", "final": "gpt_neox.final_layer_norm",
         "head": "embed_out.weight"}


def add_tensors(src: SourceModel, lay: PaddedLayout, shards: ShardWriter, names: Mapping[str, str] = NAMES) -> None:
    """Describe every target tensor to ``shards`` under ``names`` (``NAMES``); each is computed from the source when
    written, in row (or head) blocks of at most ``checkpoint.tensor_io.BLOCK_BYTES`` of float64, so memory is
    bounded by a block, not a tensor."""
    info = src.info
    d, dp, v, h = info.hidden_size, lay.hidden_size, info.vocab_size, info.n_heads
    pads = dp - d
    f = info.intermediate_size

    def bias(i: int, which: str, padded: bool) -> Producer:
        return single(lambda: pad_rows_with_mean(src.bias(i, which, WORK), pads) if padded
                      else src.bias(i, which, WORK))

    n = names
    shards.add(n["embed"], (v, dp), row_blocks(lambda a, b: embedding_rows(src, a, b, pads), v, 8 * dp))
    for i in range(info.n_layers):
        p = n["block"].format(i=i)
        ln2 = "ln1" if info.parallel else "ln2"  # parallel: both read the same LayerNorm
        for name, which in ((n["ln1"], "ln1"), (n["ln2"], ln2)):
            shards.add(p + name + ".weight", (dp,),
                       single(lambda i=i, w=which: padded_norm(*src.norm(i, w), d, pads)[0]))
            shards.add(p + name + ".bias", (dp,), single(lambda i=i, w=which: padded_norm(*src.norm(i, w), d, pads)[1]))
        n_qkv = 3 * h * lay.head_dim
        # a block of whole heads: each head's q, k and v rows are contiguous in the target
        shards.add(p + n["qkv"] + ".weight", (n_qkv, dp),
                   row_blocks(lambda a, b, i=i: _qkv_heads(src, i, lay, a, b, shards.dtype), h,
                              8 * 3 * lay.head_dim * dp))
        shards.add(p + n["qkv"] + ".bias", (n_qkv,), single(lambda i=i: _qkv_bias(src, i, lay)))
        shards.add(p + n["o"] + ".weight", (dp, h * lay.head_dim),
                   mean_padded_rows(lambda a, b, i=i: attention_out_rows(src, i, lay, a, b), d, pads, h * lay.head_dim))
        shards.add(p + n["o"] + ".bias", (dp,), bias(i, "o", True))
        shards.add(p + n["up"] + ".weight", (f, dp),
                   row_blocks(lambda a, b, i=i: reader_rows(src, i, "up", lay, a, b, shards.dtype), f, 8 * dp))
        shards.add(p + n["up"] + ".bias", (f,), bias(i, "up", False))
        shards.add(p + n["down"] + ".weight", (dp, f),
                   mean_padded_rows(lambda a, b, i=i: src.weight(i, "down", WORK, (a, b)), d, pads, f))
        shards.add(p + n["down"] + ".bias", (dp,), bias(i, "down", True))
    shards.add(n["final"] + ".weight", (dp,), single(lambda: padded_norm(*src.final_norm(), d, pads)[0]))
    shards.add(n["final"] + ".bias", (dp,), single(lambda: padded_norm(*src.final_norm(), d, pads)[1]))
    shards.add(n["head"], (v, dp), row_blocks(lambda a, b: head_rows(src, a, b, pads, shards.dtype), v, 8 * dp))


def config(src: SourceModel, lay: PaddedLayout, plan: EmulationPlan) -> dict:
    """config.json of the target, in ``plan.dtype``. Carries the legacy ``rotary_pct``/``rotary_emb_base`` keys
    too, so transformers 4.x (which ignores ``rope_parameters``) reads the same rotary setting."""
    info, c, dtype = src.info, src.config, plan.dtype
    d, pads = info.hidden_size, lay.hidden_size - info.hidden_size
    pct = lay.rotary_pct
    return {
        "architectures": [lay.target.architecture],
        "model_type": lay.target.model_type,
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


WRITER = Writer("gpt-neox", padded_layout, add_tensors, config, padded_geometry, padded_shapes)
