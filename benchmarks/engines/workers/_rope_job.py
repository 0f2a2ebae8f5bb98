"""What the engine rope workers share (imported inside an engine's environment, never ropebridge's): a job's
converted checkpoint, its q and k emulation constants at every position, and the file the result goes to.

JOB: {"model": DIR, "dtype": "bfloat16", "positions": [p], "out": PT}.
"""

import json
from pathlib import Path

import torch
from safetensors import safe_open


def head_dim(config: dict) -> int:
    """The served head dim: ``head_dim`` where the config states it, else hidden / heads (Persimmon)."""
    return config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]


def load(job_path: str) -> dict:
    """The job with its ``config`` (config.json), ``dtype`` (torch), ``positions`` ``(s,)`` long, and ``q``
    ``(s, h hd)`` and ``k`` ``(s, kv hd)``: layer 0's q and k biases (the emulation constants; the content weights
    do not enter the emulated bias) at every position, in the dtype; a fused per-head ``query_key_value`` bias
    (Persimmon's (h, 3, hd)) is split."""
    job = json.loads(Path(job_path).read_text())
    directory, dtype = Path(job["model"]), getattr(torch, job["dtype"])
    config = json.loads((directory / "config.json").read_text())
    biases = {}
    for path in sorted(directory.glob("*.safetensors")):
        with safe_open(str(path), "pt") as f:
            for name in f.keys():
                if name.startswith("model.layers.0.self_attn.") and name.endswith(("q_proj.bias", "k_proj.bias")):
                    biases[name.split(".")[-2]] = f.get_tensor(name)
                if name == "model.layers.0.self_attn.query_key_value.bias":
                    fused = f.get_tensor(name).view(config["num_attention_heads"], 3, head_dim(config))
                    biases["q_proj"], biases["k_proj"] = fused[:, 0].reshape(-1), fused[:, 1].reshape(-1)
    positions = torch.tensor(job["positions"], dtype=torch.long)
    s = len(positions)
    q = biases["q_proj"].to(dtype).expand(s, -1).contiguous()  # (s, h hd)
    k = biases["k_proj"].to(dtype).expand(s, -1).contiguous()  # (s, kv hd)
    return {**job, "config": config, "dtype": dtype, "positions": positions, "q": q, "k": k}


def save(job: dict, rope, q_rot: torch.Tensor, k_rot: torch.Tensor, inv_freq: torch.Tensor, version: str) -> None:
    """Write the engine's ``inv_freq`` ``(hd/2,)``, rotated q ``(s, h, hd)`` and k ``(s, kv, hd)``, its rope class,
    head size and rotary dims, and its version to the job's ``out`` (torch.save)."""
    s, hd = len(job["positions"]), head_dim(job["config"])
    torch.save({"inv_freq": inv_freq, "q": q_rot.reshape(s, -1, hd), "k": k_rot.reshape(s, -1, hd),
                "rope_class": type(rope).__name__, "rotary_dim": rope.rotary_dim, "head_size": rope.head_size,
                "version": version}, job["out"])
