"""``Resolved``: what will be done for a ``PlanRequest`` on a source, and ``resolve``, the one function that builds it.

A ``PlanRequest`` is what the user asked, None wherever a choice was left to ropebridge; a ``Resolved`` has every
choice made. ``resolve`` holds every rule that completes a request, in this order:

1. **dtype**: the asked one, else the checkpoint's (``checkpoint_dtype``: its config's ``dtype`` or
   ``torch_dtype``), float32 for a source without a config (``plan --heads``).
2. **engine**: the asked one, else ``transformers``; **kernel**: the asked one, else the engine's
   (``targets.support.Engine.kernel``); the kernel must have a path for the dtype (``kernels.check_dtype``).
3. **target**: the asked one, else the first the engine runs natively for this source, the family's
   ``default_target`` first, else the first its Transformers backend runs (``targets.engines.choose_for``).
4. **strategy**: the asked one (``single`` with ``--rope-base`` is ``fixed-base``), else ``single`` where a
   single-pair flag is given, else the target's default for the dtype (``Target.default_strategy``), except that a
   float32 default whose served head dim the kernel does not run takes the ladder planned for float32
   (``single_pair_unserved``); the target must carry it, and the request's options suit it (``Strategy.check``),
   and the target must carry the source's block and residual (``Target.check_source``).
5. **tolerance** (``numerics.plan_tolerance``) and **cutoff** (``Strategy.cutoff``) where none is asked.
6. **floors**: the ladder's floor C per head (``ladder.head_floors``: ``--floor``, else the cutoff plus the
   advantage: the request's ``advantage``, the one ``--calibration-text`` measures through the model, or the
   default).

``Resolved.asked`` is the request as it can be asked again: as asked, with a calibration text replaced by the
advantages it measured (the text is not kept). The conversion record keeps both (``asked`` and ``resolved``),
``plan --json`` prints ``resolved``, and ``verify`` resolves the recorded ``asked`` again and compares.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..numerics import DTYPES
from ..targets import TARGETS, Target, carrying
from .request import PlanRequest
from .strategies import STRATEGIES

UNRECORDED = ("jobs", "progress")  # how the ladder is fitted, not what: the plan is the same whatever they are


def checkpoint_dtype(config: dict | None) -> str:
    """The dtype a checkpoint's config names (``dtype`` or ``torch_dtype``), float32 if none we know or no
    config."""
    config = config or {}
    name = str(config.get("dtype") or config.get("torch_dtype") or "float32").replace("torch.", "")
    return name if name in DTYPES else "float32"


@dataclass(frozen=True)
class Resolved:
    """A plan request with every choice made (module doc): ``window``, ``dtype``, ``target`` (a name of
    ``TARGETS``), ``engine`` (of ``targets.support.ENGINES``), ``kernel`` (of ``targets.kernels.KERNELS``),
    ``strategy`` (of ``STRATEGIES``), the source's ``head_dim``, ``tolerance`` and ``cutoff`` (logits), ``floors``
    (the ladder's C per head ``(h,)``; empty for the other strategies); the strategy's own options as asked, None
    where the strategy chooses them (``theta``, ``max_phase``, ``rope_base``, ``rotary_dim``, ``pairs``,
    ``split``); how the ladder is fitted (``jobs``, ``progress``: not what); ``asked``, the request it
    resolves (module doc); and the KV cache the plan must hold with (``kv_cache_dtype``, None: the model's)."""

    window: int
    dtype: str
    target: str
    engine: str
    kernel: str
    strategy: str
    head_dim: int
    tolerance: float
    cutoff: float
    floors: tuple[float, ...]
    theta: float | None
    max_phase: float | None
    rope_base: float | None
    rotary_dim: int | None
    pairs: int
    split: float | str | None
    asked: PlanRequest
    jobs: int = 1
    progress: bool = False
    kv_cache_dtype: str | None = None

    @property
    def target_row(self) -> Target:
        return TARGETS[self.target]

    def to_dict(self) -> dict[str, Any]:
        """Every choice, as the record's ``resolved`` and ``plan --json``'s ``resolved`` hold it (not ``asked``,
        recorded beside it, nor how the ladder is fitted)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name not in ("asked", *UNRECORDED)}
        out["floors"] = list(self.floors)
        if out["kv_cache_dtype"] is None:  # records without one read as before
            out.pop("kv_cache_dtype")
        return out

    def asked_dict(self) -> dict[str, Any]:
        """``asked`` as the record keeps it (``PlanRequest.to_dict`` without how the ladder is fitted)."""
        return {k: v for k, v in self.asked.to_dict().items() if k not in UNRECORDED}


def resolve(source, asked: PlanRequest, model=None) -> Resolved:
    """``asked`` completed for ``source`` (``slopes`` ``(h,)``, ``head_dim``, ``family``; a ``SourceInfo`` adds its
    config, block and residual) by every rule of the module doc, once; ``model``: the checkpoint read
    (``SourceModel``), which a calibration text is measured through. ``ValueError`` naming the option where the
    request cannot be done on this source."""
    from ..numerics import plan_tolerance
    from ..targets.engines import choose_for
    from ..targets.kernels import check_dtype
    from ..targets.support import ENGINES

    dtype = asked.dtype or checkpoint_dtype(getattr(source, "config", None))
    engine = asked.engine or "transformers"
    if asked.kv_cache_dtype is not None:
        from .kv_cache import FORMATS

        names = [n for n, f in FORMATS.items() if asked.engine in f.engines]
        if asked.engine is not None and asked.kv_cache_dtype not in names:
            raise ValueError(f"--kv-cache-dtype {asked.kv_cache_dtype} is not a cache --engine {asked.engine} keeps; "
                             f"the ones it keeps are {', '.join(names)}")
    kernel = asked.kernel if asked.kernel != "any" else ENGINES[engine].kernel
    check_dtype(kernel, dtype)
    target = TARGETS[asked.target or choose_for(source, engine).target]
    name = _strategy(asked, target, dtype, kernel, source.head_dim)
    strategy = STRATEGIES[name]
    _check_strategy(asked, target, name)
    target.check_source(source)
    if asked.calibration_text is not None:
        asked = _calibrated(asked, model)
    tolerance = plan_tolerance(dtype, source.slopes, asked.window) if asked.tolerance is None else asked.tolerance
    cutoff = strategy.cutoff(asked.window, dtype) if asked.cutoff is None else asked.cutoff
    floors: tuple[float, ...] = ()
    if name == "ladder":
        from .ladder import head_floors

        floors = tuple(head_floors(len(source.slopes), cutoff, asked.floor, asked.advantage))
    return Resolved(window=asked.window, dtype=dtype, target=target.name, engine=engine, kernel=kernel, strategy=name,
                    head_dim=source.head_dim, tolerance=tolerance, cutoff=cutoff, floors=floors, theta=asked.theta,
                    max_phase=asked.max_phase, rope_base=asked.rope_base, rotary_dim=asked.rotary_dim,
                    pairs=asked.pairs, split=asked.split, asked=asked, jobs=asked.jobs, progress=asked.progress,
                    kv_cache_dtype=asked.kv_cache_dtype)


def _calibrated(asked: PlanRequest, model) -> PlanRequest:
    """``asked`` with its calibration text replaced by the per-head advantages it measures through ``model``."""
    if model is None:
        raise ValueError("--calibration-text needs a checkpoint directory with weights, not a config file")
    from ..checkpoint.calibration import calibrated_advantages

    advantages = calibrated_advantages(model, model.reader.directory, asked.calibration_text)
    return dataclasses.replace(asked, calibration_text=None, advantage=tuple(advantages))


def _strategy(asked: PlanRequest, target: Target, dtype: str, kernel: str, head_dim: int) -> str:
    """The strategy of rule 4 (module doc)."""
    name = asked.named_strategy
    if name is None:
        name = target.default_strategy(dtype)
        if (name == "single" and asked.rope_base is None and "ladder" in target.strategies
                and single_pair_unserved(target, head_dim, kernel)):
            name = "ladder"
    return asked.with_base(name)


def _check_strategy(asked: PlanRequest, target: Target, strategy: str) -> None:
    """``ValueError`` where ``target`` does not carry ``strategy`` (naming those that do) or ``asked`` gives an
    option the strategy does not take (``Strategy.check``)."""
    if strategy not in target.strategies:
        takes = " or ".join(target.strategies)
        carriers = " or ".join(carrying(strategy))
        if strategy == "ladder":
            raise ValueError(f"--target {target.name} takes the {takes} strategy; the ladder needs --target "
                             f"{carriers} (or --strategy single)")
        raise ValueError(f"--target {target.name} takes the {takes} strategy (its single pair turns at a free "
                         f"theta): --rope-base and --pairs with the single pair are for {carriers}")
    STRATEGIES[strategy].check(asked)


def float32_ladder_note(plan, resolved: Resolved) -> str | None:
    """The one line ``plan`` and ``convert`` print where float32 took the ladder by default (rule 4 of the module
    doc): why the single pair could not be served; None elsewhere."""
    asked = resolved.asked
    if plan.dtype != "float32" or plan.strategy != "ladder" or asked.named_strategy is not None:
        return None
    return single_pair_unserved(resolved.target_row, plan.head_dim, resolved.kernel)


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
