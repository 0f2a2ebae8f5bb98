"""Writer of the ``llama`` target: ``LlamaForCausalLM`` for the RMSNorm + gated-MLP families (Baichuan 13B).

Each head grows by its emulation dims (hd' = hd + R for the ladder, hd + 2 for the single pair; ``head_dim`` is
free of ``hidden_size / heads``), the residual keeps its width: only q, k, v and the output projection widen
(``compact``). Llama rotates the whole head, pair k on dims (k, k + hd'/2): the ladder's pairs are pairs
0 .. R/2 - 1, the single pair is pair 0, and the rope the plan chose (``EmulationPlan.rope_parameters``,
``targets.llama_rope``) silences every other pair. ``attention_bias`` carries q's and k's constants; v's and the
output's biases are zero. RMSNorm weights, the gated MLP (gate, up, down) and the embedding move over with one
cast each; the output head is the source's (Baichuan2's NormHead rows normalised in float64, cast once).
"""

from __future__ import annotations

import torch

from ..checkpoint.model import SourceModel
from ..checkpoint.tensor_io import ShardWriter, row_blocks, single
from ..emulation import EmulationPlan
from . import compact
from .gpt_neox import WORK
from .protocol import Writer


def add_tensors(src: SourceModel, lay: compact.CompactLayout, writer: ShardWriter) -> None:
    """Describe every target tensor to ``writer``, large ones in row (or head) blocks as in ``gpt_neox``."""
    info = src.info
    d, v, f, h, hd = info.hidden_size, info.vocab_size, info.intermediate_size, info.n_heads, lay.head_dim
    ones = torch.ones(d, dtype=torch.float64)

    def rows_of(i: int, which: str):  # moved: one cast from the source
        return lambda a, b: src.weight(i, which, writer.dtype, (a, b))

    writer.add("model.embed_tokens.weight", (v, d), row_blocks(src.embedding_rows, v, 8 * d))
    for i in range(info.n_layers):
        p = f"model.layers.{i}."
        for name, which in (("input_layernorm", "ln1"), ("post_attention_layernorm", "ln2")):
            writer.add(p + name + ".weight", (d,), single(lambda i=i, w=which: src.norm(i, w)[0]))
        for part, x in enumerate("qkv"):
            writer.add(p + f"self_attn.{x}_proj.weight", (h * hd, d),
                       row_blocks(lambda a, b, i=i, part=part: compact.proj_heads(src, i, lay, part, a, b, writer.dtype,
                                                                                  ones), h, 8 * hd * d))
            writer.add(p + f"self_attn.{x}_proj.bias", (h * hd,),
                       single(lambda i=i, part=part: compact.proj_bias(src, i, lay, part)))
        writer.add(p + "self_attn.o_proj.weight", (d, h * hd),
                   row_blocks(lambda a, b, i=i: compact.o_rows(src, i, lay, a, b, writer.dtype), d, 8 * h * hd))
        writer.add(p + "self_attn.o_proj.bias", (d,), single(lambda i=i: src.bias(i, "o", WORK)))
        for which in ("gate", "up"):
            writer.add(p + f"mlp.{which}_proj.weight", (f, d), row_blocks(rows_of(i, which), f, 8 * d))
        writer.add(p + "mlp.down_proj.weight", (d, f), row_blocks(rows_of(i, "down"), d, 8 * f))
    writer.add("model.norm.weight", (d,), single(lambda: src.final_norm()[0]))
    writer.add("lm_head.weight", (v, d), row_blocks(lambda a, b: src.head_rows(a, b, writer.dtype), v, 8 * d))


def config(src: SourceModel, lay: compact.CompactLayout, plan: EmulationPlan) -> dict:
    """config.json: the compact keys, Llama's own, and the plan's llama3 rope (also as the top-level
    ``rope_theta``)."""
    rope = dict(plan.rope_parameters)
    return {**compact.common_config(src, lay, plan), "architectures": [lay.target.architecture],
            "model_type": lay.target.model_type, "rms_norm_eps": src.info.eps, "attention_bias": True,
            "mlp_bias": False, "pretraining_tp": 1, "rope_theta": rope["rope_theta"], "rope_parameters": rope}


def geometry(src: SourceModel, lay: compact.CompactLayout) -> dict:
    """The layout's numbers, as ``ropebridge.json`` records them: head dim, emulation dims, the q scale."""
    return {"head_dim": lay.head_dim, "rotary_dim": lay.rotary_dim, "pair_dims": lay.emulation.tolist(),
            "content_q_scale": lay.content_scale}


WRITER = Writer(compact.layout, add_tensors, config, geometry, compact.shapes)
