"""A helper for the tests that end an engine's processes: whether a process is gone."""

import os
import time


def gone(pid: int, seconds: float = 5.0) -> bool:
    """Whether process ``pid`` ends within ``seconds``: no longer there, or a zombie its parent has not reaped yet."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            os.kill(pid, 0)
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split()[2] == "Z":
                    return True
        except (ProcessLookupError, FileNotFoundError):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
