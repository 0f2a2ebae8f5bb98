"""The worker's side of the job protocol (``ropebridge.runners.jobs``), standard library only: a worker runs in
the engine's interpreter, where ropebridge may not be installed.

``python WORKER JOB.json``: read the job, write ``job["out"]`` (JSON) once, exit 0. The result is ``{"logprobs":
[[float]], "greedy": [[int]], "greedy_logprobs": [[float]], "facts": {...}}``, or ``{"refused": "..."}`` where the
engine would not load or run the model (what it said), or ``{"missing": "..."}`` where the interpreter cannot import
the engine at all.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path


def core_binds(ranks: int) -> str:
    """The cores split between ``ranks`` tensor-parallel ranks, as vLLM's ``VLLM_CPU_OMP_THREADS_BIND`` and SGLang's
    ``SGLANG_CPU_OMP_THREADS_BIND`` write it (``0-3|4-7``)."""
    cores = sorted(os.sched_getaffinity(0))
    per = max(1, len(cores) // ranks)
    parts = [cores[r * per: (r + 1) * per] or cores[-1:] for r in range(ranks)]
    return "|".join(f"{p[0]}-{p[-1]}" if len(p) > 1 else str(p[0]) for p in parts)


def read() -> dict:
    return json.loads(Path(sys.argv[1]).read_text())


def write(job: dict, result: dict) -> None:
    tmp = Path(job["out"] + ".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(job["out"])


def said(exc: BaseException) -> str:
    """What an engine said when it refused: pydantic's sentence after ``Value error,`` where there is one, else the
    first non-empty line, with the exception's type."""
    text = str(exc)
    found = re.search(r"Value error, (.*?)(?: \[type=|$)", text, flags=re.M)
    lines = [line for line in text.splitlines() if line.strip()]
    return f"{type(exc).__name__}: {found.group(1) if found else (lines[0] if lines else '')}"[:500]


def main(run) -> None:
    """Run ``run(job) -> result`` on the job named on the command line; an ImportError of the engine is ``missing``."""
    job = read()
    try:
        result = run(job)
    except ModuleNotFoundError as exc:
        result = {"missing": f"{exc.name or exc}: {exc}"}
    write(job, result)
