"""The row every ALiBi family fills (``Family``), what its config says beyond its sizes (``FamilyDetails``), and
the helpers the rows share: reading a config key (``key``, ``first``), the tensor names BLOOM and Falcon share
(``h_names``, ``H_GLOBALS``), a float32 slope (``float32_per_logit``).

Each family applies its bias differently, so the *per-logit* slope (what the emulation must reproduce in the
softmax input) differs: each family's module says how (transformers 5.x modelling code, or the family's own remote
code).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import torch

from ... import _checks
from ..views import Segment

QKV_LAYOUTS = ("per-head", "blocks", "per-head-or-multi-query", "multi-query")  # ``Family.qkv_layout``
ATTENTIONS = ("eager", "sdpa", None)  # transformers' implementation verify runs the source with; None: no class
# the kinds of block a source has (``SourceInfo.block``), which ``targets.BLOCKS`` names
BLOCK_KINDS = ("layernorm", "rmsnorm-gated", "unbiased-layernorm-gated", "layernorm-gated")


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
    (``tensor_names``: block i's, ``globals``), its fused-QKV row layout (``per-head`` (h, 3, hd), ``blocks`` [Q | K |
    V], ``per-head-or-multi-query``: also h query heads then one k and one v, or ``multi-query``: only that), the
    attention verify runs it with, ``biases`` (config -> the key that declares the biases, whether it does, whether it
    covers the LayerNorms: ``declared_biases``), ``per_logit`` (Press et al.'s slopes m ``(h,)`` and hd -> the slope
    each logit gets), the config key of its longest input (None: no limit), whether transformers' eager path (the one
    that returns attention maps) computes its attention, the target a conversion takes by default, and ``views``
    ((info, block i) -> the canonical tensors it stores fused, ``checkpoint.views``; None: it stores them as
    they are read) and ``refused_tensors`` (a tensor whose presence means a variant without a stock RoPE form,
    with why), ``transposed`` (block weights stored input x output, GPT-2's Conv1D) and ``slopes_tensor`` (the
    tensor holding the slopes the family's code applies, checked against the formula and taken as stored) and
    ``tied_by_default`` (GPT-2's configs tie the head unless ``tie_word_embeddings`` says otherwise); ``label``:
    its name in the generated lists of the docs; ``block``: the kind of block its checkpoints as published have
    (``SourceInfo.block`` reads it from a config; ``targets.Target.blocks`` carry it); ``forms``: its checkpoints as
    published, the rows of the docs' per-family engines table it heads, (label, parallel residual); empty: it is shown
    in another family's row (Replit in MPT's, BTLM in Jais').
    ``attention`` None: transformers has no class for the family (remote code)."""

    name: str
    model_types: tuple[str, ...]
    heads: tuple[str, ...]
    hidden: tuple[str, ...]
    layers: tuple[str, ...]
    details: Callable[[Mapping[str, Any], int, int], FamilyDetails]  # (config, hidden, head_dim)
    tensor_names: Callable[[int], dict[str, str]]
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
    block: str = "layernorm"  # the kind of block its checkpoints as published have (``SourceInfo.block``)
    forms: tuple[tuple[str, bool], ...] = ()  # the rows of the docs' per-family engines table it heads

    def __post_init__(self) -> None:
        """Every field checked once, a ``ValueError`` naming the family and the field."""
        def wrong(field_name: str, why: str) -> ValueError:
            return ValueError(f"family {self.name!r}: {field_name} {getattr(self, field_name)!r} {why}")

        if not isinstance(self.name, str) or not self.name:
            raise wrong("name", "must be a non-empty string")
        for key in ("model_types", "heads", "hidden", "layers"):
            value = getattr(self, key)
            if not isinstance(value, tuple) or not value or not all(isinstance(x, str) and x for x in value):
                raise wrong(key, "must be a non-empty tuple of config keys")
        for key, allowed in (("qkv_layout", QKV_LAYOUTS), ("attention", ATTENTIONS), ("block", BLOCK_KINDS)):
            if getattr(self, key) not in allowed:
                raise wrong(key, f"must be one of {allowed}")
        for key in ("details", "tensor_names", "biases", "per_logit"):
            if not callable(getattr(self, key)):
                raise wrong(key, "must be callable")
        if self.views is not None and not callable(self.views):
            raise wrong("views", "must be callable or None")
        if not isinstance(self.globals, Mapping) or not all(isinstance(v, str) for v in self.globals.values()):
            raise wrong("globals", "must map names to tensor names")
        for key in ("embedding_norm", "max_positions_key", "slopes_tensor"):
            if getattr(self, key) is not None and not isinstance(getattr(self, key), str):
                raise wrong(key, "must be a string or None")
        for key in ("default_target", "alibi_key"):
            if not isinstance(getattr(self, key), str) or not getattr(self, key):
                raise wrong(key, "must be a non-empty string")
        for key in ("eager_attention_maps", "transposed", "tied_by_default"):
            if not isinstance(getattr(self, key), bool):
                raise wrong(key, "must be True or False")
        if not all(isinstance(f, tuple) and len(f) == 2 and isinstance(f[0], str) and isinstance(f[1], bool)
                   for f in self.forms):
            raise wrong("forms", "must be (label, parallel residual) pairs")


# The tensors of a family's other variants, by the end of their names: a source that stores one beside a config
# that says ALiBi (``Family.alibi_key``) contradicts itself (a RoPE Baichuan-7B's ``rotary_emb.inv_freq`` under a
# 13B's hidden_size), and is refused naming both (``checkpoint.model``).
FOREIGN_TENSORS = {"inv_freq": "rotary frequencies, a RoPE variant's",
                   "wpe.weight": "a learned position embedding, a variant's without ALiBi"}


def positive_key(c: Mapping[str, Any], key: str, default: Any, *, null_is_default: bool = False) -> Any:
    """Config key ``key`` as a positive number (``default`` when absent, or null where the family reads null as its
    default); ``ValueError`` naming the key for any other type or a value <= 0."""
    value = c.get(key, default)
    if value is None and (null_is_default or key not in c):
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"config key {key} is {value!r}; expected a number")
    return _checks.positive(key, value)


def ratio_width(c: Mapping[str, Any], key: str, d: int) -> int:
    """The MLP width ``ratio * d`` of MPT's ``expansion_ratio`` or MosaicGPT's ``mlp_ratio`` (``key``, default 4);
    ``ValueError`` naming the key where it is not a whole width."""
    ratio = positive_key(c, key, 4)
    if ratio * d != int(ratio * d):
        raise ValueError(f"config key {key} {ratio!r} times d_model {d} is not a whole MLP width")
    return int(ratio * d)


def h_names(i: int) -> dict[str, str]:
    p = f"transformer.h.{i}."
    return {"ln1": p + "input_layernorm", "ln2": p + "post_attention_layernorm",
            "qkv": p + "self_attention.query_key_value", "o": p + "self_attention.dense",
            "up": p + "mlp.dense_h_to_4h", "down": p + "mlp.dense_4h_to_h"}


H_GLOBALS = {"emb": "transformer.word_embeddings.weight", "ln_f": "transformer.ln_f", "head": "lm_head.weight"}


def float32_per_logit(m: torch.Tensor, head_dim: int) -> torch.Tensor:
    """Baichuan's m as its code builds it, ``torch.Tensor(_get_interleave(n))``: float32 values, as float64."""
    return m.to(torch.float32).to(torch.float64)


def first(config: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    """The value of the first of ``keys`` present (not null); ``ValueError`` naming both keys when two present
    ones disagree (transformers and ropebridge could read the config two ways)."""
    present = [(k, config[k]) for k in keys if config.get(k) is not None]
    for k, v in present[1:]:
        if v != present[0][1]:
            raise ValueError(f"config keys {present[0][0]} = {present[0][1]!r} and {k} = {v!r} disagree: the source "
                             "can be read two ways")
    return present[0][1] if present else None
