"""The engine studies' one judgement against the exact model (``benchmarks/engines/scoring.py``): a run's
perplexity, |Δ log p| and greedy partings, and what a row says of the conversion it ran."""

import json
import math
import sys
import types
from pathlib import Path

from benchmarks.engines import scoring

ROOT = Path(__file__).resolve().parents[2]


def _ref(logprobs, greedy, margins):
    return {"logprobs": logprobs, "greedy": greedy, "margins": margins}


def test_a_run_passes_within_the_perplexity_limit_and_parts_only_at_near_ties():
    ref = _ref([-1.0, -2.0, -3.0], [[1, 2, 3], [4, 5, 6]], [[1.0, 0.01, 1.0], [1.0, 1.0, 1.0]])
    same = scoring.judge({"logprobs": [-1.0, -2.0, -3.0], "greedy": [[1, 2, 3], [4, 5, 6]]}, ref)
    assert same["passes"] and same["ppl_rel"] == 0 and same["greedy_partings"] == []
    near = scoring.judge({"logprobs": [-1.0, -2.0, -3.006], "greedy": [[1, 9, 9], [4, 5, 6]]}, ref)
    assert near["passes"] and near["greedy_partings"] == [
        {"prompt": 0, "step": 1, "exact_margin": 0.01, "near_tie": True}]  # 0.01 <= 2 x 0.006
    far = scoring.judge({"logprobs": [-1.0, -2.0, -3.006], "greedy": [[1, 2, 3], [9, 9, 9]]}, ref)
    assert not far["passes"] and not far["greedy_partings"][0]["near_tie"]  # margin 1.0 is no tie
    worse = scoring.judge({"logprobs": [-1.0, -2.0, -3.1], "greedy": [[1, 2, 3], [4, 5, 6]]}, ref)
    assert not worse["passes"] and math.isclose(worse["ppl_rel"], math.exp(0.1 / 3) - 1)  # beyond 0.5%
    nan = scoring.judge({"logprobs": [-1.0, float("nan"), -3.0], "greedy": [[1, 2, 3], [4, 5, 6]]}, ref)
    assert not nan["passes"]  # a non-finite measurement is a failure
    refused = scoring.judge({"refused": "ValueError: no"}, ref)
    assert refused == {"refused": "ValueError: no", "passes": None}


def test_a_row_names_the_conversion_it_ran(tmp_path):
    (tmp_path / "ropebridge.json").write_text(json.dumps({"target": "persimmon", "plan": {
        "strategy": "ladder", "rotary_dim": 32, "heads": [{"predicted_error": 0.01}, {"predicted_error": 0.03}]}}))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "persimmon", "hidden_size": 384,
                                                      "num_attention_heads": 6}))
    assert scoring.conversion(tmp_path) == {"target": "persimmon", "strategy": "ladder", "rotary_dim": 32,
                                            "predicted": 0.03, "served_head_dim": 64}


class _DyingEnv:
    """An engine environment whose worker writes ``said`` to its log and dies."""

    def __init__(self, said: str):
        self.said = said

    def run(self, args, log_file, env=None):
        Path(log_file).write_text(self.said)
        raise RuntimeError(f"{args[0]} exited with status 1")


def test_a_worker_that_dies_is_a_refusal_read_as_the_package_reads_a_worker(tmp_path):
    job = {"model": "/m/demo-sglang"}
    died = scoring.run_worker(_DyingEnv("loading\nValueError: first\nRuntimeError: last\n"), ["w.py", "serve"], job,
                              tmp_path, "bfloat16-serve")
    assert died["refused"] == "RuntimeError: last"  # the last error its log names
    pointed = scoring.run_worker(_DyingEnv("KeyError: the cause\nEngineDeadError: see root cause above\n"),
                                 ["w.py", "serve"], job, tmp_path, "bfloat16-serve")
    assert pointed["refused"] == "KeyError: the cause"  # the last only points up the log: the first error
    silent = scoring.run_worker(_DyingEnv(""), ["w.py", "serve"], job, tmp_path, "bfloat16-serve")
    assert silent["refused"] == "w.py exited with status 1"


def test_a_run_through_the_package_runner_is_a_row_or_what_the_engine_said(tmp_path):
    from ropebridge.runners import Job
    from ropebridge.runners.jobs import WORKERS

    worker = tmp_path / "fake_worker.py"  # a runner by absolute path, in this interpreter
    worker.write_text(f"import sys\nsys.path.insert(0, {str(WORKERS)!r})\nimport _job\n\n"
                      "def run(job):\n    if job['options'].get('refuse'):\n"
                      "        return {'refused': 'ValueError: no'}\n"
                      "    if job['options'].get('die'):\n"
                      "        raise RuntimeError('the kernel has no head size 72')\n"
                      "    print('the engine log')\n"
                      "    return {'logprobs': [[-0.5]], 'greedy': [[7]], 'greedy_logprobs': [[-0.1]], "
                      "'facts': {'architecture': 'X'}}\n\n_job.main(run)\n")
    job = Job(model=str(tmp_path / "demo-x"), dtype="bfloat16", max_model_len=4, sequences=[[1, 2]])
    out = scoring.run_engine(Path(sys.executable), str(worker), job, tmp_path, "bfloat16-offline")
    assert out["logprobs"] == [-0.5] and out["greedy"] == [[7]] and out["architecture"] == "X"
    assert "the engine log" in out["log"] and (tmp_path / "logs" / "demo-x-bfloat16-offline.log").is_file()
    refused = Job(model=str(tmp_path / "demo-x"), dtype="bfloat16", max_model_len=4, sequences=[[1, 2]],
                  options={"refuse": True})
    assert scoring.run_engine(Path(sys.executable), str(worker), refused, tmp_path, "b")["refused"] == "ValueError: no"
    dies = Job(model=str(tmp_path / "demo-x"), dtype="bfloat16", max_model_len=4, sequences=[[1, 2]],
               options={"die": True})  # a crash in the engine: what it said, without the launcher's words
    said = scoring.run_engine(Path(sys.executable), str(worker), dies, tmp_path, "c")["refused"]
    assert said == "RuntimeError: the kernel has no head size 72"


def test_a_study_saves_its_rows_merged_with_those_stored_in_the_one_schema(tmp_path, monkeypatch, capsys):
    from benchmarks import _common

    monkeypatch.setattr(_common, "RESULTS", tmp_path)
    out = tmp_path / "x_engine.json"
    old = {"model": "demo-mpt", "kind": "converted", "dtype": "bfloat16", "api": "serve", "ppl": 2.0}
    out.write_text(json.dumps({"rows": [old]}))
    monkeypatch.setattr(sys, "argv", ["/repo/benchmarks/engines/x_run.py", "--apis", "offline"])
    monkeypatch.setitem(sys.modules, "__main__", types.SimpleNamespace(__spec__=types.SimpleNamespace(
        name="benchmarks.engines.x_run")))  # as `python -m benchmarks.engines.x_run` starts it
    new = {"model": "demo", "kind": "converted", "dtype": "bfloat16", "api": "offline", "ppl": 1.0}
    scoring.save(out, [new], ["model", "ppl"], scoring.MODELS, {"x": "x 1.0", "context": 8})
    payload = json.loads(out.read_text())
    assert payload["rows"] == [new, old] and payload["x"] == "x 1.0" and payload["context"] == 8
    assert payload["command"] == "python -m benchmarks.engines.x_run --apis offline" and "cpu" in payload["machine"]
    assert "load_after" in payload and f"wrote {out}" in capsys.readouterr().out
