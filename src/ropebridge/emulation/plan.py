"""The emulation plan: the rotary pairs that reproduce each ALiBi head's bias, and their predicted error.

Every strategy (``STRATEGIES`` in this package) returns one ``EmulationPlan``: per head, the pairs it rotates
(frequency theta, amplitudes N and M stated for the source's logit scale 1/sqrt(hd)), the split s of N between q
and k, and the error model's prediction. A pair carries q = (-N/s, M/s), k = (0, s) and adds
``sigma (M cos(theta d) - N sin(theta d))`` to the logit, sigma = 1/sqrt(hd) (A. Litzenberger, "Emulating ALiBi
with RoPE", https://alexlitzenberger.com/blog/emulating_alibi_with_rope). The ladder's heads also carry a
``LadderHead`` (floor C, the distance W = C/m up to which the bias is exact, the shift δ of the bias).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any


from .. import __version__, _checks
from ..numerics import DEFAULT_CUTOFF, DTYPES, largest
from .error_model import PairSpec
from .strategy import STRATEGY_NAMES

THETA_RULES = ("theta", "max-phase", "exact-rotation", "error-optimal")  # how the single pair's theta is chosen
HALF_PI = math.pi / 2


@dataclass(frozen=True)
class PairTerm:
    """One rotating pair of a head: frequency theta (rad/token), amplitudes N and M (for the scale 1/sqrt(hd)),
    its index in the target's rotary block (None for a free theta). M is 0 except in the ladder. ``opposed``: the
    pair carries q = (0, N/s), k = (s, 0) instead, the same bias with the query's product on its first dim
    (``single`` module doc)."""

    theta: float
    N: float
    index: int | None = None
    M: float = 0.0
    opposed: bool = False

    def __post_init__(self) -> None:
        _checks.positive("theta", self.theta)
        _checks.number("N", self.N)
        _checks.number("M", self.M)


@dataclass(frozen=True)
class LadderHead:
    """The ladder's part of a head: floor C (logits), W = min(L, floor(C/m)), and the shift δ: the bias equals
    δ - m d on d <= W and stays below δ - C beyond (a constant shift no softmax sees)."""

    floor: float
    exact_distance: int
    shift: float = 0.0


@dataclass(frozen=True)
class HeadPlan:
    """The emulation of one head. ``approximation_error``: the error in exact arithmetic (the sine's for a single
    pair or a fixed base, the fit's for the ladder); ``rounding_error``: the dtype's; ``predicted_error``: the
    error model's worst logit error over the window (logits)."""

    head: int
    slope: float
    pairs: tuple[PairTerm, ...]
    split: float
    approximation_error: float
    rounding_error: float
    predicted_error: float
    ladder: LadderHead | None = None

    def __post_init__(self) -> None:
        _checks.positive("slope", self.slope)
        _checks.positive("split", self.split)
        if not self.pairs:
            raise ValueError(f"head {self.head} has no pairs")

    @property
    def theta(self) -> float:
        """Frequency of the slowest pair (the only one of a single pair)."""
        return min(p.theta for p in self.pairs)

    @property
    def N(self) -> float:  # noqa: N802 (the source's name)
        return next(p.N for p in self.pairs if p.theta == self.theta)

    def phase(self, window: int) -> float:
        """``max theta * L``: the largest angle of the head's fastest pair over the window."""
        return max(p.theta for p in self.pairs) * window

    def specs(self) -> list[PairSpec]:
        return [PairSpec(p.theta, p.N, p.opposed) for p in self.pairs]


@dataclass(frozen=True)
class EmulationPlan:
    """Per-head emulation of an ALiBi model, frozen and JSON-serialisable (``to_dict`` / ``from_dict``).
    ``strategy``: the strategy that made it (``strategy.STRATEGY_NAMES``); ``theta_rule``: how the single pair's theta
    was chosen (``THETA_RULES``; None for the other strategies); ``base`` and ``rotary_dim``: the target's rotary block,
    None for a free theta; ``max_window``: with a fixed base, the longest window within ``tolerance``;
    ``rope_parameters``: the rope the target's config states where the plan chose it (the ``llama`` target's
    llama3 bands, ``targets.llama_rope``), its pairs planned at the frequencies it gives; None elsewhere."""

    head_dim: int
    window: int
    dtype: str
    strategy: str
    heads: tuple[HeadPlan, ...]
    cutoff: float = DEFAULT_CUTOFF
    tolerance: float = 1e-3
    theta_rule: str | None = None
    base: float | None = None
    rotary_dim: int | None = None
    pairs_per_head: int = 1
    max_window: int | None = None
    rope_parameters: dict[str, Any] | None = None
    family: str | None = None
    source: str | None = None
    version: str = field(default=__version__)

    def __post_init__(self) -> None:
        _checks.positive_int("head_dim", self.head_dim)
        _checks.positive_int("window", self.window)
        _checks.choice("dtype", self.dtype, tuple(DTYPES))
        _checks.choice("strategy", self.strategy, STRATEGY_NAMES)
        if self.strategy == "single":
            _checks.choice("theta_rule", self.theta_rule, THETA_RULES)
        elif self.theta_rule is not None:
            raise ValueError(f"theta_rule {self.theta_rule!r} is for the single pair, not the {self.strategy}")
        _checks.positive("cutoff", self.cutoff)
        _checks.positive("tolerance", self.tolerance)
        if not self.heads:
            raise ValueError("a plan needs at least one head")
        limit = largest(self.dtype)
        for h in self.heads:
            if self.strategy != "ladder" and len(h.pairs) == 1 and not h.phase(self.window) < HALF_PI:
                raise ValueError(f"head {h.head}: phase theta*L = {h.phase(self.window)!r} must be < pi/2 "
                                 "(monotone bias)")
            q = max(max(abs(p.N), abs(p.M)) for p in h.pairs) / h.split
            if q > limit or h.split > limit:
                raise ValueError(
                    f"head {h.head}: q = N/s = {q:.4g} and k = s = {h.split:.4g} must fit {self.dtype} "
                    f"(max {limit:.6g}); choose another split, a larger theta or a wider dtype"
                )

    @property
    def strategy_label(self) -> str:
        """The strategy in words, with the single pair's theta rule: ``single (exact-rotation)``, ``ladder``."""
        return self.strategy if self.theta_rule is None else f"{self.strategy} ({self.theta_rule})"

    @property
    def scale(self) -> float:
        """The source's logit scale 1/sqrt(head_dim), in which N is stated."""
        return 1.0 / math.sqrt(self.head_dim)

    @property
    def worst_head(self) -> HeadPlan:
        return max(self.heads, key=lambda h: h.predicted_error)

    @property
    def meets_tolerance(self) -> bool:
        return self.worst_head.predicted_error <= self.tolerance

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for h, row in zip(self.heads, out["heads"]):
            row["theta"], row["N"] = h.theta, h.N
            for pair in row["pairs"]:
                if not pair["opposed"]:  # only the llama target's opposed pairs say so
                    del pair["opposed"]
        out["worst_head"] = self.worst_head.head
        out["worst_predicted_error"] = self.worst_head.predicted_error
        out["meets_tolerance"] = self.meets_tolerance
        if self.rope_parameters is None:  # the targets whose config derives its rope from base and theta
            del out["rope_parameters"]
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EmulationPlan:
        """The plan of ``to_dict`` (a record of an older release: ``convert.older.plan`` first)."""
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        heads = []
        for row in data["heads"]:
            pairs = tuple(PairTerm(**p) for p in row["pairs"])
            keep = {k: v for k, v in row.items() if k in HeadPlan.__dataclass_fields__ and k not in ("pairs", "ladder")}
            ladder = LadderHead(**row["ladder"]) if row.get("ladder") else None
            heads.append(HeadPlan(pairs=pairs, ladder=ladder, **keep))
        fields["heads"] = tuple(heads)
        return cls(**fields)
