"""The serving tables of docs/targets.md: BLOOM-176B, MPT-30B, Falcon-RW-7B, Baichuan2-13B, Refact-1.6B, Jais-30B and
BTLM-3B-8K native against their converted
checkpoints, from shapes alone (no weights: a header-only checkpoint of each model, ``ropebridge.serving``).

    python -m benchmarks.serving_table           # compute (about 2 minutes: the ladders are planned), print the tables
    python -m benchmarks.serving_table --write   # the same, stored in benchmarks/results/serving_table.json
    python -m benchmarks.serving_table --stored  # the tables from the stored JSON

``benchmarks/tables.py`` writes the stored tables into docs/targets.md (``<!-- table: serving -->``);
``tests/test_serving.py`` recomputes them.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from ropebridge.emulation import PlanRequest
from ropebridge.serving import Geometry, converted_checkpoint, shape_only_checkpoint

# The sources' configs as their hub repositories publish them (sizes and the keys that change the shapes).
MODELS = {
    "BLOOM-176B": {"model_type": "bloom", "n_layer": 70, "hidden_size": 14336, "n_head": 112, "vocab_size": 250880},
    "MPT-30B": {"model_type": "mpt", "n_layers": 48, "d_model": 7168, "n_heads": 64, "expansion_ratio": 4,
                "vocab_size": 50432, "max_seq_len": 8192, "no_bias": True,
                "attn_config": {"alibi": True, "alibi_bias_max": 8}},
    "Falcon-RW-7B": {"model_type": "falcon", "num_hidden_layers": 36, "hidden_size": 4096, "num_attention_heads": 64,
                     "vocab_size": 65024, "alibi": True, "bias": True, "multi_query": False, "parallel_attn": False,
                     "new_decoder_architecture": False},
    "Baichuan2-13B": {"model_type": "baichuan", "num_hidden_layers": 40, "hidden_size": 5120, "num_attention_heads": 40,
                      "intermediate_size": 13696, "vocab_size": 125696, "hidden_act": "silu", "rms_norm_eps": 1e-6,
                      "model_max_length": 4096, "tie_word_embeddings": False},
    "Refact-1.6B": {"model_type": "gpt_refact", "n_layer": 32, "n_embd": 2048, "n_head": 32, "n_inner": None,
                    "multi_query": True, "vocab_size": 49216, "layer_norm_epsilon": 1e-5, "n_positions": 4096},
    "Jais-30B": {"model_type": "jais", "n_layer": 48, "n_embd": 7168, "n_head": 56, "n_inner": 19114,
                 "vocab_size": 84992,
                 "position_embedding_type": "alibi", "activation_function": "swiglu", "mup_embeddings_scale": 14.6,
                 "mup_output_alpha": 2.22, "mup_width_scale": 0.03571428571428571, "mup_scale_qk_dot_by_d": True,
                 "n_positions": 8192},
    "BTLM-3B-8K": {"model_type": "btlm", "n_layer": 32, "n_embd": 2560, "n_head": 32, "n_inner": 6826,
                   "vocab_size": 50257, "position_embedding_type": "alibi", "activation_function": "swiglu",
                   "mup_embeddings_scale": 14.6, "mup_output_alpha": 2.22, "mup_width_scale": 0.1,
                   "mup_scale_qk_dot_by_d": True, "n_positions": 8192},
}
WINDOW, DTYPE = 8192, "bfloat16"  # the ladder planned for an 8K window in bfloat16
GPUS, GPU_BYTES, UTILIZATION = 8, 80 * 2**30, 0.9  # 8 x H100 80 GB, vLLM's default gpu_memory_utilization
CONTEXTS = (2048, 8192, 32768)
VARIANTS = {"gpt-neox": {}, "nemotron": {"target": "nemotron"}}  # column: the request beyond window and dtype
COLUMNS = {"BLOOM-176B": {"gpt-neox, --rotary-dim 16": {"rotary_dim": 16}, **VARIANTS,  # also R = 16 and R = 64
                          "nemotron, --kernel fa3": {"target": "nemotron", "kernel": "fa3"}},
           "Baichuan2-13B": {"llama": {}, "llama, --kernel fa3": {"kernel": "fa3"}},  # its one target
           "Refact-1.6B": {"llama": {}, "llama, --kernel fa3": {"kernel": "fa3"}},
           "Jais-30B": {"stablelm": {}}, "BTLM-3B-8K": {"stablelm": {}}}  # R = 16 misses bfloat16's tolerance at 8K


def columns(name: str, work: Path) -> list[tuple[str, Geometry, int]]:
    """(column, geometry, parameters) for model NAME: native, then each conversion of it."""
    src = work / name
    params = shape_only_checkpoint(MODELS[name], src)
    native = Geometry.from_config(json.loads((src / "config.json").read_text()))
    out = [(f"native {name}", native, params)]
    for label, extra in COLUMNS.get(name, VARIANTS).items():
        n, config = converted_checkpoint(src, PlanRequest(window=WINDOW, dtype=DTYPE, **extra))
        g = Geometry.from_config(config)
        out.append((f"{label}, head dim {g.head_dim} (R = {g.head_dim - native.head_dim})", g, n))
    return out


def numbers(models=tuple(MODELS)) -> dict:
    result = {}
    with tempfile.TemporaryDirectory() as work:
        for model in models:
            result[model] = {}
            for name, g, params in columns(model, Path(work)):
                weights = 2 * params
                kv = g.kv_bytes_per_token(2)
                free = GPUS * GPU_BYTES * UTILIZATION - weights
                result[model][name] = {
                    "head_dim": g.head_dim, "hidden": g.hidden, "params": params, "weights_bytes": weights,
                    "weights_per_gpu_bytes": weights / GPUS, "kv_bytes_per_token": kv,
                    "kv_bytes_per_sequence": {c: kv * c for c in CONTEXTS},
                    "sequences_that_fit": {c: int(free // (kv * c)) for c in CONTEXTS},
                    "tp_problems": {tp: g.tp_problems(tp) for tp in (2, 4, 8)},
                }
    return result


def model_table(cols: dict) -> str:
    names = list(cols)
    native = cols[names[0]]

    def row(label, fn):
        return f"| {label} | " + " | ".join(fn(cols[n]) for n in names) + " |"

    gb = 1e9
    return "\n".join([
        "| | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|",
        row("head dim, residual width", lambda c: f"{c['head_dim']}, {c['hidden']}"),
        row("parameters", lambda c: f"{c['params'] / 1e9:.2f} B"),
        row("weights, bfloat16 (per GPU at TP 8)",
            lambda c: f"{c['weights_bytes'] / gb:.1f} GB ({c['weights_per_gpu_bytes'] / gb:.1f} GB)"),
        row("weights against native", lambda c: f"{c['params'] / native['params']:.2f}x"),
        row("KV cache per token, bfloat16", lambda c: f"{c['kv_bytes_per_token'] / 1e6:.3g} MB"),
        row("KV cache of one 2K / 8K / 32K sequence",
            lambda c: " / ".join(f"{v / gb:.3g}" for v in c["kv_bytes_per_sequence"].values()) + " GB"),
        row(f"2K / 8K / 32K sequences in {GPUS} x 80 GiB at {UTILIZATION:g}",
            lambda c: " / ".join(str(v) for v in c["sequences_that_fit"].values())),
        row("TP 2, 4, 8 split evenly", lambda c: "yes" if not any(c["tp_problems"].values()) else
            "no: " + "; ".join(p for ps in c["tp_problems"].values() for p in ps[:1]))])


def tables(result: dict) -> str:
    """Every model's table, from ``numbers``' result (model -> its forms)."""
    return "\n\n".join(model_table(cols) for cols in result.values())


def table(payload: dict) -> str:
    """The stored results (``payload``) as docs/targets.md's tables (``benchmarks/tables.py`` writes them)."""
    return tables({r["model"]: r["forms"] for r in payload["rows"]})


RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "serving_table.json"


def stored() -> dict:
    """The stored numbers by model, as ``numbers`` gives them."""
    return {r["model"]: r["forms"] for r in json.loads(RESULTS.read_text())["rows"]}



if __name__ == "__main__":
    if "--stored" in sys.argv[1:]:
        print(tables(stored()))
        sys.exit(0)
    result = json.loads(json.dumps(numbers()))  # the JSON form (integer keys as strings), as stored
    if "--write" in sys.argv[1:]:
        from benchmarks._common import payload  # the results' one schema (beside this script)

        RESULTS.write_text(json.dumps(payload([{"model": k, "forms": v} for k, v in result.items()]), indent=1) + "\n")
    print(tables(result))
