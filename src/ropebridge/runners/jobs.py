"""The job protocol: a checkpoint run by an engine in the engine's own interpreter, never in ropebridge's.

A ``Job`` (the token ids, the engine's options) is written as JSON; ``launch`` runs the runner's worker script
(``runners/workers/``, standard library and the engine only: ropebridge need not be installed there) as
``PYTHON WORKER JOB.json`` in a session of its own, and reads its ``Result``: per scored sequence the log p the
engine gives each next token, per prompt its greedy tokens and their log p, and what the engine resolved
(``facts``). An engine that would not load or run the model answers ``refused`` (a result: what it said); an
interpreter without the engine is refused here in one line (``ValueError``), as is a worker that died.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import _checks, _log

log = _log.logger(__name__)
WORKERS = Path(__file__).resolve().parent / "workers"
LOG_TAIL = 500  # characters of the worker's last error line a failure shows


@dataclass(frozen=True)
class Job:
    """One run: ``model`` (a checkpoint directory, or a GGUF file for llama.cpp), the ``dtype`` it runs in (None:
    the engine's choice), ``max_model_len`` tokens, the ``sequences`` scored (each ``(s,)`` token ids, one batch),
    the ``prompts`` continued greedily by ``greedy_tokens`` tokens, and the engine's ``options`` by the engine's own
    names (``{"kv_cache_dtype": "fp8"}``); ``vocab``, where given, the ids log p is taken over (the first ``vocab``:
    a benchmark's GGUF whose vocabulary is padded; None: the engine's whole vocabulary)."""

    model: str
    dtype: str | None
    max_model_len: int
    sequences: tuple[tuple[int, ...], ...]
    prompts: tuple[tuple[int, ...], ...] = ()
    greedy_tokens: int = 0
    options: dict[str, Any] = field(default_factory=dict)
    vocab: int | None = None

    def __post_init__(self) -> None:
        _checks.positive_int("max_model_len", self.max_model_len)
        _checks.non_negative_int("greedy_tokens", self.greedy_tokens)
        object.__setattr__(self, "sequences", tuple(tuple(int(t) for t in s) for s in self.sequences))
        object.__setattr__(self, "prompts", tuple(tuple(int(t) for t in p) for p in self.prompts))
        if not self.sequences or any(len(s) < 2 for s in self.sequences):
            raise ValueError("a job scores at least one sequence of 2 or more tokens")
        longest = max(len(s) for s in (*self.sequences, *((p + (0,) * self.greedy_tokens) for p in self.prompts)))
        if longest > self.max_model_len:
            raise ValueError(f"a job's longest sequence is {longest} tokens, beyond its max_model_len "
                             f"{self.max_model_len}")

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "sequences": [list(s) for s in self.sequences],
                "prompts": [list(p) for p in self.prompts]}


@dataclass(frozen=True)
class Result:
    """What a worker answered: per sequence the log p of each next token ``(s - 1,)`` as the engine computed it,
    per prompt its greedy tokens and their log p, the engine's ``facts`` (its version, the architecture and dtype
    it resolved, its cache), and the seconds the worker ran; or ``refused``: what the engine said when it would
    not load or run the model."""

    logprobs: tuple[tuple[float, ...], ...] = ()
    greedy: tuple[tuple[int, ...], ...] = ()
    greedy_logprobs: tuple[tuple[float, ...], ...] = ()
    facts: dict[str, Any] = field(default_factory=dict)
    refused: str | None = None
    seconds: float = 0.0

    @classmethod
    def from_dict(cls, d: dict[str, Any], seconds: float) -> "Result":
        if d.get("refused") is not None:
            return cls(refused=str(d["refused"]), seconds=seconds)
        rows = lambda key, kind: tuple(tuple(kind(x) for x in r) for r in d.get(key, ()))  # noqa: E731
        return cls(rows("logprobs", float), rows("greedy", int), rows("greedy_logprobs", float),
                   dict(d.get("facts", {})), None, seconds)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class WorkerDied(ValueError):
    """A worker that ended before answering; ``said``: why, from its output (``reason``), without the line's
    naming of the worker and the interpreter."""

    def __init__(self, message: str, said: str) -> None:
        super().__init__(message)
        self.said = said


def launch(python: str | Path, worker: str, job: Job, *, env: dict[str, str] | None = None,
           timeout: float | None = None, keep_log: Path | None = None) -> Result:
    """Run ``WORKERS/worker`` on ``job`` in the interpreter ``python`` (a session of its own, so that every process
    the engine starts ends with it, on an interrupt too) and return its ``Result``. ``env``: variables set for it
    beside the current environment; ``keep_log``: where the worker's output is kept (else it is shown only in a
    failure). ``ValueError`` in one line where ``python`` cannot run or import the engine, or the worker died."""
    python, script = Path(python), WORKERS / worker  # a runner's worker (an absolute path stays as it is)
    if not (python.is_file() and os.access(python, os.X_OK)):
        raise ValueError(f"--engine-python {python}: no such executable")
    with tempfile.TemporaryDirectory(prefix="ropebridge-job-") as tmp:
        job_file, out = Path(tmp) / "job.json", Path(tmp) / "result.json"
        job_file.write_text(json.dumps({**job.to_dict(), "out": str(out)}))
        output = keep_log or Path(tmp) / "worker.log"
        started = time.perf_counter()
        with open(output, "w") as sink:
            code = run_in_session([str(python), str(script), str(job_file)], sink, env=env, timeout=timeout)
        seconds = time.perf_counter() - started
        if not out.is_file():
            how = f"died by signal {-code}" if code < 0 else f"exited with status {code}"
            said = reason(output.read_text(errors="replace"))
            raise WorkerDied(f"the {worker} worker in {python} {how} before answering: {said}", said)
        answer, log_text = json.loads(out.read_text()), output.read_text(errors="replace")
    if answer.get("missing") is not None:
        raise ValueError(f"{python} cannot import what the {worker} worker needs ({answer['missing']}); give "
                         "--engine-python an interpreter that has the engine installed")
    if answer.get("refused") and ROOT_CAUSE_ABOVE in answer["refused"]:  # the engine's own process said why
        answer["refused"] = root_cause(log_text) or answer["refused"]
    log.info("%s answered in %.1f s", worker, seconds)
    return Result.from_dict(answer, seconds)


ROOT_CAUSE_ABOVE = "root cause above"  # vLLM's words where its engine process failed and said why in its log
POINTS_ABOVE = re.compile(r"root cause above|stack trace \(above\)|check the stack trace above", re.IGNORECASE)


def reason(text: str) -> str:
    """Why a worker died, in one line: its last error, or where that only points up the log ("See stack trace
    (above) for the root cause", vLLM's ``EngineDeadError``), the first exception the log names."""
    last = last_error(text)
    return (root_cause(text) or last) if POINTS_ABOVE.search(last) else last


def root_cause(text: str) -> str | None:
    """The first exception a worker's output names (``NotImplementedError: FP8 KV cache on CPU requires ...``), its
    log prefix dropped: where an engine's own process failed, the reason it gave."""
    for line in text.splitlines():
        found = re.search(r"\b([A-Z]\w*(?:Error|Exception)): (.+)$", line)
        if found and not POINTS_ABOVE.search(line) and "Traceback" not in line:
            return f"{found.group(1)}: {found.group(2).strip()}"[:LOG_TAIL]
    return None


def last_error(text: str) -> str:
    """The last line of a worker's output that names an error (else its last line), as the one line to show."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or "error:" in line]
    return (errors or lines or ["(no output)"])[-1][:LOG_TAIL]


def run_in_session(argv: list[str], sink, *, env: dict[str, str] | None = None, timeout: float | None = None) -> int:
    """Run ``argv`` in a session of its own, its output (stdout and stderr) into the open file ``sink``, with ``env``
    set beside the current variables, and return its exit status. An interrupt, the timeout or any exception while
    it runs ends the whole session (``end``: every process the engine started) before it is raised."""
    proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
                            start_new_session=True)
    try:
        return proc.wait(timeout)
    except BaseException:
        end(proc)
        raise


def end(proc: subprocess.Popen) -> None:
    """End ``proc``'s session (it was started in one of its own): SIGTERM, then SIGKILL after 10 s."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(wait)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue
