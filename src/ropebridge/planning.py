"""The one planning path: the emulation plan a converted checkpoint will carry.

``ropebridge plan`` (a preview) and ``ropebridge convert`` (the action, through ``convert.pipeline.derive``) both
call ``plan_checkpoint`` with the same ``PlanRequest``: the checkpoint is read once, the request resolved once
(``emulation.resolved.resolve``: every choice made), and planned; so ``plan --model SRC [flags] --json`` prints
exactly the plan and the resolved request that ``convert SRC DST [flags]`` records in ``ropebridge.json``.
``plan_source`` is the same for a source known by its heads alone (``plan --heads``).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import NamedTuple

from . import _log
from . import emulation
from .checkpoint.config import from_config, load_config
from .checkpoint.model import SourceModel
from .emulation.kv_cache import check as check_cache
from .emulation import EmulationPlan, PlanRequest, Resolved, resolve

WEIGHT_FILES = ("*.safetensors", "*.bin", "*.index.json")  # a directory with none of these holds a config only
UNSCALED = 2.0  # a q.k scale beyond this many times 1/sqrt(hd) makes the ladder's default advantage a guess

log = _log.logger(__name__)


class Planned(NamedTuple):
    """A plan, the resolved request it was made for, and the checkpoint read (None for a config without weights
    or a source known by its heads)."""

    plan: EmulationPlan
    resolved: Resolved
    model: SourceModel | None


def plan_source(source, request: PlanRequest) -> Planned:
    """The plan of an ``AlibiSource`` (no checkpoint; ``plan --heads``): the preview of any checkpoint with this
    geometry, resolved as one (float32 where no dtype is asked)."""
    resolved = resolve(source, request)
    plan = emulation.plan(source, resolved)
    check_cache(plan, resolved.kv_cache_dtype, request.engine)
    return Planned(plan, resolved, None)


def plan_checkpoint(src_dir, request: PlanRequest, source_name: str | None = None,
                    model: SourceModel | None = None, *, weights: bool = False) -> Planned:
    """The plan of a checkpoint directory (or its config.json) for ``request``: the config read once, the tensors'
    shapes checked against it (headers only; a directory without weight files is planned from its config, or, with
    ``weights``, refused before anything is planned), the request resolved for it (``resolve``, which measures a
    calibration text through the weights), then planned. ``source_name``: the name the plan records (default
    ``src_dir``); ``model``: the checkpoint already read."""
    config = load_config(src_dir) if model is None else model.config
    directory = Path(src_dir)
    if model is None and directory.is_dir() and any(next(directory.glob(p), None) for p in WEIGHT_FILES):
        model = SourceModel(directory, config)
    source = from_config(config) if model is None else model.info
    if weights and model is None:
        raise FileNotFoundError(f"no weights (*.safetensors or *.bin) in {src_dir}")
    resolved = resolve(source, request, model)
    plan = emulation.plan(source, resolved)
    check_cache(plan, resolved.kv_cache_dtype, request.engine)
    doubt = advantage_doubt(source, resolved, plan)
    if doubt is not None:
        log.warning(doubt)
    name = str(src_dir) if source_name is None else source_name
    return Planned(dataclasses.replace(plan, source=name), resolved, model)


def advantage_doubt(source, resolved: Resolved, plan: EmulationPlan) -> str | None:
    """One line where a ladder plans with the default content advantage (no floor, advantage or calibration text
    given) for a source whose q.k scale is above ``UNSCALED`` times 1/sqrt(hd) (a Jais with
    ``scale_attn_weights: false`` scales it by 1): its content logits are that many times those of the models
    the default was measured on, so a far key may lead by more than the floor covers; None otherwise."""
    asked = resolved.asked
    if plan.strategy != "ladder" or asked.floor is not None or asked.advantage is not None:
        return None
    scale = source.qk_scale  # a ``SourceInfo``: read from a config, every family's scale is known
    ratio = scale * math.sqrt(source.head_dim)
    if ratio <= UNSCALED:
        return None
    from .emulation.ladder import DEFAULT_ADVANTAGE

    return (f"this {source.family} model scales q.k by {scale:.3g}, {ratio:.3g} times 1/sqrt({source.head_dim}): "
            f"the ladder's default content advantage ({DEFAULT_ADVANTAGE:g} logits, measured on models scaled by "
            "1/sqrt(hd) or less) may not cover its far keys; convert with --calibration-text FILE (text like what "
            "it will serve), and verify measures it")


def what_would_fit(plan: EmulationPlan, resolved: Resolved) -> str:
    """One clause for a refusal: what the planner knows would meet the tolerance (a ladder: on the next head
    dims the resolved kernel runs, on its target)."""
    hints = []
    if plan.max_window is not None and plan.max_window < plan.window:
        hints.append(f"--window {plan.max_window} fits" if plan.max_window > 0 else "no window fits this base")
    else:
        hints.append("try a shorter --window")
    if plan.dtype != "float32":
        hints.append("--dtype float32 (exact rotation)")
    if plan.strategy == "fixed-base":
        hints.append("more --pairs or a larger --rotary-dim")
    elif plan.strategy == "ladder":
        hints.append(_ladder_that_fits(plan, resolved))
    return ", ".join(hints)


def _ladder_that_fits(plan: EmulationPlan, resolved: Resolved) -> str:
    """The smallest larger rotary dim up to 64 the kernel runs (``targets.kernels.rotary_dims``, the planner's own
    search), same base rule, whose ladder meets the tolerance, if any."""
    from .checkpoint.config import AlibiSource
    from .emulation.ladder import free_base
    from .targets.kernels import rotary_dims

    source = AlibiSource(plan.family or "bloom", len(plan.heads), plan.head_dim, 8.0,
                         tuple(h.slope for h in plan.heads))
    fixed = None if math.isclose(plan.base, free_base(plan.window, plan.rotary_dim)) else plan.base
    for r in rotary_dims(resolved.kernel, plan.head_dim, plan.rotary_dim + 2, limit=64):
        request = PlanRequest(window=plan.window, dtype=plan.dtype, target=resolved.target, strategy="ladder",
                              rope_base=fixed, rotary_dim=r, floor=tuple(h.ladder.floor for h in plan.heads),
                              cutoff=plan.cutoff, tolerance=plan.tolerance, kernel=resolved.kernel)
        better = emulation.plan(source, request)
        if better.meets_tolerance:
            return f"--rotary-dim {r} fits (predicted {better.worst_head.predicted_error:.3g})"
    return "no --rotary-dim up to 64 fits; --calibration-text may lower the floor"
