"""The serving engines, and how each runs each target, as read from the engines' own sources at a named version.

``ENGINES``, ``Support`` and the columns are ``targets.support``'s; each target's row holds how each engine runs it
(``Target.support``), read here as ``support(target, engine)``. From these alone: ``choose`` picks, for a source
and an engine, the target that engine runs natively (the family's default first), else one its Transformers backend
runs; ``per_family`` gives the docs' table of that choice for every family (``benchmarks/tables.py`` writes both tables
into docs/targets.md and the README, and its ``--check`` in the suite fails where they differ).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from .support import ENGINES, Support


def support(target: str, engine: str) -> Support:
    """How ``engine`` (a column of ``COLUMNS``) runs ``target``: its row's ``Target.support``."""
    from . import TARGETS

    return TARGETS[target].support[engine]


@dataclass(frozen=True)
class Choice:
    """The target ``choose`` picked for an engine, how the engine runs it, and the sentence that says so."""

    target: str
    kind: str
    sentence: str


def _carriers(info) -> list[str]:
    """The targets that carry ``info``'s block and residual, the family's default first."""
    from ..checkpoint.config import FAMILIES
    from . import TARGETS

    default = FAMILIES[info.family].default_target if info.family in FAMILIES else None
    names = sorted(TARGETS, key=lambda t: t != default)
    return [t for t in names if TARGETS[t].carries(info)]


def choose(info, engine: str) -> Choice:
    """The target for a source (anything with ``family``, ``block``, ``parallel``) served on ``engine``: the first
    the engine runs natively, the family's default first; else the first its Transformers backend runs; else
    ``ValueError`` in one line naming what the engine lacks."""
    e = ENGINES[engine]
    carriers = _carriers(info)
    for kind in ("native", "backend"):
        found = [t for t in carriers if support(t, engine).kind == kind]
        if found:
            return Choice(found[0], kind, describe(found[0], engine) + ("" if kind == "native" else
                                                                      " (it runs none natively)"))
    carry = "carries" if len(carriers) == 1 else "carry"
    raise ValueError(f"--engine {engine}: {e.label} runs no target that carries this {info.family} model "
                     f"({', '.join(carriers)} {carry} it; {e.title} runs none of them)")


def choose_for_family(family: str, engine: str) -> Choice:
    """``choose`` for a checkpoint of ``family`` as published, known by its family alone (``plan --heads``): its
    block as published (``Family.block``), its residual sequential."""
    from ..checkpoint.config import FAMILIES

    return choose(SimpleNamespace(family=family, block=FAMILIES[family].block, parallel=False), engine)


def choose_for(source, engine: str) -> Choice:
    """``choose`` for any source: a checkpoint's (``SourceInfo``: its ``block`` and residual), or one known by its
    family alone (``checkpoint.AlibiSource``, ``plan --heads``: ``choose_for_family``)."""
    if getattr(source, "block", None) is None:
        return choose_for_family(source.family, engine)
    return choose(source, engine)


def describe(target: str, engine: str) -> str:
    """How ``engine`` runs ``target``, in one line."""
    e, how_run = ENGINES[engine], support(target, engine)
    how = {"native": "natively", "backend": "through its Transformers backend", "none": "not at all"}[how_run.kind]
    return f"{e.label} runs {target} {how}"


def family_forms() -> list[tuple[str, SimpleNamespace]]:
    """The rows of the docs' per-family engine tables (``Family.forms``), as (label, a source as ``choose`` takes
    it: ``family``, its ``block`` as published, ``parallel``)."""
    from ..checkpoint.config import FAMILIES

    return [(label, SimpleNamespace(family=name, block=f.block, parallel=parallel))
            for name, f in FAMILIES.items() for label, parallel in f.forms]


def per_family() -> list[tuple[str, dict[str, str]]]:
    """Per family form (``family_forms``), the targets each engine runs natively for it and those its Transformers
    backend runs: ``label (default target)`` -> ``{engine: words}``."""
    from ..checkpoint.config import FAMILIES

    out = []
    for label, info in family_forms():
        carriers, cells = _carriers(info), {}
        for engine in ENGINES:
            if engine == "transformers":
                continue
            natives = [t for t in carriers if support(t, engine).kind == "native"]
            backends = [t for t in carriers if support(t, engine).kind == "backend"]
            words = ", ".join(natives) if natives else "none natively"
            cells[engine] = words + (f"; backend: {', '.join(backends)}" if backends else "")
        out.append((f"{label} ({FAMILIES[info.family].default_target})", cells))
    return out
