"""A strategy as one object: how it plans, what it requires of a request, and its rope in words.

Each strategy module holds one (``single.STRATEGY``, ``fixed_base.STRATEGY``, ``ladder.STRATEGY``), named from
``STRATEGY_NAMES``, the one list of their names (the default first), which a plan's ``strategy`` is checked
against; ``strategies.STRATEGIES`` is their registry in that order. This module sits below the plan types
(``plan`` imports it), so it names them only in words: ``request`` below is a ``resolved.Resolved`` where a
strategy plans, the ``PlanRequest`` as asked where it checks (``resolved.resolve`` and the request's own
construction call ``check``), ``plan`` an ``EmulationPlan``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..numerics import DEFAULT_CUTOFF

STRATEGY_NAMES = ("ladder", "single", "fixed-base")


@dataclass(frozen=True)
class Strategy:
    """``plan(source, resolved) -> EmulationPlan`` (``source``: ``slopes`` ``(h,)``, ``head_dim``, ``family``;
    every choice made); ``check(request)``: ``ValueError`` naming the option where the asked request gives
    one this strategy does not take, or lacks one it needs; ``rope(plan)``: the rope it serves, in words
    (``RoPE base 370, rotary dim 32``); ``cutoff(window, dtype)``: the cutoff (logits) it plans with where a
    request gives none (``numerics.DEFAULT_CUTOFF`` unless the strategy has its own)."""

    name: str
    plan: Callable[[Any, Any], Any]
    check: Callable[[Any], None]
    rope: Callable[[Any], str]
    cutoff: Callable[[int, str], float] = lambda window, dtype: DEFAULT_CUTOFF

    def __post_init__(self) -> None:
        if self.name not in STRATEGY_NAMES:
            raise ValueError(f"strategy {self.name!r} is not one of STRATEGY_NAMES {STRATEGY_NAMES}")


def refuse_ladder_options(request) -> None:
    """The ladder's own options (``--floor``, ``--calibration-text``) given to a strategy that is not the ladder."""
    if request.floor is not None or request.advantage is not None or request.calibration_text is not None:
        raise ValueError("--floor and --calibration-text are for --strategy ladder")


def base_words(plan) -> str:
    """A fixed base's or a ladder's rope: ``RoPE base B, rotary dim R``."""
    return f"RoPE base {plan.base:.6g}, rotary dim {plan.rotary_dim}"
