"""Replit-code-v1-3b as first published (``model_type: replit_lm``).

Replit-code-v1-3b as first published (``model_type: replit_lm``, remote code ``replit_lm.py``, MosaicGPT, the code
MPT grew from): MPT's attention and slopes with its keys at the top level (``alibi``, ``alibi_bias_max``,
``mlp_ratio``, ``attn_qk_ln``, ``attn_clip_qkv``, ``softmax_scale``), its older tensor names (``ln_1``,
``mlp.mlp_up``, ``ln_f``), biases as ``no_bias`` says (MosaicGPT's default: false; Replit-code-v1-3b: true), the
head tied to the embedding. The repository later renamed it to MPT's keys and names, which the MPT row reads.
"""

from __future__ import annotations

import math

from .row import Family, FamilyDetails, positive_key, ratio_width


def _replit(c, d, hd) -> FamilyDetails:
    if not c.get("alibi", False):
        raise ValueError("this replit_lm config has alibi = false: not an ALiBi model")
    for key in ("attn_clip_qkv", "attn_qk_ln", "prefix_lm", "logit_scale"):
        if c.get(key):
            raise ValueError(f"replit_lm with {key}={c[key]!r} has no stock RoPE equivalent")
    return FamilyDetails(max_bias=float(positive_key(c, "alibi_bias_max", 8)), eps=1e-5, activation="gelu",
                         parallel=False, intermediate_size=ratio_width(c, "mlp_ratio", d),
                         qk_scale=positive_key(c, "softmax_scale", 1 / math.sqrt(hd), null_is_default=True))


def _replit_names(i: int) -> dict[str, str]:
    p = f"transformer.blocks.{i}."
    return {"ln1": p + "ln_1", "ln2": p + "ln_2", "qkv": p + "attn.Wqkv", "o": p + "attn.out_proj",
            "up": p + "mlp.mlp_up", "down": p + "mlp.mlp_down"}


ROWS = (Family(name="replit", model_types=("replit_lm",), heads=("n_heads",), hidden=("d_model",), layers=("n_layers",),
               details=_replit, tensor_names=_replit_names,
               globals={"emb": "transformer.wte.weight", "ln_f": "transformer.ln_f", "head": "lm_head.weight"},
               qkv_layout="blocks", attention=None, biases=lambda c: ("no_bias", not c.get("no_bias", False), True),
               max_positions_key="max_seq_len", alibi_key="alibi", label="Replit"),)
