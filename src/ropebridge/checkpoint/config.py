"""ALiBi source configs: which family (``families.FAMILIES``), its geometry, and the per-logit slope each head
applies, read once from a Hugging Face ``config.json`` (a checkpoint directory, the file, or a dict) without importing
the model."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .. import _checks, alibi
from .families import FAMILIES, Family, _first, declared_biases, model_types

__all__ = ["FAMILIES", "AlibiSource", "Family", "SourceInfo", "declared_biases", "family_slopes", "from_config",
           "from_heads", "load_config"]


@dataclass(frozen=True)
class AlibiSource:
    """An ALiBi model's attention: family, heads, head dim, and per-logit slopes ``(h,)`` (all a plan needs)."""

    family: str
    n_heads: int
    head_dim: int
    max_bias: float
    slopes: tuple[float, ...]
    path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SourceInfo(AlibiSource):
    """A whole source checkpoint's geometry as its config gives it (read once, by ``from_config``)."""

    vocab_size: int = 0
    kv_heads: int = 0  # key/value heads: n_heads, or 1 for a multi-query Falcon (``from_config``)
    hidden_size: int = 0
    intermediate_size: int = 0
    n_layers: int = 0
    eps: float = 1e-5
    activation: str = "gelu"  # transformers ACT2FN name in the target
    parallel: bool = False  # attention and MLP read one LayerNorm and add to the residual together
    qk_scale: float = 1.0  # scale applied to q.k in the source logits
    norm: str = "layernorm"  # or "rmsnorm" (x / sqrt(mean x^2 + eps) * w)
    norm_bias: bool = True  # the LayerNorms may carry a bias (False: the family's have none, Refact's)
    gated: bool = False  # MLP down(act(gate x) * up x) instead of down(act(up x))
    head_norm: bool = False  # the output head's rows are normalised to unit length (Baichuan2's NormHead)
    alibi_factor: float = 1.0  # the bias divided by this fixed factor (Jais/BTLM ``alibi_scaling.factor``)
    embedding_scale: float = 1.0  # the embedding multiplied by this (muP ``embeddings_scale``)
    logit_scale: float = 1.0  # the logits multiplied by this (muP ``width_scale``)
    config: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def family_row(self) -> Family:
        """The family's row of ``FAMILIES`` (``family`` is its name)."""
        return FAMILIES[self.family]

    @property
    def block(self) -> str:
        """The kind of block a target must carry: ``layernorm`` (LayerNorm, a plain MLP), ``rmsnorm-gated``
        (RMSNorm, a gated MLP) or ``unbiased-layernorm-gated`` (LayerNorm without bias, a gated MLP)."""
        if not self.gated:
            return "layernorm"
        if self.norm == "rmsnorm":
            return "rmsnorm-gated"
        return "unbiased-layernorm-gated" if not self.norm_bias else "layernorm-gated"

    @property
    def max_positions(self) -> int | None:
        """The longest input the source accepts (MPT: ``max_seq_len``, its ALiBi table); None for no limit."""
        key = self.family_row.max_positions_key
        return int(self.config[key]) if key is not None and self.config.get(key) else None


def family_slopes(family: str, n_heads: int, head_dim: int, max_bias: float = 8.0) -> tuple[float, ...]:
    """Per-logit slopes of ``family`` (see the module doc), float64 values as a tuple ``(h,)``."""
    _checks.choice("family", family, tuple(FAMILIES))
    return tuple(FAMILIES[family].per_logit(alibi.slopes(n_heads, max_bias), head_dim).tolist())


def from_heads(n_heads: int, head_dim: int, family: str = "bloom", max_bias: float = 8.0) -> AlibiSource:
    """An ``AlibiSource`` from a head count (no checkpoint)."""
    n_heads = _checks.positive_int("heads", n_heads)
    head_dim = _checks.positive_int("head_dim", head_dim)
    return AlibiSource(family, n_heads, head_dim, max_bias, family_slopes(family, n_heads, head_dim, max_bias))


def load_config(path: str | Path) -> dict[str, Any]:
    """``config.json`` of a checkpoint directory (or the file itself) as a dict; clear errors otherwise."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise FileNotFoundError(f"no config.json at {path}")
    try:
        config = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{p} is not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise ValueError(f"{p} is not a JSON object (it holds a {type(config).__name__})")
    return config


def from_config(config: Mapping[str, Any] | str | Path) -> SourceInfo:
    """The ``SourceInfo`` of a config of any family of ``FAMILIES``; ``ValueError`` for anything else or a variant
    without a stock RoPE equivalent."""
    path = None
    if isinstance(config, (str, Path)):
        path = str(config)
        config = load_config(config)
    if not isinstance(config, Mapping):
        raise ValueError(f"a config is a JSON object, not a {type(config).__name__}")
    model_type = config.get("model_type")
    spec = next((f for f in FAMILIES.values() if model_type in f.model_types), None)
    if spec is None:
        raise ValueError(f"model_type {model_type!r} is not an ALiBi model ropebridge knows ({model_types()})")
    heads = _checks.positive_int("number of heads", _first(config, spec.heads))
    hidden = _checks.positive_int("hidden size", _first(config, spec.hidden))
    if hidden % heads:
        raise ValueError(f"hidden size {hidden} is not a multiple of the head count {heads}")
    head_dim = hidden // heads
    details = spec.details(config, hidden, head_dim)
    layers, vocab = _first(config, spec.layers), config.get("vocab_size")
    layers = None if layers is None else _checks.positive_int("number of layers", layers)
    vocab = None if vocab is None else _checks.positive_int("vocab_size", vocab)
    slopes = tuple(m / details.alibi_factor for m in family_slopes(spec.name, heads, head_dim, details.max_bias))
    kv_heads = heads if details.kv_heads is None else details.kv_heads
    return SourceInfo(spec.name, heads, head_dim, details.max_bias, slopes, path, vocab_size=int(vocab or 0),
                      kv_heads=kv_heads, hidden_size=hidden, n_layers=int(layers or 0), config=config,
                      **details.source_fields())
