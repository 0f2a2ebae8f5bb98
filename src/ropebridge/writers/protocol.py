"""``Writer``: the one interface of a target's code (``writers`` package doc)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..checkpoint.model import SourceModel
from ..checkpoint.tensor_io import ShardWriter
from ..emulation import EmulationPlan
from ..targets import Target


@dataclass(frozen=True)
class Writer:
    """One target's code: ``target``, the name of the ``targets.TARGETS`` row it writes; ``layout(src, plan,
    target)`` -> a layout (the writer's own dataclass), then ``add_tensors(src, layout, shards)`` (a ``ShardWriter``),
    ``config(src, layout, plan)`` (config.json, in ``plan.dtype``), ``geometry(src, layout)`` and
    ``shapes(config)``."""

    target: str
    layout: Callable[[SourceModel, EmulationPlan, Target], Any]
    add_tensors: Callable[[SourceModel, Any, ShardWriter], None]
    config: Callable[[SourceModel, Any, EmulationPlan], dict[str, Any]]
    geometry: Callable[[SourceModel, Any], dict[str, Any]]
    shapes: Callable[[Mapping[str, Any]], dict[str, int]]
