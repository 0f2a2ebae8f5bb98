"""Writer of the ``persimmon`` target: stock Persimmon (``PersimmonForCausalLM``, ``qk_layernorm`` off) with the
padded residual stream (``blocks`` module doc), under Persimmon's tensor names.

Persimmon's block is GPT-NeoX's sequential one: LayerNorm with bias, a fused per-head QKV with bias (h, 3, hd'),
``dense`` with bias, ``dense_h_to_4h`` -> ``hidden_act`` -> ``dense_4h_to_h`` with biases, and a rotary block on the
first ``int(hd' * partial_rotary_factor)`` dims of each head at ``base^(-2k/R)`` (half layout), scaled by
1/sqrt(hd'); so every tensor is the ``gpt-neox`` writer's, with ``model.*`` names (``NAMES``) and an
untied ``lm_head``. It has no parallel residual: a parallel source is refused (``gpt-neox`` carries it). SGLang
runs it natively (``models/persimmon.py``: ``config.partial_rotary_factor``, ``rope_parameters["rope_theta"]``).
"""

from __future__ import annotations

from ..checkpoint.model import SourceModel
from ..checkpoint.tensor_io import ShardWriter
from ..emulation import EmulationPlan
from . import gpt_neox
from .blocks import PaddedLayout, padded_geometry, padded_layout, padded_shapes
from .protocol import Writer

NAMES = {"embed": "model.embed_tokens.weight", "block": "model.layers.{i}.", "ln1": "input_layernorm",
         "ln2": "post_attention_layernorm", "qkv": "self_attn.query_key_value", "o": "self_attn.dense",
         "up": "mlp.dense_h_to_4h", "down": "mlp.dense_4h_to_h", "final": "model.final_layernorm",
         "head": "lm_head.weight"}


def add_tensors(src: SourceModel, lay: PaddedLayout, shards: ShardWriter) -> None:
    """The ``gpt-neox`` writer's tensors under Persimmon's names (``NAMES``)."""
    gpt_neox.add_tensors(src, lay, shards, NAMES)


def config(src: SourceModel, lay: PaddedLayout, plan: EmulationPlan) -> dict:
    """config.json: GPT-NeoX's geometry under Persimmon's keys, ``qk_layernorm`` false, the rotary block both as
    transformers 5.x's ``rope_parameters`` and as the top-level ``partial_rotary_factor``/``rope_theta`` that
    transformers 4.x and SGLang 0.5.23 (with its transformers 5.19) read."""
    neox = gpt_neox.config(src, lay, plan)
    keep = ("vocab_size", "hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size", "hidden_act",
            "rope_parameters", "max_position_embeddings", "layer_norm_eps", "tie_word_embeddings", "attention_dropout",
            "hidden_dropout", "initializer_range", "use_cache", "bos_token_id", "eos_token_id", "pad_token_id",
            "torch_dtype", "dtype")
    return {"architectures": [lay.target.architecture], "model_type": lay.target.model_type, "qk_layernorm": False,
            "partial_rotary_factor": lay.rotary_pct, "rope_theta": lay.base, **{k: neox[k] for k in keep}}


WRITER = Writer("persimmon", padded_layout, add_tensors, config, padded_geometry, padded_shapes)
