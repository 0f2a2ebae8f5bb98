"""Planning options shared by ``plan`` and ``convert``: the same names, defaults and help in both, turned into one
``PlanRequest`` (``plan_request``), which both pass to ``planning.plan_checkpoint``."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..convert.record import floors_in
from ..emulation.fixed_base import ROTARY_DIM as FIXED_BASE_ROTARY_DIM
from ..emulation.kv_cache import FORMATS as CACHE_FORMATS
from ..emulation.ladder import DEFAULT_ADVANTAGE
from ..emulation.strategies import STRATEGIES
from ..emulation.request import DEFAULT_WINDOW, PlanRequest
from ..numerics import DEFAULT_CUTOFF, DTYPES, FLOAT32_BIAS_HALF_ULPS, TOLERANCE
from ..targets import TARGETS
from ..targets.support import ENGINES
from ..targets.kernels import KERNELS



def plot_and_json(args: argparse.Namespace, figure: Callable[[], Any], data: Callable[[], dict]) -> bool:
    """``--plot FILE`` saves ``figure()`` (``check_plot`` has refused what it cannot be); ``--json`` prints ``data()``
    and returns True (the table is skipped)."""
    if args.plot:
        figure().savefig(args.plot, dpi=120)
    if args.json:
        json.dump(data(), sys.stdout, indent=1)
        print()
        return True
    return False


def check_plot(args: argparse.Namespace) -> None:
    """Refuse a ``--plot`` that names a directory or a file without a format matplotlib writes (matplotlib would
    write ``NAME.png`` beside it), before any work is done."""
    if args.plot is None:
        return
    from matplotlib.backend_bases import FigureCanvasBase

    path, formats = Path(args.plot), FigureCanvasBase.get_supported_filetypes()
    if path.is_dir():
        raise ValueError(f"--plot {path} is a directory; name a file in it, e.g. {path / 'plan.png'}")
    if path.suffix.lstrip(".").lower() not in formats:
        raise ValueError(f"--plot {path}: name a file ending in one of {', '.join('.' + f for f in sorted(formats))}")


def add_verbose(p: argparse.ArgumentParser) -> None:
    """``-v`` after the subcommand too (it is also accepted before it)."""
    p.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="log progress to stderr")


def families() -> str:
    """The families convert reads, from ``checkpoint.config.FAMILIES``: ``bloom, mpt, ...``."""
    from ..checkpoint.config import FAMILIES

    return ", ".join(FAMILIES)


def family_defaults() -> str:
    """Each default target and the families taking it, from ``FAMILIES``: ``gpt-neox for bloom, mpt; ...``."""
    from ..checkpoint.config import FAMILIES

    targets: dict[str, list[str]] = {}
    for name, family in FAMILIES.items():
        targets.setdefault(family.default_target, []).append(name)
    return "; ".join(f"{t} for {', '.join(names)}" for t, names in targets.items())


def add_planning_options(p: argparse.ArgumentParser) -> None:
    tol = ", ".join(f"{k} {v:g}" for k, v in TOLERANCE.items()) + (
        f"; float32 at least {FLOAT32_BIAS_HALF_ULPS} half-ulps of the largest bias m*window")
    p.add_argument("--window", type=numeric(int), default=DEFAULT_WINDOW,
                   help=f"longest context to serve, extrapolation included (default {DEFAULT_WINDOW})")
    p.add_argument("--dtype", choices=tuple(DTYPES),
                   help="dtype of the converted model (default: the source checkpoint's; float32 with --heads)")
    p.add_argument("--target", default=None, choices=tuple(TARGETS),
                   help=f"stock architecture (default: the family's: {family_defaults()})")
    p.add_argument("--strategy", "--emulation", choices=tuple(STRATEGIES),
                   help="ladder (every pair of a rotary block; default for bfloat16/float16 on gpt-neox), single "
                        "(one slow pair per head; default for float32, the compact targets, and when --theta, "
                        "--max-phase, --pairs or --split is given) or fixed-base (single with --rope-base)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--theta", type=numeric(), help="single: one theta for every head")
    mode.add_argument("--max-phase", type=numeric(), help="single: theta = phase/window (the source text's rule)")
    p.add_argument("--rope-base", "--base", dest="rope_base", type=numeric(),
                   help="fixed RoPE base (an engine that ignores the stored one, e.g. 10000); ladder: default free")
    p.add_argument("--rotary-dim", "--rope-dim", dest="rotary_dim", type=numeric(int),
                   help=f"rotary dims per head: single with --rope-base (default {FIXED_BASE_ROTARY_DIM}); ladder "
                        "(default: the smallest >= 32 that --kernel runs)")
    p.add_argument("--pairs", type=numeric(int), default=1,
                   help="single with --rope-base: pairs per head (multi-pair fit)")
    p.add_argument("--split", help="single, float16: k value s with q = (-N/s, 0), k = (0, s); 'sqrt' for s = sqrt(N)")
    p.add_argument("--kernel", default="any", choices=tuple(KERNELS),
                   help="the attention kernel you serve on: the ladder's head dim hd + R is a size it runs natively, "
                        "and a head dim it does not run is refused (default any: a multiple of 16; docs/targets.md)")
    p.add_argument("--engine", choices=tuple(ENGINES),
                   help="the engine you serve on: the target it runs natively for this source (else the one its "
                        "Transformers backend runs), and its kernel (docs/targets.md)")
    p.add_argument("--kv-cache-dtype", choices=tuple(CACHE_FORMATS),
                   help="the KV cache you serve with, as your engine names it (vLLM's --kv-cache-dtype, llama.cpp's "
                        "--cache-type-k): refused where it breaks the plan, naming the caches that hold "
                        "(default: the model's dtype; docs/serving.md)")
    floor = p.add_mutually_exclusive_group()
    floor.add_argument("--floor", metavar="C|FILE.json",
                       help="ladder: the floor C (logits) kept beyond W = C/m, every head; or a JSON file of one per "
                            "head (a list, or a plan or ropebridge.json whose heads carry theirs) "
                            f"(default: the cutoff + {DEFAULT_ADVANTAGE:g})")
    floor.add_argument("--calibration-text", metavar="FILE",
                       help="ladder: measure C per head on this text through the source model (needs its weights)")
    p.add_argument("--cutoff", type=numeric(),
                   help="logits below -cutoff carry no weight (default: ladder ln(window / dtype's unit roundoff), "
                        f"13-18; single {DEFAULT_CUTOFF:g})")
    p.add_argument("--jobs", type=_count, default=os.cpu_count() or 1,
                   help="ladder: processes fitting heads at once (default: the core count, here "
                        f"{os.cpu_count() or 1}); the plan is the same whatever --jobs")
    p.add_argument("--tolerance", type=numeric(),
                   help=f"largest predicted worst error (logits) a plan may have (default per dtype: {tol})")


def numeric(kind: type = float, low: float | None = None, high: float | None = None, *,
            low_open: bool = False, high_open: bool = False) -> Callable[[str], float | int]:
    """argparse type for every numeric option: ``kind`` (int or float) parsed from the text, finite, within
    ``[low, high]`` (an end excluded where ``low_open`` / ``high_open``); anything else is refused in one line that
    argparse prefixes with the option (``argument --max-memory: 'inf' is not ...``): nan, infinities and 1e400
    never reach the library. The bounds are given where the library has none of its own; where it has (the
    planning options, verify's context), its one line says why a value is out of range."""
    def fmt(x: float) -> str:
        return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"

    lo = "" if low is None else f"{'>' if low_open else '>='} {fmt(low)}"
    hi = "" if high is None else f"{'<' if high_open else '<='} {fmt(high)}"
    want = (("an integer" if kind is int else "a finite number") + (f" {lo}" if lo else "")
            + (" and " if lo and hi else " ") * bool(hi) + hi).strip()

    def parse(text: str) -> float | int:
        typed = repr(text) if len(text) <= 24 else f"'{text[:8]}...' ({len(text)} characters)"  # one readable line
        try:
            value = kind(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"{typed} is not {want}") from None
        finite = isinstance(value, int) or math.isfinite(value)  # an int of any size is finite (isfinite overflows)
        if not finite or (low is not None and (value < low or low_open and value == low)) or (
                high is not None and (value > high or high_open and value == high)):
            raise argparse.ArgumentTypeError(f"{typed} is not {want}")
        return value

    parse.__name__ = "integer" if kind is int else "number"  # argparse names the type in its own messages
    return parse


_count = numeric(int, 1, MAX_JOBS := 1024)  # --jobs: processes fitting the ladder's heads


def floors(text: str | None) -> float | tuple[float, ...] | None:
    """``--floor``: a number, or a JSON file holding one floor per head (a list, or a plan, or a converted
    checkpoint's ropebridge.json, whose ladder heads carry their floors)."""
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    try:
        data = json.loads(Path(text).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"--floor {text}: neither a number nor a readable JSON file ({exc})") from None
    try:
        return tuple(float(v) for v in data) if isinstance(data, list) else floors_in(data)
    except (TypeError, KeyError, ValueError, AttributeError):
        raise ValueError(f"--floor {text}: expected a list of numbers or a ladder plan with a floor per head") from None


def plan_request(args: argparse.Namespace, progress: bool) -> PlanRequest:
    """The parsed planning options as the ``PlanRequest`` both ``plan`` and ``convert`` pass on."""
    text = None
    if args.calibration_text is not None:
        text = Path(args.calibration_text).read_text()
    return PlanRequest(window=args.window, dtype=args.dtype, target=args.target, strategy=args.strategy,
                       theta=args.theta, max_phase=args.max_phase, rope_base=args.rope_base,
                       rotary_dim=args.rotary_dim, pairs=args.pairs, split=args.split,
                       kernel=args.kernel, engine=args.engine, floor=floors(args.floor), calibration_text=text,
                       cutoff=args.cutoff, tolerance=args.tolerance, jobs=args.jobs, progress=progress,
                       kv_cache_dtype=args.kv_cache_dtype)
