"""Conversion at BLOOM-176B's width: time, peak RSS and the I/O floor on a one-layer checkpoint, extrapolated.

    python -m benchmarks.convert_width [--layers 1] [--hidden 14336] [--heads 112] [--vocab 1024]
                                       [--window 2048] [--dtype bfloat16] [--cache DIR]

The source (BLOOM-176B's hidden 14336, 112 heads of 128, MLP 57344; one layer, vocab 1024, bfloat16, two
shards) is written tensor by tensor with random values, so building it needs no more memory than a block.
Conversion runs as ``python -m ropebridge convert`` in a child process (its own peak RSS); the plan alone is
timed too, since it is paid once per model, not per layer. The extrapolation to the full model (70 layers,
vocab 250880) scales the per-byte conversion time by the output bytes of the full model. Prints a table and
writes benchmarks/results/convert_width.json (convert_width_wL.json for another --window).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from benchmarks._common import save, table
from benchmarks.convert_560m import IO_FLOOR, child_peak_rss_mb

from ropebridge.checkpoint.tensor_io import ShardWriter

GIB = 2**30


def random_bloom(directory: Path, *, layers: int, hidden: int, heads: int, vocab: int, shard_gb: float) -> Path:
    """A random bfloat16 BLOOM checkpoint written block by block (``ShardWriter``), cached in ``directory``."""
    if (directory / "config.json").exists():
        return directory
    tmp = directory.with_name(directory.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    gen = torch.Generator().manual_seed(0)

    def randn(rows: int, cols: int, std: float = 0.02):
        block = max(1, (64 << 20) // (4 * cols))
        return lambda: (torch.randn(min(block, rows - a), cols, generator=gen) * std for a in range(0, rows, block))

    def ones(n):
        return lambda: iter([torch.ones(n)])

    def zeros(n):
        return lambda: iter([torch.zeros(n)])

    writer = ShardWriter(torch.bfloat16, int(shard_gb * GIB))
    writer.add("transformer.word_embeddings.weight", (vocab, hidden), randn(vocab, hidden))
    writer.add("transformer.word_embeddings_layernorm.weight", (hidden,), ones(hidden))
    writer.add("transformer.word_embeddings_layernorm.bias", (hidden,), zeros(hidden))
    for i in range(layers):
        p = f"transformer.h.{i}."
        for name, (rows, cols) in (("self_attention.query_key_value", (3 * hidden, hidden)),
                                   ("self_attention.dense", (hidden, hidden)),
                                   ("mlp.dense_h_to_4h", (4 * hidden, hidden)),
                                   ("mlp.dense_4h_to_h", (hidden, 4 * hidden))):
            writer.add(p + name + ".weight", (rows, cols), randn(rows, cols))
            writer.add(p + name + ".bias", (rows,), lambda rows=rows: iter([torch.randn(rows, generator=gen) * 0.02]))
        for name in ("input_layernorm", "post_attention_layernorm"):
            writer.add(p + name + ".weight", (hidden,), ones(hidden))
            writer.add(p + name + ".bias", (hidden,), zeros(hidden))
    writer.add("transformer.ln_f.weight", (hidden,), ones(hidden))
    writer.add("transformer.ln_f.bias", (hidden,), zeros(hidden))
    writer.write(tmp)
    config = {"architectures": ["BloomForCausalLM"], "model_type": "bloom", "n_layer": layers, "hidden_size": hidden,
              "n_head": heads, "vocab_size": vocab, "layer_norm_epsilon": 1e-5, "dtype": "bfloat16",
              "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 3}
    (tmp / "config.json").write_text(json.dumps(config, indent=1))
    tmp.rename(directory)
    return directory


def full_model_bytes(record: dict, layers: int, vocab: int, itemsize: int) -> int:
    """Output bytes of a converted BLOOM with ``layers`` and ``vocab``, from the converted geometry
    (``ropebridge.json``)."""
    lay = record["geometry"]
    d2, hd2, heads = lay["hidden_size"], lay["head_dim"], len(record["plan"]["heads"])
    d = d2 - lay["pad_dims"]
    f = 4 * d
    # QKV, attention output, both MLP matrices (weights and biases), two LayerNorms
    per_layer = 3 * heads * hd2 * (d2 + 1) + d2 * (heads * hd2 + 1) + f * (d2 + 1) + d2 * (f + 1) + 4 * d2
    return itemsize * (layers * per_layer + 2 * vocab * d2 + 2 * d2)  # embedding, output head, final LayerNorm


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=1)
    p.add_argument("--hidden", type=int, default=14336)
    p.add_argument("--heads", type=int, default=112)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--window", type=int, default=2048)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--full-layers", type=int, default=70, help="layers of the model to extrapolate to")
    p.add_argument("--full-vocab", type=int, default=250880)
    p.add_argument("--shard-gb", type=float, default=3.3)
    p.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "ropebridge-bench"))
    args = p.parse_args()
    cache = Path(args.cache)
    name = f"bloom-width{args.hidden}-{args.heads}h-{args.layers}x{args.vocab}"
    src = random_bloom(cache / name, layers=args.layers, hidden=args.hidden, heads=args.heads, vocab=args.vocab,
                       shard_gb=args.shard_gb)
    shards = sorted(src.glob("*.safetensors"))
    in_bytes = sum(f.stat().st_size for f in shards)
    work = cache / "work-width"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    flags = ["--window", str(args.window), "--dtype", args.dtype]

    os.sync()
    base_wall, base_rss = child_peak_rss_mb([sys.executable, "-c", "import ropebridge.convert.pipeline"])
    plan_wall, plan_rss = child_peak_rss_mb([sys.executable, "-m", "ropebridge", "plan", "--model", str(src), *flags,
                                             "--json"])
    os.sync()
    conv_wall, conv_rss = child_peak_rss_mb([sys.executable, "-m", "ropebridge", "convert", str(src),
                                             str(work / "rope"), *flags, "--max-shard-mb", "4000"])
    record = json.loads((work / "rope" / "ropebridge.json").read_text())
    index = json.loads((work / "rope" / "model.safetensors.index.json").read_text())
    out_bytes = index["metadata"]["total_size"]
    itemsize = 2 if args.dtype in ("bfloat16", "float16") else 4
    assert full_model_bytes(record, args.layers, args.vocab, itemsize) == out_bytes  # the extrapolation's own check
    largest_out = max(f.stat().st_size for f in (work / "rope").glob("*.safetensors"))
    from ropebridge.checkpoint.tensor_io import CheckpointReader

    reader = CheckpointReader(work / "rope")
    largest_tensor = max(itemsize * torch.Size(reader.shape(n)).numel() for n in reader.names())
    shutil.rmtree(work / "rope")
    os.sync()
    floor_wall, floor_rss = child_peak_rss_mb([sys.executable, "-c", IO_FLOOR, str(src), str(work / "floor"),
                                               str(out_bytes)])
    shutil.rmtree(work, ignore_errors=True)

    full_out = full_model_bytes(record, args.full_layers, args.full_vocab, itemsize)
    per_byte = (conv_wall - plan_wall) / out_bytes  # the plan is paid once per model
    rows = [
        {"what": "python + imports", "seconds": base_wall, "peak_rss_gib": base_rss / 1024},
        {"what": "ropebridge plan (once per model)", "seconds": plan_wall, "peak_rss_gib": plan_rss / 1024},
        {"what": "ropebridge convert (plan included)", "seconds": conv_wall, "peak_rss_gib": conv_rss / 1024},
        {"what": "I/O floor: read the source, write the output's bytes", "seconds": floor_wall,
         "peak_rss_gib": floor_rss / 1024},
    ]
    bound = 2 * largest_tensor / GIB + 1
    summary = {
        "source_gib": in_bytes / GIB, "largest_source_shard_gib": max(f.stat().st_size for f in shards) / GIB,
        "output_gib": out_bytes / GIB, "largest_output_tensor_gib": largest_tensor / GIB,
        "largest_output_shard_gib": largest_out / GIB,
        "peak_rss_target_gib": bound, "peak_rss_met": conv_rss / 1024 <= bound,
        "conversion_over_io_floor": (conv_wall - plan_wall) / floor_wall,
        "head_dim": record["geometry"]["head_dim"], "hidden_size": record["geometry"]["hidden_size"],
        "predicted_worst_error": max(h["predicted_error"] for h in record["plan"]["heads"]),
        "full_model_output_gib": full_out / GIB,
        "full_model_minutes_extrapolated": (plan_wall + per_byte * full_out) / 60,
        "full_model_io_floor_minutes_extrapolated": floor_wall * full_out / out_bytes / 60,
    }
    print(f"source: {args.layers} layer(s), hidden {args.hidden}, {args.heads} heads, vocab {args.vocab}, "
          f"{len(shards)} shards, {in_bytes / GIB:.2f} GiB; {args.dtype}, window {args.window}")
    print(table(rows, ["what", "seconds", "peak_rss_gib"]))
    for k, v in summary.items():
        print(f"{k}: {v:.4g}" if isinstance(v, float) else f"{k}: {v}")
    path = save("convert_width" + ("" if args.window == 2048 else f"_w{args.window}"),
                {"args": vars(args), "rows": rows, **summary})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
