"""Prefill speed and peak memory: native BLOOM (eager, its only path) against the converted GPT-NeoX (SDPA),
the same source converted in the half-precision default (the frequency ladder, 32 rotary dims per head: head
64 -> 96, residual 1024 -> 1536; timed in float32 like the rest), the ladder on Nemotron (head 64 -> 96, the
residual at 1024), and the converted model with the emulation pair removed (no positional encoding: the
limit). Parameters are counted from the loaded models.

    python -m benchmarks.speed_memory [--quick] [--lengths 1024,2048,...] [--timeout 900]

Each (variant, length) runs in a child process (peak RSS is its own; an out-of-memory kill or a timeout is
recorded as such) on a BLOOM-560M-shaped random checkpoint (24 layers, hidden 1024, 16 heads), float32,
one sequence, ``logits_to_keep=1`` (a prefill's logits for all positions would need 1 GB per 1K tokens).
Also decode tokens/s after a 2K prompt, with transformers' default KV cache (grown by concatenation every
step) and with a static one (allocated once, written in place, as serving engines keep theirs). Prints a table and
writes benchmarks/results/speed_memory.json (or speed_memory_quick.json).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks._common import RESULTS, bloom_560m_shaped, save, table

CHILD = r"""
import json, resource, sys, time, torch
import transformers as T
T.logging.set_verbosity_error()
path, length, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
model = T.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
if mode == "limit":  # the converted model without its emulation pair: zero the q/k biases on the rotary dims
    with torch.no_grad():
        for layer in model.gpt_neox.layers:
            att = layer.attention
            b = att.query_key_value.bias.view(model.config.num_attention_heads, 3, att.head_size)
            b[:, :2, : att.rotary_ndims] = 0
ids = torch.randint(0, 1000, (1, length), generator=torch.Generator().manual_seed(0))
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
with torch.no_grad():
    if mode in ("decode", "decode-static"):
        n = 32
        # decode: transformers' DynamicCache (grown by concatenation every step); decode-static: a cache
        # allocated once for prompt + n tokens and written in place, as serving engines keep theirs
        cache = T.StaticCache(config=model.config, max_cache_len=length + n) if mode == "decode-static" else None
        t = time.perf_counter()
        out = model(ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
        prefill = time.perf_counter() - t
        cache, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
        t = time.perf_counter()
        for _ in range(n):
            out = model(nxt, past_key_values=cache, use_cache=True)
            cache, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
        print(json.dumps({"decode_tokens_per_s": n / (time.perf_counter() - t), "prefill_s": prefill}))
    else:
        t = time.perf_counter()
        model(ids, logits_to_keep=1)
        wall = time.perf_counter() - t
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps({"seconds": wall, "tokens_per_s": length / wall, "peak_rss_mb": peak,
                          "model_rss_mb": base, "params": sum(p.numel() for p in model.parameters())}))
"""


def run_child(path: Path, length: int, mode: str, timeout: float) -> dict:
    try:
        out = subprocess.run([sys.executable, "-c", CHILD, str(path), str(length), mode], capture_output=True,
                             text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": f"timeout > {timeout:.0f} s"}
    if out.returncode != 0:
        killed = out.returncode in (-9, 137) or "MemoryError" in out.stderr or "DefaultCPUAllocator" in out.stderr
        return {"status": "out of memory" if killed else f"failed: {out.stderr.strip().splitlines()[-1][:120]}"}
    return {"status": "ok", **json.loads(out.stdout.strip().splitlines()[-1])}


def median_run(runs: list[dict]) -> dict:
    """The run with the median decode tokens/s of RUNS (the lower middle of an even count), every run's tokens/s
    beside it; the first failure if any run failed."""
    ok = [r for r in runs if r["status"] == "ok"]
    if len(ok) < len(runs):
        return next(r for r in runs if r["status"] != "ok")
    ranked = sorted(ok, key=lambda r: r["decode_tokens_per_s"])
    return {**ranked[(len(ranked) - 1) // 2], "runs_tokens_per_s": [r["decode_tokens_per_s"] for r in runs]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="4 layers, vocab 32000, lengths 512 and 1024")
    p.add_argument("--lengths", help="comma-separated prefill lengths")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per child run")
    p.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "ropebridge-bench"))
    p.add_argument("--decode-repeats", type=int, default=1,
                   help="decode runs per variant and cache, interleaved; the median is reported, every run kept")
    p.add_argument("--decode-only", action="store_true",
                   help="measure decode only; the prefill rows of the stored results file are kept")
    args = p.parse_args()
    layers, vocab = (4, 32000) if args.quick else (24, 250880)
    lengths = [int(x) for x in (args.lengths or ("512,1024" if args.quick else "1024,2048,4096,8192,16384")).split(",")]
    cache = Path(args.cache)
    src = bloom_560m_shaped(cache / f"bloom560m-shaped-{layers}x{vocab}", layers=layers, vocab=vocab)
    dst = cache / f"bloom560m-shaped-{layers}x{vocab}-rope{max(lengths)}"
    if not (dst / "config.json").exists():
        subprocess.run([sys.executable, "-m", "ropebridge", "convert", str(src), str(dst), "--window",
                        str(max(lengths)), "--json", "--force"], check=True, capture_output=True)
    # The half-precision default (the frequency ladder; at 8K in bfloat16 the planner takes r = 32: head 64 -> 96)
    # has the shape that matters here; in float32 the planner takes the same r.
    # Written in float32 like the others (a bfloat16 file loaded as float32 would add a conversion's memory),
    # where its fit error exceeds the float32 tolerance: a bfloat16-sized tolerance is given, since speed, not
    # error, is what this row measures.
    ladder = cache / f"bloom560m-shaped-{layers}x{vocab}-ladder{max(lengths)}"
    if not (ladder / "config.json").exists():
        subprocess.run([sys.executable, "-m", "ropebridge", "convert", str(src), str(ladder), "--window",
                        str(max(lengths)), "--dtype", "float32", "--strategy", "ladder", "--tolerance", "2",
                        "--json", "--force"], check=True, capture_output=True)
    nemotron = cache / f"bloom560m-shaped-{layers}x{vocab}-nemotron{max(lengths)}"
    if not (nemotron / "config.json").exists():
        subprocess.run([sys.executable, "-m", "ropebridge", "convert", str(src), str(nemotron), "--window",
                        str(max(lengths)), "--dtype", "float32", "--strategy", "ladder", "--target", "nemotron",
                        "--tolerance", "2", "--json", "--force"], check=True, capture_output=True)
    rows = []
    measured = [] if args.decode_only else lengths  # prefill lengths this run measures
    variants = (("native", src, "prefill"), ("converted", dst, "prefill"), ("ladder", ladder, "prefill"),
                ("nemotron", nemotron, "prefill"), ("limit", dst, "limit"))
    for length in measured:
        for variant, path, mode in variants:
            r = run_child(path, length, mode, args.timeout)
            rows.append({"length": length, "variant": variant, **r})
            print(json.dumps(rows[-1]), flush=True)
    decode_len = 512 if args.quick else 2048
    decoders = (("native", src), ("converted", dst), ("ladder", ladder), ("nemotron", nemotron))
    runs = {mode: {v: [] for v, _ in decoders} for mode in ("decode", "decode-static")}
    for _ in range(args.decode_repeats):  # interleaved: a slow spell of the machine hits every variant alike
        for mode in runs:
            for v, path in decoders:
                runs[mode][v].append(run_child(path, decode_len, mode, args.timeout))
    decode, decode_static = ({v: median_run(r) for v, r in runs[mode].items()} for mode in ("decode", "decode-static"))
    name = "speed_memory_quick" if args.quick else "speed_memory"
    if args.lengths:  # a partial run keeps the default run's file
        name += "_" + "_".join(str(n) for n in lengths)
    stored = json.loads((RESULTS / f"{name}.json").read_text()) if args.decode_only else {}
    rows, summary = stored.get("runs", rows), stored.get("summary", [])
    for length in measured:
        by = {r["variant"]: r for r in rows if r["length"] == length}
        row = {"length": length}
        for v in ("native", "converted", "ladder", "nemotron", "limit"):
            r = by[v]
            row[f"{v}_tok_s"] = r["tokens_per_s"] if r["status"] == "ok" else r["status"]
            row[f"{v}_rss_mb"] = r["peak_rss_mb"] if r["status"] == "ok" else "-"
            row[f"{v}_params"] = r.get("params", "-")
        if by["native"]["status"] == "ok" and by["converted"]["status"] == "ok":
            row["speedup_vs_native"] = by["native"]["seconds"] / by["converted"]["seconds"]
            row["memory_native_over_converted"] = by["native"]["peak_rss_mb"] / by["converted"]["peak_rss_mb"]
        if by["limit"]["status"] == "ok" and by["converted"]["status"] == "ok":
            row["converted_over_limit_time"] = by["converted"]["seconds"] / by["limit"]["seconds"]
        if by["ladder"]["status"] == "ok" and by["converted"]["status"] == "ok":
            row["ladder_over_converted_time"] = by["ladder"]["seconds"] / by["converted"]["seconds"]
            row["ladder_over_converted_rss"] = by["ladder"]["peak_rss_mb"] / by["converted"]["peak_rss_mb"]
        if by["nemotron"]["status"] == "ok" and by["converted"]["status"] == "ok":
            row["nemotron_over_converted_time"] = by["nemotron"]["seconds"] / by["converted"]["seconds"]
        summary.append(row)
    cols = ["length", "native_tok_s", "converted_tok_s", "ladder_tok_s", "nemotron_tok_s", "limit_tok_s",
            "native_rss_mb", "converted_rss_mb", "ladder_rss_mb", "nemotron_rss_mb", "speedup_vs_native",
            "converted_over_limit_time", "ladder_over_converted_time", "nemotron_over_converted_time"]
    print(table(summary, cols))
    print(f"decode after {decode_len} tokens, tokens/s: native "
          f"{decode['native'].get('decode_tokens_per_s', decode['native']['status'])}, "
          f"converted {decode['converted'].get('decode_tokens_per_s', decode['converted']['status'])}, "
          f"ladder {decode['ladder'].get('decode_tokens_per_s', decode['ladder']['status'])}, "
          f"nemotron {decode['nemotron'].get('decode_tokens_per_s', decode['nemotron']['status'])}")
    print("the same with a static KV cache: " + ", ".join(
        f"{v} {r.get('decode_tokens_per_s', r['status'])}" for v, r in decode_static.items()))
    path = save(name,
                {"layers": layers, "vocab": vocab, "runs": rows, "rows": summary, "decode_context": decode_len,
                 "decode": decode, "decode_static": decode_static, "decode_repeats": args.decode_repeats})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
