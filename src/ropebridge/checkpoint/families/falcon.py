"""Falcon with ``alibi=True`` (Falcon-RW).

Falcon with ``alibi=True`` (Falcon-RW): (q.k + m*j)/sqrt(hd), slope m/sqrt(hd), and transformers rounds m to
bfloat16 first, even in float32 models: we take those rounded values.

As the canonical model reads it (``checkpoint.model``): fused QKV per head (h, 3, hd) (multi-query: h query heads,
then one k and one v head, replicated here per head, which is exact); logits = (q.k + m_bf16*j)/sqrt(hd); exact
GELU; ``parallel_attn`` shares one LayerNorm between attention and MLP.
"""

from __future__ import annotations

import math

import torch

from .row import Family, FamilyDetails, H_GLOBALS, h_names, positive_key


def _falcon(c, d, hd) -> FamilyDetails:
    if not c.get("alibi", False):
        raise ValueError(f"this Falcon config (model_type {c.get('model_type')!r}) has alibi = false: it uses RoPE "
                         "already")
    if c.get("new_decoder_architecture"):
        raise ValueError("Falcon with new_decoder_architecture=true (grouped KV, two LayerNorms) is not supported")
    act = c.get("activation", "gelu")
    if act != "gelu":
        raise ValueError(f"Falcon activation {act!r} is not supported (only gelu)")
    kv_heads = 1 if c.get("multi_query", True) else d // hd  # FalconConfig's default is multi_query=True
    return FamilyDetails(max_bias=8.0, eps=positive_key(c, "layer_norm_epsilon", 1e-5), activation=act,
                         parallel=bool(c.get("parallel_attn", True)),
                         intermediate_size=int(positive_key(c, "ffn_hidden_size", 4 * d, null_is_default=True)),
                         qk_scale=1 / math.sqrt(hd), kv_heads=kv_heads)


def _falcon_per_logit(m: torch.Tensor, head_dim: int) -> torch.Tensor:
    """Falcon's (q.k + m j)/sqrt(hd) with m rounded to bfloat16 (as transformers builds it): m_bf16 / sqrt(hd)."""
    return m.to(torch.bfloat16).to(torch.float64) / math.sqrt(head_dim)


ROWS = (Family(name="falcon", model_types=("falcon", "RefinedWeb", "RefinedWebModel"),
               heads=("num_attention_heads", "n_head"), hidden=("hidden_size",),
               layers=("num_hidden_layers", "n_layer"),
               details=_falcon, tensor_names=h_names, globals=H_GLOBALS, qkv_layout="per-head-or-multi-query",
               attention="sdpa", biases=lambda c: ("bias", bool(c.get("bias", False)), False),
               per_logit=_falcon_per_logit, eager_attention_maps=False,  # transformers' eager Falcon adds ALiBi twice
               alibi_key="alibi", label="Falcon-RW",
               forms=(("Falcon-RW, sequential as published", False), ("Falcon with `parallel_attn`", True))),)
