"""What the engine rope workers share (imported inside an engine's environment, never ropebridge's): a job's
converted checkpoint, its q and k emulation constants at every position, and the file the result goes to.

JOB: {"model": DIR, "dtype": "bfloat16", "positions": [p], "out": PT}.
"""

import json
from pathlib import Path

import torch
from safetensors import safe_open


def load(job_path: str) -> dict:
    """The job with its ``config`` (config.json), ``dtype`` (torch), ``positions`` ``(s,)`` long, and ``q``
    ``(s, h hd)`` and ``k`` ``(s, kv hd)``: layer 0's q and k biases (the emulation constants; the content weights
    do not enter the emulated bias) at every position, in the dtype."""
    job = json.loads(Path(job_path).read_text())
    directory, dtype = Path(job["model"]), getattr(torch, job["dtype"])
    config = json.loads((directory / "config.json").read_text())
    biases = {}
    for path in sorted(directory.glob("*.safetensors")):
        with safe_open(str(path), "pt") as f:
            for name in f.keys():
                if name.startswith("model.layers.0.self_attn.") and name.endswith(("q_proj.bias", "k_proj.bias")):
                    biases[name.split(".")[-2]] = f.get_tensor(name)
    positions = torch.tensor(job["positions"], dtype=torch.long)
    s = len(positions)
    q = biases["q_proj"].to(dtype).expand(s, -1).contiguous()  # (s, h hd)
    k = biases["k_proj"].to(dtype).expand(s, -1).contiguous()  # (s, kv hd)
    return {**job, "config": config, "dtype": dtype, "positions": positions, "q": q, "k": k}


def save(job: dict, rope, q_rot: torch.Tensor, k_rot: torch.Tensor, inv_freq: torch.Tensor, version: str) -> None:
    """Write the engine's ``inv_freq`` ``(hd/2,)``, rotated q ``(s, h, hd)`` and k ``(s, kv, hd)``, its rope class,
    head size and rotary dims, and its version to the job's ``out`` (torch.save)."""
    s, hd = len(job["positions"]), job["config"]["head_dim"]
    torch.save({"inv_freq": inv_freq, "q": q_rot.reshape(s, -1, hd), "k": k_rot.reshape(s, -1, hd),
                "rope_class": type(rope).__name__, "rotary_dim": rope.rotary_dim, "head_size": rope.head_size,
                "version": version}, job["out"])
