"""The one planning path: the emulation plan a converted checkpoint will carry.

``ropebridge plan`` (a preview) and ``ropebridge convert`` (the action) both call ``conversion_plan`` with
the same arguments, so ``plan --model SRC [flags] --json`` prints exactly the plan that ``convert SRC DST
[flags]`` records in ``ropebridge.json``. A stock target's heads share one frequency set:

- ``emulation="ladder"`` (default for bfloat16/float16 on gpt-neox): every pair of a rotary block
  (``ladder.plan_ladder``);
- ``"single"``: one slow pair per head: with ``base`` the best ``pairs`` consecutive pairs of that base
  (mode ``fixed-base``); otherwise one theta for all heads (``theta``, ``max_phase / window``, the exact
  rotation theta in float32, else the worst head's error-optimal theta), which gpt-neox realises with
  rotary dim 4 and base ``theta^-2``, the compact targets with a RoPE scaling factor ``1/theta``.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from . import _checks
from .emulation import EmulationPlan, plan_emulation, shared_theta
from .error_model import DTYPES, EXACT_TABLE_ANGLE, plan_tolerance
from .ladder import DEFAULT_HEAD_DIM_MULTIPLE, check_window, engine_frequencies, plan_ladder

SINGLE_CUTOFF = 40.0  # single pair: logits below -40 carry no weight (its error model counts d <= 40/m)

TARGETS = ("gpt-neox", "starcoder2", "nemotron")
EMULATIONS = ("ladder", "single")
DEFAULT_WINDOW = 8192
SINGLE_PAIR_ROTARY_DIM = 4  # pair 0 always turns at 1 rad/token; pair 1 at base^(-1/2) = the planned theta
FIXED_BASE_ROTARY_DIM = 16


def exact_rotation_theta(window: int) -> float:
    """theta = 2^-k, the largest power of two with theta * window <= 2^-12: every float32 angle p * theta
    (p <= window) is exact (a power of two only shifts the exponent), cos(p theta) rounds to exactly 1 and
    sin(p theta) to p theta itself (their next terms, x^2/2 and x^3/6, fall below half an ulp), so the
    rotation of the emulation pair is exact: the rounding that remains is that of the products with N.
    The sine approximation then costs m theta^2 d^3 / 6 <= m d 2^-24 / 6, below float32's own rounding
    of m d. Measured on the demo model at 2K tokens, against an exact float64 ALiBi forward pass: 8e-6
    logits, where the error-optimal theta (4.3e-7, not a power of two) gave 5e-4 and native BLOOM in
    float32 2.3e-4."""
    return math.ldexp(EXACT_TABLE_ANGLE, -(window - 1).bit_length())  # bit_length: ceil(log2(window))


def default_emulation(dtype: str, target: str) -> str:
    """The frequency ladder for bfloat16/float16 on gpt-neox (its rounding does not grow with the context);
    the exact single pair in float32 and on the compact targets (which rotate one pair only)."""
    return "ladder" if dtype != "float32" and target == "gpt-neox" else "single"


def conversion_plan(
    source: Any, *, window: int = DEFAULT_WINDOW, dtype: str = "float32", target: str = "gpt-neox",
    emulation: str | None = None, theta: float | None = None, max_phase: float | None = None,
    base: float | None = None, rotary_dim: int | None = None, pairs: int = 1,
    floors: float | list[float] | None = None, advantages: list[float] | None = None,
    head_dim_multiple: int = DEFAULT_HEAD_DIM_MULTIPLE, tolerance: float | None = None, cutoff: float | None = None,
    split: float | str | None = None, jobs: int = 1, progress: bool = False,
) -> EmulationPlan:
    """The plan (module doc). ``source``: anything with ``slopes`` ``(h,)``, ``head_dim`` and ``family``
    (``sources.AlibiSource``, ``convert.families.SourceInfo``). ``tolerance`` defaults to
    ``error_model.plan_tolerance``; ``emulation`` to ``default_emulation`` unless ``theta``, ``max_phase``,
    ``pairs`` or ``split`` ask for the single pair. ``cutoff`` defaults to ``ladder.default_cutoff`` for the ladder and
    ``SINGLE_CUTOFF`` for the single pair; ``advantages`` (calibrated, per head) are added to it for the
    ladder's floors. ``jobs`` and ``progress`` are the ladder's (``ladder.fit_heads``): how, not what."""
    window = check_window(window)
    jobs = _checks.positive_int("jobs", jobs)
    _checks.choice("dtype", dtype, tuple(DTYPES))
    _checks.choice("target", target, TARGETS)
    cutoff = None if cutoff is None else _checks.positive("cutoff", cutoff)
    tolerance = plan_tolerance(dtype, source.slopes, window) if tolerance is None else _checks.positive(
        "tolerance", tolerance)
    single_flags = theta is not None or max_phase is not None or pairs != 1 or split is not None
    if emulation is None:
        emulation = "single" if single_flags else default_emulation(dtype, target)
    _checks.choice("emulation", emulation, EMULATIONS)
    if emulation == "single" and cutoff is None:
        cutoff = SINGLE_CUTOFF
    common = dict(dtype=dtype, tolerance=tolerance, family=source.family, source=None, cutoff=cutoff)
    if rotary_dim is not None and base is None and emulation == "single":
        raise ValueError("--rotary-dim needs --rope-base with --emulation single (the free-theta pair uses 4 dims)")
    if emulation == "ladder":
        if target != "gpt-neox":
            raise ValueError(f"--target {target} rotates one pair at one theta; the ladder needs --target gpt-neox "
                             "(or --emulation single)")
        if single_flags:
            raise ValueError("--theta, --max-phase, --pairs and --split are for --emulation single; the ladder "
                             "plans every pair")
        return plan_ladder(source.slopes, source.head_dim, window, base=base, rotary_dim=rotary_dim,
                           head_dim_multiple=head_dim_multiple, floors=floors, advantages=advantages, jobs=jobs,
                           progress=progress, **common)
    if floors is not None or advantages is not None:
        raise ValueError("--floor and --calibration-text are for --emulation ladder")
    if target != "gpt-neox" and (base is not None or pairs != 1):
        raise ValueError(f"--target {target} rotates one pair at a free theta: --rope-base and --pairs are for gpt-neox")
    if base is not None:
        if theta is not None or max_phase is not None:
            raise ValueError("give either --rope-base (with --rotary-dim) or --theta/--max-phase, not both")
        plan = plan_emulation(source.slopes, source.head_dim, window, base=base,
                              rope_dim=rotary_dim or FIXED_BASE_ROTARY_DIM, pairs=pairs, split=split, **common)
        return check_engine_frequencies(plan, f"--rope-base {base:g}")
    if pairs != 1:
        raise ValueError("--pairs > 1 needs a fixed base (--rope-base), whose frequency set provides the pairs")
    if theta is not None and max_phase is not None:
        raise ValueError("give --theta or --max-phase, not both")
    if theta is not None:
        mode = "theta"
    elif max_phase is not None:
        if not 0 < max_phase < math.pi / 2:
            raise ValueError(f"max_phase must be in (0, pi/2), got {max_phase!r}")
        mode, theta = "max-phase", max_phase / window
    elif dtype == "float32":
        mode, theta = "exact-rotation", exact_rotation_theta(window)
    else:
        mode, theta = "error-optimal", shared_theta(source.slopes, source.head_dim, window, dtype=dtype, cutoff=cutoff,
                                                    split=split)
    theta = _checks.positive("theta", theta)
    if theta * window >= math.pi / 2:
        raise ValueError(f"theta * window = {theta * window:.4g} must be < pi/2")
    if target != "gpt-neox":
        plan = plan_emulation(source.slopes, source.head_dim, window, theta=theta, split=split, **common)
    else:  # (no max_window search: with a free base the window is whatever theta was planned for)
        plan = plan_emulation(source.slopes, source.head_dim, window, base=theta**-2.0,
                              rope_dim=SINGLE_PAIR_ROTARY_DIM, max_window=False, split=split, **common)
        check_engine_frequencies(plan, f"the base theta^-2 of theta {theta:.6g}")
    return dataclasses.replace(plan, mode=mode)


def check_engine_frequencies(plan: EmulationPlan, base_from: str) -> EmulationPlan:
    """``plan``, or ``ValueError`` when a planned pair's theta is not the frequency transformers computes for
    its index (float32 ``1/base^(2r/R)``, ``ladder.engine_frequencies``) to within 2^-20: the engine would
    rotate at another speed than the error model predicted for. ``base_from`` says where the base came from."""
    if plan.base is None:
        return plan
    try:
        engine = engine_frequencies(plan.base, plan.rope_dim)
    except ValueError as exc:
        raise ValueError(f"{base_from}: {exc}") from None
    for h in plan.heads:
        for p in h.pairs:
            got = engine[p.index]
            if not abs(got - p.theta) <= 2.0**-20 * p.theta:
                raise ValueError(
                    f"{base_from}: transformers' float32 frequency of pair {p.index} is {got:.6g}, "
                    f"the plan's {p.theta:.6g}; the converted model would not carry this plan")
    return plan


def what_would_fit(plan: EmulationPlan) -> str:
    """One clause for a refusal: what the planner knows would meet the tolerance."""
    hints = []
    if plan.max_window is not None and plan.max_window < plan.window:
        hints.append(f"--window {plan.max_window} fits" if plan.max_window > 0 else "no window fits this base")
    else:
        hints.append("try a shorter --window")
    if plan.dtype != "float32":
        hints.append("--dtype float32 (exact rotation)")
    if plan.mode == "fixed-base":
        hints.append("more --pairs or a larger --rotary-dim")
    elif plan.mode == "ladder":
        hints.append(_ladder_that_fits(plan))
    return ", ".join(hints)


def _ladder_that_fits(plan: EmulationPlan) -> str:
    """The smallest larger rotary dim (up to 64, same base rule) whose ladder meets the tolerance, if any."""
    from .ladder import free_base

    slopes = [h.slope for h in plan.heads]
    floors = [h.floor for h in plan.heads]
    fixed = None if math.isclose(plan.base, free_base(plan.window, plan.rope_dim)) else plan.base
    r = plan.rope_dim
    while r < 64:
        r = min(64, 2 * r)
        better = plan_ladder(slopes, plan.head_dim, plan.window, dtype=plan.dtype, base=fixed, rotary_dim=r,
                             floors=floors, cutoff=plan.cutoff, tolerance=plan.tolerance)
        if better.meets_tolerance:
            return f"--rotary-dim {r} fits (predicted {better.worst_head.predicted_error:.3g})"
    return "no --rotary-dim up to 64 fits; --calibration-text may lower the floor"


def default_dtype(config: dict) -> str:
    """The dtype a checkpoint's config names (``dtype`` or ``torch_dtype``), float32 if none we know."""
    name = str(config.get("dtype") or config.get("torch_dtype") or "float32").replace("torch.", "")
    return name if name in DTYPES else "float32"


def checkpoint_plan(
    src_dir, *, dtype: str | None = None, floor: float | None = None, calibration_text: str | None = None,
    source_name: str | None = None, **flags: Any,
) -> EmulationPlan:
    """``conversion_plan`` for a checkpoint directory (or its config.json): the dtype defaults to the
    checkpoint's, and ``calibration_text`` measures the ladder's floors through its weights
    (``convert.calibration``). ``plan --model`` and ``convert`` both call this."""
    from .convert.families import SourceModel
    from .sources import from_config, load_config

    config = load_config(src_dir)
    source = from_config(config)
    dtype = default_dtype(config) if dtype is None else _checks.choice("dtype", dtype, tuple(DTYPES))
    directory = Path(src_dir)
    model = None
    if directory.is_dir():
        try:  # its tensors' shapes checked against the config, as convert checks them (headers only)
            model = SourceModel(directory, config)
        except FileNotFoundError:  # a directory with a config and no weights: planned from the config alone
            model = None
    advantages = None
    if calibration_text is not None:
        if floor is not None:
            raise ValueError("give --floor or --calibration-text, not both")
        from .convert.calibration import calibrated_advantages

        if model is None:
            raise ValueError("--calibration-text needs a checkpoint directory with weights, not a config file")
        advantages = calibrated_advantages(model, directory, calibration_text)
    plan = conversion_plan(source, dtype=dtype, floors=floor, advantages=advantages, **flags)
    return dataclasses.replace(plan, source=str(src_dir) if source_name is None else source_name)
