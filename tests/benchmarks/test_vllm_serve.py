"""benchmarks/engines/vllm_serve.py says what is missing and measures nothing where there is no GPU or no vLLM."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
STUDY = [sys.executable, "-m", "benchmarks.engines.vllm_serve"]  # as its docstring says to run it


@pytest.mark.skipif(torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None,
                    reason="a GPU and vLLM are here: the benchmark would run")
def test_without_a_gpu_or_vllm_it_says_which_and_writes_nothing():
    out = ROOT / "benchmarks" / "results" / "vllm_serve.json"
    before = out.read_bytes() if out.exists() else None
    proc = subprocess.run(STUDY, capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    reason = "no CUDA GPU" if not torch.cuda.is_available() else "vLLM is not installed"
    assert proc.stdout.startswith(f"vllm_serve: {reason}") and "nothing measured, nothing written" in proc.stdout
    assert (out.read_bytes() if out.exists() else None) == before


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: the benchmark would run")
def test_sglang_and_the_llama_shapes_without_a_gpu_say_so_and_write_nothing():
    before = {p.name: p.read_bytes() for p in (ROOT / "benchmarks" / "results").glob("*_serve.json")}
    proc = subprocess.run([*STUDY, "--engine", "sglang",
                           "--models", "baichuan2-13b-shape,refact-1.6b-shape", "--targets", "llama"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout.startswith("vllm_serve: no CUDA GPU"), proc.stdout + proc.stderr
    assert {p.name: p.read_bytes() for p in (ROOT / "benchmarks" / "results").glob("*_serve.json")} == before


def test_an_unknown_model_is_bad_input():
    proc = subprocess.run([*STUDY, "--models", "baichuan-7b"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2 and "unknown model 'baichuan-7b'" in proc.stderr


def _serve_module():
    from benchmarks.engines import vllm_serve

    return vllm_serve


@pytest.mark.parametrize("name, family, heads, head_dim, target", [
    ("baichuan2-13b-shape", "baichuan", 40, 128, "llama"), ("refact-1.6b-shape", "refact", 32, 64, "llama"),
    ("jais-30b-shape", "jais", 56, 128, "stablelm"), ("btlm-3b-8k-shape", "btlm", 32, 80, "stablelm")])
def test_each_shape_is_read_as_its_family_and_geometry_with_its_default_target(tmp_path, name, family, heads,
                                                                               head_dim, target):
    """The published geometry in its family's config keys (the config as the benchmark writes it; tensors with no
    layers and a small vocabulary): read as that family, and ``default`` is convert's target."""
    import json

    from pico import build_remote

    from ropebridge.checkpoint.config import from_config

    serve = _serve_module()
    layout, shape = serve.SHAPES[name]
    layers = "num_hidden_layers" if "num_hidden_layers" in shape else "n_layer"
    src = build_remote(tmp_path, layout, **{**shape, layers: 0, "vocab_size": 64})
    (src / "config.json").write_text(json.dumps({**json.loads((src / "config.json").read_text()), **shape}))
    info = from_config(src)
    assert (info.family, info.n_heads, info.head_dim) == (family, heads, head_dim)
    assert serve.target_names("default,gpt-neox", src) == [target, "gpt-neox"]
