"""Command-line interface: ``ropebridge SUBCOMMAND …``. Thin: one subcommand calls one library function.

Exit status: 0 ok, 1 a verification failed, 2 bad input (one line on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import logging
import sys

from .. import __version__
from . import convert_cmd, demo_cmd, plan_cmd, rope_cmd, verify_cmd

SUBCOMMANDS = (rope_cmd, plan_cmd, convert_cmd, verify_cmd, demo_cmd)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own exit status is also 2; keep its one-line form
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ropebridge", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"ropebridge {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for module in SUBCOMMANDS:
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.command in ("verify", "demo") and not args.verbose:  # (convert never imports transformers: it starts faster)
        import transformers

        transformers.utils.logging.disable_progress_bar()  # ours is enough
        transformers.utils.logging.set_verbosity_error()
    try:
        return args.run(args)
    except (ValueError, OSError) as exc:  # bad input: files, permissions, values
        print(f"ropebridge {args.command}: error: {exc}", file=sys.stderr)
        return 2


def console_main() -> None:
    try:
        sys.exit(main())
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stderr.close()
        sys.exit(0)
