"""verify --engine: DST run by an engine through the job protocol, judged against the exact reference by verify's
own limit; a real second engine (transformers) passes, an engine whose numbers are wrong fails, both ways."""

import json
import sys
from pathlib import Path

import pytest
import torch
import transformers as T
from pico import build

from ropebridge.checkpoint.model import SourceModel
from ropebridge.cli import main
from ropebridge.convert import convert
from ropebridge.emulation import PlanRequest
from ropebridge.runners import RUNNERS, EngineRun, Option, Runner
from ropebridge.verify import verify
from ropebridge.verify.in_engine import cached_exact_scores, exact_scores

PERTURBED = Runner("perturbed", "perturbed transformers", str(Path(__file__).parents[1] / "runners" /
                                                               "perturbed_worker.py"), "checkpoint",
                   (Option("shift", "--shift", str, "added to one log p"), Option("at", "--at", int, "where", low=0)))


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A pico BLOOM and its bfloat16 ladder conversion."""
    work = tmp_path_factory.mktemp("in_engine")
    src = build(work / "bloom", "bloom-4heads")
    dst = convert(src, work / "rope", PlanRequest(window=256, dtype="bfloat16")).destination
    return src, dst


@pytest.fixture
def perturbed(monkeypatch):
    monkeypatch.setitem(RUNNERS, "perturbed", PERTURBED)
    return PERTURBED


def test_exact_scores_are_an_independent_float64_alibi_s(bloom):
    # transformers' BLOOM in float64 is ALiBi written by others: the log p, argmax and margins agree with it
    ids = torch.tensor([3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46, 264, 33, 83, 27, 95])
    scores = exact_scores(SourceModel(bloom), ids)
    model = T.AutoModelForCausalLM.from_pretrained(bloom, dtype=torch.float64, attn_implementation="eager").eval()
    with torch.no_grad():
        logp = torch.log_softmax(model(ids[None]).logits[0, :-1], -1)  # (s - 1, V)
    want = logp.gather(1, ids[1:, None])[:, 0]
    # transformers builds BLOOM's slopes and bias in float32 whatever the model's dtype: about float32's eps per
    # unit of distance (8.6e-8 measured here)
    tol = len(ids) * torch.finfo(torch.float32).eps
    assert torch.allclose(torch.tensor(scores.logprobs, dtype=torch.float64), want, rtol=0, atol=tol)
    assert list(scores.argmax) == logp.argmax(-1).tolist()
    margin = torch.tensor(scores.margin, dtype=torch.float64)
    assert torch.allclose(margin, logp.max(-1).values - want, rtol=0, atol=2 * tol)
    assert all((m == 0) == (a == t) for m, a, t in zip(scores.margin, scores.argmax, ids[1:].tolist()))
    assert scores.baseline_max_err is None and scores.ppl == pytest.approx(float(torch.exp(-want.mean())))


def test_the_baseline_and_limit_are_verifys_own(pair, tmp_path):
    src, dst = pair
    own = verify(src, dst, context=64, greedy_tokens=0)
    run = verify(src, dst, context=64, greedy_tokens=0, engine=EngineRun("transformers"))
    assert own.passed and run.passed, (own.failures, run.failures)
    assert run.baseline_max_err == pytest.approx(own.baseline_max_err, rel=1e-12)
    assert run.thresholds["limit"] == own.thresholds["limit"] and run.predicted_error == own.predicted_error
    # cached: computed once per model and ids, read back the second time
    source, ids = SourceModel(src), list(range(1, 40))
    first = cached_exact_scores(source, "fp", ids, tmp_path, baseline="bfloat16")
    assert first == cached_exact_scores(source, "fp", ids, tmp_path, baseline="bfloat16")
    assert len(list(tmp_path.glob("exact-*.json"))) == 1


def test_transformers_through_the_protocol_passes_and_reports_what_it_ran(pair, capsys):
    src, dst = pair
    assert main(["verify", str(src), str(dst), "--context", "96", "--greedy-tokens", "8", "--engine", "transformers",
                 "--attn-implementation", "eager", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    engine = out["engine"]
    assert engine["run"]["options"] == {"attn_implementation": "eager"} and engine["facts"]["attention"] == "eager"
    assert engine["max_err"] < out["thresholds"]["limit"] and engine["decode_max_err"] < out["thresholds"]["limit"]
    assert engine["parting"] is None and out["byte_check"]["mode"] == "exact"
    assert main(["verify", str(src), str(dst), "--context", "96", "--greedy-tokens", "8", "--engine",
                 "transformers"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("exact bloom vs converted in transformers, bfloat16, 96 tokens") and "PASSED" in text


@pytest.mark.parametrize("shift, passes", [(0.05, True), (1e6, False), (float("nan"), False)])
def test_an_engine_whose_log_p_is_wrong_fails_and_one_within_the_limit_passes(pair, perturbed, shift, passes):
    src, dst = pair
    report = verify(src, dst, context=64, greedy_tokens=4, engine=EngineRun("perturbed", {"shift": "0", "at": 10}))
    base = report.engine.max_err
    report = verify(src, dst, context=64, greedy_tokens=4,
                    engine=EngineRun("perturbed", {"shift": str(shift), "at": 10}))
    assert report.passed is passes, report.failures
    if not passes:
        assert any("in perturbed transformers --at 10 --shift" in f for f in report.failures), report.failures
    else:
        assert report.engine.max_err == pytest.approx(max(base, report.engine.max_err))


def test_an_engine_that_does_not_run_dst_fails_with_what_it_said(pair, perturbed, tmp_path, capsys):
    src, dst = pair
    report = verify(src, dst, context=32, greedy_tokens=0, engine=EngineRun("perturbed", {"shift": "refuse"}))
    assert report.failures == ["in perturbed transformers --shift refuse: the engine did not run DST: ValueError: "
                               "this engine runs no NemotronForCausalLM"]
    # an interpreter that is not there, or lacks the engine: bad input, one line
    with pytest.raises(ValueError, match="no such executable"):
        verify(src, dst, context=32, engine=EngineRun("transformers", python=str(tmp_path / "python")))
    assert main(["verify", str(src), str(dst), "--engine", "vllm", "--engine-python", sys.executable]) == 2
    err = capsys.readouterr().err
    assert "cannot import what the run_vllm.py worker needs (vllm" in err and err.count("\n") == 1, err


@pytest.mark.parametrize("argv, message", [
    (["--kv-cache-dtype", "fp8"], "--kv-cache-dtype is an engine option: give --engine too"),
    (["--engine", "transformers", "--cache-type-k", "q8_0"],
     "--cache-type-k is an option of --engine llama.cpp, not of --engine transformers"),
    (["--engine", "llama.cpp"], "--engine llama.cpp runs a GGUF file: give it with --gguf FILE"),
    (["--engine", "vllm", "--tensor-parallel-size", "0"], "argument --tensor-parallel-size: '0' is not an integer"),
    (["--engine", "sglang", "--kv-cache-dtype", "fp8"], "--engine sglang: --kv-cache-dtype must be one of auto, bf16"),
    (["--engine", "vllm", "--kv-cache-dtype", "fp8_e9"], "argument --kv-cache-dtype: invalid choice: 'fp8_e9'"),
    (["--engine", "vllm", "--chunked-prefill-size", "256"],
     "--chunked-prefill-size is an option of --engine sglang, not of --engine vllm"),
])
def test_engine_options_are_checked_before_anything_runs(pair, capsys, argv, message):
    src, dst = pair
    assert main(["verify", str(src), str(dst), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
