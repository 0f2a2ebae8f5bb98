"""runners/workers/run_vllm: what can be checked without vLLM (the suite runs without it; the engine benchmarks run
the worker in vLLM's own environment)."""

import sys

from ropebridge.runners import Job, launch
from ropebridge.runners.jobs import WORKERS

sys.path.insert(0, str(WORKERS))
import run_vllm  # noqa: E402


def test_the_cores_are_split_between_the_ranks_as_vllm_writes_it(monkeypatch):
    monkeypatch.setattr(run_vllm.os, "sched_getaffinity", lambda pid: {0, 1})
    assert run_vllm._binds(2) == "0|1"
    monkeypatch.setattr(run_vllm.os, "sched_getaffinity", lambda pid: set(range(16)))
    assert run_vllm._binds(2) == "0-7|8-15" and run_vllm._binds(1) == "0-15"


def test_an_interpreter_without_vllm_is_named(bloom):
    job = Job(model=str(bloom), dtype=None, max_model_len=8, sequences=[[1, 2]])
    try:
        launch(sys.executable, "run_vllm.py", job)
    except ValueError as exc:
        assert "cannot import what the run_vllm.py worker needs (vllm" in str(exc)
    else:
        raise AssertionError("vLLM is not installed beside ropebridge: the worker must say it is missing")
