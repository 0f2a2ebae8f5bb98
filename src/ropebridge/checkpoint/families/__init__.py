"""The ALiBi source families as one table (``FAMILIES``), one module per family: each row (``row.Family``) names
its config keys, what it refuses, its tensor names, the per-logit slope each head applies and its checkpoints as
published. A family's module holds its row (``ROWS``), the functions only it uses, and in its docstring how it
applies its bias and how the canonical model reads it; ``row`` holds the row's type and the helpers rows share.

Adding a family is one module here and its name in ``MODULES``; every list of families (the CLI's choices and
help, the refusal of an unknown ``model_type``, the docs' tables, the demo's labels) is read from ``FAMILIES``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import baichuan, bloom, falcon, jais, mpt, refact, replit
from .row import FOREIGN_TENSORS, Family, FamilyDetails, first

MODULES = (bloom, mpt, replit, falcon, baichuan, refact, jais)  # the order of the table (and of every list)
FAMILIES = {f.name: f for module in MODULES for f in module.ROWS}


def model_types() -> str:
    """Every ``model_type`` a row reads, in the table's order (``bloom, mpt, replit_lm, falcon, ...``): what the
    refusal of any other names."""
    return ", ".join(t for f in FAMILIES.values() for t in f.model_types)


def declared_biases(family: str, config: Mapping[str, Any]) -> tuple[str, bool, bool]:
    """The key that says whether the linear layers carry biases, whether they do, and whether the key covers the
    LayerNorms too (a bias tensor the key does not declare would be read by ropebridge and ignored by the family's
    own code), from the family's row (``Family.biases``: each module says its rule)."""
    return FAMILIES[family].biases(config)


_first = first  # ``checkpoint.config`` reads a size's keys through it

__all__ = ["FAMILIES", "FOREIGN_TENSORS", "MODULES", "Family", "FamilyDetails", "declared_biases", "model_types"]
