"""What serving a conversion costs in llama.cpp: the BLOOM-560M shape's own GGUF (llama.cpp's BLOOM, its ALiBi)
beside its ``--engine llama.cpp`` conversion's, F16 GGUFs, in one run with the rounds interleaved.

    python -m benchmarks.engines.llamacpp_cost [--rounds 2]

The llama.cpp environment of ``envs.py``. The model: BLOOM-560M's shape with random weights and GPT-2's tokenizer
(``models.prepare_native``), through llama.cpp's converter at F16; converted with ``ropebridge convert SRC DST
--engine llama.cpp --dtype float16 --window 4096`` (gpt-neox, the ladder, head 64 -> 96), through the same
converter at F16 with the RoPE base set in the GGUF (``worker_llamacpp.py set-base``). Each round runs each model
once (``worker_llamacpp.py speed``: llama.cpp's defaults, f16 K/V cache, 2 threads): prefill of ``PREFILL`` ids in
one batch, and decode of ``DECODE_TOKENS`` tokens one at a time (llama-cpp-python's high-level API runs one
sequence; batched decode is not measured). KV bytes per token from the GGUF's shapes (2 layers heads head_dim,
f16), weights the GGUF file's size. Ratios are converted / native, from the medians.

Writes benchmarks/results/llamacpp_cost.json and prints the table.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks._common import machine, started_as
from benchmarks.engines import envs
from benchmarks.engines.models import prepare_native
from benchmarks.engines.workers import FOLDER as WORKERS

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


log = logging.getLogger("engines")
OUT = ROOT / "benchmarks" / "results" / "llamacpp_cost.json"
PREFILL, DECODE_TOKENS, WINDOW = 2048, 64, 4096


def gguf(env: envs.Env, checkpoint: Path, out: Path, base: float | None) -> Path:
    if not out.exists():
        env.run([env.convert_hf_to_gguf, checkpoint, "--outtype", "f16", "--outfile", out], gguf=True)
        if base is not None:
            based = out.with_suffix(".tmp.gguf")
            env.run([WORKERS / "worker_llamacpp.py", "set-base", out, based, str(base)], gguf=True)
            based.replace(out)
    return out


def table(payload: dict) -> str:
    """The stored rows as markdown, ratios to native beside the numbers."""
    def cell(r: dict, key: str, fmt: str) -> str:
        ratio = r.get(f"{key}_ratio")
        return fmt.format(r[key]) + ("" if ratio is None else f" ({ratio:.2f}×)")

    out = ["| model | head size | prefill 2K, tok/s | decode batch 1, tok/s | KV bytes / token | weights (GGUF) |",
           "|---|---:|---:|---:|---:|---:|"]
    for r in payload["rows"]:
        out.append(f"| {r['model']} | {r['head_size']} | {cell(r, 'prefill_tokens_per_s', '{:.0f}')} | "
                   f"{cell(r, 'decode_tokens_per_s', '{:.1f}')} | {cell(r, 'kv_bytes_per_token', '{:,}')} | "
                   f"{cell(r, 'weights_bytes', '{:.3g}').replace('e+09', ' GB')} |")
    loads = [x for r in payload["rows"] for x in r["load_before"]]
    out += ["", f"(llama-cpp-python {payload['llama_cpp_python']}, F16 GGUFs, f16 K/V cache, {payload['threads']} "
                f"threads; load average before each run {min(loads):.1f}-{max(loads):.1f})"]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--env-dir", type=Path, default=None)
    p.add_argument("--work-dir", type=Path, default=None)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    root = args.env_dir or envs.default_root()
    env = envs.ensure("llama.cpp", root)
    work = (args.work_dir or root / "work") / "llamacpp-cost"
    work.mkdir(parents=True, exist_ok=True)
    native = prepare_native("bloom560m", work, env)
    conv = work / "bloom560m-llamacpp"
    if not (conv / "ropebridge.json").exists():
        subprocess.run([sys.executable, "-m", "ropebridge", "convert", str(native), str(conv), "--engine", "llama.cpp",
                        "--dtype", "float16", "--window", str(WINDOW), "--force"], check=True, capture_output=True)
    config = json.loads((conv / "config.json").read_text())
    models = {"native BLOOM (ALiBi)": (gguf(env, native, work / "native-f16.gguf", None), 16, 64),
              "converted (gpt-neox, R = 32)": (gguf(env, conv, work / "converted-f16.gguf", config["rotary_emb_base"]),
                                               config["num_attention_heads"],
                                               config["hidden_size"] // config["num_attention_heads"])}
    import torch

    ids = torch.randint(0, 50257, (PREFILL,), generator=torch.Generator().manual_seed(0)).tolist()
    runs: dict[str, list[dict]] = {m: [] for m in models}
    for r in range(args.rounds):
        for name, (path, _, _) in models.items():
            load = os.getloadavg()[0]
            log.info("round %d: %s (load %.2f)", r + 1, name, load)
            job, out = work / "speed.job.json", work / "speed.result.json"
            job.write_text(json.dumps({"model": str(path), "sequence": ids, "prefill": PREFILL,
                                       "decode_tokens": DECODE_TOKENS, "rounds": 2, "n_ctx": WINDOW,
                                       "threads": args.threads, "out": str(out)}))
            env.run([WORKERS / "worker_llamacpp.py", "speed", job], gguf=True)
            runs[name].append({**json.loads(out.read_text()), "load_before": load})
    rows, native_row = [], None
    for name, (path, heads, head_dim) in models.items():
        row = {"model": name, "head_size": head_dim,
               "prefill_tokens_per_s": statistics.median(PREFILL / s for x in runs[name] for s in x["prefill_seconds"]),
               "decode_tokens_per_s": statistics.median(DECODE_TOKENS / s for x in runs[name]
                                                        for s in x["decode_seconds"]),
               "kv_bytes_per_token": 2 * 24 * heads * head_dim * 2, "weights_bytes": path.stat().st_size,
               "load_before": [x["load_before"] for x in runs[name]]}
        if native_row is not None:
            for key in ("prefill_tokens_per_s", "decode_tokens_per_s", "kv_bytes_per_token", "weights_bytes"):
                row[f"{key}_ratio"] = row[key] / native_row[key]
        rows.append(row)
        native_row = native_row or row
    payload = {"machine": machine(), "command": started_as(),
               "llama_cpp_python": envs.LLAMA_CPP_PYTHON, "threads": args.threads, "rows": rows, "runs": runs}
    print(table(payload))
    OUT.write_text(json.dumps(payload, indent=1))
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
