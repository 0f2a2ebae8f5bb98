"""Jais and BTLM, Cerebras' GPT-2 with muP (``model_type: jais``, ``btlm``).

Jais (``model_type: jais``, remote code ``modeling_jais.py``) and BTLM (``model_type: btlm``, ``modeling_btlm.py``),
Cerebras' GPT-2 with muP: scores = q.k / hd^p + (-m |i - j|) / f, p = 1 where ``scale_qk_dot_by_d`` (Jais-13B's
spelling) or ``mup_scale_qk_dot_by_d`` says so (else 1/2; no scale when ``scale_attn_weights`` is false), f the
fixed ``alibi_scaling.factor`` (1 without it). m is ``relative_pe.slopes``, a parameter the checkpoint stores: taken
as stored, after checking it against Press et al.'s formula (``checkpoint.model``); without weights, the formula's
values as its ``torch.tensor`` builds them (float32). GPT-2's ``Conv1D`` stores every block weight input x output
(read transposed); ``c_attn`` is [Q | K | V]; LayerNorms and every linear carry biases; the MLP is ``c_proj(c_fc(x)
* silu(c_fc2(x)))`` (``activation_function: swiglu``): ``c_fc2`` is the gate. The embedding is multiplied by
``embeddings_scale`` (or ``mup_embeddings_scale``), the logits by ``width_scale`` (or ``mup_output_alpha *
mup_width_scale``); both are folded into the embedding and head rows. The head is tied to the embedding unless
``lm_head`` is stored. ``alibi_scaling.train_seq_len`` (the slopes divided by s / L for an input of s > L tokens)
makes the bias depend on the input's length, which no RoPE checkpoint can: refused.

As the canonical model reads it (``checkpoint.model``): every block weight stored transposed (GPT-2's ``Conv1D``,
read through ``views.TransposedReader``), ``c_attn`` as [Q | K | V]; LayerNorms and linears with biases; the MLP
c_proj(c_fc x * silu(c_fc2 x)): ``c_fc2`` is the gate; logits = q.k * qk_scale - (m/f)|i - j| with m the stored
``relative_pe.slopes``; muP's embedding and logit scales folded into ``embedding_rows`` and ``head_rows``.
"""

from __future__ import annotations

from collections.abc import Mapping

from ... import _checks
from .row import Family, FamilyDetails, first, float32_per_logit, positive_key


def _jais(c, d, hd) -> FamilyDetails:
    """Jais and BTLM (module doc): the muP scales under either spelling, the attention's power of hd, the fixed
    ALiBi scaling; the variants without a stock RoPE form refused."""
    kind = c.get("position_embedding_type", "learned")  # JAISConfig's and BTLMConfig's default: learned
    if kind != "alibi":
        raise ValueError(f"this {c.get('model_type')} config has position_embedding_type {kind!r}: not an ALiBi model")
    for key in ("add_cross_attention", "scale_attn_by_inverse_layer_idx"):
        if c.get(key):
            raise ValueError(f"{c.get('model_type')} with {key}=true has no stock RoPE equivalent")
    act = c.get("activation_function", "gelu_new")
    if act != "swiglu":
        raise ValueError(f"{c.get('model_type')} activation_function {act!r} is not supported (only swiglu)")
    scaling, factor = c.get("alibi_scaling"), 1.0
    if scaling is not None:
        if not isinstance(scaling, Mapping):
            raise ValueError(f"config key alibi_scaling is {scaling!r}; expected an object")
        if scaling.get("factor") is None and scaling.get("train_seq_len") is not None:
            raise ValueError(f"alibi_scaling.train_seq_len = {scaling['train_seq_len']!r} divides the slopes by the "
                             "input length over it for longer inputs: the bias depends on the input's length, which no "
                             "RoPE checkpoint can carry (a fixed alibi_scaling.factor can)")
        if scaling.get("type", "linear") != "linear":
            raise ValueError(f"alibi_scaling.type {scaling.get('type')!r} is not supported (only linear)")
        factor = float(positive_key(scaling, "factor", 1.0))
    by_d = first(c, ("scale_qk_dot_by_d", "mup_scale_qk_dot_by_d"))
    power = 1.0 if by_d else 0.5
    width = c.get("width_scale")
    mup = float(positive_key(c, "mup_output_alpha", 1.0)) * float(positive_key(c, "mup_width_scale", 1.0))
    if width is not None and any(k in c for k in ("mup_output_alpha", "mup_width_scale")) and float(width) != mup:
        raise ValueError(f"config keys width_scale = {width!r} and mup_output_alpha * mup_width_scale = {mup!r} "
                         "disagree: the source can be read two ways")
    embed = first(c, ("embeddings_scale", "mup_embeddings_scale"))
    return FamilyDetails(max_bias=8.0, eps=positive_key(c, "layer_norm_epsilon", 1e-5), activation="silu",
                         parallel=False,
                         intermediate_size=int(positive_key(c, "n_inner", 4 * d, null_is_default=True)),
                         qk_scale=hd ** -power if c.get("scale_attn_weights", True) else 1.0, gated=True,
                         alibi_factor=factor,
                         embedding_scale=1.0 if embed is None else _checks.positive("embeddings_scale", embed),
                         logit_scale=float(positive_key(c, "width_scale", 1.0)) if width is not None else mup)


def _gpt2_names(i: int) -> dict[str, str]:
    p = f"transformer.h.{i}."
    return {"ln1": p + "ln_1", "ln2": p + "ln_2", "qkv": p + "attn.c_attn", "o": p + "attn.c_proj",
            "gate": p + "mlp.c_fc2", "up": p + "mlp.c_fc", "down": p + "mlp.c_proj"}


ROWS = tuple(
    Family(name=name, model_types=(name,), heads=("n_head", "num_attention_heads"),
           hidden=("n_embd", "hidden_size"), layers=("n_layer", "num_hidden_layers"), details=_jais,
           tensor_names=_gpt2_names,
           globals={"emb": "transformer.wte.weight", "ln_f": "transformer.ln_f", "head": "lm_head.weight"},
           qkv_layout="blocks", attention=None, biases=lambda c: ("", True, True), per_logit=float32_per_logit,
           default_target="stablelm", block="layernorm-gated", transposed=True,
           slopes_tensor="transformer.relative_pe.slopes",
           tied_by_default=True, alibi_key="position_embedding_type", label=label, forms=forms)
    for name, label, forms in (("jais", "Jais", (("Jais, BTLM", False),)), ("btlm", "BTLM", ()))
)
