"""Records of older releases read in today's schema: the one reader of what ropebridge 0.1 and 0.2 wrote.

Nothing else in the package knows an older name. What changed, and how each is read:

- **the record's keys** (``keys``): 0.1 and 0.2 kept the target's geometry under ``layout``;
- **the plan** (``plan``): 0.1's ``rope_dim`` is ``rotary_dim``; the ``mode`` of 0.1 and early 0.2 is
  ``strategy`` and ``theta_rule``; per head, 0.1's ``sine_error`` is ``approximation_error``, its ``phase``
  (derived today) is dropped, and its ``floor``, ``exact_distance`` and ``shift`` are the head's ``ladder`` part;
- **the request** (``asked``): 0.2 recorded one completed ``request`` (before ``asked`` and ``resolved``), early
  0.2 with the strategy as ``emulation``; 0.1 recorded none, so the options are those its plan shows: those every
  plan holds and its strategy's own (``STRATEGY_OPTIONS``: a theta or phase, a fixed base, a ladder's rotary dim,
  floors and base where it is not the free one).
"""

from __future__ import annotations

import math
from typing import Any

from ..emulation.plan import THETA_RULES

_MODES = {**{r: ("single", r) for r in THETA_RULES}, "fixed-base": ("fixed-base", None), "ladder": ("ladder", None)}
_LADDER_PART = ("floor", "exact_distance", "shift")


def keys(record: dict[str, Any]) -> dict[str, Any]:
    """A record's top-level keys in today's names: ``layout`` is ``geometry`` (module doc)."""
    if "layout" not in record or "geometry" in record:
        return record
    return {("geometry" if k == "layout" else k): v for k, v in record.items()}


def plan(record: dict[str, Any]) -> dict[str, Any]:
    """A plan record in today's names (module doc); ``ValueError`` for a ``mode`` no release wrote."""
    out = {("rotary_dim" if k == "rope_dim" else k): v for k, v in record.items() if k != "mode"}
    if "mode" in record and "strategy" not in record:
        if record["mode"] not in _MODES:
            raise ValueError(f"mode must be one of {tuple(_MODES)}, got {record['mode']!r}")
        out["strategy"], out["theta_rule"] = _MODES[record["mode"]]
    if isinstance(out.get("heads"), (list, tuple)):
        out["heads"] = [_head(h) if isinstance(h, dict) else h for h in out["heads"]]
    return out


def _head(row: dict[str, Any]) -> dict[str, Any]:
    out = {("approximation_error" if k == "sine_error" else k): v for k, v in row.items()
           if k != "phase" and (k not in _LADDER_PART or "ladder" in row)}
    if "ladder" not in row and any(k in row for k in _LADDER_PART):
        out["ladder"] = {k: row.get(k) for k in _LADDER_PART} if row.get("floor") is not None else None
    return out


def floors(plan_or_record: dict[str, Any]) -> tuple[float, ...]:
    """The ladder's floors C per head that a plan, or a record holding one, of any release carries; ``KeyError``,
    ``TypeError`` or ``AttributeError`` where it carries none."""
    data = plan_or_record["plan"] if isinstance(plan_or_record.get("plan"), dict) else plan_or_record
    return tuple(float(h["ladder"]["floor"]) for h in plan(data)["heads"])


def _single(p: dict[str, Any]) -> dict[str, Any]:
    rule = p.get("theta_rule")
    if rule == "theta":
        return {"theta": p["heads"][0]["theta"]}
    if rule == "max-phase":
        return {"max_phase": max(q["theta"] for h in p["heads"] for q in h["pairs"]) * p["window"]}
    return {}


def _fixed_base(p: dict[str, Any]) -> dict[str, Any]:
    return {"rope_base": p["base"], "rotary_dim": p.get("rotary_dim"), "pairs": p.get("pairs_per_head", 1)}


def _ladder(p: dict[str, Any]) -> dict[str, Any]:
    from ..emulation.ladder import free_base

    options = {"rotary_dim": p.get("rotary_dim"), "floor": floors(p)}
    if p.get("base") is not None and not math.isclose(p["base"], free_base(p["window"], p["rotary_dim"])):
        options["rope_base"] = p["base"]
    return options


STRATEGY_OPTIONS = {"single": _single, "fixed-base": _fixed_base, "ladder": _ladder}


def asked(request: Any, record_plan: dict[str, Any], target: Any) -> dict[str, Any]:
    """The ``PlanRequest`` fields a record asked: its ``asked``, or a 0.2 record's ``request`` (``request``), with
    early 0.2's ``emulation`` as ``strategy``; for a 0.1 record (None), the options its plan shows (module doc).
    ``ValueError`` naming what is malformed; ``KeyError``, ``TypeError`` or ``IndexError`` where a 0.1 plan does
    not say how it was made."""
    if request is not None:
        if not isinstance(request, dict):
            raise ValueError("its record's request is not an object")
        return {("strategy" if k == "emulation" else k): v for k, v in request.items()}
    p = plan(record_plan)
    options: dict[str, Any] = dict(window=p["window"], dtype=p["dtype"],
                                   target="gpt-neox" if target is None else target, strategy=p["strategy"],
                                   cutoff=p.get("cutoff"), tolerance=p.get("tolerance"))
    return {**options, **STRATEGY_OPTIONS[p["strategy"]](p)}
