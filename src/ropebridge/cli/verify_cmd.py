"""``ropebridge verify SRC DST``: does the converted checkpoint reproduce the original? (calls ``verify.verify``)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from ..limit import BASELINE_FACTOR, LOGIT_FACTOR
from ..runners import RUNNERS, EngineRun
from ..runners.serving_options import flags as engine_flags
from ..verify.verdict import rows
from ..verify.run import DEFAULT_MAX_MEMORY, DEVICES, VerifyRequest, verify
from ..numerics import DTYPES
from . import silence_stdout
from ._options import add_verbose, numeric


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="compare a converted checkpoint with its ALiBi source (exit 1 on failure)")
    p.add_argument("src", help="the original ALiBi checkpoint directory")
    p.add_argument("dst", help="the converted checkpoint directory")
    p.add_argument("--context", type=numeric(int), default=256, help="tokens to compare (default 256)")
    p.add_argument("--dtype", choices=tuple(DTYPES),
                   help="dtype both models run in (default: the one DST was converted for, from its ropebridge.json)")
    p.add_argument("--text", metavar="FILE", help="a text file: compare on its tokens and report perplexities")
    p.add_argument("--greedy-tokens", type=numeric(int), default=32, help="tokens of greedy generation (default 32)")
    p.add_argument("--max-logit-diff", type=numeric(),
                   help="threshold in logits (default: the dtype's default tolerance at DST's window, whatever "
                        "--tolerance the conversion used: 1e-3 float32 (more at long windows), 2 bfloat16, 0.25 "
                        f"float16); the limit is the largest of this, {LOGIT_FACTOR:g}x the plan's predicted error "
                        f"and, in half precision, {BASELINE_FACTOR:g}x the baseline (SRC itself in the dtype)")
    p.add_argument("--max-memory", type=numeric(float, 0, MAX_GIB, low_open=True), default=DEFAULT_MAX_MEMORY / 2**30,
                   metavar="GIB",
                   help=f"memory verify may hold, in GiB (default {DEFAULT_MAX_MEMORY / 2**30:g}): every model reads "
                        "a weight (the reference a block of rows) at a time; a check that needs more is refused")
    p.add_argument("--device", choices=DEVICES, default="cpu",
                   help="where the models and the exact float64 reference run (default cpu)")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument("--report", metavar="DIR", help="write report.md, report.json and plots into DIR")
    p.add_argument("--card", action="store_true",
                   help="record the result in DST's model card (README.md) as its Verification section")
    p.add_argument("--quick", action="store_true",
                   help="skip reading DST's tensor values (their names, shapes and dtypes, the config, tokenizer and "
                        "plan are still compared with what convert writes from SRC)")
    p.add_argument("--accept-older", action="store_true",
                   help="for a conversion by an older ropebridge: report each tensor whose bytes differ from what this "
                        "version writes instead of failing; the bytes are then not proven and the function decides")
    add_engine_options(p)
    add_verbose(p)
    p.set_defaults(run=run)


def add_engine_options(p: argparse.ArgumentParser) -> None:
    """``--engine``, ``--engine-python``, ``--gguf`` and every runner's serving options under the engine's own flags
    (``runners.RUNNERS``)."""
    g = p.add_argument_group("in an engine", "run DST in an engine, as it is served, instead of transformers")
    g.add_argument("--engine", choices=tuple(RUNNERS),
                   help="run DST in this engine with the options below and judge its log-probabilities against the "
                        "exact float64 ALiBi pass on the same ids, by the same limit")
    g.add_argument("--engine-python", metavar="PYTHON",
                   help="the interpreter that has the engine installed (default: this one)")
    g.add_argument("--gguf", metavar="FILE", help="llama.cpp: the GGUF file made from DST that you serve")
    for flag, takers in engine_flags().items():
        option = takers[0][1]
        helps = dict.fromkeys(o.help for _, o in takers)  # runners sharing one help are named together
        what = "; ".join(f"{', '.join(r.title for r, o in takers if o.help == h)}: {h}" for h in helps)
        choices = () if not all(o.choices for _, o in takers) else tuple(dict.fromkeys(c for _, o in takers
                                                                                      for c in o.choices))
        if option.kind is bool:
            g.add_argument(flag, dest=f"engine_{option.key}", action=argparse.BooleanOptionalAction, default=None,
                           help=what)
        else:
            g.add_argument(flag, dest=f"engine_{option.key}", default=None, help=what,
                           type={int: numeric(int, option.low), float: numeric()}.get(option.kind, str),
                           **({"choices": choices} if choices else {}))


def engine_run(args: argparse.Namespace) -> EngineRun | None:
    """The ``EngineRun`` the options ask for; an engine option without ``--engine``, or one the engine does not take,
    is refused, naming both (a value the engine does not take: ``EngineRun``, naming its values)."""
    takers = engine_flags()
    given = {flag: getattr(args, f"engine_{t[0][1].key}") for flag, t in takers.items()}
    given = {flag: v for flag, v in given.items() if v is not None}
    if args.engine is None:
        extra = [*given] + [f for f, v in (("--engine-python", args.engine_python), ("--gguf", args.gguf))
                            if v is not None]
        if extra:
            raise ValueError(f"{extra[0]} is an engine option: give --engine too")
        return None
    for flag in given:
        names = [r.name for r, _ in takers[flag]]
        if args.engine not in names:
            raise ValueError(f"{flag} is an option of --engine {' and '.join(names)}, not of --engine {args.engine}")
    return EngineRun(args.engine, {takers[flag][0][1].key: v for flag, v in given.items()}, args.engine_python,
                     args.gguf)


def run(args: argparse.Namespace) -> int:
    text = None
    if args.text is not None:
        try:
            text = Path(args.text).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"cannot read --text {args.text}: {exc}") from None
    request = VerifyRequest(context=args.context, dtype=args.dtype, text=text, greedy_tokens=args.greedy_tokens,
                            max_logit_diff=args.max_logit_diff, max_memory=_gib(args.max_memory), device=args.device,
                            report_dir=args.report, card=args.card, quick=args.quick,
                            accept_older=args.accept_older, engine=engine_run(args))
    r = verify(args.src, args.dst, request, progress=not args.json)
    status = 0 if r.passed else 1
    try:
        if args.json:
            print(json.dumps(r.to_dict(), indent=1), flush=True)
        else:
            print("\n".join(format_report(r)), flush=True)
    except BrokenPipeError:  # the reader stopped reading (`| head`): the verdict is still the exit status
        silence_stdout()
    if r.report_error is not None:  # the result above stands; the report could not be written
        print(f"ropebridge verify: error: cannot write the report into {args.report}: {r.report_error}",
              file=sys.stderr)
        return 2
    return status


MAX_GIB = 2.0**20  # a mebibyte of GiB: no machine holds more


def _gib(value: float) -> int:
    """``--max-memory`` GiB as bytes, rounded up (a budget below a byte is a byte, which verify refuses naming what
    the checkpoint needs)."""
    return max(1, math.ceil(value * 2**30))


def format_report(r) -> list[str]:
    """The report as ``verify`` prints it: ``verdict.rows`` (each number beside how it is judged), the verdict last."""
    exact = "" if r.transformers_deviation is None else ", run as the family defines it"
    if r.engine is not None:
        lines = [f"exact {r.family} vs converted in {r.engine.label}, {r.dtype}, {r.context} tokens"]
    else:
        lines = [f"{r.family} ({r.source_attention}{exact}) vs converted, {r.dtype}, {r.context} tokens"]
    lines += [f"  {what:<23} {value}" + (f"  ({how})" if how else "") for what, value, how in rows(r)]
    lines.append("PASSED" if r.passed else "FAILED: " + "; ".join(r.failures))
    return lines
