"""Refact-1.6B (``model_type: gpt_refact``).

Refact (``model_type: gpt_refact``, remote code ``modeling_gpt_refact.py``): scores = q.k/sqrt(hd) + m*(j + 1), m
computed as its ``_get_slopes`` does (``torch.pow`` of 2^(-8/n) in float32: up to 6 float32 ulps, 5e-7, from Press
et al.'s values for 32 heads), which we take. LayerNorms without bias, a gated SiLU MLP (``gate_up_proj``, gate
first, width 256 * ceil(int(2 * 4D / 3) / 256)), multi-query attention (q alone, k and v fused in ``kv``, k first),
no biases, an untied head (tied where ``lm_head`` is absent). Its fused tensors are read through ``views`` as the
canonical ones.

As the canonical model reads it (``checkpoint.model``): q alone and k, v fused (one kv head), read through ``views``
as the multi-query QKV (h query heads, one k, one v, replicated here per head: exact); LayerNorms without bias; the
MLP down(silu(gate x) * up x) from one fused ``gate_up_proj``; no biases; logits = q.k/sqrt(hd) + m_f32*(j + 1).
"""

from __future__ import annotations

import math

import torch

from ..views import Segment
from .row import Family, FamilyDetails, positive_key


def _refact(c, d, hd) -> FamilyDetails:
    inner = int(positive_key(c, "n_inner", 4 * d, null_is_default=True))
    width = int(2 * inner / 3)  # its MLP: 2/3 of n_inner (default 4D), rounded up to a multiple of 256
    return FamilyDetails(max_bias=8.0, eps=positive_key(c, "layer_norm_epsilon", 1e-5), activation="silu",
                         parallel=False,
                         intermediate_size=256 * ((width + 255) // 256), qk_scale=1 / math.sqrt(hd), gated=True,
                         norm_bias=False,
                         kv_heads=1)  # multi-query whatever ``multi_query`` says: one kv head in its code


def _refact_names(i: int) -> dict[str, str]:
    p = f"transformer.h.{i}."
    return {"ln1": p + "ln_1", "ln2": p + "ln_2", "qkv": p + "attn.qkv", "o": p + "attn.c_proj",
            "gate": p + "mlp.gate", "up": p + "mlp.up", "down": p + "mlp.c_proj"}


def _refact_views(info, i: int) -> dict[str, tuple[Segment, ...]]:
    """Refact's stored ``attn.q`` + ``attn.kv`` as the canonical multi-query QKV, ``gate_up_proj`` as gate and up."""
    p, f, hd = f"transformer.h.{i}.", info.intermediate_size, info.head_dim
    return {p + "attn.qkv.weight": (Segment(p + "attn.q.weight", 0, info.n_heads * hd),
                                    Segment(p + "attn.kv.weight", 0, 2 * hd)),
            p + "mlp.gate.weight": (Segment(p + "mlp.gate_up_proj.weight", 0, f),),
            p + "mlp.up.weight": (Segment(p + "mlp.gate_up_proj.weight", f, 2 * f),)}


def _refact_per_logit(m: torch.Tensor, head_dim: int) -> torch.Tensor:
    """Refact's m as its ``_get_slopes`` builds it: ``torch.pow(2^(-8/n), k)`` in float32 (n the largest power of
    two up to h; then ``torch.pow(2^(-4/n), odd k)`` for the rest), as float64. Its max bias is 8 whatever
    ``m`` was built with."""
    h = len(m)
    n = 2 ** math.floor(math.log2(h))
    out = torch.pow(2.0 ** (-8.0 / n), torch.arange(1, 1 + n))
    if n < h:
        out = torch.cat([out, torch.pow(2.0 ** (-4.0 / n), torch.arange(1, 1 + 2 * (h - n), 2))])
    return out.to(torch.float64)


ROWS = (Family(name="refact", model_types=("gpt_refact",), heads=("n_head", "num_attention_heads"),
               hidden=("n_embd", "hidden_size"), layers=("n_layer", "num_hidden_layers"), details=_refact,
               tensor_names=_refact_names,
               globals={"emb": "transformer.wte.weight", "ln_f": "ln_f", "head": "lm_head.weight"},
               qkv_layout="multi-query", attention=None, biases=lambda c: ("", False, True),
               per_logit=_refact_per_logit,
               default_target="llama", block="unbiased-layernorm-gated", views=_refact_views, label="Refact",
               forms=(("Refact-1.6B", False),)),)
