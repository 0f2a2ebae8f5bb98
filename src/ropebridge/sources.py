"""ALiBi source models: which family, how many heads, and the per-logit slope each head applies.

Read from a Hugging Face ``config.json`` (a checkpoint directory, the file, or a dict) without
importing the model. Each family applies its bias differently, so the *per-logit* slope (what the
emulation must reproduce in the softmax input) differs:

- BLOOM: scores = q.k/sqrt(d) + m*j, slope m (Press et al. rule, max_bias 8);
- MPT (``attn_config.alibi``): the bias is added after the softmax scale, slope m
  (``alibi_bias_max``, default 8);
- Falcon with ``alibi=True`` (Falcon-RW): (q.k + m*j)/sqrt(d), slope m/sqrt(d), and transformers
  rounds m to bfloat16 first, even in float32 models: we take those rounded values.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from . import _checks, alibi

FAMILIES = ("bloom", "mpt", "falcon")
_FALCON_TYPES = ("falcon", "RefinedWeb", "RefinedWebModel")


@dataclass(frozen=True)
class AlibiSource:
    """An ALiBi model's attention geometry: family, heads, head dim, and per-logit slopes ``(h,)``."""

    family: str
    n_heads: int
    head_dim: int
    max_bias: float
    slopes: tuple[float, ...]
    path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def family_slopes(family: str, n_heads: int, head_dim: int, max_bias: float = 8.0) -> tuple[float, ...]:
    """Per-logit slopes of ``family`` (see the module doc), float64 values as a tuple."""
    _checks.choice("family", family, FAMILIES)
    m = alibi.slopes(n_heads, max_bias)
    if family == "falcon":
        m = m.to(torch.bfloat16).to(torch.float64) / math.sqrt(head_dim)
    return tuple(m.tolist())


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
        return json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{p} is not valid JSON: {exc}") from None


def from_config(config: Mapping[str, Any] | str | Path) -> AlibiSource:
    """An ``AlibiSource`` from a BLOOM, MPT or Falcon (``alibi=True``) config; ``ValueError`` for anything else."""
    path = None
    if not isinstance(config, Mapping):
        path = str(config)
        config = load_config(config)
    model_type = config.get("model_type")
    if model_type == "bloom":
        heads = config.get("n_head", config.get("num_attention_heads"))
        hidden = config.get("hidden_size", config.get("n_embed"))
        family, max_bias = "bloom", 8.0
    elif model_type == "mpt":
        attn = config.get("attn_config") or {}
        if not attn.get("alibi", False):
            raise ValueError("this MPT config has attn_config.alibi = false: not an ALiBi model")
        heads, hidden = config.get("n_heads"), config.get("d_model")
        family, max_bias = "mpt", float(attn.get("alibi_bias_max", 8))
    elif model_type in _FALCON_TYPES:
        if not config.get("alibi", False):
            raise ValueError(f"this Falcon config (model_type {model_type!r}) has alibi = false: it uses RoPE already")
        heads = config.get("num_attention_heads", config.get("n_head"))
        hidden = config.get("hidden_size")
        family, max_bias = "falcon", 8.0
    else:
        raise ValueError(
            f"model_type {model_type!r} is not an ALiBi model ropebridge knows (bloom, mpt, falcon with alibi=true)"
        )
    heads = _checks.positive_int("number of heads", heads)
    hidden = _checks.positive_int("hidden size", hidden)
    if hidden % heads:
        raise ValueError(f"hidden size {hidden} is not a multiple of the head count {heads}")
    head_dim = hidden // heads
    return AlibiSource(family, heads, head_dim, max_bias, family_slopes(family, heads, head_dim, max_bias), path)
