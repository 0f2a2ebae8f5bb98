"""The default conversion of every supported attention shape, end to end: one layer, a 320-token vocabulary,
random weights, ``ropebridge convert SRC DST`` with no flags (float32, window 8192), then ``ropebridge verify``.

    python -m benchmarks.default_shapes [--shapes bloom-1b7,mpt-7b,...] [--context 256]

BLOOM-560M's and Falcon-RW-1B's shapes run in the test suite (tests/convert/test_pipeline.py); this covers the larger
ones. Prints a table and writes benchmarks/results/default_shapes.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._common import save, started_as, table


SHAPES = {  # name: (pico family, config overrides): the attention shape and width of the real model, one layer
    "bloom-1b7": ("bloom-4heads", dict(n_layer=1, hidden_size=2048, n_head=16)),
    "bloom-7b1": ("bloom-4heads", dict(n_layer=1, hidden_size=4096, n_head=32)),
    "mpt-7b": ("mpt", dict(n_layers=1, d_model=4096, n_heads=32)),
    "mpt-30b": ("mpt", dict(n_layers=1, d_model=7168, n_heads=64)),
    "falcon-rw-7b": ("falcon-rw", dict(num_hidden_layers=1, hidden_size=4096, num_attention_heads=64,
                                       num_kv_heads=64)),
    "poro-34b": ("bloom-4heads", dict(n_layer=1, hidden_size=7168, n_head=56)),  # BLOOM, 56 heads of 128
    "replit-code-v1-3b": ("replit", dict(n_layers=1, d_model=2560, n_heads=32)),  # replit_lm, 32 heads of 80
    "baichuan-13b": ("baichuan", dict(num_hidden_layers=1, hidden_size=5120, num_attention_heads=40,
                                      intermediate_size=13696)),
    "refact-1.6b": ("refact", dict(n_layer=1, n_embd=2048, n_head=32)),
}
REMOTE = ("replit", "baichuan", "refact")  # remote-code families: ``pico.build_remote``


def verify_command(src: Path, dst: Path, context: int) -> list[str]:
    """``ropebridge verify`` as this benchmark runs it: every family, transformers' or remote code, judged against
    the exact float64 reference, within 16 GiB (a 7168-wide layer's float64 reference needs 11 on a 24 GB machine;
    verify's default budget is 8)."""
    return [sys.executable, "-m", "ropebridge", "verify", str(src), str(dst), "--context", str(context),
            "--greedy-tokens", "8", "--max-memory", "16", "--json"]


def main() -> int:
    from tests.pico import build, build_remote

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--context", type=int, default=256)
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name in args.shapes.split(","):
            family, overrides = SHAPES[name]
            src, dst = Path(work) / name, Path(work) / f"{name}-rope"
            (build_remote if family in REMOTE else build)(src, family, std=0.02, **overrides)
            start = time.perf_counter()
            conv = subprocess.run([sys.executable, "-m", "ropebridge", "convert", str(src), str(dst), "--json"],
                                  capture_output=True, text=True)
            row = {"shape": name, "convert_exit": conv.returncode, "convert_seconds": time.perf_counter() - start}
            if conv.returncode == 0:
                summary = json.loads(conv.stdout)
                row.update(window=summary["window"], predicted=summary["worst_predicted_error"])
                start = time.perf_counter()
                ver = subprocess.run(verify_command(src, dst, args.context), capture_output=True, text=True)
                row.update(verify_exit=ver.returncode, verify_seconds=time.perf_counter() - start)
                if ver.returncode == 2:
                    row["refusal"] = (ver.stderr.strip().splitlines() or ["?"])[-1]
                if ver.returncode in (0, 1):
                    report = json.loads(ver.stdout)
                    row.update(converted_vs_exact=report["reference_converted_max_err"],
                               limit=report["thresholds"]["limit"], source_ran=report["source_ran"],
                               passed=report["passed"])
            else:
                row["refusal"] = conv.stderr.strip().splitlines()[-1]
            rows.append(row)
            print(table(rows[-1:], list(rows[-1])), flush=True)
            for path in (src, dst):
                subprocess.run(["rm", "-rf", str(path)])
    print(table(rows, ["shape", "convert_exit", "window", "predicted", "verify_exit", "converted_vs_exact",
                       "limit", "source_ran", "passed"]))
    print(f"wrote {save('default_shapes', {'command': started_as(), 'rows': rows})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
