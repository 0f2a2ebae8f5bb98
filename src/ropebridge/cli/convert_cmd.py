"""``ropebridge convert SRC DST``: an ALiBi checkpoint into a stock RoPE checkpoint (calls ``convert.convert``)."""

from __future__ import annotations

import argparse
import json

from ..convert.card import CACHE_FLAG, serving_options
from ..convert.pipeline import convert
from ..emulation.resolved import float32_ladder_note
from ..emulation.strategies import STRATEGIES
from ..limit import conversion_limit
from ..targets import TARGETS
from ..targets.engines import describe
from ..targets.support import TITLES
from ._options import add_planning_options, families, add_verbose, numeric, plan_request


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("convert", help=f"convert an ALiBi checkpoint ({families()}) into a stock RoPE checkpoint")
    p.add_argument("src", help="checkpoint directory or hub id")
    p.add_argument("dst", help="output directory (must not exist unless --force)")
    add_planning_options(p)
    p.add_argument("--accept-error", action="store_true",
                   help="write the checkpoint even when the plan's prediction exceeds --tolerance (warns, records it)")
    p.add_argument("--max-shard-mb", type=numeric(float, 1e-3, 2.0**40), default=2000.0,
                   help="output shard size in MB (default 2000)")
    p.add_argument("--force", action="store_true", help="replace an existing DST")
    p.add_argument("--json", action="store_true", help="print a JSON summary")
    add_verbose(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    request = plan_request(args, progress=not args.json)
    res = convert(args.src, args.dst, request, accept_error=args.accept_error, force=args.force,
                  max_shard_mb=args.max_shard_mb)
    worst = res.plan.worst_head
    summary = {
        "destination": str(res.destination), "target": res.target, "dtype": res.dtype, "window": res.plan.window,
        "rope_base": res.plan.base, "rotary_dim": res.plan.rotary_dim, "strategy": res.plan.strategy,
        "theta_rule": res.plan.theta_rule, "seconds": res.seconds,
        "bytes_written": res.bytes_written, "worst_head": worst.head, "worst_predicted_error": worst.predicted_error,
        "verify_limit": conversion_limit(res.plan), "resolved": res.resolved.to_dict(),
    }
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        rope = STRATEGIES[res.plan.strategy].rope(res.plan)
        print(f"wrote {args.dst} ({res.target}, {res.dtype}, {res.bytes_written / 2**20:.1f} MiB) in "
              f"{res.seconds:.1f} s; window {res.plan.window}, {res.plan.strategy_label} strategy, {rope}; worst head "
              f"{worst.head}: predicted max |error| {worst.predicted_error:.3e} logits")
        why = float32_ladder_note(res.plan, res.resolved)
        if why is not None:
            print(why)
        print(f"{res.target} runs in {TARGETS[res.target].engines}"
              + (f"; --engine {args.engine}: {describe(res.target, args.engine)}" if args.engine else ""))
        if args.engine in CACHE_FLAG:  # what the engine's options do to this plan, and what a user must set
            print(serving_options(res.plan, args.engine))
            base = "free theta" if res.plan.base is None else f"{res.plan.base:.6g}"
            print(*(line.format(dst=args.dst, dtype=res.dtype, window=res.plan.window, base=base).replace("`", "")
                    for line in TARGETS[res.target].serving if line.startswith(TITLES[args.engine].split()[0] + ":")),
                  sep="\n")
    return 0
