"""What an interrupted process must remove, and the moments it must not be cut: a quiet registry the library
keeps and the CLI's signal handler reads (``cli.signals``). In the library alone nothing here handles a signal:
an interrupt raises ``KeyboardInterrupt`` and the blocks below remove what they were writing."""

from __future__ import annotations

import shutil
import tempfile
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
    """Within the block, ``path`` (a file or a directory) is being written: it is removed if the block raises,
    an interrupt included, and by the CLI's handler if the process is stopped before its imports are done."""
    with _removed_on_failure(lambda: Path(path)) as written:
        yield written


@contextmanager
def new_directory(parent: Path, prefix: str) -> Iterator[Path]:
    """A new empty directory in ``parent`` (``tempfile.mkdtemp``), removed as ``removed_if_interrupted`` says.
    It is made and registered as one uninterrupted step: no instant exists at which it stands unknown to the
    cleanup."""
    with _removed_on_failure(lambda: Path(tempfile.mkdtemp(prefix=prefix, dir=parent))) as made:
        yield made


@contextmanager
def _removed_on_failure(make: Callable[[], Path]) -> Iterator[Path]:
    made: list[Path] = []
    try:
        with uninterrupted():
            made.append(make())
            _paths.append(made[0])
        yield made[0]
    except BaseException:
        with uninterrupted():  # a second signal does not cut the removal
            for path in made:
                remove(path)
        raise
    finally:
        for path in made:
            if path in _paths:
                _paths.remove(path)


def remove(path: Path) -> None:
    """Remove ``path``: a directory with its contents, a file, or a symbolic link itself (never its target)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


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
