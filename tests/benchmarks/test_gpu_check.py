"""benchmarks/gpu_check.py on the CPU: everything but the GPU itself (it needs one, and says so in one line)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from pico import build

from benchmarks import gpu_check

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here: the check runs instead")
def test_without_a_cuda_device_it_says_so_in_one_line():
    proc = subprocess.run([sys.executable, "-m", "benchmarks.gpu_check"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and "no CUDA device" in proc.stderr


def test_flexattention_alibi_is_native_bloom(tmp_path):
    # the baseline a user would run instead of converting: the same weights, ALiBi as a score_mod, causal; on a
    # prompt and then token by token with its kept keys and values, equal to transformers' eager BLOOM in float32
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(build(tmp_path / "bloom", "bloom-4heads"), dtype=torch.float32)
    ids = torch.randint(0, model.config.vocab_size, (1, 40), generator=torch.Generator().manual_seed(0))
    flex = gpu_check.flex_bloom(model)
    with torch.no_grad():
        eager = model(ids).logits  # (1, s, V)
        whole, _ = flex(ids)
        head, caches = flex(ids[:, :32])
        tail = []
        for p in range(32, 40):
            logits, caches = flex(ids[:, p:p + 1], caches, p)
            tail.append(logits)
    tol = dict(rtol=0, atol=1e-4)  # float32 logits of size ~10: a few ulps of the sums, not a bias error (~m d)
    torch.testing.assert_close(whole, eager, **tol)
    torch.testing.assert_close(torch.cat([head, *tail], 1), eager, **tol)


def test_the_whole_check_runs_on_the_cpu_at_small_sizes(tmp_path):
    out = tmp_path / "gpu_check.json"
    assert gpu_check.main(["--device", "cpu", "--quick", "--layers", "1", "--contexts", "64",
                           "--fidelity-contexts", "64", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    fidelity = [r for r in rows if r["part"] == "fidelity"]
    assert {(r["model"], r["target"]) for r in fidelity} == set(gpu_check.FIDELITY)
    assert all(r["max_abs_logit_err"] < 2 and abs(r["ppl_converted"] / r["ppl_exact"] - 1) < 0.05 for r in fidelity)
    speed = {r["model"]: r for r in rows if r["part"] == "speed"}
    assert set(speed) == {"native (eager)", "native (FlexAttention)", "nemotron (SDPA)", "gpt-neox (SDPA)"}
    assert all(r["prefill_tokens_per_s"] > 0 and r["decode_tokens_per_s"] > 0 for r in speed.values())
    assert speed["nemotron (SDPA)"]["decode_cache"] == "static"
