"""benchmarks/vllm_serve.py says what is missing and measures nothing where there is no GPU or no vLLM."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None,
                    reason="a GPU and vLLM are here: the benchmark would run")
def test_without_a_gpu_or_vllm_it_says_which_and_writes_nothing():
    out = ROOT / "benchmarks" / "results" / "vllm_serve.json"
    before = out.read_bytes() if out.exists() else None
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "vllm_serve.py")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    reason = "no CUDA GPU" if not torch.cuda.is_available() else "vLLM is not installed"
    assert proc.stdout.startswith(f"vllm_serve: {reason}") and "nothing measured, nothing written" in proc.stdout
    assert (out.read_bytes() if out.exists() else None) == before


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: the benchmark would run")
def test_sglang_and_the_llama_shapes_without_a_gpu_say_so_and_write_nothing():
    before = {p.name: p.read_bytes() for p in (ROOT / "benchmarks" / "results").glob("*_serve.json")}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "vllm_serve.py"), "--engine", "sglang",
                           "--models", "baichuan2-13b-shape,refact-1.6b-shape", "--targets", "llama"],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("vllm_serve: no CUDA GPU"), proc.stdout + proc.stderr
    assert {p.name: p.read_bytes() for p in (ROOT / "benchmarks" / "results").glob("*_serve.json")} == before


def test_an_unknown_model_is_bad_input():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "vllm_serve.py"), "--models", "baichuan-7b"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown model 'baichuan-7b'" in proc.stderr
