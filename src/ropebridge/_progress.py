"""One progress bar for long work (convert's bytes, a plan's heads, the demo's steps), on stderr."""

from __future__ import annotations


def progress_bar(total: float, desc: str, *, enabled: bool = True, unit: str = "it", delay: float = 0.0, **kwargs):
    """A tqdm bar that clears its line when closed (so an error printed next starts a line of its own) and shows
    nothing where stderr is not a terminal (logs and pipes get no carriage-return noise) or ``enabled`` is
    False. ``delay``: seconds before it first appears. Close it in a ``finally``."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, leave=False, delay=delay, disable=None if enabled else True,
                **kwargs)
