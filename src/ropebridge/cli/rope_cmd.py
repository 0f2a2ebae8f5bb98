"""``ropebridge rope``: the pairs of a RoPE configuration over a context (calls ``analysis.analyse``)."""

from __future__ import annotations

import argparse
import re

from .. import reports
from ..analysis import analyse
from ..frequencies import ROPE_TYPES
from ._options import add_verbose, check_plot, numeric, plot_and_json

# flag -> rope_parameters key, for the numeric keys passed straight through
_NUMERIC = {
    "factor": "factor",
    "original_max_position": "original_max_position_embeddings",
    "max_position": "max_position_embeddings",
    "partial_rotary_factor": "partial_rotary_factor",
    "beta_fast": "beta_fast",
    "beta_slow": "beta_slow",
    "mscale": "mscale",
    "mscale_all_dim": "mscale_all_dim",
    "attention_factor": "attention_factor",
    "low_freq_factor": "low_freq_factor",
    "high_freq_factor": "high_freq_factor",
}
_INTEGER = {"original_max_position", "max_position"}
_ALL = ("default", "linear", "ntk", "dynamic", "yarn", "longrope", "llama3", "proportional")
# flag -> the rope types that read it (transformers' rope_parameters semantics)
_USED_BY = {
    "factor": ("linear", "ntk", "dynamic", "yarn", "longrope", "llama3", "proportional"),
    "original_max_position": ("yarn", "longrope", "llama3"),
    "max_position": ("dynamic", "yarn", "longrope"),
    "partial_rotary_factor": _ALL,
    "beta_fast": ("yarn",), "beta_slow": ("yarn",), "mscale": ("yarn",), "mscale_all_dim": ("yarn",),
    "attention_factor": ("yarn", "longrope"),
    "low_freq_factor": ("llama3",), "high_freq_factor": ("llama3",),
    "short_factor": ("longrope",), "long_factor": ("longrope",), "no_truncate": ("yarn",),
}
_KEY_TO_FLAG = {key: "--" + flag.replace("_", "-") for flag, key in _NUMERIC.items()}
_KEY_TO_FLAG.update(short_factor="--short-factor", long_factor="--long-factor", rope_theta="--base",
                    head_dim="--head-dim", seq_len="--seq-len", context="--context")


def _floats(text: str) -> list[float]:
    each = numeric()
    try:
        return [each(x) for x in text.split(",") if x.strip()]
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected comma-separated finite numbers, got {text!r}") from None


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("rope", help="per-pair frequencies, wavelengths and turns of a RoPE configuration")
    p.add_argument("--head-dim", type=numeric(int), required=True, help="attention head dim")
    p.add_argument("--base", type=numeric(), default=10000.0, help="rope_theta (default 10000)")
    p.add_argument("--context", type=numeric(int), required=True, help="context length L in tokens")
    p.add_argument("--rope-type", default="default", choices=tuple(ROPE_TYPES), help="scaling method (default default)")
    for flag, key in _NUMERIC.items():
        p.add_argument("--" + flag.replace("_", "-"), type=numeric(int) if flag in _INTEGER else numeric(),
                       help=f"rope_parameters['{key}']; for {', '.join(_USED_BY[flag])}")
    p.add_argument("--short-factor", type=_floats, help="longrope: comma-separated per-pair factors")
    p.add_argument("--long-factor", type=_floats, help="longrope: comma-separated per-pair factors")
    p.add_argument("--no-truncate", action="store_true", help="yarn: do not floor/ceil the correction range")
    p.add_argument("--seq-len", type=numeric(int),
                   help="current sequence length for dynamic/longrope (default: --context)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--plot", metavar="FILE.png", help="write a figure of wavelength per pair")
    add_verbose(p)
    p.set_defaults(run=run)


def rope_parameters(args: argparse.Namespace) -> dict:
    """The flags as transformers' ``rope_parameters``; a flag the chosen type does not read is refused."""
    for flag, types in _USED_BY.items():
        value = getattr(args, flag)
        if value is not None and value is not False and args.rope_type not in types:
            raise ValueError(f"--{flag.replace('_', '-')} is not used by --rope-type {args.rope_type} "
                             f"(it is for {', '.join(types)})")
    params: dict = {"rope_type": args.rope_type, "rope_theta": args.base}
    for flag, key in _NUMERIC.items():
        if getattr(args, flag) is not None:
            params[key] = getattr(args, flag)
    for key in ("short_factor", "long_factor"):
        if getattr(args, key) is not None:
            params[key] = getattr(args, key)
    if args.no_truncate:
        params["truncate"] = False
    return params


def _fmt(x: float) -> str:
    return f"{x:.4g}" if x == x and abs(x) != float("inf") else "inf"


def run(args: argparse.Namespace) -> int:
    check_plot(args)
    if args.context is not None and args.context <= 0:
        raise ValueError(f"--context must be > 0, got {args.context}")
    try:
        result = analyse(args.head_dim, rope_parameters(args), args.context, seq_len=args.seq_len)
    except ValueError as exc:  # the library names rope_parameters keys and its arguments; the user typed flags
        message = str(exc)
        for key, flag in sorted(_KEY_TO_FLAG.items(), key=lambda kv: -len(kv[0])):
            message = re.sub(rf"'{key}'|(?<![-\w]){key}(?![-\w])", flag, message)
        raise ValueError(message) from None
    if plot_and_json(args, lambda: reports.wavelength_figure(result), result.to_dict):
        return 0
    scaled = result.rope_parameters["rope_type"] != "default"
    head = f"{'pair':>4} {'inv_freq':>11} {'wavelength':>11} {'turns':>10}"
    if scaled:
        head += f" {'scaled_freq':>11} {'scaled_wl':>11} {'scale':>8}"
    print(head)
    for p in result.pairs:
        line = f"{p.index:>4} {p.inv_freq:>11.4e} {_fmt(p.wavelength):>11} {_fmt(p.turns_in_context):>10}"
        if scaled:
            line += f" {p.scaled_inv_freq:>11.4e} {_fmt(p.scaled_wavelength):>11} {p.scale:>8.4f}"
        print(line)
    n = len(result.pairs)
    print(
        f"{len(result.pairs_without_full_turn)} of {n} pairs never complete a turn within {result.context} tokens"
        + (f" ({len(result.scaled_pairs_without_full_turn)} after {result.rope_parameters['rope_type']} scaling;"
           f" attention factor {result.attention_factor:.6g})" if scaled else "")
    )
    return 0
