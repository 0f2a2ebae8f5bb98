"""runners/workers/run_transformers: the transformers worker answers what transformers computes in this process."""

import sys

import torch
import transformers as T

from ropebridge.runners import Job, launch


def test_the_transformers_worker_answers_what_transformers_computes(bloom):
    ids, prompt = [5, 9, 17, 200, 3, 44, 81, 7], [5, 9, 17]
    job = Job(model=str(bloom), dtype="float32", max_model_len=16, sequences=[ids], prompts=[prompt],
              greedy_tokens=4)
    result = launch(sys.executable, "run_transformers.py", job)
    model = T.AutoModelForCausalLM.from_pretrained(bloom, dtype=torch.float32).eval()
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([ids])).logits[0, :-1], -1)  # (s - 1, V)
        want = logp.gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
        out = model.generate(torch.tensor([prompt]), max_new_tokens=4, do_sample=False, pad_token_id=0)
    eps = torch.finfo(torch.float32).eps
    got = torch.tensor(result.logprobs[0], dtype=torch.float32)
    assert torch.allclose(got, want, rtol=0, atol=float(64 * eps * want.abs().max()))
    assert list(result.greedy[0]) == out[0, 3:].tolist()
    assert len(result.greedy_logprobs[0]) == 4 and all(lp <= 0 for lp in result.greedy_logprobs[0])
    assert result.facts["architecture"] == "BloomForCausalLM" and result.facts["dtype"] == "float32"


def test_the_transformers_worker_says_what_transformers_said_of_a_model_it_cannot_load(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "no-such-architecture"}')
    job = Job(model=str(tmp_path), dtype=None, max_model_len=4, sequences=[[1, 2]])
    refused = launch(sys.executable, "run_transformers.py", job).refused
    assert refused is not None and "no-such-architecture" in refused
