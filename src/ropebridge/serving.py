"""Serving arithmetic for tensor-parallel engines: what a checkpoint costs in GPU memory and whether it splits.

A tensor-parallel engine (vLLM, TensorRT-LLM) splits attention by heads (the fused QKV by output rows, whole
heads to a rank; the attention output by its input columns) and the MLP by its intermediate width (the up
projection by rows, the down projection by columns); LayerNorms are replicated and the vocabulary is split
(padded by the engine when it does not divide). So a degree ``tp`` needs ``heads % tp == 0`` and
``intermediate % tp == 0``. The converted GPT-NeoX checkpoint keeps the heads and the MLP width of its source;
only the head dim (hd' = r + hd) and the residual width (D' = h hd') grow.

Memory: weights ``itemsize * params``; KV cache ``2 * layers * heads * head_dim * itemsize`` bytes per token
(keys and values, every head: these models have no grouped KV). Both divide by ``tp``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Geometry:
    """Shapes that decide memory and splitting. ``family``: 'bloom' (ALiBi source), 'gpt-neox' or 'nemotron'
    (converted). ``hidden`` is the residual width: D for BLOOM and Nemotron, D' = h hd' for GPT-NeoX."""

    family: str
    layers: int
    heads: int
    head_dim: int
    hidden: int
    intermediate: int
    vocab: int

    def __post_init__(self):
        for name in ("layers", "heads", "head_dim", "hidden", "intermediate", "vocab"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.family not in ("bloom", "gpt-neox", "nemotron"):
            raise ValueError(f"family must be 'bloom', 'gpt-neox' or 'nemotron', got {self.family!r}")

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Geometry:
        """From a BLOOM or a GPT-NeoX ``config.json`` (as a dict)."""
        kind = config.get("model_type")
        if kind == "bloom":
            d, h = config.get("hidden_size", config.get("n_embed")), config["n_head"]
            return cls("bloom", config["n_layer"], h, d // h, d, 4 * d, config["vocab_size"])
        if kind == "gpt_neox":
            d, h = config["hidden_size"], config["num_attention_heads"]
            return cls("gpt-neox", config["num_hidden_layers"], h, d // h, d, config["intermediate_size"],
                       config["vocab_size"])
        if kind == "nemotron":
            return cls("nemotron", config["num_hidden_layers"], config["num_attention_heads"], config["head_dim"],
                       config["hidden_size"], config["intermediate_size"], config["vocab_size"])
        raise ValueError(f"serving arithmetic covers BLOOM sources and GPT-NeoX and Nemotron targets, not {kind!r}")

    def converted(self, rotary_dim: int, target: str = "gpt-neox") -> Geometry:
        """The checkpoint ropebridge writes from this BLOOM source with ``rotary_dim`` dims per head: GPT-NeoX pads
        the residual stream to h hd', Nemotron keeps it (only q, k, v and the attention output widen)."""
        if self.family != "bloom":
            raise ValueError("converted() applies to a BLOOM source geometry")
        if target not in ("gpt-neox", "nemotron"):
            raise ValueError(f"target must be 'gpt-neox' or 'nemotron', got {target!r}")
        hd = self.head_dim + rotary_dim
        hidden = self.heads * hd if target == "gpt-neox" else self.hidden
        return Geometry(target, self.layers, self.heads, hd, hidden, self.intermediate, self.vocab)

    @property
    def params(self) -> int:
        """Parameter count. BLOOM: embedding (tied head) and its LayerNorm; the targets: untied embedding and head.
        Per layer: QKV ``3 q (D + 1)`` and the output ``D (q + 1)`` with q = h hd', the MLP, two LayerNorms."""
        d, f, q = self.hidden, self.intermediate, self.heads * self.head_dim
        per_layer = 3 * q * (d + 1) + d * (q + 1) + f * (d + 1) + d * (f + 1) + 4 * d  # QKV, out, MLP, 2 LN
        ends = self.vocab * d + 4 * d if self.family == "bloom" else 2 * self.vocab * d + 2 * d
        return self.layers * per_layer + ends

    def kv_bytes_per_token(self, itemsize: int = 2) -> int:
        return 2 * self.layers * self.heads * self.head_dim * itemsize

    def tp_problems(self, tp: int) -> list[str]:
        """Why ``tp``-way tensor parallelism cannot split this model evenly (empty when it can)."""
        problems = []
        if self.heads % tp:
            problems.append(f"{self.heads} heads do not split {tp} ways")
        if self.intermediate % tp:
            problems.append(f"MLP width {self.intermediate} does not split {tp} ways")
        return problems


def checkpoint_tp_problems(directory: str | Path, tp: int) -> list[str]:
    """``Geometry.tp_problems`` checked on a converted GPT-NeoX checkpoint's stored shapes: every fused QKV has
    3 h hd' rows laid out per head (so ``tp`` contiguous row blocks hold whole heads), every attention output
    h hd' columns, every MLP matrix the intermediate width on the split side."""
    import json

    from .checkpoint.tensor_io import CheckpointReader

    directory = Path(directory)
    geo = Geometry.from_config(json.loads((directory / "config.json").read_text()))
    reader = CheckpointReader(directory)
    problems = geo.tp_problems(tp)
    q = geo.heads * geo.head_dim
    want = {"attention.query_key_value.weight": (0, 3 * q), "attention.dense.weight": (1, q),
            "mlp.dense_h_to_4h.weight": (0, geo.intermediate), "mlp.dense_4h_to_h.weight": (1, geo.intermediate)}
    for name in reader.names():
        shape = reader.shape(name)
        for suffix, (dim, size) in want.items():
            if name.endswith(suffix):
                if shape[dim] != size:
                    problems.append(f"{name} has {shape[dim]} on dim {dim}, the config says {size}")
                elif shape[dim] % tp:
                    problems.append(f"{name} dim {dim} ({shape[dim]}) does not split {tp} ways")
    return problems
