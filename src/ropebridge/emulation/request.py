"""``PlanRequest``: everything a user asks of a plan, built once (from argparse or Python) and validated once.

``ropebridge plan`` and ``ropebridge convert`` build the same request from the same options
(``cli/_options.py``); ``resolved.resolve`` completes it for a source into a ``resolved.Resolved`` (every choice
made), from which ``planning.plan_checkpoint`` makes the plan a converted checkpoint carries. Field names are the
CLI's option names; None leaves the choice to ``resolve``. Each value is checked here, alone; what depends on the
source (its dtype, family, head dim) is checked by ``resolve``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from .. import _checks
from ..numerics import DTYPES
from ..targets import TARGETS
from ..targets.engines import support
from ..targets.support import ENGINES
from ..targets.kernels import KERNELS
from .strategies import STRATEGIES

MAX_WINDOW = 2**24  # float32 holds every integer position up to 2^24 exactly (engines compute angles from them)
DEFAULT_WINDOW = 8192


def check_window(window: Any) -> int:
    """``window`` as a positive int no larger than ``MAX_WINDOW``, else ``ValueError`` naming ``--window``."""
    window = _checks.positive_int("window", window)
    if window > MAX_WINDOW:
        raise ValueError(f"--window {_checks.shown(window)} is beyond {MAX_WINDOW} (2^24), the last position float32 "
                         "holds exactly")
    return window


def _per_head(key: str, value: Any, low: float) -> float | tuple[float, ...] | None:
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return tuple(_checks.at_least(f"{key}[{i}]", v, low) for i, v in enumerate(value))
    return _checks.at_least(key, value, low)


@dataclass(frozen=True)
class PlanRequest:
    """A plan as the user asks for it (the CLI's planning options); None, ``any`` or 1 where the user left the
    choice to ``resolved.resolve``, which makes it (its module doc says how).

    window: longest context served, extrapolation included. dtype: of the converted model. target: an entry of
    ``targets.TARGETS``. strategy: ``ladder``, ``single`` or ``fixed-base``. theta / max_phase: the single pair's
    theta (theta = max_phase / window). rope_base, rotary_dim, pairs: a fixed RoPE base, the rotary dims per head,
    pairs per head (fixed base). split: the k value s of the single pair (a number or "sqrt"). floor / advantage:
    the ladder's floor C, or the content advantage added to the cutoff (one or per head); calibration_text: text to
    measure the advantages on. kernel: the attention kernel served on (``targets.kernels``): the ladder's R makes
    hd + R a size it runs natively, and a served head dim it does not run is refused. engine: the engine served on
    (``targets.support.ENGINES``), which chooses the target and the kernel where none is named. cutoff, tolerance:
    logits. jobs, progress: how the ladder is fitted, not what (the plan is the same whatever they are).
    kv_cache_dtype: the KV cache the engine will keep (``emulation.kv_cache.FORMATS``; None: the model's dtype),
    which the plan must hold with.
    """

    window: int = DEFAULT_WINDOW
    dtype: str | None = None
    target: str | None = None
    strategy: str | None = None
    theta: float | None = None
    max_phase: float | None = None
    rope_base: float | None = None
    rotary_dim: int | None = None
    pairs: int = 1
    split: float | str | None = None
    floor: float | tuple[float, ...] | None = None
    advantage: float | tuple[float, ...] | None = None
    calibration_text: str | None = None
    kernel: str = "any"
    engine: str | None = None
    cutoff: float | None = None
    tolerance: float | None = None
    jobs: int = 1
    progress: bool = False
    kv_cache_dtype: str | None = None

    def __post_init__(self) -> None:
        fix = lambda key, value: object.__setattr__(self, key, value)  # noqa: E731 (normalise once, frozen after)
        fix("window", check_window(self.window))
        fix("jobs", _checks.positive_int("jobs", self.jobs))
        fix("pairs", _checks.positive_int("pairs", self.pairs))
        _checks.choice("kernel", self.kernel, tuple(KERNELS))
        if self.engine is not None:
            engine = ENGINES[_checks.choice("engine", self.engine, tuple(ENGINES))]
            if self.target is not None and support(self.target, self.engine).kind == "none":
                raise ValueError(f"--engine {self.engine}: {engine.label} does not run --target {self.target} "
                                 f"({support(self.target, self.engine).how or 'no form of it'}); leave --target out "
                                 "to take the target it runs")
        if self.dtype is not None:
            _checks.choice("dtype", self.dtype, tuple(DTYPES))
        if self.kv_cache_dtype is not None:
            from .kv_cache import FORMATS

            _checks.choice("kv_cache_dtype", self.kv_cache_dtype, tuple(FORMATS))
        if self.target is not None:
            _checks.choice("target", self.target, tuple(TARGETS))
        if self.strategy is not None:
            _checks.choice("strategy", self.strategy, tuple(STRATEGIES))
        for key in ("cutoff", "tolerance", "theta"):
            if getattr(self, key) is not None:
                fix(key, _checks.positive(key, getattr(self, key)))
        if self.theta is not None and self.max_phase is not None:
            raise ValueError("give --theta or --max-phase, not both")
        if self.max_phase is not None and not 0 < _checks.number("max_phase", self.max_phase) < math.pi / 2:
            raise ValueError(f"max_phase must be in (0, pi/2), got {self.max_phase!r}")
        if self.theta is not None and self.theta * self.window >= math.pi / 2:
            raise ValueError(f"theta * window = {self.theta * self.window:.4g} must be < pi/2")
        if self.rope_base is not None:
            fix("rope_base", _checks.number("rope_base", self.rope_base))
            if self.rope_base <= 1:
                raise ValueError(f"--rope-base must be > 1, got {self.rope_base!r}")
        if self.rotary_dim is not None:
            fix("rotary_dim", _checks.positive_int("rotary_dim", self.rotary_dim, even=True))
        if self.split is not None and self.split != "sqrt":
            try:
                fix("split", _checks.positive("split", float(self.split)))
            except (TypeError, ValueError):
                raise ValueError(f"split must be a number or 'sqrt', got {self.split!r}") from None
        if self.floor is not None and (self.calibration_text is not None or self.advantage is not None):
            raise ValueError("give --floor or --calibration-text, not both")
        fix("floor", _per_head("floor", self.floor, 0.0))
        fix("advantage", _per_head("advantage", self.advantage, 0.0))
        name = self.named_strategy  # its options checked now; the target's carrying it, once resolved
        if name is not None:
            STRATEGIES[self.with_base(name)].check(self)

    @property
    def single_flags(self) -> bool:
        """Whether a flag only the single pair takes was given (--theta, --max-phase, --pairs, --split)."""
        return self.theta is not None or self.max_phase is not None or self.pairs != 1 or self.split is not None

    @property
    def named_strategy(self) -> str | None:
        """The strategy this request names: ``strategy``, else ``single`` where a single-pair flag is given, else
        None (``resolved.resolve`` chooses it for the target and the dtype)."""
        return self.strategy if self.strategy is not None else "single" if self.single_flags else None

    def with_base(self, name: str) -> str:
        """Strategy ``name`` as this request takes it: ``single`` with ``--rope-base`` is ``fixed-base``."""
        return "fixed-base" if name == "single" and self.rope_base is not None else name

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out.pop("calibration_text")  # the text itself is not recorded; the advantages it gave are
        for key in ("engine", "kv_cache_dtype"):
            if out[key] is None:  # records without one read as before
                out.pop(key)
        return out

