"""MPT (``model_type: mpt``, ``attn_config.alibi``).

MPT (``attn_config.alibi``): the bias is added after the softmax scale, slope m (``alibi_bias_max``, default 8).

As the canonical model reads it (``checkpoint.model``): Wqkv as [Q | K | V] blocks, no biases, LayerNorms without
bias; logits = q.k*softmax_scale + alibi (after the scale); exact GELU; ``clip_qkv`` and ``qk_ln`` have no stock
equivalent (refused).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from .row import Family, FamilyDetails, positive_key, ratio_width


def _mpt(c, d, hd) -> FamilyDetails:
    attn = c.get("attn_config") or {}
    if not isinstance(attn, Mapping):
        raise ValueError(f"config key attn_config is {attn!r}; expected an object")
    if not attn.get("alibi", False):
        raise ValueError("this MPT config has attn_config.alibi = false: not an ALiBi model")
    for key in ("clip_qkv", "qk_ln", "prefix_lm"):
        if attn.get(key):
            raise ValueError(f"MPT with attn_config.{key}={attn[key]!r} has no stock RoPE equivalent")
    return FamilyDetails(max_bias=float(positive_key(attn, "alibi_bias_max", 8)),
                         eps=positive_key(c, "layer_norm_epsilon", 1e-5), activation="gelu", parallel=False,
                         intermediate_size=ratio_width(c, "expansion_ratio", d),
                         qk_scale=positive_key(attn, "softmax_scale", 1 / math.sqrt(hd), null_is_default=True))


def _mpt_names(i: int) -> dict[str, str]:
    p = f"transformer.blocks.{i}."
    return {"ln1": p + "norm_1", "ln2": p + "norm_2", "qkv": p + "attn.Wqkv", "o": p + "attn.out_proj",
            "up": p + "ffn.up_proj", "down": p + "ffn.down_proj"}


ROWS = (Family(name="mpt", model_types=("mpt",), heads=("n_heads",), hidden=("d_model",), layers=("n_layers",),
               details=_mpt, tensor_names=_mpt_names,
               globals={"emb": "transformer.wte.weight", "ln_f": "transformer.norm_f", "head": "lm_head.weight"},
               qkv_layout="blocks", attention="eager", biases=lambda c: ("no_bias", not c.get("no_bias", True), True),
               max_positions_key="max_seq_len", alibi_key="attn_config.alibi", label="MPT",
               forms=(("MPT, Replit", False),),
               refused_tensors={"transformer.wpe.weight": "a learned position embedding beside ALiBi (its "
                                "learned_pos_emb), which transformers' MPT never adds and no RoPE target carries"}),)
