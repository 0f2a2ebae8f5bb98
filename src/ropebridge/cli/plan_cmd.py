"""``ropebridge plan``: theta and N for every ALiBi head, with predicted errors (calls ``emulation.plan_emulation``)."""

from __future__ import annotations

import argparse
import json
import math
import sys

from ..emulation import plan_emulation
from ..error_model import PLAN_TOLERANCE, DTYPES
from ..ladder import DEFAULT_ADVANTAGE, DEFAULT_CUTOFF, DEFAULT_HEAD_DIM_MULTIPLE, plan_ladder
from ..fixed_base import max_window_for_phase
from ..sources import FAMILIES, from_config, from_heads


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="plan the RoPE emulation (theta, N) of every ALiBi head, with predicted errors")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", metavar="PATH", help="a BLOOM, MPT or Falcon (alibi) checkpoint directory or config.json")
    src.add_argument("--heads", type=int, help="number of heads (with --head-dim)")
    p.add_argument("--head-dim", type=int, help="head dim (with --heads)")
    p.add_argument("--family", default="bloom", help=f"with --heads: one of {', '.join(FAMILIES)} (default bloom)")
    p.add_argument("--window", type=int, required=True, help="longest context to serve, extrapolation included")
    p.add_argument("--dtype", default="float32", choices=tuple(DTYPES), help="dtype of the converted model (default float32)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--max-phase", type=float, help="theta = phase/window (the source text's rule)")
    mode.add_argument("--theta", type=float, help="a given theta")
    p.add_argument("--base", "--rope-base", dest="base", type=float,
                   help="fixed RoPE base: theta from base^(-2r/rope_dim)")
    p.add_argument("--rope-dim", "--rotary-dim", dest="rope_dim", type=int,
                   help="rotary dim of the frequency set (with --base; ladder: default from --head-dim-multiple)")
    p.add_argument("--emulation", choices=("ladder", "single"),
                   help="ladder (every pair of a rotary block, as convert does in bfloat16/float16) or single (one "
                        "slow pair per head); default: ladder for bfloat16/float16 unless a single-pair flag is given")
    p.add_argument("--ladder", dest="emulation", action="store_const", const="ladder", help="same as --emulation ladder")
    p.add_argument("--floor", type=float, help="ladder: the floor C (logits) beyond W = C/m "
                   f"(default {DEFAULT_CUTOFF + DEFAULT_ADVANTAGE:g})")
    p.add_argument("--head-dim-multiple", type=int, default=DEFAULT_HEAD_DIM_MULTIPLE,
                   help=f"ladder: head_dim + R a multiple of this (default {DEFAULT_HEAD_DIM_MULTIPLE})")
    p.add_argument("--pairs", type=int, default=1, help="pairs per head for the multi-pair fit (with --base)")
    p.add_argument("--split", help="float16: k value s with q=(-N/s,0), k=(0,s); 'sqrt' for s=sqrt(N)")
    p.add_argument("--cutoff", type=float, default=40.0, help="logits below -cutoff carry no weight (default 40)")
    p.add_argument("--tolerance", type=float,
                   help="error the plan must meet, logits (default per dtype: float32 1e-3, bfloat16 2, float16 0.25)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--plot", metavar="FILE.png", help="ALiBi vs emulated bias and error vs distance for a few heads")
    p.set_defaults(run=run)


def _split(text: str | None) -> float | str | None:
    if text is None or text == "sqrt":
        return text
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"split must be a number or 'sqrt', got {text!r}") from None


def run(args: argparse.Namespace) -> int:
    if args.model is not None:
        source = from_config(args.model)
    else:
        if args.head_dim is None:
            raise ValueError("--heads needs --head-dim")
        source = from_heads(args.heads, args.head_dim, args.family)
    if args.max_phase is not None and args.base is None and not 0 < args.max_phase < math.pi / 2:
        raise ValueError(f"max_phase must be in (0, pi/2), got {args.max_phase}")
    tolerance = PLAN_TOLERANCE[args.dtype] if args.tolerance is None else args.tolerance
    single = args.max_phase is not None or args.theta is not None or args.pairs != 1 or args.split is not None
    emulation = args.emulation or ("single" if single or args.dtype == "float32" else "ladder")
    if emulation == "ladder":
        if single:
            raise ValueError("--max-phase, --theta, --pairs and --split are for --emulation single")
        plan = plan_ladder(source.slopes, source.head_dim, args.window, dtype=args.dtype, base=args.base,
                           rotary_dim=args.rope_dim, head_dim_multiple=args.head_dim_multiple, floors=args.floor,
                           cutoff=args.cutoff, tolerance=tolerance, family=source.family, source=source.path)
        return _show_ladder(plan, args)
    if args.floor is not None:
        raise ValueError("--floor is for --emulation ladder")
    plan = plan_emulation(
        source.slopes, source.head_dim, args.window, dtype=args.dtype,
        max_phase=args.max_phase if args.base is None else None, theta=args.theta,
        base=args.base, rope_dim=args.rope_dim, pairs=args.pairs, split=_split(args.split),
        cutoff=args.cutoff, tolerance=tolerance, family=source.family, source=source.path,
    )
    phase_window = None
    if args.base is not None:
        phase_window = max_window_for_phase(args.base, args.rope_dim, args.max_phase or 0.1)
    if args.plot:
        from ..plots import emulation_figure

        emulation_figure(plan).savefig(args.plot, dpi=120)
    if args.json:
        data = plan.to_dict()
        if phase_window is not None:
            data["max_window_at_phase"] = {"phase": args.max_phase or 0.1, "window": phase_window}
        json.dump(data, sys.stdout, indent=1)
        print()
        return 0
    print(f"{source.family}: {len(plan.heads)} heads, head_dim {plan.head_dim}, window {plan.window}, "
          f"{plan.dtype}, mode {plan.mode}" + (f", base {plan.base:g}, rope_dim {plan.rope_dim}, "
                                              f"{plan.pairs_per_head} pair(s)/head" if plan.base else ""))
    print(f"{'head':>4} {'slope':>10} {'theta':>11} {'N':>11} {'phase':>8} {'sine_err':>10} {'round_err':>10} "
          f"{'predicted':>10}")
    for h in plan.heads:
        print(f"{h.head:>4} {h.slope:>10.4g} {h.theta:>11.4e} {h.N:>11.4e} {h.phase:>8.4g} {h.sine_error:>10.3e} "
              f"{h.rounding_error:>10.3e} {h.predicted_error:>10.3e}")
        if len(h.pairs) > 1:
            print("     pairs: " + ", ".join(f"r={p.index} theta={p.theta:.4e} N={p.N:.4e}" for p in h.pairs))
        if h.split != 1.0:
            print(f"     split: q = (-N/{h.split:.6g}, 0), k = (0, {h.split:.6g})")
    w = plan.worst_head
    verdict = "meets" if plan.meets_tolerance else "does NOT meet"
    print(f"worst head {w.head}: predicted max |error| {w.predicted_error:.3e} logits; the plan {verdict} "
          f"the tolerance {plan.tolerance:g}")
    if plan.max_window is not None:
        print(f"longest window within {plan.tolerance:g} logits at base {plan.base:g}: {plan.max_window} tokens; "
              f"phase {args.max_phase or 0.1:g} on the slowest pair: {phase_window} tokens")
    return 0


def _show_ladder(plan, args: argparse.Namespace) -> int:
    if args.plot:
        from ..plots import ladder_figure

        ladder_figure(plan).savefig(args.plot, dpi=120)
    if args.json:
        json.dump(plan.to_dict(), sys.stdout, indent=1)
        print()
        return 0
    print(f"{plan.family}: {len(plan.heads)} heads, head_dim {plan.head_dim} -> {plan.head_dim + plan.rope_dim}, "
          f"window {plan.window}, {plan.dtype}, ladder of {plan.pairs_per_head} pairs, base {plan.base:.6g}")
    print(f"{'head':>4} {'slope':>10} {'floor C':>8} {'W':>7} {'sum|amp|':>9} {'fit_err':>10} {'round_err':>10} "
          f"{'predicted':>10}")
    for h in plan.heads:
        amp = sum(abs(p.N) + abs(p.M) for p in h.pairs) * plan.scale  # logits
        print(f"{h.head:>4} {h.slope:>10.4g} {h.floor:>8.4g} {h.exact_distance:>7} {amp:>9.4g} {h.sine_error:>10.3e} "
              f"{h.rounding_error:>10.3e} {h.predicted_error:>10.3e}")
    w = plan.worst_head
    verdict = "meets" if plan.meets_tolerance else "does NOT meet"
    print(f"worst head {w.head}: predicted max |error| {w.predicted_error:.3e} logits; the plan {verdict} "
          f"the tolerance {plan.tolerance:g}")
    return 0
