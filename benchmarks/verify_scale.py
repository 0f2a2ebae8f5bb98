"""``ropebridge verify`` at the sizes users have: time, peak memory and the ratio to ``convert``'s time.

    python -m benchmarks.verify_scale [--shapes bloom-560m bloom-1b7 ...] [--cache DIR] [--keep]

Each shape is a random checkpoint of the model's real geometry (written tensor by tensor, never held whole:
``random_checkpoint``), stored in bfloat16 as the hub's are, converted with ``--dtype bfloat16 --window 2048`` and
verified by default (the exact float64 reference, every model a layer at a time) at the shape's context, once
untouched and once with one MLP matrix zeroed (``--quick``, so only the functional check can see it). Convert and
verify run as child processes so their peak RSS is their own (``getrusage`` of the children), and verify's peak
anonymous memory is sampled beside it (``child``). Prints a table and
writes benchmarks/results/verify_scale.json (rows merged by shape).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from benchmarks._common import RESULTS, save, table

# name: (transformers config class or remote-code family, config kwargs, context)
SHAPES = {
    "bloom-560m": ("BloomConfig", dict(n_layer=24, hidden_size=1024, n_head=16, vocab_size=250880), 1024),
    "bloom-560m-6l": ("BloomConfig", dict(n_layer=6, hidden_size=1024, n_head=16, vocab_size=250880), 1024),
    "bloom-1b7": ("BloomConfig", dict(n_layer=24, hidden_size=2048, n_head=16, vocab_size=250880), 1024),
    # depth alone: BLOOM-560M's width with a small vocabulary, 6 and 48 layers (what verify holds must not grow)
    "bloom-1024-6l": ("BloomConfig", dict(n_layer=6, hidden_size=1024, n_head=16, vocab_size=4096), 256),
    "bloom-1024-48l": ("BloomConfig", dict(n_layer=48, hidden_size=1024, n_head=16, vocab_size=4096), 256),
    "bloom-7b1": ("BloomConfig", dict(n_layer=30, hidden_size=4096, n_head=32, vocab_size=250880), 256),
    # the widest layers users have, 2 layers each with a small vocabulary: BLOOM-176B's (hidden 14336, 112 heads: a
    # layer is 2.5B parameters, 18.4 GiB in float64) and MPT-30B's (d_model 7168, 64 heads, MLP 4x)
    "bloom-176b-2l": ("BloomConfig", dict(n_layer=2, hidden_size=14336, n_head=112, vocab_size=4096), 256),
    "mpt-30b-2l": ("MptConfig", dict(n_layers=2, d_model=7168, n_heads=64, expansion_ratio=4, max_seq_len=8192,
                                     vocab_size=4096), 1024),
    # Baichuan-13B's geometry (40 heads of 128, MLP 13696, vocabulary 64000) with 2 of its 40 layers: a
    # remote-code family, judged against the reference that stands for its code (no source run)
    "baichuan-13b-2l": ("baichuan", dict(hidden_size=5120, num_attention_heads=40, num_hidden_layers=2,
                                         intermediate_size=13696, vocab_size=64000), 1024),
    # Refact-1.6B whole (32 layers, 32 heads of 64, one kv head, vocabulary 49216): a remote-code family at its
    # real size
    "refact-1.6b": ("refact", dict(n_embd=2048, n_head=32, n_layer=32, vocab_size=49216), 1024),
}


def random_checkpoint(directory: Path, config, dtype: torch.dtype = torch.bfloat16, std: float = 0.02,
                      embedding_std: float = 0.1, seed: int = 0) -> Path:
    """A random checkpoint of ``config`` (a transformers config) in ``directory``, written one tensor at a time
    by ropebridge's ``ShardWriter`` (1 GB shards): matrices N(0, std), norm weights 1, biases 0, as transformers
    initialises them, but the (tied) embedding N(0, embedding_std), so that the logits spread as a trained
    model's do (std 0.1 sqrt(D), 3.2 at D = 1024; at 0.02 they are flat and no damage moves them past a
    half-precision limit); the model's names and shapes from a model built on the meta device."""
    import transformers as T

    from ropebridge.checkpoint.tensor_io import ShardWriter

    if (directory / "config.json").exists():
        return directory
    tmp = directory.with_name(directory.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with torch.device("meta"):
        model = T.AutoModelForCausalLM.from_config(config)
    writer = ShardWriter(dtype, 1 << 30)
    g = torch.Generator().manual_seed(seed)
    embedding = next(n for n, p in model.named_parameters() if p is model.get_input_embeddings().weight)
    for name, p in model.state_dict().items():
        if name == "lm_head.weight" and getattr(config, "tie_word_embeddings", True):
            continue
        if p.dim() == 1:
            value = 1.0 if ("norm" in name or "ln" in name) and name.endswith("weight") else 0.0
            writer.add(name, tuple(p.shape), lambda shape=tuple(p.shape), v=value: iter([torch.full(shape, v)]))
        else:
            rows = max(1, (64 << 20) // (4 * p.shape[1]))
            scale = embedding_std if name == embedding else std
            writer.add(name, tuple(p.shape), lambda shape=tuple(p.shape), rows=rows, scale=scale: (
                torch.randn(min(rows, shape[0] - a), shape[1], generator=g) * scale for a in range(0, shape[0], rows)))
    writer.write(tmp)
    config.save_pretrained(tmp)
    tmp.rename(directory)
    return directory


def child(cmd: list[str]) -> tuple[int, float, float, str, float]:
    """Run ``cmd`` as a child: (exit status, wall seconds, peak RSS MiB of that child, its stdout, its peak anonymous
    memory MiB). The peak RSS counts the pages of files it maps (reclaimable, shared with the page cache); the
    anonymous peak (``RssAnon``, sampled every 20 ms) is the memory of its own that verify's budget bounds."""
    wrapper = [sys.executable, "-c",
               "import resource,subprocess,sys,time\n"
               "t=time.perf_counter();p=subprocess.Popen(sys.argv[1:],stdout=subprocess.PIPE);anon=0\n"
               "import threading;out=[];r=threading.Thread(target=lambda:out.append(p.stdout.read()));r.start()\n"
               "while p.poll() is None:\n"
               " try:\n"
               "  anon=max(anon,next(int(l.split()[1]) for l in open(f'/proc/{p.pid}/status') if "
               "l.startswith('RssAnon')))\n"
               " except (OSError,StopIteration): pass\n"
               " time.sleep(0.02)\n"
               "r.join();w=time.perf_counter()-t;m=resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
               "sys.stdout.buffer.write(out[0]);print(f'{p.returncode} {w} {m} {anon}',file=sys.stderr)",
               *cmd]
    out = subprocess.run(wrapper, capture_output=True, text=True)
    code, wall, kib, anon = out.stderr.strip().splitlines()[-1].split()
    return int(code), float(wall), int(kib) / 1024, out.stdout, int(anon) / 1024


def zero_one_mlp(dst: Path, damaged: Path) -> str:
    """A copy of ``dst`` (hard links, but the damaged shard rewritten) with layer 0's MLP output matrix zeroed."""
    from safetensors.torch import load_file, save_file

    shutil.rmtree(damaged, ignore_errors=True)
    damaged.mkdir()
    index_file = dst / "model.safetensors.index.json"
    index = json.loads(index_file.read_text())["weight_map"] if index_file.exists() else {
        k: "model.safetensors" for k in json.loads(_header(dst / "model.safetensors")) if k != "__metadata__"}
    name = next(n for n in index if ".0." in n and ("dense_4h_to_h.weight" in n or "down_proj.weight" in n))
    for f in dst.iterdir():
        if f.name != index[name]:
            os.link(f, damaged / f.name)
    tensors = load_file(dst / index[name])
    tensors[name] = torch.zeros_like(tensors[name])
    save_file(tensors, damaged / index[name], metadata={"format": "pt"})
    return name


def run_shape(shape: str, cache: Path, greedy: int) -> dict:
    import transformers as T

    cls, kwargs, context = SHAPES[shape]
    if hasattr(T, cls):
        config = getattr(T, cls)(**kwargs)
        layers = config.num_hidden_layers
        src = random_checkpoint(cache / f"{shape}-bf16", config)
    else:  # a remote-code family: the tests' writer of its published names, float32, N(0, 0.02)
        from tests.pico import build_remote

        src, layers = cache / f"{shape}-bf16", kwargs.get("num_hidden_layers", kwargs.get("n_layer"))
        if not (src / "config.json").exists():
            build_remote(src, cls, std=0.02, **kwargs)
    params = sum(math.prod(v["shape"]) for f in src.glob("*.safetensors")
                 for k, v in json.loads(_header(f)).items() if k != "__metadata__")
    dst = cache / f"{shape}-rope"
    shutil.rmtree(dst, ignore_errors=True)
    py = [sys.executable, "-m", "ropebridge"]
    code, convert_s, convert_rss, _, _ = child([*py, "convert", str(src), str(dst), "--dtype", "bfloat16", "--window",
                                             "2048", "--json"])
    if code:
        raise SystemExit(f"{shape}: convert exited {code}")
    verify = [*py, "verify", str(src), str(dst), "--context", str(context), "--greedy-tokens", str(greedy), "--json"]
    code, verify_s, verify_rss, out, verify_anon = child(verify)
    report = json.loads(out)
    damaged = cache / f"{shape}-damaged"
    zeroed = zero_one_mlp(dst, damaged)
    d_code, damaged_s, damaged_rss, d_out, _ = child([*py, "verify", str(src), str(damaged), "--context", str(context),
                                                   "--greedy-tokens", "0", "--quick", "--json"])
    shutil.rmtree(damaged, ignore_errors=True)
    return {"shape": shape, "parameters": params, "layers": layers, "context": context,
            "convert_seconds": convert_s, "convert_peak_rss_mb": convert_rss,
            "verify_exit": code, "verify_seconds": verify_s, "verify_peak_rss_mb": verify_rss,
            "verify_peak_anon_mb": verify_anon,
            "verify_over_convert": verify_s / convert_s, "memory_need_mb": report["cost"]["memory_need"] / 2**20,
            "stage_seconds": report["cost"]["stage_seconds"], "byte_check_seconds": report["byte_check"].get("seconds"),
            "converted_vs_exact": report["reference_converted_max_err"],
            "source_vs_exact": report["reference_source_max_err"],
            "limit": report["thresholds"]["limit"], "baseline": report.get("baseline_max_err"),
            "greedy_tokens": len(report["greedy_source"]),
            "greedy_bound": report["greedy_bound"], "passed": report["passed"],
            "damaged": zeroed, "damaged_exit": d_code, "damaged_seconds": damaged_s, "damaged_peak_rss_mb": damaged_rss,
            "damaged_converted_vs_exact": json.loads(d_out)["reference_converted_max_err"] if d_out.strip() else None,
            "load": os.getloadavg()}


def _header(f: Path) -> str:
    with open(f, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        return fh.read(n).decode()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", nargs="+", default=["bloom-560m-6l", "bloom-560m", "bloom-1b7"], choices=list(SHAPES))
    p.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "ropebridge-verify-scale"))
    p.add_argument("--greedy-tokens", type=int, default=32)
    p.add_argument("--keep", action="store_true", help="keep the random sources in --cache")
    args = p.parse_args()
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "verify_scale.json"
    rows = {r["shape"]: r for r in json.loads(path.read_text())["rows"]} if path.exists() else {}
    started = time.time()
    for shape in args.shapes:
        rows[shape] = run_shape(shape, cache, args.greedy_tokens)
        print(table([rows[shape]], ["shape", "parameters", "convert_seconds", "verify_seconds", "verify_peak_rss_mb",
                                    "memory_need_mb", "converted_vs_exact", "passed", "damaged_exit"]), flush=True)
        if not args.keep:
            shutil.rmtree(cache / f"{shape}-bf16", ignore_errors=True)
        shutil.rmtree(cache / f"{shape}-rope", ignore_errors=True)
    ordered = [rows[s] for s in SHAPES if s in rows]
    print(table(ordered, ["shape", "parameters", "context", "convert_seconds", "verify_seconds", "verify_over_convert",
                          "verify_peak_rss_mb", "memory_need_mb", "converted_vs_exact", "source_vs_exact", "passed",
                          "damaged_exit"]))
    print(f"wrote {save('verify_scale', {'rows': ordered, 'seconds': time.time() - started})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
