"""What an interrupted process must remove, and the moments it must not be cut: a quiet registry the library
keeps and the CLI's signal handler reads (``cli.signals``). In the library alone nothing here handles a signal:
an interrupt raises ``KeyboardInterrupt`` and each writer's own ``except`` removes what it wrote."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

_paths: list[Path] = []  # temporary files and directories being written, removed on an interrupt
_state = {"critical": 0, "pending": None}
_action: list[Callable[[int], None]] = []  # the CLI's: remove the paths, one line, exit


def paths() -> list[Path]:
    """The paths being written now, newest last."""
    return list(_paths)


@contextmanager
def removed_if_interrupted(path: Path) -> Iterator[Path]:
    """Within the block, ``path`` is removed if the process is interrupted (by the CLI's handler)."""
    _paths.append(Path(path))
    try:
        yield Path(path)
    finally:
        if Path(path) in _paths:
            _paths.remove(Path(path))


@contextmanager
def uninterrupted() -> Iterator[None]:
    """A block the CLI's handler does not cut (a rename that publishes a result and the removals after it): a
    signal that arrives within it is acted on when it ends."""
    _state["critical"] += 1
    try:
        yield
    finally:
        _state["critical"] -= 1
        pending = _state["pending"]
        if not _state["critical"] and pending is not None and _action:
            _state["pending"] = None
            _action[0](pending)


def defer(signum: int) -> bool:
    """True (and the signal kept for later) when an ``uninterrupted`` block is running."""
    if _state["critical"]:
        _state["pending"] = signum
        return True
    return False
