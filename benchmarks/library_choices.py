"""Two places where ropebridge does what a library also does, measured side by side on the BLOOM-560M shape
(random bfloat16 weights, 1.1 GB), each case in a child process of its own, rounds interleaved:

- **a model built without weights** (``verify.read_on_use``): ropebridge's ``_parameters_on_meta`` against
  accelerate's ``init_empty_weights`` (both under transformers' ``no_init_weights``): wall time and peak RSS of
  building the whole model, and whether both leave every parameter on the meta device and every buffer real;
- **bounded reads** (``checkpoint.tensor_io``): every tensor read in blocks of 64 MiB of rows, converted to
  float64 as verify reads them, by ``CheckpointReader.read(name, rows)`` (``os.preadv``, no memory map) against
  safetensors' ``safe_open(...).get_slice(name)[a:b]`` (a memory map): wall time and peak RSS (``VmHWM``, which
  counts the mapped file's pages a process touched), page cache warm (each case reads the file once before it is
  timed).

    python -m benchmarks.library_choices [--rounds 3] [--write]

accelerate is not a dependency: the script takes it from ``--accelerate DIR`` (``pip install --target DIR
--no-deps accelerate``) and skips that case without it. Writes ``benchmarks/results/library_choices.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._common import payload

ROOT = Path(__file__).resolve().parents[1]
BLOCK_BYTES = 64 << 20
BLOOM_560M = {"model_type": "bloom", "n_layer": 24, "hidden_size": 1024, "n_head": 16, "vocab_size": 250880}

BUILD = r"""
import json, sys, time
import torch
from transformers import AutoConfig, AutoModelForCausalLM
from transformers.initialization import no_init_weights
how, directory = sys.argv[1], sys.argv[2]
config = AutoConfig.from_pretrained(directory)
t = time.perf_counter()
if how == "ropebridge":
    from ropebridge.verify.read_on_use import _parameters_on_meta as empty
else:
    from accelerate import init_empty_weights as empty
with empty(), no_init_weights():
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
seconds = time.perf_counter() - t
meta = all(p.device.type == "meta" for p in model.parameters())
real = all(b.device.type != "meta" for b in model.buffers())
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM"))
print(json.dumps({"seconds": seconds, "rss_mb": hwm / 1024, "parameters_meta": meta, "buffers_real": real}))
"""

READ = r"""
import json, sys, time
import torch
how, directory, block = sys.argv[1], sys.argv[2], int(sys.argv[3])
from ropebridge.checkpoint.tensor_io import CheckpointReader, rows_per_block
reader = CheckpointReader(directory)
names = reader.names()
def blocks(name):
    shape = reader.shape(name)
    n = shape[0] if shape else 1
    row = max(1, reader.dtype(name).itemsize * (int(torch.tensor(shape[1:]).prod()) if len(shape) > 1 else 1))
    step = max(1, block // row)
    return [(a, min(n, a + step)) for a in range(0, n, step)]
if how == "safe_open":
    from safetensors import safe_open
    f = safe_open(f"{directory}/model.safetensors", "pt")
    read = lambda name, a, b: f.get_slice(name)[a:b].to(torch.float64)
else:
    read = lambda name, a, b: reader.read(name, (a, b), finite=False)
total = 0.0
for warm in (True, False):
    t = time.perf_counter()
    for name in names:
        for a, b in blocks(name):
            total += float(read(name, a, b).sum())
    seconds = time.perf_counter() - t
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM"))
print(json.dumps({"seconds": seconds, "rss_mb": hwm / 1024, "checksum": total}))
"""


def child(code: str, args: list[str], accelerate: str | None) -> dict:
    env = dict(os.environ)
    if accelerate:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [accelerate, env.get("PYTHONPATH")]))
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def checkpoint(directory: Path) -> Path:
    """The BLOOM-560M shape with random bfloat16 weights (``serving.shape_only_checkpoint``'s tensors, filled)."""
    import torch
    from safetensors.torch import save_file

    from ropebridge.serving import shape_only_checkpoint

    shape_only_checkpoint(BLOOM_560M, directory)
    from ropebridge.checkpoint.tensor_io import CheckpointReader

    reader = CheckpointReader(directory)
    g = torch.Generator().manual_seed(0)
    tensors = {n: (torch.randn(reader.shape(n), generator=g) * 0.02).to(torch.bfloat16) for n in reader.names()}
    save_file(tensors, str(directory / "model.safetensors"))
    return directory


def summary(runs: list[dict]) -> dict:
    return {"seconds": statistics.median(r["seconds"] for r in runs), "rss_mb": max(r["rss_mb"] for r in runs),
            **{k: v for k, v in runs[0].items() if k not in ("seconds", "rss_mb")}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--accelerate", metavar="DIR", help="a directory holding accelerate (pip install --target)")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        src = checkpoint(Path(tmp) / "bloom-560m")
        builds = ["ropebridge"] + (["accelerate"] if args.accelerate else [])
        reads = ["ropebridge", "safe_open"]
        runs: dict[str, list[dict]] = {f"build:{b}": [] for b in builds} | {f"read:{r}": [] for r in reads}
        for _ in range(args.rounds):  # interleaved
            for b in builds:
                runs[f"build:{b}"].append(child(BUILD, [b, str(src)], args.accelerate))
            for r in reads:
                runs[f"read:{r}"].append(child(READ, [r, str(src), str(BLOCK_BYTES)], None))
    rows = {k: summary(v) for k, v in runs.items()}
    print(f"{'case':24s} {'seconds':>8s} {'peak RSS MB':>12s}  other")
    for k, r in rows.items():
        other = {x: y for x, y in r.items() if x not in ("seconds", "rss_mb")}
        print(f"{k:24s} {r['seconds']:8.2f} {r['rss_mb']:12.0f}  {other}")
    if args.write:
        (ROOT / "benchmarks" / "results" / "library_choices.json").write_text(json.dumps(payload(
            [{"case": k, **r} for k, r in rows.items()],
            command="python -m benchmarks.library_choices --accelerate DIR --write", rounds=args.rounds,
            shape="BLOOM-560M, random bfloat16", load_average_1min_at_start=load, cores=os.cpu_count(),
            date=time.strftime("%Y-%m-%d")), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
