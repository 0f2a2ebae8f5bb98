"""The CLI's signals: Ctrl-C (SIGINT), SIGTERM and SIGHUP at any instant end the process with exit 128 + the
signal (130 for Ctrl-C) and one line on stderr, with nothing written.

Two phases. While the CLI imports torch, numpy and transformers, an exception raised inside those imports
leaves them half-initialised (tracebacks from later imports, C++ aborts), and nothing has been written yet: the
handler exits at once (``os._exit``), removing whatever ``_interrupt`` lists. Once the imports are done
(``arm``), the handler raises ``Stopped`` (a ``KeyboardInterrupt``) so that each writer's own ``except`` and
``finally`` remove what it wrote and end its workers; ``received`` tells the entry point that any exception
that follows is the interruption's. Within ``_interrupt.uninterrupted`` (the rename that publishes a result) a
signal waits for the block's end. Once the command has returned (``finish``), its result is complete and
reported: a signal during the exit changes nothing, and the process ends with the command's own status."""

from __future__ import annotations

import os
import signal
import sys

from .. import _interrupt

SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
_state = {"command": "ropebridge", "armed": False, "received": None, "finished": False}


class Stopped(KeyboardInterrupt):
    """The signal ``signum`` arrived: raised in the main thread once the CLI is armed."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def install() -> None:
    """Handle every signal of ``SIGNALS`` from now on (``console_main``'s first instruction; the command's entry
    point, ``_ropebridge_console``, handles them from its own first instruction until then)."""
    _interrupt._action[:] = [_act]
    for sig in SIGNALS:
        signal.signal(sig, _handler)


def name_command(command: str) -> None:
    """The subcommand the one line names, once known."""
    _state["command"] = f"ropebridge {command}"


def arm() -> None:
    """The imports are done: from now on a signal raises ``Stopped`` where the main thread is."""
    _state["armed"] = True


def finish() -> None:
    """The command has returned: from now on a signal is ignored (the process is exiting with its status). Ignored,
    not handled: the interpreter's finalization puts a Python handler back to the default action (a signal then
    would kill the process while torch's modules are torn down) but leaves an ignored signal ignored."""
    _state["finished"] = True
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


def received() -> int | None:
    """The signal that arrived, if one did."""
    return _state["received"]


def line(signum: int) -> str:
    """The one line for ``signum``."""
    what = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
    return f"{_state['command']}: {what}; nothing written"


def _handler(signum: int, frame) -> None:
    if _state["finished"]:
        return
    if _state["received"] is not None and _state["armed"]:
        return  # a second signal while the first is being handled: the first's cleanup goes on
    _state["received"] = signum
    if not _interrupt.defer(signum):
        _act(signum)


def _act(signum: int) -> None:
    if _state["armed"]:
        raise Stopped(signum)
    for path in reversed(_interrupt.paths()):  # what was being written: once removed, nothing is
        _interrupt.remove(path)
    try:
        sys.stdout.flush()
    except Exception:  # a closed pipe or a half-written buffer: the line below still goes out
        pass
    os.write(2, (line(signum) + "\n").encode())
    os._exit(128 + signum)
