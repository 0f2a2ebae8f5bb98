"""Engine parity without a GPU: the llama, persimmon and stablelm targets' rope as vLLM or SGLang computes it,
against ropebridge's plan and transformers.

    python -m benchmarks.engines.engine_rope --engine vllm --python ENV/bin/python [--write]
    python -m benchmarks.engines.engine_rope --engine sglang --python ENV/bin/python [--write]

ENV is a virtual environment outside the repository with the engine (vLLM: ``python3 -m venv ENV &&
ENV/bin/pip install vllm==0.33.0``, about 9.5 GB with its CUDA build of torch, whose CPU ops run here; SGLang
0.5.23: its wheel's files on ``PYTHONPATH`` (``--engine-path``) inside that same environment, plus ``ipython``,
the one module its import chain adds). For each case, a source pico with the real head geometry
(``tests/pico.build_remote``, one layer: Baichuan's heads of 128, Refact's 64 with one kv head; BLOOM with its q and k
biases zeroed, so that the converted q and k biases hold the emulation's constants alone) is converted to
the ``llama`` target (and BLOOM picos to ``nemotron``'s ladder, which vLLM runs with a model of its own and
SGLang does not, and to ``persimmon``, which SGLang runs and vLLM 0.33 has no model for; Jais and BTLM picos, their
q and k biases zeroed likewise, to ``stablelm``, which both run; SGLang's Persimmon reads
its config through transformers, so ``--engine-path`` also holds transformers 5.19, the version SGLang 0.5.23
pins); ``worker_{engine}_rope.py`` (run by ENV's Python) builds the engine's rope from the converted
config as its ``llama.py`` (``nemotron.py``, ``persimmon.py``) does (``get_rope``, ``forward_native``; vLLM under
``custom_ops=['none']``) and rotates the checkpoint's q and k emulation constants at every position of the
window. Here:

- the engine's ``inv_freq``, class, head size and rotary dims against the plan's (``llama_rope.inv_freq_float32``
  of the plan's ``rope_parameters``): equal bit for bit, or the case fails;
- the engine's rotated q and k against transformers' (``LlamaRotaryEmbedding`` + ``apply_rotary_pos_emb``, the
  dtype's cos/sin): the largest difference, reported;
- the emulated bias through the engine's rotation, q.k in the dtype (float32 accumulation) times 1/sqrt(hd'), on
  64 sampled queries and every key: each head's error in the plan's own terms (the ladder: |logit - s + m d| up
  to its exact distance and the rise above s - C beyond; the single pair: |logit + m d| where m d is within the
  cutoff) against the head's predicted error.

The table goes to stdout; ``--write`` stores ``benchmarks/results/{engine}_rope.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from benchmarks._common import payload  # (the results' one schema)
from benchmarks.engines.workers import FOLDER as WORKERS

ROOT = Path(__file__).resolve().parents[2]

CASES = [  # (family, target, heads, head_dim, dtype, window), the default strategy of each dtype: the llama target
    # on Baichuan-13B's heads of 128 and Refact-1.6B's 64 (one kv head); nemotron on BLOOM heads of 128
    ("baichuan", "llama", 8, 128, "bfloat16", 4096), ("baichuan", "llama", 8, 128, "float16", 4096),
    ("baichuan", "llama", 8, 128, "float32", 4096), ("baichuan", "llama", 40, 128, "bfloat16", 4096),
    ("refact", "llama", 32, 64, "bfloat16", 4096), ("bloom", "nemotron", 8, 128, "bfloat16", 4096),
    ("bloom", "nemotron", 8, 128, "float16", 4096),  # nemotron's ladder, the form vLLM serves in half precision
    # persimmon (the gpt-neox block under Persimmon's names), the LayerNorm families' form SGLang runs natively
    ("bloom", "persimmon", 8, 128, "bfloat16", 4096), ("bloom", "persimmon", 8, 128, "float16", 4096),
    ("bloom", "persimmon", 8, 128, "float32", 4096),
    # stablelm (the gpt-neox block with StableLM's separate q, k, v), the form Jais and BTLM take, on Jais-13B's
    # heads of 128, and on BTLM-3B's 80 (32 heads)
    ("jais", "stablelm", 8, 128, "bfloat16", 4096), ("jais", "stablelm", 8, 128, "float16", 4096),
    ("jais", "stablelm", 8, 128, "float32", 4096), ("btlm", "stablelm", 32, 80, "bfloat16", 4096)]
ENGINES = ("vllm", "sglang")
NATIVE = {"vllm": ("llama", "nemotron", "stablelm"), "sglang": ("llama", "persimmon", "stablelm")}  # run natively
ROTARY_CLASSES = {"stablelm": "StableLmRotaryEmbedding"}  # transformers' class where it is not the capitalised type


def cases(engine: str) -> list[tuple]:
    """The cases ENGINE runs: those of the targets it has a model of its own for."""
    return [c for c in CASES if c[1] in NATIVE[engine]]


def results(engine: str) -> Path:
    return ROOT / "benchmarks" / "results" / f"{engine}_rope.json"


def _source(family: str, heads: int, head_dim: int, work: Path) -> Path:
    from tests.pico import build, build_remote

    if family == "bloom":  # its q and k biases zeroed: the converted q and k biases are then the emulation's alone
        src = build(work / "src", "bloom-4heads", n_layer=1, hidden_size=heads * head_dim, n_head=heads, vocab_size=64)
        from safetensors.torch import load_file, save_file

        tensors = load_file(src / "model.safetensors")
        qkv = tensors["transformer.h.0.self_attention.query_key_value.bias"]
        qkv = qkv.view(heads, 3, head_dim)  # BLOOM's (h, 3, hd)
        qkv[:, :2] = 0
        save_file(tensors, src / "model.safetensors", metadata={"format": "pt"})
        return src
    if family in ("jais", "btlm"):  # its q and k biases zeroed (c_attn's first two thirds), as BLOOM's
        src = build_remote(work / "src", family, n_embd=heads * head_dim, n_head=heads, n_layer=1, n_inner=64,
                           vocab_size=64)
        from safetensors.torch import load_file, save_file

        tensors = load_file(src / "model.safetensors")
        tensors["transformer.h.0.attn.c_attn.bias"][: 2 * heads * head_dim] = 0
        save_file(tensors, src / "model.safetensors", metadata={"format": "pt"})
        return src
    if family == "refact":
        return build_remote(work / "src", "refact", n_embd=heads * head_dim, n_head=heads, n_layer=1, vocab_size=64)
    return build_remote(work / "src", "baichuan", hidden_size=heads * head_dim, num_attention_heads=heads,
                        num_hidden_layers=1, intermediate_size=64, vocab_size=64)


def case(engine: str, python: str, engine_path: str | None, family: str, target: str, heads: int, head_dim: int,
         dtype: str, window: int, work: Path) -> dict:
    import importlib
    import os

    import transformers as T

    from ropebridge.convert import convert
    from ropebridge.emulation import PlanRequest
    from ropebridge.emulation.error_model import matter_distance
    from ropebridge.emulation.fixed_base import engine_frequencies
    from ropebridge.targets import llama_rope

    src = _source(family, heads, head_dim, work)
    res = convert(src, work / "dst", PlanRequest(window=window, dtype=dtype, target=target), force=True)
    plan, config = res.plan, json.loads((res.destination / "config.json").read_text())
    hd = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    kv = config.get("num_key_value_heads", config["num_attention_heads"])
    job = {"model": str(res.destination), "dtype": dtype, "positions": list(range(window)), "out": str(work / "v.pt")}
    (work / "job.json").write_text(json.dumps(job))
    env = {**os.environ, "PYTHONPATH": engine_path} if engine_path else None
    subprocess.run([python, str(WORKERS / f"worker_{engine}_rope.py"), "run", str(work / "job.json")],
                   check=True, cwd=Path(__file__).parent, capture_output=True, env=env)
    got = torch.load(work / "v.pt")
    # transformers' rope and rotation of the same constants (its module for the target's model type)
    dt = getattr(torch, dtype)
    from safetensors import safe_open

    with safe_open(str(next(res.destination.glob("*.safetensors"))), "pt") as f:
        if target == "persimmon":  # fused per head: (h, 3, hd')
            fused = f.get_tensor("model.layers.0.self_attn.query_key_value.bias").view(heads, 3, hd)
            qb, kb = fused[:, 0].reshape(-1), fused[:, 1].reshape(-1)
        else:
            qb, kb = (f.get_tensor(f"model.layers.0.self_attn.{x}_proj.bias") for x in "qk")
    cfg = T.AutoConfig.from_pretrained(res.destination)
    modeling = importlib.import_module(f"transformers.models.{cfg.model_type}.modeling_{cfg.model_type}")
    rotary = getattr(modeling, ROTARY_CLASSES.get(cfg.model_type, f"{cfg.model_type.capitalize()}RotaryEmbedding"))(cfg)
    apply_rotary_pos_emb = modeling.apply_rotary_pos_emb
    # the frequencies the plan was fitted at: the llama3 rope it states, or the float32 block at its base
    planned = (llama_rope.inv_freq_float32(hd, plan.rope_parameters) if plan.rope_parameters is not None
               else torch.from_numpy(engine_frequencies(plan.base, plan.rotary_dim)).float())
    pos = torch.arange(window)[None]
    cos, sin = rotary(torch.zeros(1, dtype=dt), pos)  # (1, s, rotary dims) in the dtype
    q = qb.to(dt).view(1, heads, 1, hd).expand(1, heads, window, hd)
    k = kb.to(dt).view(1, kv, 1, hd).expand(1, kv, window, hd)
    r = cos.shape[-1]  # transformers' rotary dims: the whole head, or Persimmon's first int(hd' * factor)
    tq, tk = apply_rotary_pos_emb(q[..., :r], k[..., :r], cos, sin)  # (1, h, s, r), (1, kv, s, r)
    tq, tk = torch.cat([tq, q[..., r:]], -1), torch.cat([tk, k[..., r:]], -1)  # (1, h, s, hd), (1, kv, s, hd)
    vq, vk = got["q"].transpose(0, 1), got["k"].transpose(0, 1)  # (h, s, hd), (kv, s, hd)
    rotation_diff = max(float((vq.double() - tq[0].double()).abs().max()),
                        float((vk.double() - tk[0].double()).abs().max()))
    g = torch.Generator().manual_seed(0)
    queries = torch.unique(torch.cat([torch.arange(window - 32, window), torch.randint(0, window, (32,), generator=g)]))
    d = (queries[:, None] - torch.arange(window)[None, :]).double()  # (s, t)
    scale = torch.tensor(1 / math.sqrt(hd), dtype=torch.float64).to(dt)
    heads_out = []
    for hp in plan.heads:
        key = vk[hp.head * kv // heads]  # (t, hd'): the head's kv head
        # (s, t) as a GPU attention computes it: products of the dtype's numbers (exact in float32) summed in
        # float32, then the scale in the dtype
        logits = ((vq[hp.head, queries].float() @ key.float().T).to(dt) * scale).double()
        if hp.ladder is not None:
            near, far = (d >= 0) & (d <= hp.ladder.exact_distance), d > hp.ladder.exact_distance
            err = float((logits - hp.ladder.shift + hp.slope * d)[near].abs().max())
            if far.any():
                err = max(err, float((logits[far] - hp.ladder.shift + hp.ladder.floor).max()))
        else:  # where the key can matter: m d up to the cutoff (``error_model.matter_distance``), as predicted
            matters = (d >= 0) & (d <= matter_distance(hp.slope, window, plan.cutoff))
            err = float((logits + hp.slope * d)[matters].abs().max())
        heads_out.append({"head": hp.head, "measured": err, "predicted": hp.predicted_error})
    return {"family": family, "target": target, "heads": heads, "kv_heads": kv, "head_dim": head_dim, "dtype": dtype,
            "window": window,
            "strategy": plan.strategy, "served_head_dim": hd, "engine": engine, "engine_version": got["version"],
            "engine_rope": got["rope_class"], "engine_head_size": got["head_size"],
            "engine_rotary_dim": got["rotary_dim"], "served_rotary_dim": 2 * len(rotary.inv_freq),
            "inv_freq_equal": bool(torch.equal(got["inv_freq"].float(), planned)),
            "rotation_max_diff_vs_transformers": rotation_diff,
            "worst_measured": max(h["measured"] for h in heads_out),
            "worst_predicted": max(h["predicted"] for h in heads_out),
            "within_prediction": all(h["measured"] <= h["predicted"] for h in heads_out),
            "tolerance": plan.tolerance, "per_head": heads_out}


def table(content: dict) -> str:
    """The stored rows (``content["rows"]``) as markdown."""
    rows = content["rows"]
    engine = rows[0]["engine"] if rows else "engine"
    name = {"vllm": "vLLM", "sglang": "SGLang"}.get(engine, engine)
    out = [f"| source, target | heads (kv) x head dim | dtype | window | strategy | {name} rope, head size | "
           "inv_freq as planned | rotation vs transformers | worst bias error: measured / predicted | within |",
           "|---" * 10 + "|"]
    for r in rows:
        out.append(f"| {r['family']}, {r['target']} | {r['heads']} ({r['kv_heads']}) x {r['head_dim']} | {r['dtype']} "
                   f"| "
                   f"{r['window']} | {r['strategy']} | {r['engine_rope']}, {r['engine_head_size']} | "
                   f"{'identical' if r['inv_freq_equal'] else 'DIFFERS'} | "
                   f"{r['rotation_max_diff_vs_transformers']:.3g} | {r['worst_measured']:.3g} / "
                   f"{r['worst_predicted']:.3g} | {'yes' if r['within_prediction'] else 'no'} |")
    return "\n".join(out)


def merged(engine: str, rows: list[dict], chosen: set[str] | None) -> list[dict]:
    """The rows to store: ROWS, and where only the CHOSEN targets ran, the stored rows of the others, in the
    order of ``cases``."""
    if chosen is None or not results(engine).exists():
        return rows
    keep = [r for r in json.loads(results(engine).read_text())["rows"] if r["target"] not in chosen]
    order = {c: k for k, c in enumerate(cases(engine))}

    def key(r: dict) -> int:
        return order.get((r["family"], r["target"], r["heads"], r["head_dim"], r["dtype"], r["window"]), len(order))

    return sorted(keep + rows, key=key)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=ENGINES, required=True)
    parser.add_argument("--python", required=True, help="the Python of an environment with the engine")
    parser.add_argument("--engine-path",
                        help="the worker's PYTHONPATH (SGLang's unpacked wheel, and transformers 5.19)")
    parser.add_argument("--targets",
                        help="comma-separated targets to run (default: every one the engine runs natively)")
    parser.add_argument("--write", action="store_true", help="store the results in benchmarks/results/ENGINE_rope.json")
    args = parser.parse_args()
    rows = []
    chosen = None if args.targets is None else set(args.targets.split(","))
    for family, target, heads, head_dim, dtype, window in cases(args.engine):
        if chosen is not None and target not in chosen:
            continue
        with tempfile.TemporaryDirectory() as work:
            rows.append(case(args.engine, args.python, args.engine_path, family, target, heads, head_dim, dtype,
                             window, Path(work)))
            print(f"{family} {target} {heads} x {head_dim} {dtype}: done", file=sys.stderr)
    print(table({"rows": rows}))
    if args.write:
        results(args.engine).write_text(json.dumps(payload(merged(args.engine, rows, chosen)), indent=1) + "\n")
    return 0 if all(r["inv_freq_equal"] and r["within_prediction"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
