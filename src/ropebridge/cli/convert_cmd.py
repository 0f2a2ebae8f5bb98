"""``ropebridge convert SRC DST``: an ALiBi checkpoint into a stock RoPE checkpoint (calls ``convert.convert``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..convert.pipeline import DEFAULT_WINDOW, EMULATIONS, TARGETS, convert
from ..error_model import DTYPES
from ..ladder import DEFAULT_ADVANTAGE, DEFAULT_CUTOFF, DEFAULT_HEAD_DIM_MULTIPLE


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("convert", help="convert a BLOOM/MPT/Falcon-RW checkpoint into a stock RoPE checkpoint")
    p.add_argument("src", help="checkpoint directory or hub id")
    p.add_argument("dst", help="output directory (must not exist unless --force)")
    p.add_argument("--window", type=int, default=DEFAULT_WINDOW, help=f"longest context to serve (default {DEFAULT_WINDOW})")
    p.add_argument("--dtype", choices=tuple(DTYPES), help="output dtype (default: the source's)")
    p.add_argument("--target", default="gpt-neox", choices=TARGETS, help="stock architecture (default gpt-neox)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--theta", type=float, help="one theta for every head")
    mode.add_argument("--max-phase", type=float, help="theta = phase/window")
    p.add_argument("--rope-base", type=float, help="fixed RoPE base (an engine that ignores the stored base)")
    p.add_argument("--rotary-dim", type=int, help="rotary dims per head with --rope-base (default 16)")
    p.add_argument("--pairs", type=int, default=1, help="pairs per head for the multi-pair fit (with --rope-base)")
    p.add_argument("--emulation", choices=EMULATIONS,
                   help="ladder (every pair of a rotary block; default for bfloat16/float16 on gpt-neox) or single "
                        "(one slow pair; default for float32 and the compact targets)")
    p.add_argument("--head-dim-multiple", type=int, default=DEFAULT_HEAD_DIM_MULTIPLE,
                   help=f"ladder: the rotary dim R makes head_dim + R a multiple of this (default {DEFAULT_HEAD_DIM_MULTIPLE})")
    floor = p.add_mutually_exclusive_group()
    floor.add_argument("--floor", type=float, help="ladder: the floor C (logits) beyond W = C/m, for every head "
                       f"(default {DEFAULT_CUTOFF + DEFAULT_ADVANTAGE:g})")
    floor.add_argument("--calibration-text", metavar="FILE",
                       help="ladder: measure C per head on this text through the source model")
    p.add_argument("--tolerance", type=float, help="largest predicted worst error (logits) the plan may have "
                   "(default per dtype: float32 1e-3, bfloat16 2, float16 0.25)")
    p.add_argument("--accept-error", action="store_true",
                   help="write the checkpoint even when the plan's prediction exceeds --tolerance (warns, records it)")
    p.add_argument("--max-shard-mb", type=float, default=2000.0, help="output shard size in MB (default 2000)")
    p.add_argument("--force", action="store_true", help="replace an existing DST")
    p.add_argument("--json", action="store_true", help="print a JSON summary")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    res = convert(
        args.src, args.dst, window=args.window, dtype=args.dtype, target=args.target, theta=args.theta,
        max_phase=args.max_phase, base=args.rope_base, rotary_dim=args.rotary_dim, pairs=args.pairs,
        emulation=args.emulation, floor=args.floor, head_dim_multiple=args.head_dim_multiple,
        tolerance=args.tolerance, accept_error=args.accept_error,
        calibration_text=Path(args.calibration_text).read_text() if args.calibration_text else None,
        force=args.force, max_shard_mb=args.max_shard_mb, progress=not args.json,
    )
    worst = res.plan.worst_head
    summary = {
        "destination": str(res.destination), "target": res.target, "dtype": res.dtype, "window": res.plan.window,
        "rope_base": res.plan.base, "rotary_dim": res.plan.rope_dim, "emulation": res.plan.mode, "seconds": res.seconds,
        "bytes_written": res.bytes_written, "worst_head": worst.head, "worst_predicted_error": worst.predicted_error,
    }
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        rope = (f"RoPE base {res.plan.base:.6g}, rotary dim {res.plan.rope_dim}" if res.plan.base is not None
                else f"theta {worst.theta:.6g} on one pair")  # the compact targets scale one pair instead
        print(f"wrote {res.destination} ({res.target}, {res.dtype}, {res.bytes_written / 2**20:.1f} MiB) in "
              f"{res.seconds:.1f} s; window {res.plan.window}, {res.plan.mode} emulation, {rope}; worst head "
              f"{worst.head}: predicted max |error| {worst.predicted_error:.3e} logits")
    return 0
