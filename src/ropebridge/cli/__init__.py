"""Command-line interface: ``ropebridge SUBCOMMAND …``. Thin: one subcommand calls one library function.

Exit status: 0 ok, 1 a verification failed, 2 bad input (one line on stderr, no traceback), 130 interrupted
(129 and 143 for SIGHUP and SIGTERM: ``signals``).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys

from .. import __version__
from . import signals

# Subcommand modules, imported when the parser is built: they import torch, which takes seconds, and a Ctrl-C
# during that import is answered like any other (``console_main``).
SUBCOMMANDS = ("rope_cmd", "plan_cmd", "convert_cmd", "verify_cmd", "demo_cmd")
DESCRIPTION = ("Positional encodings of transformer language models: exact RoPE and ALiBi, and ALiBi checkpoints "
               "converted into stock RoPE checkpoints that serving engines run, verified against exact ALiBi.")


class _Parser(argparse.ArgumentParser):
    """argparse with whole option names only (``--dtyp`` is not ``--dtype``) and one-line errors; an option it does not
    know is named with the closest it does (``unknown``)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, allow_abbrev=False, **kwargs)

    def error(self, message: str) -> None:  # argparse's own exit status is also 2; keep its one-line form
        self.exit(2, f"{self.prog}: error: {message}\n")

    def parse_args(self, args=None, namespace=None):
        argv = sys.argv[1:] if args is None else list(args)
        name = next((a for a in argv if not a.startswith("-")), None)
        sub = _subcommand(self, name)
        if sub is not None:  # an option the subcommand does not know is named before its other errors
            options = {o for a in [*self._actions, *sub._actions] for o in a.option_strings}
            words = argv[: argv.index("--")] if "--" in argv else argv
            strange = [a for a in words if a.startswith("--") and a.split("=", 1)[0] not in options]
            if strange:
                sub.error(unknown(sub, strange))
        known, extra = self.parse_known_args(args, namespace)
        if extra:
            sub = _subcommand(self, getattr(known, "command", None))
            (sub or self).error(unknown(sub or self, extra))
        return known


def _subcommand(parser: argparse.ArgumentParser, name: str | None) -> argparse.ArgumentParser | None:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return actions[0].choices.get(name) if actions and name else None


def unknown(parser: argparse.ArgumentParser, extra: list[str]) -> str:
    """The words for arguments ``parser`` does not take: the first, the option it most resembles where one does,
    and where its options are listed."""
    import difflib

    first = extra[0].split("=", 1)[0]
    options = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
    close = difflib.get_close_matches(first, options, n=1, cutoff=0.6) if first.startswith("-") else []
    what = "unrecognized argument" + ("s" if len(extra) > 1 else "") + f" {' '.join(extra)}"
    hint = f"did you mean {close[0]}? " if close else ""
    return f"{what}; {hint}{parser.prog} --help lists its options"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ropebridge", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"ropebridge {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    import importlib

    for name in SUBCOMMANDS:
        importlib.import_module(f"{__name__}.{name}").add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status. Standard output closed (``>&-``: Python's ``sys.stdout`` is None) is
    refused before anything runs: every subcommand's result goes there, and it would be lost."""
    if sys.stdout is None:
        if sys.stderr is not None:
            print("ropebridge: error: standard output is closed: the result could not be written; nothing was run",
                  file=sys.stderr)
        return 2
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version (0) or a usage error (2, argparse's one line): a status, not an exit
        return int(exc.code or 0)
    signals.name_command(args.command)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    # convert never imports transformers: it starts faster
    if args.command in ("verify", "demo") and not args.verbose:
        import transformers

        transformers.utils.logging.disable_progress_bar()  # ours is enough
        transformers.utils.logging.set_verbosity_error()
    signals.arm()  # the imports are done: a signal now raises where the work is, and its cleanup runs
    try:
        return args.run(args)
    except BrokenPipeError:  # output piped into `head` and the like: end quietly
        silence_stdout()
        return 0
    except KeyboardInterrupt as exc:  # the library has removed what it was writing
        signum = getattr(exc, "signum", signal.SIGINT)
        print(signals.line(signum), file=sys.stderr)
        return 128 + signum
    except (ValueError, OSError) as exc:  # bad input: files, permissions, values
        if signals.received() is not None:  # raised by the interruption (inside an import, a pool): it is the cause
            raise
        message = as_flags(" ".join(str(exc).split()), parser, args.command)
        print(f"ropebridge {args.command}: error: {message}", file=sys.stderr)  # one line
        return 2


def as_flags(message: str, parser: argparse.ArgumentParser, command: str) -> str:
    """A library's refusal in the words the user typed: a parameter it names (``window must be > 0``) as the
    subcommand's option (``--window must be > 0``)."""
    import re

    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    for action in sub._actions:
        flag = next((o for o in action.option_strings if o.startswith("--")), None)
        if flag is not None and action.dest not in ("help", "verbose"):
            message = re.sub(rf"(?<![-\w.'`]){re.escape(action.dest)}(?= must\b| is not\b)", flag, message)
    return message


def silence_stdout() -> None:
    """Point stdout at /dev/null (a reader closed the pipe), so that no later write and not the interpreter's final
    flush fail on it."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def console_main() -> None:
    signals.install()  # first: a signal during the imports below must not surface inside torch or numpy
    try:
        code = main()
    except BaseException as exc:  # whatever an interruption raised on its way out: one line, its status
        signum = signals.received()
        if signum is None:
            raise
        if not isinstance(exc, KeyboardInterrupt):
            logging.getLogger(__name__).info("after the signal: %s: %s", type(exc).__name__, exc)
        print(signals.line(signum), file=sys.stderr)
        code = 128 + signum
    signals.finish()  # the command has returned (or was stopped, cleaned up): a signal from now on changes nothing
    if signals.received() is not None:  # cleaned up already: the exit handlers (multiprocessing's pools, its
        import atexit  # semaphores) run, but not the interpreter's teardown, where a thread still inside torch's C++

        atexit._run_exitfuncs()  # would abort the process ("terminate called without an active exception")
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # a closed pipe: the status still goes out
                pass
        os._exit(code)
    try:
        sys.exit(code)
    except BrokenPipeError:  # a pipe closed while the exit status was being flushed
        silence_stdout()
        sys.exit(0)
