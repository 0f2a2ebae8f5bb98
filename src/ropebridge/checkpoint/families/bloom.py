"""BLOOM (``model_type: bloom``; BLOOMZ and Poro share it).

BLOOM: scores = q.k/sqrt(hd) + m*j, slope m (Press et al. rule, max_bias 8); an embedding LayerNorm.

As the canonical model reads it (``checkpoint.model``): fused QKV laid out per head as (h, 3, hd); an embedding
LayerNorm (folded here into the embedding rows); scores = q.k/sqrt(hd) + m*j (alibi unscaled, j from the cumulative
attention mask); output head tied to the raw embedding; GELU with the tanh approximation.
"""

from __future__ import annotations

import math

from .row import Family, FamilyDetails, H_GLOBALS, h_names, positive_key


def _bloom(c, d, hd) -> FamilyDetails:
    if c.get("apply_residual_connection_post_layernorm"):
        raise ValueError("BLOOM with apply_residual_connection_post_layernorm=true has no stock RoPE equivalent")
    return FamilyDetails(max_bias=8.0, eps=positive_key(c, "layer_norm_epsilon", 1e-5), activation="gelu_pytorch_tanh",
                         parallel=False, intermediate_size=4 * d, qk_scale=1 / math.sqrt(hd))


ROWS = (Family(name="bloom", model_types=("bloom",), heads=("n_head", "num_attention_heads"),
               hidden=("hidden_size", "n_embed"), layers=("n_layer",), details=_bloom, tensor_names=h_names,
               globals=H_GLOBALS,
               qkv_layout="per-head", attention="eager", embedding_norm="transformer.word_embeddings_layernorm",
               label="BLOOM", forms=(("BLOOM, BLOOMZ, Poro", False),)),)
