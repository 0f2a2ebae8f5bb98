"""runners/workers/run_vllm: what can be checked without vLLM (the suite runs without it; the engine benchmarks run
the worker in vLLM's own environment)."""



import _job
import run_vllm  # noqa: F401  (imports with the standard library alone)


def test_the_cores_are_split_between_the_ranks_as_vllm_and_sglang_write_it(monkeypatch):
    monkeypatch.setattr(_job.os, "sched_getaffinity", lambda pid: {0, 1})
    assert _job.core_binds(2) == "0|1"
    monkeypatch.setattr(_job.os, "sched_getaffinity", lambda pid: set(range(16)))
    assert _job.core_binds(2) == "0-7|8-15" and _job.core_binds(1) == "0-15"
