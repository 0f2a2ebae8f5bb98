"""runners/workers/run_llama_cpp: what can be checked without llama.cpp (the suite runs without it; the engine
benchmarks run the worker in llama.cpp's own environment)."""

import sys

import numpy as np
import pytest
import torch

from ropebridge.runners import Job, launch

import run_llama_cpp


def test_log_p_is_torchs_float64_log_softmax_over_the_vocabulary_scored():
    row = np.random.default_rng(0).normal(0, 30, 50).astype(np.float32)  # llama.cpp's logits are float32
    got = run_llama_cpp._log_softmax(np, row, 40)
    want = torch.log_softmax(torch.tensor(row[:40], dtype=torch.float64), -1).numpy()
    assert got.shape == (40,) and np.allclose(got, want, rtol=0, atol=1e-12)
    assert np.allclose(run_llama_cpp._log_softmax(np, row, None), torch.log_softmax(
        torch.tensor(row, dtype=torch.float64), -1).numpy(), rtol=0, atol=1e-12)


def test_an_interpreter_without_llama_cpp_is_named(tmp_path):
    job = Job(model=str(tmp_path / "m.gguf"), dtype=None, max_model_len=8, sequences=[[1, 2]])
    with pytest.raises(ValueError, match="cannot import what the run_llama_cpp.py worker needs \\(llama_cpp"):
        launch(sys.executable, "run_llama_cpp.py", job)
