"""``PlanRequest``: everything a user asks of a plan, built once (from argparse or Python) and validated once.

``ropebridge plan`` and ``ropebridge convert`` build the same request from the same options
(``cli/_options.py``), and ``planning.plan_checkpoint`` turns it into the plan a converted checkpoint carries.
Field names are the CLI's option names. ``dtype`` None means the checkpoint's own; the request is completed by
``with_dtype`` once that is known, and every rule that depends on the strategy is checked then.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from .. import _checks
from ..numerics import DTYPES
from ..targets import DEFAULT_TARGET, TARGETS, Target, carrying
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
        raise ValueError(f"--window {window} is beyond {MAX_WINDOW} (2^24), the last position float32 holds exactly")
    return window


def _per_head(key: str, value: Any, low: float) -> float | tuple[float, ...] | None:
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return tuple(_checks.at_least(f"{key}[{i}]", v, low) for i, v in enumerate(value))
    return _checks.at_least(key, value, low)


@dataclass(frozen=True)
class PlanRequest:
    """A plan as the user asks for it (the CLI's planning options).

    window: longest context served, extrapolation included. dtype: of the converted model (None: the checkpoint's).
    target: an entry of ``targets.TARGETS`` (None: the source family's ``default_target``, ``for_family``). strategy: ``ladder``, ``single`` or ``fixed-base`` (None: chosen by
    ``chosen_strategy``). theta / max_phase: the single pair's theta (theta = max_phase / window). rope_base,
    rotary_dim, pairs: a fixed RoPE base, the rotary dims per head, pairs per head (fixed base). split: the k value s
    of the single pair (a number or "sqrt"). floor / advantage: the ladder's floor C, or the content advantage added
    to the cutoff (one or per head); calibration_text: text to measure the advantages on. kernel: the attention
    kernel served on (``targets.kernels``): the ladder's R makes hd + R a size it runs natively, and a served
    head dim it does not run is refused. engine: the engine served on (``targets.engines``): the target, where
    none is named, is the one it runs natively for the source (``engines.choose``), and the kernel, where none is
    named, the engine's. cutoff, tolerance: logits (None: the strategy's, ``plan_tolerance``).
    jobs, progress: how the ladder is fitted, not what (the plan is the same whatever they are).
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

    def __post_init__(self) -> None:
        fix = lambda key, value: object.__setattr__(self, key, value)  # noqa: E731 (normalise once, frozen after)
        fix("window", check_window(self.window))
        fix("jobs", _checks.positive_int("jobs", self.jobs))
        fix("pairs", _checks.positive_int("pairs", self.pairs))
        _checks.choice("kernel", self.kernel, tuple(KERNELS))
        if self.engine is not None:
            engine = ENGINES[_checks.choice("engine", self.engine, tuple(ENGINES))]
            if self.kernel == "any":  # the kernel whose sizes the engine must run
                fix("kernel", engine.kernel)
            if self.target is not None and support(self.target, self.engine).kind == "none":
                raise ValueError(f"--engine {self.engine}: {engine.label} does not run --target {self.target} "
                                 f"({support(self.target, self.engine).how or 'no form of it'}); leave --target out "
                                 "to take the target it runs")
        if self.dtype is not None:
            _checks.choice("dtype", self.dtype, tuple(DTYPES))
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
        name = self.chosen_strategy
        source_decides = name == "single" and self.strategy is None and not self.single_flags and self.kernel != "any"
        if name is not None and not source_decides:  # else checked once resolved (``resolve``, _default_or_ladder)
            self._check_strategy(name)

    @property
    def target_spec(self) -> Target:
        """The target's row: the one asked for, else ``targets.DEFAULT_TARGET`` until ``for_family`` names one."""
        return TARGETS[self.target or DEFAULT_TARGET]

    def for_family(self, family: str | None) -> PlanRequest:
        """The request with the target completed where it named none: ``family``'s ``default_target`` (the RMSNorm
        families take ``llama``), ``targets.DEFAULT_TARGET`` without a family."""
        if self.target is not None:
            return self
        from ..checkpoint.config import FAMILIES

        spec = FAMILIES.get(family) if family is not None else None
        return dataclasses.replace(self, target=spec.default_target if spec is not None else DEFAULT_TARGET)

    @property
    def single_flags(self) -> bool:
        """Whether a flag only the single pair takes was given (--theta, --max-phase, --pairs, --split)."""
        return self.theta is not None or self.max_phase is not None or self.pairs != 1 or self.split is not None

    @property
    def chosen_strategy(self) -> str | None:
        """The strategy of ``STRATEGIES`` this request asks for (None while the dtype decides and is not known):
        ``strategy`` if given (``single`` with --rope-base is ``fixed-base``); else ``single`` when a single-pair flag
        is given, else the target's default for the dtype (``Target.default_strategy``)."""
        name = self.strategy
        if name is None:
            if self.single_flags:
                name = "single"
            elif self.dtype is None:
                return None
            else:
                name = self.target_spec.default_strategy(self.dtype)
        return "fixed-base" if name == "single" and self.rope_base is not None else name

    def _check_strategy(self, strategy: str) -> None:
        target = self.target_spec
        if strategy not in target.strategies:
            takes = " or ".join(target.strategies)
            carriers = " or ".join(carrying(strategy))
            if strategy == "ladder":
                raise ValueError(f"--target {self.target} takes the {takes} strategy; the ladder needs --target "
                                 f"{carriers} (or --strategy single)")
            raise ValueError(f"--target {self.target} takes the {takes} strategy (its single pair turns at a free "
                             f"theta): --rope-base and --pairs with the single pair are for {carriers}")
        STRATEGIES[strategy].check(self)

    def with_dtype(self, dtype: str) -> PlanRequest:
        """The request completed with the checkpoint's dtype where it named none (validated again)."""
        return self if self.dtype is not None else dataclasses.replace(self, dtype=dtype)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out.pop("calibration_text")  # the text itself is not recorded; the advantages it gave are
        if out["engine"] is None:  # records without one read as before
            out.pop("engine")
        return out


def resolve(source, request: PlanRequest) -> PlanRequest:
    """``request`` completed for ``source`` (``slopes`` ``(h,)``, ``family``), once, as every strategy plans from
    it: the dtype must be known (``with_dtype``) and the kernel must run it; the target, where it names none, the
    family's (``for_family``), refused where it cannot carry the source (``Target.check_source``); the strategy
    chosen (``chosen_strategy``); the tolerance ``numerics.plan_tolerance`` and the cutoff the strategy's default
    (``Strategy.cutoff``) where none is given."""
    from ..numerics import plan_tolerance
    from ..targets.kernels import check_dtype

    if request.dtype is None:
        raise ValueError("the request names no dtype: complete it with PlanRequest.with_dtype")
    check_dtype(request.kernel, request.dtype)
    request = request.for_family(getattr(source, "family", None))
    target = request.target_spec
    target.check_source(source)
    strategy = STRATEGIES[_default_or_ladder(request, target, source.head_dim)]
    tolerance = request.tolerance
    if tolerance is None:
        tolerance = plan_tolerance(request.dtype, source.slopes, request.window)
    cutoff = strategy.cutoff(request.window, request.dtype) if request.cutoff is None else request.cutoff
    return dataclasses.replace(request, strategy=strategy.name, tolerance=tolerance, cutoff=cutoff)


def _default_or_ladder(request: PlanRequest, target: Target, head_dim: int) -> str:
    """``request.chosen_strategy``, except where it is the single pair by default (float32, no strategy or
    single-pair flag given) and the kernel does not run the head dim the single pair serves at while the target
    carries the ladder (``single_pair_unserved``): then the ladder, planned for float32, which takes a rotary width
    whose head dim the kernel runs."""
    name = request.chosen_strategy
    if (name == "single" and request.strategy is None and not request.single_flags and "ladder" in target.strategies
            and single_pair_unserved(target, head_dim, request.kernel) is not None):
        return "ladder"
    return name


def float32_ladder_note(plan, target: Target, request: PlanRequest) -> str | None:
    """The one line ``plan`` and ``convert`` print where float32 took the ladder by default
    (``_default_or_ladder``) for ``request`` as asked: why the single pair could not be served; None elsewhere."""
    if plan.dtype != "float32" or plan.strategy != "ladder" or request.strategy is not None or request.single_flags:
        return None
    return single_pair_unserved(target, plan.head_dim, request.kernel)


def single_pair_unserved(target: Target, head_dim: int, kernel: str) -> str | None:
    """Why the single pair cannot be served on ``kernel`` (``Target.single_head_dim``: hd + 2 or hd + 4 is not a
    size it runs; vLLM's CPU attention runs none of them for hd 32, 64, 80 or 128), in one line; None where it
    can."""
    from ..targets.kernels import KERNELS

    served, k = target.single_head_dim(head_dim), KERNELS[kernel]
    if k.runs(served):
        return None
    return (f"float32 takes the ladder planned for float32: the single pair would serve head dim {served} on "
            f"--target {target.name}, which --kernel {k.name} does not run ({k.sizes})")
