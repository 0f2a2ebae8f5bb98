"""``ropebridge demo``: convert the embedded ALiBi model and show that both agree (calls ``demo.run_demo``)."""

from __future__ import annotations

import argparse
import json

from ..emulation.request import MAX_WINDOW
from ._options import add_verbose, numeric


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="convert the embedded ALiBi model into RoPE and compare both on held-out text")
    p.add_argument("--out", metavar="DIR", help="write the converted model, report.md and plots into DIR")
    p.add_argument("--context", type=numeric(int, 1, MAX_WINDOW),
                   help="evaluation context beyond training (default 4x the training context)")
    p.add_argument("--model", metavar="DIR", help=argparse.SUPPRESS)  # another demo-shaped model directory (tests)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the report")
    add_verbose(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..demo import run_demo

    r = run_demo(args.out, context=args.context, model_dir=args.model, progress=not args.json)
    if args.json:
        print(json.dumps(r.to_dict(), indent=1))
        return 0
    print("\n".join(format_report(r)))
    return 0


def format_report(r) -> list[str]:
    """The demo's text report, one string a line (the README's sample is checked against it)."""
    lines: list[str] = []
    lines.append(f"embedded ALiBi model: {r.source_model}, vocabulary {r.vocab_size}, trained at context "
                 f"{r.train_context}; "
                 f"{r.heldout_tokens} held-out tokens")
    lines.append(f"converted to GPT-NeoX (RoPE base {r.rope_base:.4g}) in {r.convert_seconds:.2f} s; "
                 f"worst predicted emulation error {r.worst_predicted_error:.2e} logits")
    lines.append("")
    lines.append(f"{'':32} {'native ALiBi':>14} {'converted RoPE':>15}")
    lines.append(f"{f'perplexity @ {r.train_context} (trained)':32} {r.ppl_native:>14.6f} {r.ppl_converted:>15.6f}")
    lines.append(f"{f'perplexity @ {r.eval_context} (extrapolated)':32} {r.ppl_native_extrapolated:>14.6f} "
                 f"{r.ppl_converted_extrapolated:>15.6f}")
    lines.append(f"{f'forward time @ {r.eval_context}':32} {r.forward_seconds_native * 1e3:>12.1f}ms "
                 f"{r.forward_seconds_converted * 1e3:>13.1f}ms")
    lines.append(f"untrained model of the same shape: perplexity {r.ppl_random_model:.0f}")
    lines.append(f"max |logit diff| {r.max_abs_logit_diff:.2e}; "
                 f"perplexities agree to {r.ppl_relative_diff:.1e} relative")
    lines.append("")
    lines.append(f"prompt: {r.prompt!r}")
    lines.append(f"  native:    {r.continuation_native!r}")
    lines.append(f"  converted: {r.continuation_converted!r}")
    lines.append("greedy continuations " + ("identical" if r.greedy_identical else "DIFFER"))
    if r.out:
        lines.append(f"report, plots, the ALiBi model (native/) and the converted one (converted/) in {r.out}")
    return lines
