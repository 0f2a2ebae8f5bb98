"""Writers: the code that turns a source model and its plan into one target's tensors and config, one per row of
``targets.TARGETS``, each behind the one interface ``Writer`` (``WRITERS``, keyed by target name).

A writer lays the plan out on the target (``layout``), describes every tensor to a ``ShardWriter`` as a producer
that reads the source when written (``add_tensors``), gives ``config.json`` (``config``), the layout's numbers
``ropebridge.json`` records (``geometry``), and reads back what a converted ``config.json`` serves
(``shapes``: layers, heads, kv_heads, head_dim, hidden, intermediate). ``describe_checkpoint`` runs the first four
for ``convert`` and the serving arithmetic alike. Adding a target is one row of ``targets.TARGETS`` and one writer
here.
"""

from __future__ import annotations

from typing import Any

from ..checkpoint.model import SourceModel
from ..checkpoint.tensor_io import ShardWriter
from ..emulation import EmulationPlan
from ..targets import Target
from . import gpt_neox, llama, nemotron, persimmon, stablelm, starcoder2
from .protocol import Writer

WRITERS: dict[str, Writer] = {w.target: w for w in (gpt_neox.WRITER, starcoder2.WRITER, nemotron.WRITER, llama.WRITER,
                                                     persimmon.WRITER, stablelm.WRITER)}  # keyed by the row each names


def writer_for(target: Target) -> Writer:
    """The writer of ``target`` (``WRITERS``)."""
    return WRITERS[target.name]


def describe_checkpoint(model: SourceModel, plan: EmulationPlan, target: Target,
                        shards: ShardWriter) -> tuple[dict[str, Any], dict[str, Any]]:
    """Lay ``plan`` out on ``target`` and describe every tensor to ``shards`` (nothing is read yet); returns the
    layout's numbers ``ropebridge.json`` records and ``config.json``."""
    code = writer_for(target)
    layout = code.layout(model, plan, target)
    code.add_tensors(model, layout, shards)
    return code.geometry(model, layout), code.config(model, layout, plan)


__all__ = ["WRITERS", "Writer", "describe_checkpoint", "writer_for"]
