"""Baichuan-13B and Baichuan2-13B (``model_type: baichuan``).

Baichuan-13B and Baichuan2-13B (``model_type: baichuan``, remote code ``modeling_baichuan.py``): scores =
q.k/sqrt(hd) + m*j, m Press et al.'s (``_get_interleave``) built as a float32 tensor: we take those float32 values.
RMSNorm, a gated SiLU MLP, no biases. The family's 7B models share the model_type and use RoPE; as vLLM and SGLang
tell them apart, hidden_size 4096 is a 7B (refused: already RoPE) and any other size the ALiBi 13B; Baichuan2's
output head normalises its rows (NormHead), told from Baichuan's by its vocabulary of 125696 (as vLLM and SGLang
do).

As the canonical model reads it (``checkpoint.model``): ``W_pack`` as [Q | K | V] blocks, RMSNorms (weight only),
the MLP down(silu(gate x) * up x), no biases, an untied head (Baichuan2's rows normalised: ``head_rows``); logits =
q.k/sqrt(hd) + m_f32*j.
"""

from __future__ import annotations

import math

from .row import Family, FamilyDetails, positive_key, float32_per_logit


VOCAB_2 = 125696  # Baichuan2's vocabulary: its output head is a NormHead (vLLM's and SGLang's rule)


def _baichuan(c, d, hd) -> FamilyDetails:
    if d == 4096:
        raise ValueError("this Baichuan config has hidden_size 4096, a 7B model (Baichuan-7B, Baichuan2-7B): it uses "
                         "RoPE already; the ALiBi models are the 13B ones")
    act = c.get("hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"Baichuan hidden_act {act!r} is not supported (only silu)")
    return FamilyDetails(max_bias=8.0, eps=positive_key(c, "rms_norm_eps", 1e-6), activation="silu", parallel=False,
                         intermediate_size=int(positive_key(c, "intermediate_size", 13696)), qk_scale=1 / math.sqrt(hd),
                         norm="rmsnorm", gated=True, head_norm=c.get("vocab_size") == VOCAB_2)


def _baichuan_names(i: int) -> dict[str, str]:
    p = f"model.layers.{i}."
    return {"ln1": p + "input_layernorm", "ln2": p + "post_attention_layernorm", "qkv": p + "self_attn.W_pack",
            "o": p + "self_attn.o_proj", "gate": p + "mlp.gate_proj", "up": p + "mlp.up_proj",
            "down": p + "mlp.down_proj"}


ROWS = (Family(name="baichuan", model_types=("baichuan",), heads=("num_attention_heads",), hidden=("hidden_size",),
               layers=("num_hidden_layers",), details=_baichuan, tensor_names=_baichuan_names,
               globals={"emb": "model.embed_tokens.weight", "ln_f": "model.norm", "head": "lm_head.weight"},
               qkv_layout="blocks", attention=None, biases=lambda c: ("", False, True), per_logit=float32_per_logit,
               default_target="llama", block="rmsnorm-gated", alibi_key="hidden_size", label="Baichuan-13B",
               forms=(("Baichuan-13B, Baichuan2-13B", False),)),)
