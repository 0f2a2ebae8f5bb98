"""Conversion of a BLOOM-560M-shaped checkpoint: time and peak RSS against ``cp -r``, and float32 fidelity.

    python -m benchmarks.convert_560m [--quick] [--context 2048] [--cache DIR]

Prints a table and writes benchmarks/results/convert_560m.json (or convert_560m_quick.json).
Conversion runs as ``python -m ropebridge convert`` in a child process so its peak RSS is its own; both
timed commands start with the source in the page cache and no dirty pages (``sync``) and end when their
writes are buffered (neither waits for the disk). The source has 200 MB shards, but its embedding alone
(250880 x 1024 float32, 980 MB) is one tensor, hence one shard: the largest.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from benchmarks._common import bloom_560m_shaped, save, table


def child_peak_rss_mb(cmd: list[str]) -> tuple[float, float]:
    """Run ``cmd`` under /usr/bin/time-like accounting: (wall seconds, peak RSS in MiB of that child)."""
    wrapper = [sys.executable, "-c",
               "import resource,subprocess,sys,time;t=time.perf_counter();r=subprocess.run(sys.argv[1:]);"
               "w=time.perf_counter()-t;m=resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss;"
               "print(f'{w} {m}',file=sys.stderr);sys.exit(r.returncode)", *cmd]
    out = subprocess.run(wrapper, capture_output=True, text=True, check=True)
    wall, kib = out.stderr.strip().splitlines()[-1].split()
    return float(wall), int(kib) / 1024


# The least a converter written in Python has to do, with nothing computed and no torch: read every source
# byte into user space and write as many bytes as the conversion writes, reading in one thread while the
# main thread writes (64 MiB unbuffered blocks, at most four in flight).
IO_FLOOR = """
import os, queue, sys, threading
src, dst, total = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.makedirs(dst)
blocks = queue.Queue(maxsize=4)
def read():
    for name in sorted(os.listdir(src)):
        with open(os.path.join(src, name), "rb", buffering=0) as r:
            while n := r.readinto(block := bytearray(64 << 20)):
                blocks.put(memoryview(block)[:n])
    blocks.put(None)
reader = threading.Thread(target=read)
reader.start()
written = 0
with open(os.path.join(dst, "out.bin"), "wb", buffering=0) as w:
    while (block := blocks.get()) is not None:
        written += w.write(block)
    pad = memoryview(bytearray(64 << 20))
    while written < total:
        written += w.write(pad[:min(len(pad), total - written)])
reader.join()
"""


FINGERPRINT = "import sys; from pathlib import Path; from ropebridge.convert.pipeline import source_fingerprint; " \
              "source_fingerprint(Path(sys.argv[1]))"


def verify_bytes(src: Path, dst: Path) -> tuple[float, float, dict]:
    """``ropebridge verify`` with the least functional work (16 tokens, no greedy; the exact reference on those
    16, a layer at a time) in a child: (wall seconds, peak RSS MiB, its report's byte check: mode, tensors, bytes,
    seconds)."""
    import json

    wrapper = [sys.executable, "-c",
               "import resource,subprocess,sys,time;t=time.perf_counter();r=subprocess.run(sys.argv[1:],"
               "stdout=subprocess.PIPE);w=time.perf_counter()-t;m=resource.getrusage(resource.RUSAGE_CHILDREN)"
               ".ru_maxrss;sys.stdout.buffer.write(r.stdout);print(f'{w} {m}',file=sys.stderr)",
               sys.executable, "-m", "ropebridge", "verify", str(src), str(dst), "--context", "16",
               "--greedy-tokens", "0", "--json"]
    out = subprocess.run(wrapper, capture_output=True, text=True)
    if not out.stdout.strip():
        raise SystemExit(f"verify printed no report: {out.stderr.strip()[-500:]}")
    wall, kib = out.stderr.strip().splitlines()[-1].split()
    report = json.loads(out.stdout)
    if not report["passed"]:
        raise SystemExit(f"verify failed on an untouched conversion: {report['failures']}")
    return float(wall), int(kib) / 1024, report["byte_check"]


def logits_max_diff(native_dir: Path, converted_dir: Path, context: int, seed: int = 0) -> float:
    """max |native - converted| over every logit of ``context`` random tokens, the head applied in chunks."""
    import transformers as T

    T.logging.set_verbosity_error()
    ids = torch.randint(0, 1000, (1, context), generator=torch.Generator().manual_seed(seed))
    worst = 0.0
    with torch.no_grad():
        native = T.AutoModelForCausalLM.from_pretrained(native_dir).eval()
        h_native = native.transformer(ids).last_hidden_state[0]  # (s, D)
        head_native = native.lm_head.weight
        converted = T.AutoModelForCausalLM.from_pretrained(converted_dir).eval()
        h_conv = converted.gpt_neox(ids).last_hidden_state[0]  # (s, D')
        head_conv = converted.lm_head.weight
        for start in range(0, head_native.shape[0], 16384):
            a = h_native @ head_native[start:start + 16384].T
            b = h_conv @ head_conv[start:start + 16384].T
            worst = max(worst, float((a - b).abs().max()))
    return worst


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="4 layers, vocab 32000, context 512")
    p.add_argument("--context", type=int)
    p.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "ropebridge-bench"))
    p.add_argument("--shard", default="200MB")
    p.add_argument("--cold", action="store_true", help="drop the page cache before each timed command (root)")
    args = p.parse_args()
    layers, vocab, context = (4, 32000, 512) if args.quick else (24, 250880, 2048)
    context = args.context or context
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    src = bloom_560m_shaped(cache / f"bloom560m-shaped-{layers}x{vocab}", layers=layers, vocab=vocab, shard=args.shard)
    shards = sorted(src.glob("*.safetensors"))
    largest = max(f.stat().st_size for f in shards) / 2**20
    total = sum(f.stat().st_size for f in shards) / 2**20

    work = cache / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    def settle(keep: tuple[str, ...] = ()) -> None:
        """Same start for every timed command: no dirty pages to flush; the source in the page cache (warm)
        or not (``--cold``, where the kernel lets us drop caches); the outputs not in ``keep`` removed."""
        for name in ("warm", "copy", "rope", "floor"):
            if name not in keep:
                shutil.rmtree(work / name, ignore_errors=True)
        os.sync()
        if args.cold:
            Path("/proc/sys/vm/drop_caches").write_text("3\n")

    subprocess.run(["cp", "-r", str(src), str(work / "warm")], check=True)  # read the source into the page cache
    settle()
    cp_wall, cp_rss = child_peak_rss_mb(["cp", "-r", "--reflink=never", str(src), str(work / "copy")])
    settle()
    base_wall, base_rss = child_peak_rss_mb([sys.executable, "-c", "import ropebridge.convert.pipeline"])
    settle()
    conv_wall, conv_rss = child_peak_rss_mb([sys.executable, "-m", "ropebridge", "convert", str(src),
                                             str(work / "rope"), "--window", str(max(context, 2048)), "--json",
                                             "--max-shard-mb", str(int(largest) + 1)])
    out_nbytes = sum(f.stat().st_size for f in (work / "rope").glob("*.safetensors"))
    out_bytes = out_nbytes / 2**20
    diff = logits_max_diff(src, work / "rope", context)
    settle(keep=("rope",))
    fp_wall, fp_rss = child_peak_rss_mb([sys.executable, "-c", FINGERPRINT, str(src)])
    settle(keep=("rope",))
    verify_wall, verify_rss, checked = verify_bytes(src, work / "rope")
    settle()
    floor_wall, floor_rss = child_peak_rss_mb([sys.executable, "-c", IO_FLOOR, str(src), str(work / "floor"),
                                               str(out_nbytes)])
    rows = [
        {"what": "cp -r --reflink=never", "seconds": cp_wall, "peak_rss_mb": cp_rss},
        {"what": "python + imports", "seconds": base_wall, "peak_rss_mb": base_rss},
        {"what": "ropebridge convert", "seconds": conv_wall, "peak_rss_mb": conv_rss},
        {"what": "I/O floor: python reads the source, writes the output's bytes", "seconds": floor_wall,
         "peak_rss_mb": floor_rss},
        {"what": "fingerprint: sha256 of every source byte (python + imports)", "seconds": fp_wall,
         "peak_rss_mb": fp_rss},
        {"what": "verify: byte check (inside verify, its own timer)", "seconds": checked["seconds"]},
        {"what": "ropebridge verify --context 16 --greedy-tokens 0 (whole)", "seconds": verify_wall,
         "peak_rss_mb": verify_rss},
    ]
    print(f"checkpoint: {layers} layers, vocab {vocab}, {len(shards)} shards, {total:.0f} MiB, "
          f"largest {largest:.0f} MiB")
    print(table(rows, ["what", "seconds", "peak_rss_mb"]))
    summary = {
        "byte_check_over_convert_time": checked["seconds"] / conv_wall,
        "byte_check_and_fingerprint_over_convert_time": (checked["seconds"] + fp_wall - base_wall) / conv_wall,
        "byte_check_mode": checked["mode"],
        "conversion_over_copy_time": conv_wall / cp_wall,
        "io_floor_over_copy_time": floor_wall / cp_wall,
        "peak_rss_over_largest_shard": conv_rss / largest,
        "peak_rss_above_imports_over_largest_shard": (conv_rss - base_rss) / largest,
        "float32_max_abs_logit_diff": diff,
        "context": context,
        "output_mb": out_bytes,
        "page_cache": "cold" if args.cold else "warm",
    }
    for k, v in summary.items():
        print(f"{k}: {v:.4g}" if isinstance(v, float) else f"{k}: {v}")
    name = "convert_560m" + ("_quick" if args.quick else "") + ("_cold" if args.cold else "")
    path = save(name, {
        "layers": layers, "vocab": vocab, "shards": len(shards), "total_mb": total, "largest_shard_mb": largest,
        "rows": rows, **summary})
    print(f"wrote {path}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
