"""runners/workers/run_vllm: what can be checked without vLLM (the suite runs without it; the engine benchmarks run
the worker in vLLM's own environment)."""

import sys

from ropebridge.runners.jobs import WORKERS

sys.path.insert(0, str(WORKERS))
import run_vllm  # noqa: E402


def test_the_cores_are_split_between_the_ranks_as_vllm_writes_it(monkeypatch):
    monkeypatch.setattr(run_vllm.os, "sched_getaffinity", lambda pid: {0, 1})
    assert run_vllm._binds(2) == "0|1"
    monkeypatch.setattr(run_vllm.os, "sched_getaffinity", lambda pid: set(range(16)))
    assert run_vllm._binds(2) == "0-7|8-15" and run_vllm._binds(1) == "0-15"
