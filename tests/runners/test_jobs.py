"""runners.jobs: a job in, a result out, the worker in another interpreter; every way a worker can fail ends
in one line."""

import sys
import textwrap

import pytest
from processes import gone

from ropebridge.runners import Job, launch
from ropebridge.runners.jobs import WORKERS, Result, last_error

JOB = Job(model="m", dtype="float32", max_model_len=8, sequences=[[1, 2, 3]], prompts=[[1]], greedy_tokens=2)


def worker(tmp_path, body: str):
    """A worker script at an absolute path: ``_job`` importable, ``body`` its ``run(job)``."""
    path = tmp_path / "worker.py"
    path.write_text(f"import sys\nsys.path.insert(0, {str(WORKERS)!r})\nimport _job\n" + textwrap.dedent(body)
                    + "\nif __name__ == '__main__':\n    _job.main(run)\n")
    return str(path)


@pytest.mark.parametrize("kwargs, message", [
    (dict(sequences=[]), "at least one sequence of 2 or more tokens"),
    (dict(sequences=[[1]]), "at least one sequence of 2 or more tokens"),
    (dict(sequences=[[1] * 9]), "longest sequence is 9 tokens, beyond its max_model_len 8"),
    (dict(sequences=[[1, 2]], prompts=[[1] * 7], greedy_tokens=2), "longest sequence is 9 tokens"),
    (dict(sequences=[[1, 2]], max_model_len=0), "max_model_len must be > 0"),
])
def test_a_job_is_refused_on_construction(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Job(**{"model": "m", "dtype": None, "max_model_len": 8, **kwargs})


def test_a_result_comes_back_as_the_worker_wrote_it(tmp_path):
    path = worker(tmp_path, """
    def run(job):
        return {"logprobs": [[-1.5] * (len(job["sequences"][0]) - 1)], "greedy": [[7] * job["greedy_tokens"]],
                "greedy_logprobs": [[-0.5] * job["greedy_tokens"]], "facts": {"options": job["options"]}}
    """)
    result = launch(sys.executable, path, Job(**{**JOB.to_dict(), "options": {"x": 1}}))
    assert result.logprobs == ((-1.5, -1.5),) and result.greedy == ((7, 7),) and result.refused is None
    assert result.facts == {"options": {"x": 1}} and result.seconds > 0
    assert Result.from_dict(result.to_dict(), 1.0).logprobs == result.logprobs


def test_a_refusal_is_a_result(tmp_path):
    path = worker(tmp_path, """
    def run(job):
        try:
            raise ValueError("1 validation error\\n  Value error, head size 72 is not supported [type=value_error]")
        except ValueError as exc:
            return {"refused": _job.said(exc)}
    """)
    assert launch(sys.executable, path, JOB).refused == "ValueError: head size 72 is not supported"


def test_an_interpreter_without_the_engine_is_refused_in_one_line(tmp_path):
    path = worker(tmp_path, """
    def run(job):
        import no_such_engine_here
    """)
    with pytest.raises(ValueError, match="cannot import what the .* worker needs \\(no_such_engine_here"):
        launch(sys.executable, path, JOB)
    with pytest.raises(ValueError, match="no such executable"):
        launch(tmp_path / "nowhere" / "python", path, JOB)


def test_a_worker_that_dies_is_named_with_its_last_error(tmp_path):
    path = worker(tmp_path, """
    def run(job):
        print("loading weights")
        raise RuntimeError("the kernel has no head size 72")
    """)
    with pytest.raises(ValueError, match="exited with status 1 before answering: RuntimeError: the kernel has no") as e:
        launch(sys.executable, path, JOB)
    assert e.value.said == "RuntimeError: the kernel has no head size 72"  # what it said, for a caller to keep
    assert last_error("a\nValueError: x\nb\n") == "ValueError: x" and last_error("") == "(no output)"


def test_an_interrupted_run_ends_every_process_the_engine_started(tmp_path):
    # the worker starts a child (as vLLM starts its engine core) and hangs; the timeout ends the whole session
    pid_file = tmp_path / "child.pid"
    path = worker(tmp_path, f"""
    import subprocess, time
    def run(job):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open({str(pid_file)!r}, "w").write(str(child.pid))
        time.sleep(600)
    """)
    with pytest.raises(Exception):  # the timeout, as an interrupt would raise
        launch(sys.executable, path, JOB, timeout=5)
    assert gone(int(pid_file.read_text())), "the engine's child process outlived the run"


def test_a_refusal_whose_reason_is_in_the_engines_log_says_that_reason(tmp_path):
    # vLLM's engine process fails and its LLM() raises "... See root cause above": the reason is the first
    # exception its log names
    path = worker(tmp_path, """
    def run(job):
        print("(Worker pid=1) ERROR 12-07 [multiproc_executor.py:1063] Traceback (most recent call last):")
        print("(Worker pid=1) ERROR 12-07 [multiproc_executor.py:1063] NotImplementedError: FP8 KV cache on CPU "
              "requires x86 with AVX-512 or AMX.", flush=True)
        return {"refused": "RuntimeError: Engine core initialization failed. See root cause above. Failed core "
                           "proc(s): {}"}
    """)
    assert launch(sys.executable, path, JOB).refused == ("NotImplementedError: FP8 KV cache on CPU requires x86 with "
                                                         "AVX-512 or AMX.")


def test_a_dead_worker_whose_last_words_point_up_its_log_is_named_by_the_first_exception_there(tmp_path):
    # vLLM's worker fails, its engine core says "please check the stack trace above for the root cause" and the
    # process ends in EngineDeadError "See stack trace (above) for the root cause"
    path = worker(tmp_path, """
    def run(job):
        print("(Worker pid=1) ERROR [multiproc_executor.py:1063] AttributeError: '_OpNamespace' '_C' object has no "
              "attribute 'cpu_gemm_wna16'")
        print("(EngineCore pid=2) ERROR [core.py:1512] RuntimeError: Worker failed with error '...', please check "
              "the stack trace above for the root cause", flush=True)
        raise SystemExit("vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack "
                         "trace (above) for the root cause.")
    """)
    with pytest.raises(ValueError, match="before answering: AttributeError: '_OpNamespace' '_C' object has no "
                                         "attribute 'cpu_gemm_wna16'$"):
        launch(sys.executable, path, JOB)
