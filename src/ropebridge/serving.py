"""Serving arithmetic for tensor-parallel engines: what a checkpoint costs in GPU memory and whether it splits.

A tensor-parallel engine (vLLM, TensorRT-LLM) splits attention by heads (the fused QKV by output rows, whole
heads to a rank; the attention output by its input columns) and the MLP by its intermediate width (the up
projection by rows, the down projection by columns); LayerNorms are replicated and the vocabulary is split
(padded by the engine when it does not divide). So a degree ``tp`` needs ``heads % tp == 0`` and
``intermediate % tp == 0``.

Memory: weights ``itemsize * params``; KV cache ``2 * layers * kv_heads * head_dim * itemsize`` bytes per
token (keys and values). Both divide by ``tp``.

Parameter counts come from shapes, never from a formula: a source's from transformers' own model built on
the meta device (``shape_only_checkpoint``), a conversion's from the tensors the converter describes before it
reads a byte (``converted_checkpoint``), on a checkpoint whose file holds a header and no data (sparse).
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .targets import of_model_type


@dataclass(frozen=True)
class Geometry:
    """Shapes that decide the KV cache and the splits. ``architecture``: what the config describes, an ALiBi
    source's family ('bloom', 'mpt', 'falcon', …) or a target (a name of ``targets.TARGETS``); ``hidden`` is the
    residual width (D' = h hd' for GPT-NeoX's padded stream); ``kv_heads`` the key/value heads the cache holds."""

    architecture: str
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    hidden: int
    intermediate: int

    def __post_init__(self):
        for name in ("layers", "heads", "kv_heads", "head_dim", "hidden", "intermediate"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Geometry:
        """From an ALiBi source's ``config.json`` (as a dict; BLOOM, MPT, Falcon, Baichuan) or a converted one's (any
        entry of ``targets.TARGETS``, read by the target's own ``shapes``; ``ValueError`` naming a missing key)."""
        target = of_model_type(config.get("model_type"))
        if target is not None:
            from .writers import writer_for

            try:
                return cls(target.name, **writer_for(target).shapes(config))
            except KeyError as exc:
                raise ValueError(f"this {target.name} config.json lacks the key {exc.args[0]}") from None
        from .checkpoint.config import from_config

        info = from_config(config)  # an ALiBi source, or ValueError naming what it is
        return cls(info.family, info.n_layers, info.n_heads, info.kv_heads, info.head_dim, info.hidden_size,
                   info.intermediate_size)

    def kv_bytes_per_token(self, itemsize: int = 2) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * itemsize

    def tp_problems(self, tp: int) -> list[str]:
        """Why ``tp``-way tensor parallelism cannot split this model evenly (empty when it can)."""
        problems = []
        if self.heads % tp:
            problems.append(f"{self.heads} heads do not split {tp} ways")
        if self.intermediate % tp:
            problems.append(f"MLP width {self.intermediate} does not split {tp} ways")
        return problems


def kv_cost(head_dim: int, served_head_dim: int) -> str:
    """What serving at ``served_head_dim`` costs in the KV cache against the source's ``head_dim``, in one line: a
    conversion keeps the layers and the key/value heads, so the cache per token grows by hd'/hd and a fixed KV budget
    holds hd/hd' of the sequences (``benchmarks/engines/vllm_cost.py`` measures it in vLLM)."""
    ratio = served_head_dim / head_dim
    return (f"head dim {head_dim} -> {served_head_dim}: KV cache per token {ratio:.2f}x the source's, a fixed KV "
            f"budget holds {1 / ratio:.2f}x the sequences")


def shape_only_checkpoint(config: Mapping[str, Any], directory: str | Path) -> int:
    """Write ``config`` and a bfloat16 ``model.safetensors`` holding only a header into DIRECTORY: every
    parameter of transformers' model for ``config`` (built on the meta device; a tied head once), or, for a family
    transformers has no class for (Baichuan, Refact, Jais), every tensor its published code holds as it stores them
    (``checkpoint.model.stored_shapes``: the required ones, the biases it declares, and the head unless tied; not Jais'
    slopes, which a hole would give as zeros), with the file extended to its full size as a hole (sparse: no data is
    written or read). Returns the parameter count."""
    import torch
    import transformers as T

    from .checkpoint.config import declared_biases, from_config
    from .checkpoint.model import stored_shapes

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    info = from_config(config)
    if info.family_row.attention is None:  # remote code: the tensors of its layout
        tied = config.get("tie_word_embeddings", info.family_row.tied_by_default)
        head = None if tied else info.family_row.globals["head"]
        biases = declared_biases(info.family, config)[1]  # the biases its code builds
        shapes = {n: shape for n, (shape, required) in stored_shapes(info).items()
                  if required or n == head or (biases and n.endswith(".bias"))}
        (directory / "config.json").write_text(json.dumps(dict(config), indent=2))
    else:
        cfg = T.AutoConfig.for_model(**config)
        with torch.device("meta"):
            model = T.AutoModelForCausalLM.from_config(cfg)
        shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}  # lists a tied tensor once
        cfg.save_pretrained(directory)
    header, offset = {}, 0
    for name, shape in shapes.items():
        size = 2 * math.prod(shape)
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    with open(directory / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + offset)
    return offset // 2


def converted_checkpoint(src_dir: str | Path, request) -> tuple[int, dict]:
    """The parameter count and ``config.json`` that ``convert(src_dir, ..., request)`` would write: the same plan
    and resolved request (``planning.plan_checkpoint``), layout and tensor descriptions, no tensor read (SRC may be
    a ``shape_only_checkpoint``)."""
    import torch

    from .checkpoint.tensor_io import ShardWriter
    from .planning import plan_checkpoint

    plan, resolved, model = plan_checkpoint(src_dir, request)
    from .writers import describe_checkpoint

    shards = ShardWriter(torch.bfloat16, 2**62)  # never written: only its descriptions count
    _, config = describe_checkpoint(model, plan, resolved.target_row, shards)
    return sum(torch.Size(p.shape).numel() for p in shards.pending), config
