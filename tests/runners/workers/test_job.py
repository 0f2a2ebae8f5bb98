"""runners/workers/_job: the worker's side of the protocol; every worker runs in an engine's interpreter, where
ropebridge is not installed, so each imports the standard library and its engine only."""

import ast
import sys

import pytest

from ropebridge.runners.jobs import WORKERS

import _job

ENGINES = {"torch", "transformers", "vllm", "sglang", "numpy", "llama_cpp"}  # what the workers may import beside _job


@pytest.mark.parametrize("path", sorted(WORKERS.glob("*.py")), ids=lambda p: p.name)
def test_a_worker_imports_the_standard_library_and_its_engine_only(path):
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    outside = names - set(sys.stdlib_module_names) - ENGINES - {"_job", "__future__"}
    assert not outside, f"{path.name} imports {outside}"



def test_what_an_engine_said_is_its_sentence():
    pydantic = ValueError("1 validation error for ModelConfig\n  Value error, head size 72 is not supported by the "
                          "CPU attention [type=value_error, input_value=...]")
    assert _job.said(pydantic) == "ValueError: head size 72 is not supported by the CPU attention"
    assert _job.said(RuntimeError("\n\nout of memory\nmore")) == "RuntimeError: out of memory"
    assert len(_job.said(RuntimeError("x" * 2000))) == 500


@pytest.mark.parametrize("worker, engine", [("run_vllm.py", "vllm"), ("run_sglang.py", "sglang")])
def test_an_interpreter_without_the_engine_is_named(bloom, worker, engine):
    from ropebridge.runners import Job, launch

    job = Job(model=str(bloom), dtype=None, max_model_len=8, sequences=[[1, 2]])
    try:
        launch(sys.executable, worker, job)
    except ValueError as exc:
        assert f"cannot import what the {worker} worker needs ({engine}" in str(exc)
    else:
        raise AssertionError(f"{engine} is not installed beside ropebridge: the worker must say it is missing")
