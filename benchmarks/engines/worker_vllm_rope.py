"""Runs inside a vLLM environment (never ropebridge's): a converted checkpoint's rope as vLLM builds it from the
config (``get_rope``, the PyTorch-native path ``forward_native``, on the CPU), applied to the checkpoint's own q
and k emulation constants (the q/k biases: the content weights do not enter the emulated bias).

    python worker_vllm_rope.py run JOB.json

JOB: {"model": DIR, "dtype": "bfloat16", "positions": [p], "out": PT}. Writes to OUT (torch.save): vLLM's
``inv_freq`` ``(hd/2,)`` float32, its cos/sin cache rows at the positions ``(s, hd)`` in the dtype, and the
rotated q and k ``(s, h, hd)`` in the dtype, with vLLM's version.
"""

import json
import sys
from pathlib import Path

import torch
import vllm
from safetensors import safe_open
from vllm.config import CompilationConfig, DeviceConfig, VllmConfig, set_current_vllm_config
from vllm.model_executor.layers.rotary_embedding import get_rope


def run(job_path: str) -> int:
    job = json.loads(Path(job_path).read_text())
    directory, dtype = Path(job["model"]), getattr(torch, job["dtype"])
    config = json.loads((directory / "config.json").read_text())
    h, hd = config["num_attention_heads"], config["head_dim"]
    biases = {}
    for path in sorted(directory.glob("*.safetensors")):
        with safe_open(str(path), "pt") as f:
            for name in f.keys():
                if name.startswith("model.layers.0.self_attn.") and name.endswith(("q_proj.bias", "k_proj.bias")):
                    biases[name.split(".")[-2]] = f.get_tensor(name)
    positions = torch.tensor(job["positions"], dtype=torch.long)
    current = VllmConfig(compilation_config=CompilationConfig(custom_ops=["none"]), device_config=DeviceConfig(device="cpu"))
    with set_current_vllm_config(current):
        rope = get_rope(hd, max(job["positions"]) + 1, is_neox_style=True,
                        rope_parameters=config.get("rope_parameters"), dtype=dtype)
        s = len(positions)
        q = biases["q_proj"].to(dtype).expand(s, h * hd).contiguous()  # (s, h hd): the constants at every position
        k = biases["k_proj"].to(dtype).expand(s, h * hd).contiguous()
        q_rot, k_rot = rope.forward_native(positions, q, k)
        cache = rope._match_cos_sin_cache_dtype(q)
    torch.save({"inv_freq": rope._compute_inv_freq(rope.base), "cos_sin": cache.index_select(0, positions),
                "q": q_rot.view(s, h, hd), "k": k_rot.view(s, h, hd), "rope_class": type(rope).__name__,
                "rotary_dim": rope.rotary_dim, "head_size": rope.head_size, "vllm": vllm.__version__},
               job["out"])
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[2]))
