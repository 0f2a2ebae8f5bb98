"""``ropebridge.json``, the conversion record: the one module that writes, reads, shape-checks and migrates it.

``convert`` writes one beside every checkpoint (``ConversionRecord.of`` then ``to_json``): the request as asked
(``asked``) and as resolved for the source (``resolved``, ``emulation.Resolved.to_dict``), the plan, the target's
geometry. ``verify`` reads it back (``ConversionRecord.read``) and takes from it only the options to derive the
checkpoint again (``plan_request``: the asked request, resolved again from SRC). Everything else a record says (its
version, target, dtype, resolved request, geometry, plan) is DST's claim about itself: ``read`` checks its shape
and keeps the values as DST holds them, and the byte check compares each with what SRC gives.
The ``geometry`` is the target's numbers (``writers.Writer.geometry``).

A record of an older release is read in today's schema by ``convert.older``, the one module that knows an
older name (its plan, and the request it asked).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .. import __version__
from ..emulation import EmulationPlan, PlanRequest, Resolved
from ..emulation.resolved import UNRECORDED
from . import older

FILE = "ropebridge.json"
_KEYS = ("ropebridge_version", "source", "source_family", "source_fingerprint", "target", "dtype",
         "torch_version", "asked", "resolved", "geometry", "plan", "accepted_error")  # in the order they are written
_OLDER = ("request",)  # read from records that hold it, never written


@dataclass(frozen=True)
class ConversionRecord:
    """What ``ropebridge.json`` holds, field for key: the writing
    versions, the source's name, family and fingerprint (``pipeline.source_fingerprint``), the target and
    dtype, the request as asked (``asked``: every ``PlanRequest`` field the plan and the tensors depend on) and as
    resolved (``resolved``), the geometry, the plan (``EmulationPlan.to_dict``) and whether its error was accepted;
    ``request``: a 0.2 record's completed request (None in the others). Read from DST, every field but ``plan`` is
    as DST holds it (any JSON value, None where the key is missing)."""

    plan: dict[str, Any]
    ropebridge_version: Any = None
    source: Any = None
    source_family: Any = None
    source_fingerprint: Any = None
    target: Any = None
    dtype: Any = None
    torch_version: Any = None
    asked: Any = None
    resolved: Any = None
    geometry: Any = None
    accepted_error: Any = None
    request: Any = None

    @classmethod
    def of(cls, resolved: Resolved, plan: EmulationPlan, family: str, geometry: dict[str, Any],
           source: str, fingerprint: str) -> ConversionRecord:
        """The record ``convert`` writes for a conversion of ``source`` (its fingerprint) with ``resolved`` into
        ``plan`` with ``geometry``, by this ropebridge and torch."""
        return cls(plan=plan.to_dict(), ropebridge_version=__version__, source=source, source_family=family,
                   source_fingerprint=fingerprint, target=resolved.target, dtype=plan.dtype,
                   torch_version=torch.__version__, asked=resolved.asked_dict(), resolved=resolved.to_dict(),
                   geometry=geometry, accepted_error=not plan.meets_tolerance)

    def to_dict(self) -> dict[str, Any]:
        """The record as ``ropebridge.json`` holds it, its keys in the written order."""
        return {k: getattr(self, k) for k in _KEYS}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    @classmethod
    def read(cls, dst: str | Path) -> ConversionRecord:
        """DST's record, its shape checked (an object whose plan has a list of heads, each with a numeric slope);
        ``ValueError`` for a directory ropebridge did not write or a record that is malformed."""
        path = Path(dst) / FILE
        if not path.is_file():
            raise ValueError(f"{dst} is not a ropebridge conversion (no {FILE}): verify compares a converted "
                             "checkpoint with its source")
        try:
            data = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"{path} is not valid JSON: {exc}") from None
        if not isinstance(data, dict) or not isinstance(data.get("plan"), dict):
            raise ValueError(f"{path} has no conversion plan: not a ropebridge conversion")
        heads = data["plan"].get("heads")
        if not isinstance(heads, list) or not heads or not all(
                isinstance(h, dict) and isinstance(h.get("slope"), (int, float)) for h in heads):
            raise ValueError(f"{path}: its plan's heads are malformed (a list of objects, each with a numeric "
                             "slope)")
        data = older.keys(data)
        return cls(**{k: data.get(k) for k in (*_KEYS, *_OLDER)})

    def current_plan(self) -> dict[str, Any]:
        """The recorded plan in today's names (``older.plan``); ``ValueError`` where it cannot be."""
        return older.plan(self.plan)

    def plan_request(self) -> PlanRequest:
        """The ``PlanRequest`` DST was converted with: the recorded ``asked``, or what an older record asked
        (``older.asked``). ``jobs`` is this machine's core count. ``ValueError`` naming what is malformed."""
        request = self.asked if self.asked is not None else self.request
        try:
            fields = older.asked(request, self.plan, self.target)
        except (KeyError, TypeError, IndexError, ValueError) as exc:
            if request is not None:
                raise
            raise ValueError(f"its record's plan does not say how it was made ({type(exc).__name__}: {exc})") \
                from None
        fields = {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()
                  if k in PlanRequest.__dataclass_fields__ and k not in (*UNRECORDED, "calibration_text")}
        try:
            return PlanRequest(**fields, jobs=os.cpu_count() or 1)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"its record's request is not one convert takes: {exc}") from None


def floors_in(data: dict[str, Any]) -> tuple[float, ...]:
    """The ladder's per-head floors C a plan, or a record holding one, of any release carries (``older.floors``);
    ``KeyError``, ``TypeError`` or ``AttributeError`` where it carries none."""
    return older.floors(data)


def written_by_older(version) -> bool:
    """Whether a record's ``ropebridge_version`` names a release before this one (``--accept-older`` applies only
    then); a version that does not parse as numbers is not older."""
    def numbers(v) -> tuple[int, ...] | None:
        try:
            return tuple(int(x) for x in str(v).split("+")[0].split("."))
        except ValueError:
            return None

    theirs, ours = numbers(version), numbers(__version__)
    return theirs is not None and ours is not None and theirs < ours
