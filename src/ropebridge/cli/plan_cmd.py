"""``ropebridge plan``: preview the emulation ``convert`` would write, with predicted errors (calls
``planning.plan_checkpoint`` with ``--model``, as convert does, or ``planning.plan_source`` with ``--heads``); its
``--json`` is the plan with the resolved request (``resolved``) that convert records."""

from __future__ import annotations

import argparse
from pathlib import Path

from .. import reports
from ..checkpoint.config import FAMILIES, from_heads
from ..emulation.fixed_base import max_window_for_phase
from ..emulation.resolved import float32_ladder_note
from ..limit import conversion_limit
from ..checkpoint.hub import resolve_source
from ..planning import plan_checkpoint, plan_source, what_would_fit
from ..targets.engines import describe
from ..serving import kv_cost
from ..targets.kernels import engine_kernels
from ._options import (add_planning_options, add_verbose, check_plot, families, numeric, plan_request,
                       plot_and_json)

MAX_HEADS, MAX_HEAD_DIM = 65536, 65536


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="preview the RoPE emulation convert would write (theta, N or the ladder per head), "
                                    "with predicted errors")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", metavar="PATH",
                     help=f"an ALiBi checkpoint directory, its config.json or a hub id ({families()})")
    src.add_argument("--heads", type=numeric(int, 1, MAX_HEADS), help="number of heads (with --head-dim)")
    p.add_argument("--head-dim", type=numeric(int, 1, MAX_HEAD_DIM), help="head dim (with --heads)")
    p.add_argument("--family", default="bloom", choices=tuple(FAMILIES), help="with --heads (default bloom)")
    add_planning_options(p)
    p.add_argument("--ladder", dest="strategy", action="store_const", const="ladder", help="same as --strategy ladder")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--plot", metavar="FILE.png", help="ALiBi vs emulated bias and error vs distance for a few heads")
    add_verbose(p)
    p.set_defaults(run=run)


PHASE = 0.1  # the phase the fixed base's report measures windows by: the source text's rule


def run(args: argparse.Namespace) -> int:
    check_plot(args)
    if args.model is None and args.calibration_text is not None:
        raise ValueError("--calibration-text needs --model (a checkpoint with weights)")
    request = plan_request(args, progress=not args.json)
    if args.model is not None:  # a directory, its config.json, or a hub id (as convert takes)
        model = args.model if Path(args.model).is_file() else resolve_source(args.model)
        plan, resolved, _ = plan_checkpoint(model, request, source_name=args.model)
    else:
        if args.head_dim is None:
            raise ValueError("--heads needs --head-dim")
        plan, resolved, _ = plan_source(from_heads(args.heads, args.head_dim, args.family), request)
    if plan.strategy == "ladder":
        return _show_ladder(plan, args, resolved)
    phase_window = None
    if plan.strategy == "fixed-base":
        phase_window = max_window_for_phase(plan.base, plan.rotary_dim, PHASE)
    def data() -> dict:
        out = _preview(plan, resolved)
        if phase_window is not None:
            out["max_window_at_phase"] = {"phase": PHASE, "window": phase_window}
        return out

    if plot_and_json(args, lambda: reports.emulation_figure(plan), data):
        return 0
    print(f"{plan.family}: {len(plan.heads)} heads, head_dim {plan.head_dim}, window {plan.window}, "
          f"{plan.dtype}, strategy {plan.strategy_label}" + (f", base {plan.base:g}, rotary_dim {plan.rotary_dim}, "
                                              f"{plan.pairs_per_head} pair(s)/head" if plan.base else ""))
    print(f"{'head':>4} {'slope':>10} {'theta':>11} {'N':>11} {'phase':>8} {'approx_err':>10} {'round_err':>10} "
          f"{'predicted':>10}")
    for h in plan.heads:
        print(f"{h.head:>4} {h.slope:>10.4g} {h.theta:>11.4e} {h.N:>11.4e} {h.phase(plan.window):>8.4g} "
              f"{h.approximation_error:>10.3e} {h.rounding_error:>10.3e} {h.predicted_error:>10.3e}")
        if len(h.pairs) > 1:
            print("     pairs: " + ", ".join(f"r={p.index} theta={p.theta:.4e} N={p.N:.4e}" for p in h.pairs))
        if h.split != 1.0:
            print(f"     split: q = (-N/{h.split:.6g}, 0), k = (0, {h.split:.6g})")
    _verdict(plan, args, resolved)
    if plan.max_window is not None:
        print(f"longest window within {plan.tolerance:g} logits at base {plan.base:g}: {plan.max_window} tokens; "
              f"phase {PHASE:g} on the slowest pair: {phase_window} tokens")
    return 0


def _preview(plan, resolved) -> dict:
    """``--json``: the plan with the resolved request convert records (``"resolved"``) and the limit verify holds
    its conversion to over the window (``"verify_limit"``, ``limit.conversion_limit``)."""
    return {**plan.to_dict(), "resolved": resolved.to_dict(), "verify_limit": conversion_limit(plan)}


def _show_ladder(plan, args: argparse.Namespace, resolved) -> int:
    if plot_and_json(args, lambda: reports.ladder_figure(plan), lambda: _preview(plan, resolved)):
        return 0
    print(f"{plan.family}: {len(plan.heads)} heads, head_dim {plan.head_dim} -> {plan.head_dim + plan.rotary_dim}, "
          f"window {plan.window}, {plan.dtype}, ladder of {plan.pairs_per_head} pairs, base {plan.base:.6g}")
    print(f"{'head':>4} {'slope':>10} {'floor C':>8} {'W':>7} {'shift':>8} {'sum|amp|':>9} {'approx_err':>10} "
          f"{'round_err':>10} {'predicted':>10}")
    for h in plan.heads:
        amp = sum(abs(p.N) + abs(p.M) for p in h.pairs) * plan.scale  # logits
        print(f"{h.head:>4} {h.slope:>10.4g} {h.ladder.floor:>8.4g} {h.ladder.exact_distance:>7} "
              f"{h.ladder.shift:>8.4g} {amp:>9.4g} {h.approximation_error:>10.3e} "
              f"{h.rounding_error:>10.3e} {h.predicted_error:>10.3e}")
    _verdict(plan, args, resolved)
    return 0


def _verdict(plan, args: argparse.Namespace, resolved) -> None:
    """The worst head against the tolerance, what would fit where the plan misses it (as convert says), and for a
    checkpoint (``--model``) the target convert writes (``resolved.target``) and its engines."""
    w = plan.worst_head
    verdict = "meets" if plan.meets_tolerance else "does NOT meet"
    print(f"worst head {w.head}: predicted max |error| {w.predicted_error:.3e} logits; the plan {verdict} "
          f"the tolerance {plan.tolerance:g}")
    if not plan.meets_tolerance:
        print(f"what would fit: {what_would_fit(plan, resolved)}")
    if args.model is None:
        return
    target = resolved.target_row
    why = float32_ladder_note(plan, resolved)
    if why is not None:
        print(why)
    print(f"target {target.name} ({target.architecture}): {target.engines}")
    if args.engine is not None:
        print(f"--engine {args.engine}: {describe(target.name, args.engine)}")
    served = target.served_head_dim(plan.head_dim, plan.rotary_dim, plan.strategy)
    print(f"head dim {served} runs on: " + "; ".join(f"{e} {k}" for e, k in engine_kernels(served, plan.dtype).items()))
    print(f"serving cost: {kv_cost(plan.head_dim, served)}")
