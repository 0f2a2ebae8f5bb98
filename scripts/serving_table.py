"""The serving table of docs/targets.md: BLOOM-176B native against its converted checkpoints, from shapes alone.

    python scripts/serving_table.py          # print the markdown table
    python scripts/serving_table.py --json   # the same numbers as JSON

``tests/test_serving.py`` checks that docs/targets.md holds exactly this table.
"""

from __future__ import annotations

import json
import sys

from ropebridge.emulation.ladder import rotary_dim_for
from ropebridge.serving import Geometry

BLOOM_176B = {"model_type": "bloom", "n_layer": 70, "hidden_size": 14336, "n_head": 112, "vocab_size": 250880}
GPUS, GPU_BYTES, UTILIZATION = 8, 80 * 2**30, 0.9  # 8 x H100 80 GB, vLLM's default gpu_memory_utilization
CONTEXTS = (2048, 8192, 32768)


def columns() -> list[tuple[str, Geometry]]:
    native = Geometry.from_config(BLOOM_176B)
    out = [("native BLOOM-176B", native)]
    # gpt-neox: R = 16 (hd' 144, --rotary-dim 16) and the planner's default R = 32 (160); nemotron: R = 32 and 64
    for r in (16, rotary_dim_for(native.head_dim)):
        out.append((f"gpt-neox, head dim {native.head_dim + r} (R = {r})", native.converted(r)))
    for r in (rotary_dim_for(native.head_dim), 64):
        out.append((f"nemotron, head dim {native.head_dim + r} (R = {r})", native.converted(r, "nemotron")))
    return out


def numbers() -> dict:
    result = {}
    for name, g in columns():
        weights = 2 * g.params
        kv = g.kv_bytes_per_token(2)
        free = GPUS * GPU_BYTES * UTILIZATION - weights
        result[name] = {
            "head_dim": g.head_dim, "hidden": g.hidden, "params": g.params, "weights_bytes": weights,
            "weights_per_gpu_bytes": weights / GPUS, "kv_bytes_per_token": kv,
            "kv_bytes_per_sequence": {c: kv * c for c in CONTEXTS},
            "sequences_that_fit": {c: int(free // (kv * c)) for c in CONTEXTS},
            "tp_problems": {tp: g.tp_problems(tp) for tp in (2, 4, 8)},
        }
    return result


def table() -> str:
    cols = numbers()
    names = list(cols)

    def row(label, fn):
        return f"| {label} | " + " | ".join(fn(cols[n]) for n in names) + " |"

    gb = 1e9
    lines = ["| | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|",
             row("head dim, residual width", lambda c: f"{c['head_dim']}, {c['hidden']}"),
             row("parameters", lambda c: f"{c['params'] / 1e9:.2f} B"),
             row("weights, bfloat16 (per GPU at TP 8)",
                 lambda c: f"{c['weights_bytes'] / gb:.1f} GB ({c['weights_per_gpu_bytes'] / gb:.1f} GB)"),
             row("KV cache per token, bfloat16", lambda c: f"{c['kv_bytes_per_token'] / 1e6:.2f} MB"),
             row("KV cache of one 2K / 8K / 32K sequence",
                 lambda c: " / ".join(f"{v / gb:.1f}" for v in c["kv_bytes_per_sequence"].values()) + " GB"),
             row(f"2K / 8K / 32K sequences in {GPUS} x 80 GiB at {UTILIZATION:g}",
                 lambda c: " / ".join(str(v) for v in c["sequences_that_fit"].values())),
             row("TP 2, 4, 8 split evenly", lambda c: "yes" if not any(c["tp_problems"].values()) else "no")]
    return "\n".join(lines)


if __name__ == "__main__":
    print(json.dumps(numbers(), indent=1) if "--json" in sys.argv[1:] else table())
