"""``ropebridge verify SRC DST``: does the converted checkpoint reproduce the original? (calls ``convert.verify``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..convert.verdict import READING_TOKENS, describe
from ..convert.verify import VerifyRequest, verify
from ..numerics import DTYPES
from ._options import add_verbose


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="compare a converted checkpoint with its ALiBi source (exit 1 on failure)")
    p.add_argument("src", help="the original ALiBi checkpoint directory")
    p.add_argument("dst", help="the converted checkpoint directory")
    p.add_argument("--context", type=int, default=256, help="tokens to compare (default 256)")
    p.add_argument("--dtype", choices=tuple(DTYPES),
                   help="dtype both models run in (default: the one DST was converted for, from its ropebridge.json)")
    p.add_argument("--text", metavar="FILE", help="a text file: compare on its tokens and report perplexities")
    p.add_argument("--greedy-tokens", type=int, default=32, help="tokens of greedy generation (default 32)")
    p.add_argument("--max-logit-diff", type=float,
                   help="threshold in logits (default: the dtype's default tolerance at DST's window, whatever "
                        "--tolerance the conversion used: 1e-3 float32 (more at long windows), 2 bfloat16, 0.25 "
                        "float16); the limit is this or 3x the plan's predicted error, whichever is larger")
    p.add_argument("--reference-max-params", type=float, default=50e6,
                   help="run the exact float64 ALiBi reference for sources up to this many parameters (default 5e7; "
                        "it runs on the CPU)")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument("--report", metavar="DIR", help="write report.md, report.json and plots into DIR")
    p.add_argument("--card", action="store_true",
                   help="record the result in DST's model card (README.md) as its Verification section")
    p.add_argument("--quick", action="store_true",
                   help="skip reading DST's tensor values (their names, shapes and dtypes, the config, tokenizer and "
                        "plan are still compared with what convert writes from SRC)")
    add_verbose(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    text = None
    if args.text is not None:
        try:
            text = Path(args.text).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"cannot read --text {args.text}: {exc}") from None
    request = VerifyRequest(context=args.context, dtype=args.dtype, text=text, greedy_tokens=args.greedy_tokens,
                            max_logit_diff=args.max_logit_diff, reference_max_params=int(args.reference_max_params),
                            report_dir=args.report, card=args.card, quick=args.quick)
    r = verify(args.src, args.dst, request, progress=not args.json)
    if args.json:
        print(json.dumps(r.to_dict(), indent=1))
    else:
        print("\n".join(format_report(r)))
    if r.report_error is not None:  # the result above stands; the report could not be written
        print(f"ropebridge verify: error: cannot write the report into {args.report}: {r.report_error}", file=sys.stderr)
        return 2
    return 0 if r.passed else 1


def format_report(r) -> list[str]:
    """The report as ``verify`` prints it: the byte check, the measured numbers beside their limit, the verdict."""
    exact = "" if r.transformers_native_deviation is None else ", run as the family defines it"
    lines = [f"{r.family} ({r.source_attention}{exact}) vs converted, {r.dtype}, {r.context} tokens"]
    lines.append(f"  bytes                   {describe(r.byte_check)}")
    if not r.measured:
        lines.append(f"  functional check        skipped: {r.functional_skipped}")
    else:
        t, native = r.thresholds, r.native_name
        lines.append(f"  max |logit diff|        {r.max_abs_logit_diff:.3e}  (against {native})")
        if r.transformers_native_max_abs_logit_diff is not None:
            lines.append(f"  ... against transformers' own {r.family} ({r.transformers_native_deviation}): "
                         f"{r.transformers_native_max_abs_logit_diff:.3e}")
        lines += [f"  left-padded batch       {r.padded_max_abs_logit_diff:.3e}",
                  f"  {'mean KL(' + native + '||conv)':<23} {r.mean_kl:.3e}",
                  f"  top-1 agreement         {r.top1_agreement:.4f}"]
        if r.greedy_native:
            lines.append(f"  greedy ({len(r.greedy_native)} tokens)     "
                         + ("identical" if r.greedy_identical else f"differ from token {r.greedy_first_divergence}"))
        if r.ppl_native is not None:
            lines.append(f"  perplexity              {native} {r.ppl_native:.6g}, converted {r.ppl_converted:.6g}")
        if r.reference_native_max_err is not None:
            lines.append(f"  vs exact float64 ALiBi  converted {r.reference_converted_max_err:.3e}" + (
                f", native {r.reference_native_max_err:.3e} (reported)" if r.native_ran else ""))
        else:
            lines.append(f"  vs exact float64 ALiBi  skipped: {r.reference_skipped}")
        if r.native_reading_max_err is not None and r.dtype == "float32":  # judged in float32 only
            own = "" if r.transformers_reading_max_err is None else \
                f"; transformers' own {r.transformers_reading_max_err:.3e}"
            lines.append(f"  reading of SRC          native vs exact, first {READING_TOKENS} tokens "
                         f"{r.native_reading_max_err:.3e}{own}")
        lines.append(f"  limit                   {t['limit']:.3g} against the {t['against']} ({r.limit_why})")
    lines.append("PASSED" if r.passed else "FAILED: " + "; ".join(r.failures))
    return lines
