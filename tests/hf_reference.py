"""Helpers that call transformers' own RoPE functions, natively (float32) or in float64.

transformers hard-codes float32 (``torch.float``, ``torch.float32``, ``Tensor.float``) in its RoPE
initialisers; patching those names to float64 evaluates *its* formulas, in its order, in float64.
"""

from __future__ import annotations

from contextlib import ExitStack
from unittest import mock

import torch
from transformers import GPTNeoXConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding


def hf_config(head_dim: int, params: dict, max_position_embeddings: int = 4096) -> GPTNeoXConfig:
    hf_params = {k: v for k, v in params.items() if k != "max_position_embeddings"}
    return GPTNeoXConfig(
        hidden_size=head_dim * 4,
        num_attention_heads=4,
        head_dim=head_dim,
        max_position_embeddings=params.get("max_position_embeddings", max_position_embeddings),
        rope_parameters=hf_params,
    )


def hf_inv_freq(head_dim: int, params: dict, seq_len=None, *, float64: bool = False):
    """transformers' (inv_freq, attention_factor) for ``params`` (GPT-NeoX's default honours partial rotary)."""
    config = hf_config(head_dim, params)
    rope_type = params.get("rope_type", "default")
    with ExitStack() as stack:
        if float64:
            stack.enter_context(mock.patch.object(torch, "float", torch.float64))
            stack.enter_context(mock.patch.object(torch, "float32", torch.float64))
            stack.enter_context(mock.patch.object(torch.Tensor, "float", lambda self: self.double()))
        if rope_type == "default":
            return GPTNeoXRotaryEmbedding.compute_default_rope_parameters(config)
        return ROPE_INIT_FUNCTIONS[rope_type](config, None, seq_len=seq_len)
