"""Checkpoints run by engines in their own interpreters: the engines and their serving options as data
(``serving_options.RUNNERS``), what a user asks of a run (``engine_run.EngineRun``), and the job protocol (``jobs``: a
``Job`` in, a ``Result`` out, the worker scripts in ``workers/`` standard library and engine only)."""

from .jobs import Job, Result, launch
from .engine_run import EngineRun
from .serving_options import RUNNERS, Option, Runner

__all__ = ["RUNNERS", "EngineRun", "Job", "Option", "Result", "Runner", "launch"]
