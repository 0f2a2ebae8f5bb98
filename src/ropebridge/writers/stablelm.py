"""Writer of the ``stablelm`` target: stock StableLM (``StableLmForCausalLM``, ``qk_layernorm`` off, sequential
residual) carrying a gated-MLP LayerNorm source with biases everywhere (Jais, BTLM) exactly, on the padded
residual stream (``blocks`` module doc).

StableLM ties the head dim to ``hidden_size / heads`` and rotates the first ``int(hd' * partial_rotary_factor)``
dims of each head (half layout, as GPT-NeoX), so the layout is ``blocks.padded_layout``: heads of hd' = r + hd,
the residual padded to D' = D + h r with each pad dim carrying the mean of the real ones.
Its LayerNorms have a bias, its q, k, v have biases (``use_qkv_bias``); its output projection and its MLP
``down(silu(gate x) * up x)`` have none. The missing biases ride on constants the padded block already has room for:

- **a constant channel**: the last pad dim, c = D' - 1. Every LayerNorm has gamma 0 and beta 1 there (the other pads
  keep gamma = beta = 0), so each LayerNorm output is exactly 1 on c: the MLP's gate and up biases are their weight
  columns on c.
- **a value that is 1**: v's first rotary dim of head 0 (v is not rotated; those dims are zero otherwise) has bias
  1 and no weight, so the attention output there is sum_j p_j = 1 to the dtype's rounding of a sum of
  probabilities; the output projection's column for it is the source's output bias.
- **a bias unit**: one extra MLP unit with gate 64 and up 1/64 on c: silu(64) * 1/64 = 1 exactly in float32,
  bfloat16 and float16 (sigmoid(64) rounds to 1), so its down column is the source's down bias. The width becomes
  the next multiple of 128 above F (the units after the first are zero), so tensor parallelism up to 128 ways
  splits it even where it could not split F (Jais-30B's 19114 becomes 19200). Only where the source has the
  biases.

SGLang 0.5.23's StableLM (and vLLM 0.33's, before 0.34 moved StableLM to its Transformers backend) fix the MLP's
activation to SiLU and the residual to sequential: a source with another activation or a parallel residual is
refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..checkpoint.model import SourceModel
from ..checkpoint.tensor_io import ShardWriter, row_blocks, single
from ..emulation import EmulationPlan
from ..targets import Target
from . import gpt_neox
from .blocks import (WORK, PaddedLayout, attention_out_rows, embedding_rows, head_rows, mean_padded_rows,
                     padded_geometry, padded_layout, padded_norm, padded_shapes, proj_bias, proj_rows)
from .protocol import Writer

UNIT_GATE = 64.0  # the bias unit's gate; silu(64) = 64 in float32/16 and bfloat16, and its up is 1/64
UNIT_ALIGN = 128  # with the bias unit, the MLP width is the next multiple of this above F


@dataclass(frozen=True)
class StableLmLayout:
    """The padded layout, the MLP width F' and whether the bias unit (``bias_unit``) and the value that is 1
    (``value_one``) are written (module doc)."""

    neox: PaddedLayout
    intermediate_size: int
    bias_unit: bool
    value_one: bool

    @property
    def constant(self) -> int:
        """The constant channel: the last pad dim."""
        return self.neox.hidden_size - 1


def _has_bias(src: SourceModel, which: str) -> bool:
    return any(src.info.family_row.tensor_names(i)[which] + ".bias" in src.reader for i in range(src.info.n_layers))


def layout(src: SourceModel, plan: EmulationPlan, target: Target) -> StableLmLayout:
    """The padded layout, the MLP width; ``ValueError`` for an activation other than SiLU (a parallel source is
    refused before, by ``Target.check_source``)."""
    info = src.info
    if info.activation != "silu":
        raise ValueError(f"--target {target.name}'s MLP is SiLU in vLLM and SGLang; this {info.family} model's is "
                         f"{info.activation}")
    unit = _has_bias(src, "down")
    f = info.intermediate_size
    return StableLmLayout(padded_layout(src, plan, target), f + (UNIT_ALIGN - f % UNIT_ALIGN if unit else 0), unit,
                          _has_bias(src, "o"))


def _norm(src: SourceModel, i: int, which: str, lay: StableLmLayout) -> tuple[torch.Tensor, torch.Tensor]:
    """Block i's LayerNorm ``which`` on D' (``blocks.padded_norm``), beta 1 on the constant channel."""
    d = src.info.hidden_size
    w, b = padded_norm(*src.norm(i, which), d, lay.neox.hidden_size - d)
    b[lay.constant] = 1.0
    return w, b


def _proj_bias(src: SourceModel, i: int, lay: StableLmLayout, part: int) -> torch.Tensor:
    """q's, k's or v's bias ``(h hd',)`` (``blocks.proj_bias``), and v's 1 on head 0's first dim where the source
    has an output bias."""
    bias = proj_bias(src, i, lay.neox, part)  # (h, hd')
    if part == 2 and lay.value_one:
        bias[0, 0] = 1.0
    return bias.reshape(-1)


def add_tensors(src: SourceModel, lay: StableLmLayout, shards: ShardWriter) -> None:
    """Describe every target tensor to ``shards``, large ones in row (or head) blocks (at most
    ``checkpoint.tensor_io.BLOCK_BYTES`` of float64 each)."""
    info, n = src.info, lay.neox
    d, dp, v, h, hd, f, fp = (info.hidden_size, n.hidden_size, info.vocab_size, info.n_heads, n.head_dim,
                              info.intermediate_size, lay.intermediate_size)
    pads, c = dp - d, lay.constant

    def o_rows(i: int, a: int, b: int) -> torch.Tensor:  # (rows, h hd'): the content columns, the bias on v's 1
        out = attention_out_rows(src, i, n, a, b)
        if lay.value_one:
            out[:, 0] = src.bias(i, "o", WORK)[a:b]  # head 0's first dim
        return out

    def mlp_in_rows(i: int, which: str, unit: float, a: int, b: int) -> torch.Tensor:  # (rows, D') of gate or up
        out = torch.zeros(b - a, dp, dtype=shards.dtype)
        real = min(b, f)
        if a < real:
            out[: real - a, :d] = src.weight(i, which, shards.dtype, (a, real))
            out[: real - a, c] = src.bias(i, which, shards.dtype)[a:real]
        if lay.bias_unit and a <= f < b:
            out[f - a, c] = unit
        return out

    def down_rows(i: int, a: int, b: int) -> torch.Tensor:  # (rows, F'): the source's, the bias on the unit
        out = torch.zeros(b - a, fp, dtype=WORK)
        out[:, :f] = src.weight(i, "down", WORK, (a, b))
        if lay.bias_unit:
            out[:, f] = src.bias(i, "down", WORK)[a:b]
        return out

    shards.add("model.embed_tokens.weight", (v, dp),
               row_blocks(lambda a, b: embedding_rows(src, a, b, pads), v, 8 * dp))
    for i in range(info.n_layers):
        p = f"model.layers.{i}."
        for name, which in (("input_layernorm", "ln1"), ("post_attention_layernorm", "ln2")):
            shards.add(p + name + ".weight", (dp,), single(lambda i=i, w=which: _norm(src, i, w, lay)[0]))
            shards.add(p + name + ".bias", (dp,), single(lambda i=i, w=which: _norm(src, i, w, lay)[1]))
        for part, x in enumerate("qkv"):
            shards.add(p + f"self_attn.{x}_proj.weight", (h * hd, dp),
                       row_blocks(lambda a, b, i=i, part=part: proj_rows(src, i, n, part, a, b, shards.dtype), h,
                                  8 * hd * dp))
            shards.add(p + f"self_attn.{x}_proj.bias", (h * hd,),
                       single(lambda i=i, part=part: _proj_bias(src, i, lay, part)))
        shards.add(p + "self_attn.o_proj.weight", (dp, h * hd),
                   mean_padded_rows(lambda a, b, i=i: o_rows(i, a, b), d, pads, h * hd))
        for which, unit in (("gate", UNIT_GATE), ("up", 1 / UNIT_GATE)):
            shards.add(p + f"mlp.{which}_proj.weight", (fp, dp),
                       row_blocks(lambda a, b, i=i, w=which, u=unit: mlp_in_rows(i, w, u, a, b), fp, 8 * dp))
        shards.add(p + "mlp.down_proj.weight", (dp, fp),
                   mean_padded_rows(lambda a, b, i=i: down_rows(i, a, b), d, pads, fp))
    for k in (0, 1):
        shards.add(f"model.norm.{('weight', 'bias')[k]}", (dp,),
                   single(lambda k=k: padded_norm(*src.final_norm(), d, pads)[k]))
    shards.add("lm_head.weight", (v, dp), row_blocks(lambda a, b: head_rows(src, a, b, pads, shards.dtype), v, 8 * dp))


def config(src: SourceModel, lay: StableLmLayout, plan: EmulationPlan) -> dict:
    """config.json: the padded geometry, the rotary block as transformers 5.x's and vLLM's ``rope_parameters``, as
    the top-level ``partial_rotary_factor`` / ``rope_theta`` of transformers 4.x, and as ``rope_pct``, which SGLang
    0.5.23's StableLM reads first: from transformers 5.20 on the config object has no ``partial_rotary_factor``
    (it lives in ``rope_parameters``), and SGLang would fall back to rotating the whole head; an unknown key such as
    ``rope_pct`` stays an attribute in every version."""
    neox = gpt_neox.config(src, lay.neox, plan)
    keep = ("vocab_size", "hidden_size", "num_attention_heads", "num_hidden_layers", "rope_parameters",
            "max_position_embeddings", "layer_norm_eps", "tie_word_embeddings", "attention_dropout", "hidden_dropout",
            "initializer_range", "use_cache", "bos_token_id", "eos_token_id", "pad_token_id", "torch_dtype", "dtype")
    return {"architectures": [lay.neox.target.architecture], "model_type": lay.neox.target.model_type,
            **{k: neox[k] for k in keep},
            "num_key_value_heads": src.info.n_heads, "intermediate_size": lay.intermediate_size, "hidden_act": "silu",
            "partial_rotary_factor": lay.neox.rotary_pct, "rope_pct": lay.neox.rotary_pct, "rope_theta": lay.neox.base,
            "use_qkv_bias": True,
            "qk_layernorm": False, "use_parallel_residual": False}


def geometry(src: SourceModel, lay: StableLmLayout) -> dict:
    """The padded layout's numbers (``blocks.padded_geometry``), the MLP width and where the biases ride."""
    return {**padded_geometry(src, lay.neox), "intermediate_size": lay.intermediate_size,
            "constant_dim": lay.constant, "bias_unit": lay.bias_unit, "value_one": lay.value_one}


WRITER = Writer("stablelm", layout, add_tensors, config, geometry, padded_shapes)
