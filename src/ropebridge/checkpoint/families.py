"""The ALiBi source families as one table (``FAMILIES``): each row names its config keys, what it refuses, its tensor
names and the per-logit slope each head applies.

Read once from a Hugging Face ``config.json`` (a checkpoint directory, the file, or a dict) without importing the
model, through one table of family entries (``FAMILIES``): the config keys each family names its sizes with, what
it refuses, and the tensor names of its checkpoint. Each family applies its bias differently, so the *per-logit*
slope (what the emulation must reproduce in the softmax input) differs (transformers 5.x modelling code):

- BLOOM: scores = q.k/sqrt(hd) + m*j, slope m (Press et al. rule, max_bias 8); an embedding LayerNorm;
- MPT (``attn_config.alibi``): the bias is added after the softmax scale, slope m (``alibi_bias_max``, default 8);
- Falcon with ``alibi=True`` (Falcon-RW): (q.k + m*j)/sqrt(hd), slope m/sqrt(hd), and transformers rounds m to
  bfloat16 first, even in float32 models: we take those rounded values;
- Replit-code-v1-3b as first published (``model_type: replit_lm``, remote code ``replit_lm.py``, MosaicGPT,
  the code MPT grew from): MPT's attention and slopes with its keys at the top level (``alibi``,
  ``alibi_bias_max``, ``mlp_ratio``, ``attn_qk_ln``, ``attn_clip_qkv``, ``softmax_scale``), its older tensor
  names (``ln_1``, ``mlp.mlp_up``, ``ln_f``), biases as ``no_bias`` says (MosaicGPT's default: false;
  Replit-code-v1-3b: true), the head tied to the embedding. The repository later renamed it to MPT's keys and
  names, which the MPT row reads.
- Baichuan-13B and Baichuan2-13B (``model_type: baichuan``, remote code ``modeling_baichuan.py``): scores =
  q.k/sqrt(hd) + m*j, m Press et al.'s (``_get_interleave``) built as a float32 tensor: we take those float32
  values. RMSNorm, a gated SiLU MLP, no biases. The family's 7B models share the model_type and use RoPE; as
  vLLM and SGLang tell them apart, hidden_size 4096 is a 7B (refused: already RoPE) and any other size the ALiBi
  13B; Baichuan2's output head normalises its rows (NormHead), told from Baichuan's by its vocabulary of 125696
  (as vLLM and SGLang do).
- Refact (``model_type: gpt_refact``, remote code ``modeling_gpt_refact.py``): scores = q.k/sqrt(hd) + m*(j + 1),
  m computed as its ``_get_slopes`` does (``torch.pow`` of 2^(-8/n) in float32: up to 6 float32 ulps, 5e-7,
  from Press et al.'s values for 32 heads), which we take. LayerNorms without bias, a gated SiLU MLP (``gate_up_proj``, gate
  first, width 256 * ceil(int(2 * 4D / 3) / 256)), multi-query attention (q alone, k and v fused in ``kv``, k
  first), no biases, an untied head (tied where ``lm_head`` is absent). Its fused tensors are read through
  ``views`` as the canonical ones.
- Jais (``model_type: jais``, remote code ``modeling_jais.py``) and BTLM (``model_type: btlm``, ``modeling_btlm.py``),
  Cerebras' GPT-2 with muP: scores = q.k / hd^p + (-m |i - j|) / f, p = 1 where ``scale_qk_dot_by_d`` (Jais-13B's
  spelling) or ``mup_scale_qk_dot_by_d`` says so (else 1/2; no scale when ``scale_attn_weights`` is false), f the
  fixed ``alibi_scaling.factor`` (1 without it). m is ``relative_pe.slopes``, a parameter the checkpoint stores:
  taken as stored, after checking it against Press et al.'s formula (``checkpoint.model``); without weights, the
  formula's values as its ``torch.tensor`` builds them (float32). GPT-2's ``Conv1D`` stores every block weight
  input x output (read transposed); ``c_attn`` is [Q | K | V]; LayerNorms and every linear carry biases; the MLP
  is ``c_proj(c_fc(x) * silu(c_fc2(x)))`` (``activation_function: swiglu``): ``c_fc2`` is the gate. The embedding
  is multiplied by ``embeddings_scale`` (or ``mup_embeddings_scale``), the logits by ``width_scale`` (or
  ``mup_output_alpha * mup_width_scale``); both are folded into the embedding and head rows. The head is tied to
  the embedding unless ``lm_head`` is stored. ``alibi_scaling.train_seq_len`` (the slopes divided by s / L for an
  input of s > L tokens) makes the bias depend on the input's length, which no RoPE checkpoint can: refused.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import torch

from .. import _checks
from .views import Segment


@dataclass(frozen=True, kw_only=True)
class FamilyDetails:
    """What a family's config says beyond its sizes (``Family.details``, which refuses the variants without a stock
    RoPE form): ``max_bias`` (slopes 2^(-max_bias k/h)), ``kv_heads`` (None: one per head), and the fields
    ``SourceInfo`` holds under the same names (its docs say what each means)."""

    max_bias: float
    eps: float
    intermediate_size: int
    qk_scale: float
    activation: str = "gelu"
    parallel: bool = False
    kv_heads: int | None = None
    norm: str = "layernorm"
    norm_bias: bool = True
    gated: bool = False
    head_norm: bool = False
    alibi_factor: float = 1.0
    embedding_scale: float = 1.0
    logit_scale: float = 1.0

    def __post_init__(self) -> None:
        for key, kind in (("eps", float), ("intermediate_size", int), ("qk_scale", float), ("kv_heads", int)):
            if getattr(self, key) is not None:
                object.__setattr__(self, key, kind(getattr(self, key)))

    def source_fields(self) -> dict[str, Any]:
        """The ``SourceInfo`` fields these details give, but ``max_bias`` and ``kv_heads`` (set by ``from_config``)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("max_bias", "kv_heads")}


@dataclass(frozen=True, kw_only=True)
class Family:
    """One ALiBi family, a row of keywords: its model types, the config keys of its sizes (first present wins),
    ``details`` ((config, hidden, head_dim) -> ``FamilyDetails``: the family's own keys read, its variants without a
    stock RoPE form refused), its tensor names
    (``block``: block i's, ``globals``), its fused-QKV row layout (``per-head`` (h, 3, hd), ``blocks`` [Q | K | V],
    ``per-head-or-multi-query``: also h query heads then one k and one v, or ``multi-query``: only that), the attention verify runs it with,
    ``biases`` (config -> the key that declares the biases, whether it does, whether it covers the LayerNorms:
    ``declared_biases``), ``per_logit`` (Press et al.'s slopes m ``(h,)`` and hd -> the slope each logit gets),
    the config key of its longest input (None: no limit), whether transformers' eager path (the one that
    returns attention maps) computes its attention, the target a conversion takes by default, and ``views``
    ((info, block i) -> the canonical tensors it stores fused, ``checkpoint.views``; None: it stores them as
    they are read) and ``refused_tensors`` (a tensor whose presence means a variant without a stock RoPE form,
    with why), ``transposed`` (block weights stored input x output, GPT-2's Conv1D) and ``slopes_tensor`` (the
    tensor holding the slopes the family's code applies, checked against the formula and taken as stored) and
    ``tied_by_default`` (GPT-2's configs tie the head unless ``tie_word_embeddings`` says otherwise); ``label``:
    its name in the generated lists of the docs.
    ``attention`` None: transformers has no class for the family (remote code)."""

    name: str
    model_types: tuple[str, ...]
    heads: tuple[str, ...]
    hidden: tuple[str, ...]
    layers: tuple[str, ...]
    details: Callable[[Mapping[str, Any], int, int], FamilyDetails]  # (config, hidden, head_dim)
    block: Callable[[int], dict[str, str]]
    globals: Mapping[str, str]
    qkv_layout: str
    attention: str | None  # transformers attention implementation of the source (verify); None: no class
    embedding_norm: str | None = None  # an embedding LayerNorm folded into the embedding rows
    biases: Callable[[Mapping[str, Any]], tuple[str, bool, bool]] = lambda c: ("", True, False)
    per_logit: Callable[[torch.Tensor, int], torch.Tensor] = lambda m, hd: m
    max_positions_key: str | None = None
    eager_attention_maps: bool = True
    default_target: str = "gpt-neox"
    views: Callable[[Any, int], dict[str, tuple[Segment, ...]]] | None = None
    transposed: bool = False  # block weights stored input x output (GPT-2's Conv1D), read transposed
    slopes_tensor: str | None = None  # the stored ALiBi slopes ``(h, 1)`` the family's code applies
    tied_by_default: bool = False  # the head tied to the embedding where the config has no tie_word_embeddings
    refused_tensors: Mapping[str, str] = field(default_factory=dict)  # a tensor whose presence is refused -> why
    alibi_key: str = "model_type"  # the config key that makes a model of this family its ALiBi variant
    label: str = ""  # the family as the docs and the README name it (the generated lists)


# The tensors of a family's other variants, by the end of their names: a source that stores one beside a config
# that says ALiBi (``Family.alibi_key``) contradicts itself (a RoPE Baichuan-7B's ``rotary_emb.inv_freq`` under a
# 13B's hidden_size), and is refused naming both (``checkpoint.model``).
FOREIGN_TENSORS = {"inv_freq": "rotary frequencies, a RoPE variant's",
                   "wpe.weight": "a learned position embedding, a variant's without ALiBi"}


def _key(c: Mapping[str, Any], key: str, default: Any, *, null_is_default: bool = False) -> Any:
    """Config key ``key`` as a positive number (``default`` when absent, or null where the family reads null as its
    default); ``ValueError`` naming the key for any other type or a value <= 0."""
    value = c.get(key, default)
    if value is None and (null_is_default or key not in c):
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"config key {key} is {value!r}; expected a number")
    return _checks.positive(key, value)


def _bloom(c, d, hd) -> FamilyDetails:
    if c.get("apply_residual_connection_post_layernorm"):
        raise ValueError("BLOOM with apply_residual_connection_post_layernorm=true has no stock RoPE equivalent")
    return FamilyDetails(max_bias=8.0, eps=_key(c, "layer_norm_epsilon", 1e-5), activation="gelu_pytorch_tanh",
                         parallel=False, intermediate_size=4 * d, qk_scale=1 / math.sqrt(hd))


def _mpt(c, d, hd) -> FamilyDetails:
    attn = c.get("attn_config") or {}
    if not isinstance(attn, Mapping):
        raise ValueError(f"config key attn_config is {attn!r}; expected an object")
    if not attn.get("alibi", False):
        raise ValueError("this MPT config has attn_config.alibi = false: not an ALiBi model")
    for key in ("clip_qkv", "qk_ln", "prefix_lm"):
        if attn.get(key):
            raise ValueError(f"MPT with attn_config.{key}={attn[key]!r} has no stock RoPE equivalent")
    ratio = _key(c, "expansion_ratio", 4)
    if ratio * d != int(ratio * d):
        raise ValueError(f"config key expansion_ratio {ratio!r} times d_model {d} is not a whole MLP width")
    return FamilyDetails(max_bias=float(_key(attn, "alibi_bias_max", 8)), eps=_key(c, "layer_norm_epsilon", 1e-5),
                         activation="gelu", parallel=False, intermediate_size=int(ratio * d),
                         qk_scale=_key(attn, "softmax_scale", 1 / math.sqrt(hd), null_is_default=True))


def _replit(c, d, hd) -> FamilyDetails:
    if not c.get("alibi", False):
        raise ValueError("this replit_lm config has alibi = false: not an ALiBi model")
    for key in ("attn_clip_qkv", "attn_qk_ln", "prefix_lm", "logit_scale"):
        if c.get(key):
            raise ValueError(f"replit_lm with {key}={c[key]!r} has no stock RoPE equivalent")
    ratio = _key(c, "mlp_ratio", 4)
    if ratio * d != int(ratio * d):
        raise ValueError(f"config key mlp_ratio {ratio!r} times d_model {d} is not a whole MLP width")
    return FamilyDetails(max_bias=float(_key(c, "alibi_bias_max", 8)), eps=1e-5, activation="gelu", parallel=False,
                         intermediate_size=int(ratio * d),
                         qk_scale=_key(c, "softmax_scale", 1 / math.sqrt(hd), null_is_default=True))


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
    return FamilyDetails(max_bias=8.0, eps=_key(c, "layer_norm_epsilon", 1e-5), activation=act,
                         parallel=bool(c.get("parallel_attn", True)),
                         intermediate_size=int(_key(c, "ffn_hidden_size", 4 * d, null_is_default=True)),
                         qk_scale=1 / math.sqrt(hd), kv_heads=kv_heads)


def _baichuan(c, d, hd) -> FamilyDetails:
    if d == 4096:
        raise ValueError("this Baichuan config has hidden_size 4096, a 7B model (Baichuan-7B, Baichuan2-7B): it uses "
                         "RoPE already; the ALiBi models are the 13B ones")
    act = c.get("hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"Baichuan hidden_act {act!r} is not supported (only silu)")
    return FamilyDetails(max_bias=8.0, eps=_key(c, "rms_norm_eps", 1e-6), activation="silu", parallel=False,
                         intermediate_size=int(_key(c, "intermediate_size", 13696)), qk_scale=1 / math.sqrt(hd),
                         norm="rmsnorm", gated=True, head_norm=c.get("vocab_size") == BAICHUAN2_VOCAB)


BAICHUAN2_VOCAB = 125696  # Baichuan2's vocabulary: its output head is a NormHead (vLLM's and SGLang's rule)


def _refact(c, d, hd) -> FamilyDetails:
    inner = int(_key(c, "n_inner", 4 * d, null_is_default=True))
    width = int(2 * inner / 3)  # its MLP: 2/3 of n_inner (default 4D), rounded up to a multiple of 256
    return FamilyDetails(max_bias=8.0, eps=_key(c, "layer_norm_epsilon", 1e-5), activation="silu", parallel=False,
                         intermediate_size=256 * ((width + 255) // 256), qk_scale=1 / math.sqrt(hd), gated=True,
                         norm_bias=False, kv_heads=1)  # multi-query whatever ``multi_query`` says: one kv head in its code


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
        factor = float(_key(scaling, "factor", 1.0))
    by_d = _first(c, ("scale_qk_dot_by_d", "mup_scale_qk_dot_by_d"))
    power = 1.0 if by_d else 0.5
    width = c.get("width_scale")
    mup = float(_key(c, "mup_output_alpha", 1.0)) * float(_key(c, "mup_width_scale", 1.0))
    if width is not None and any(k in c for k in ("mup_output_alpha", "mup_width_scale")) and float(width) != mup:
        raise ValueError(f"config keys width_scale = {width!r} and mup_output_alpha * mup_width_scale = {mup!r} "
                         "disagree: the source can be read two ways")
    embed = _first(c, ("embeddings_scale", "mup_embeddings_scale"))
    return FamilyDetails(max_bias=8.0, eps=_key(c, "layer_norm_epsilon", 1e-5), activation="silu", parallel=False,
                         intermediate_size=int(_key(c, "n_inner", 4 * d, null_is_default=True)),
                         qk_scale=hd ** -power if c.get("scale_attn_weights", True) else 1.0, gated=True,
                         alibi_factor=factor,
                         embedding_scale=1.0 if embed is None else _checks.positive("embeddings_scale", embed),
                         logit_scale=float(_key(c, "width_scale", 1.0)) if width is not None else mup)


def _h_names(i: int) -> dict[str, str]:
    p = f"transformer.h.{i}."
    return {"ln1": p + "input_layernorm", "ln2": p + "post_attention_layernorm",
            "qkv": p + "self_attention.query_key_value", "o": p + "self_attention.dense",
            "up": p + "mlp.dense_h_to_4h", "down": p + "mlp.dense_4h_to_h"}


def _mpt_names(i: int) -> dict[str, str]:
    p = f"transformer.blocks.{i}."
    return {"ln1": p + "norm_1", "ln2": p + "norm_2", "qkv": p + "attn.Wqkv", "o": p + "attn.out_proj",
            "up": p + "ffn.up_proj", "down": p + "ffn.down_proj"}


def _replit_names(i: int) -> dict[str, str]:
    p = f"transformer.blocks.{i}."
    return {"ln1": p + "ln_1", "ln2": p + "ln_2", "qkv": p + "attn.Wqkv", "o": p + "attn.out_proj",
            "up": p + "mlp.mlp_up", "down": p + "mlp.mlp_down"}


def _baichuan_names(i: int) -> dict[str, str]:
    p = f"model.layers.{i}."
    return {"ln1": p + "input_layernorm", "ln2": p + "post_attention_layernorm", "qkv": p + "self_attn.W_pack",
            "o": p + "self_attn.o_proj", "gate": p + "mlp.gate_proj", "up": p + "mlp.up_proj",
            "down": p + "mlp.down_proj"}


def _refact_names(i: int) -> dict[str, str]:
    p = f"transformer.h.{i}."
    return {"ln1": p + "ln_1", "ln2": p + "ln_2", "qkv": p + "attn.qkv", "o": p + "attn.c_proj",
            "gate": p + "mlp.gate", "up": p + "mlp.up", "down": p + "mlp.c_proj"}


def _gpt2_names(i: int) -> dict[str, str]:
    p = f"transformer.h.{i}."
    return {"ln1": p + "ln_1", "ln2": p + "ln_2", "qkv": p + "attn.c_attn", "o": p + "attn.c_proj",
            "gate": p + "mlp.c_fc2", "up": p + "mlp.c_fc", "down": p + "mlp.c_proj"}


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


def _float32_per_logit(m: torch.Tensor, head_dim: int) -> torch.Tensor:
    """Baichuan's m as its code builds it, ``torch.Tensor(_get_interleave(n))``: float32 values, as float64."""
    return m.to(torch.float32).to(torch.float64)


def _falcon_per_logit(m: torch.Tensor, head_dim: int) -> torch.Tensor:
    """Falcon's (q.k + m j)/sqrt(hd) with m rounded to bfloat16 (as transformers builds it): m_bf16 / sqrt(hd)."""
    return m.to(torch.bfloat16).to(torch.float64) / math.sqrt(head_dim)


_H_GLOBALS = {"emb": "transformer.word_embeddings.weight", "ln_f": "transformer.ln_f", "head": "lm_head.weight"}
FAMILIES = {f.name: f for f in (
    Family(name="bloom", model_types=("bloom",), heads=("n_head", "num_attention_heads"),
           hidden=("hidden_size", "n_embed"), layers=("n_layer",), details=_bloom, block=_h_names, globals=_H_GLOBALS,
           qkv_layout="per-head", attention="eager", embedding_norm="transformer.word_embeddings_layernorm",
           label="BLOOM"),
    Family(name="mpt", model_types=("mpt",), heads=("n_heads",), hidden=("d_model",), layers=("n_layers",),
           details=_mpt, block=_mpt_names,
           globals={"emb": "transformer.wte.weight", "ln_f": "transformer.norm_f", "head": "lm_head.weight"},
           qkv_layout="blocks", attention="eager", biases=lambda c: ("no_bias", not c.get("no_bias", True), True),
           max_positions_key="max_seq_len", alibi_key="attn_config.alibi", label="MPT",
           refused_tensors={"transformer.wpe.weight": "a learned position embedding beside ALiBi (its "
                            "learned_pos_emb), which transformers' MPT never adds and no RoPE target carries"}),
    Family(name="replit", model_types=("replit_lm",), heads=("n_heads",), hidden=("d_model",), layers=("n_layers",),
           details=_replit, block=_replit_names,
           globals={"emb": "transformer.wte.weight", "ln_f": "transformer.ln_f", "head": "lm_head.weight"},
           qkv_layout="blocks", attention=None, biases=lambda c: ("no_bias", not c.get("no_bias", False), True),
           max_positions_key="max_seq_len", alibi_key="alibi", label="Replit"),
    Family(name="falcon", model_types=("falcon", "RefinedWeb", "RefinedWebModel"),
           heads=("num_attention_heads", "n_head"), hidden=("hidden_size",), layers=("num_hidden_layers", "n_layer"),
           details=_falcon, block=_h_names, globals=_H_GLOBALS, qkv_layout="per-head-or-multi-query",
           attention="sdpa", biases=lambda c: ("bias", bool(c.get("bias", False)), False),
           per_logit=_falcon_per_logit, eager_attention_maps=False,  # transformers' eager Falcon adds ALiBi twice
           alibi_key="alibi", label="Falcon-RW"),
    Family(name="baichuan", model_types=("baichuan",), heads=("num_attention_heads",), hidden=("hidden_size",),
           layers=("num_hidden_layers",), details=_baichuan, block=_baichuan_names,
           globals={"emb": "model.embed_tokens.weight", "ln_f": "model.norm", "head": "lm_head.weight"},
           qkv_layout="blocks", attention=None, biases=lambda c: ("", False, True), per_logit=_float32_per_logit,
           default_target="llama", alibi_key="hidden_size", label="Baichuan-13B"),
    Family(name="refact", model_types=("gpt_refact",), heads=("n_head", "num_attention_heads"),
           hidden=("n_embd", "hidden_size"), layers=("n_layer", "num_hidden_layers"), details=_refact,
           block=_refact_names, globals={"emb": "transformer.wte.weight", "ln_f": "ln_f", "head": "lm_head.weight"},
           qkv_layout="multi-query", attention=None, biases=lambda c: ("", False, True), per_logit=_refact_per_logit,
           default_target="llama", views=_refact_views, label="Refact"),
    *(Family(name=name, model_types=(name,), heads=("n_head", "num_attention_heads"),
             hidden=("n_embd", "hidden_size"), layers=("n_layer", "num_hidden_layers"), details=_jais,
             block=_gpt2_names,
             globals={"emb": "transformer.wte.weight", "ln_f": "transformer.ln_f", "head": "lm_head.weight"},
             qkv_layout="blocks", attention=None, biases=lambda c: ("", True, True), per_logit=_float32_per_logit,
             default_target="stablelm", transposed=True, slopes_tensor="transformer.relative_pe.slopes",
             tied_by_default=True, alibi_key="position_embedding_type", label=label)
      for name, label in (("jais", "Jais"), ("btlm", "BTLM"))),
)}


def declared_biases(family: str, config: Mapping[str, Any]) -> tuple[str, bool, bool]:
    """The key that says whether the linear layers carry biases, whether they do, and whether the key covers the
    LayerNorms too (a bias tensor the key does not declare would be read by ropebridge and ignored by the family's
    own code), from the family's row: Falcon ``bias`` (default false; its LayerNorms always have one), MPT
    ``no_bias`` (default true; linears and LayerNorms), Replit's ``no_bias`` likewise but false by default
    (MosaicGPT's), BLOOM, Jais and BTLM always, Baichuan and Refact never (no key: "")."""
    return FAMILIES[family].biases(config)


def _first(config: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    """The value of the first of ``keys`` present (not null); ``ValueError`` naming both keys when two present
    ones disagree (transformers and ropebridge could read the config two ways)."""
    present = [(k, config[k]) for k in keys if config.get(k) is not None]
    for k, v in present[1:]:
        if v != present[0][1]:
            raise ValueError(f"config keys {present[0][0]} = {present[0][1]!r} and {k} = {v!r} disagree: the source "
                             "can be read two ways")
    return present[0][1] if present else None


