"""The one planning path: the emulation plan a converted checkpoint will carry.

``ropebridge plan`` (a preview) and ``ropebridge convert`` (the action) both call ``plan_checkpoint`` with the same
``PlanRequest``, so ``plan --model SRC [flags] --json`` prints exactly the plan that ``convert SRC DST [flags]``
records in ``ropebridge.json``. The strategy comes from the request and the target (``emulation.STRATEGIES``,
``targets.TARGETS``): the ladder for bfloat16/float16 where the target carries it, the exact single pair otherwise.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from . import _log
from . import emulation
from .checkpoint.config import from_config, load_config
from .checkpoint.model import SourceModel
from .emulation import EmulationPlan, PlanRequest
from .numerics import DTYPES

WEIGHT_FILES = ("*.safetensors", "*.bin", "*.index.json")  # a directory with none of these holds a config only
UNSCALED = 2.0  # a q.k scale beyond this many times 1/sqrt(hd) makes the ladder's default advantage a guess

log = _log.logger(__name__)


def default_dtype(config: dict) -> str:
    """The dtype a checkpoint's config names (``dtype`` or ``torch_dtype``), float32 if none we know."""
    name = str(config.get("dtype") or config.get("torch_dtype") or "float32").replace("torch.", "")
    return name if name in DTYPES else "float32"


def plan_source(source, request: PlanRequest) -> EmulationPlan:
    """The plan of an ``AlibiSource`` (no checkpoint): the request's dtype, float32 if it names none; the target,
    where none is named and ``--engine`` is, the one that engine runs for a checkpoint of this family as published
    (``targets.engines.choose_for_family``), as ``prepare`` chooses it for a checkpoint: the preview of any source
    with this geometry."""
    if request.engine is not None and request.target is None:
        from .targets.engines import choose_for_family

        request = dataclasses.replace(request, target=choose_for_family(source.family, request.engine).target)
    return emulation.plan(source, request.with_dtype("float32"))


def prepare(src_dir, request: PlanRequest,
            model: SourceModel | None = None) -> tuple[PlanRequest, SourceModel | None, Any]:
    """The request completed for a checkpoint directory (or its config.json), the checkpoint read as a
    ``SourceModel`` (None for a config without weights) and its ``AlibiSource``, the config read once: the dtype
    defaults to the checkpoint's; the tensors' shapes are checked against the config (headers only);
    ``calibration_text`` is measured through the weights into per-head advantages (``checkpoint.calibration``), which
    the completed request carries instead of the text; the target, where none is named, is the one ``--engine`` runs
    for the source (``targets.engines.choose``), else the family's.
    ``model``: the checkpoint already read (not read again)."""
    config = load_config(src_dir) if model is None else model.config
    request = request.with_dtype(default_dtype(config))
    directory = Path(src_dir)
    if model is None and directory.is_dir() and any(next(directory.glob(p), None) for p in WEIGHT_FILES):  # else planned from the config alone
        model = SourceModel(directory, config)
    source = from_config(config) if model is None else model.info
    if request.engine is not None and request.target is None:  # the target the engine runs for this source
        from .targets.engines import choose

        request = dataclasses.replace(request, target=choose(source, request.engine).target)
    request = request.for_family(source.family)
    if request.calibration_text is not None:
        if model is None:
            raise ValueError("--calibration-text needs a checkpoint directory with weights, not a config file")
        from .checkpoint.calibration import calibrated_advantages

        advantages = calibrated_advantages(model, directory, request.calibration_text)
        request = dataclasses.replace(request, calibration_text=None, advantage=tuple(advantages))
    return request, model, source


def plan_checkpoint(src_dir, request: PlanRequest, source_name: str | None = None) -> tuple[EmulationPlan, SourceModel | None]:
    """The plan of a checkpoint directory (or its config.json) for ``request`` (``prepare``), and the checkpoint
    read as a ``SourceModel`` (None for a config without weights)."""
    plan, _, model = plan_and_request(src_dir, request, source_name)
    return plan, model


def plan_and_request(src_dir, request: PlanRequest,
                     source_name: str | None = None) -> tuple[EmulationPlan, PlanRequest, SourceModel | None]:
    """``plan_checkpoint``'s plan, the completed request it was made for (its target, dtype, kernel), and the
    checkpoint read."""
    request, model, source = prepare(src_dir, request)
    plan = emulation.plan(source, request)
    doubt = advantage_doubt(source, request, plan)
    if doubt is not None:
        log.warning(doubt)
    return dataclasses.replace(plan, source=str(src_dir) if source_name is None else source_name), request, model


def advantage_doubt(source, request: PlanRequest, plan: EmulationPlan) -> str | None:
    """One line where a ladder plans with the default content advantage (no floor, advantage or calibration text
    given) for a source whose q.k scale is above ``UNSCALED`` times 1/sqrt(hd) (a Jais with
    ``scale_attn_weights: false`` scales it by 1): its content logits are that many times those of the models
    the default was measured on, so a far key may lead by more than the floor covers; None otherwise."""
    if plan.strategy != "ladder" or request.floor is not None or request.advantage is not None:
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


def what_would_fit(plan: EmulationPlan, kernel: str = "any") -> str:
    """One clause for a refusal: what the planner knows would meet the tolerance (a ladder: on the next head
    dims ``kernel`` runs)."""
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
        hints.append(_ladder_that_fits(plan, kernel))
    return ", ".join(hints)


def _ladder_that_fits(plan: EmulationPlan, kernel: str) -> str:
    """The smallest larger rotary dim up to 64 the kernel runs (``targets.kernels.rotary_dims``, the planner's own
    search), same base rule, whose ladder meets the tolerance, if any."""
    from .checkpoint.config import AlibiSource
    from .emulation.ladder import free_base
    from .targets.kernels import rotary_dims

    source = AlibiSource(plan.family or "bloom", len(plan.heads), plan.head_dim, 8.0, tuple(h.slope for h in plan.heads))
    fixed = None if math.isclose(plan.base, free_base(plan.window, plan.rotary_dim)) else plan.base
    for r in rotary_dims(kernel, plan.head_dim, plan.rotary_dim + 2, limit=64):
        request = PlanRequest(window=plan.window, dtype=plan.dtype, strategy="ladder", rope_base=fixed,
                              rotary_dim=r, floor=tuple(h.ladder.floor for h in plan.heads), cutoff=plan.cutoff,
                              tolerance=plan.tolerance, kernel=kernel)
        better = emulation.plan(source, request)
        if better.meets_tolerance:
            return f"--rotary-dim {r} fits (predicted {better.worst_head.predicted_error:.3g})"
    return "no --rotary-dim up to 64 fits; --calibration-text may lower the floor"
