"""How a head's score error reaches the logits, per model: the exact float64 reference run again with each head's
predicted worst score error injected into its attention scores, against the measured error of the conversion.

    python benchmarks/propagation.py [--models demo,demo-mpt,demo-falcon,demo-baichuan,demo-jais]
                                     [--dtypes bfloat16,float16] [--window 8192] [--context 8192]

For every model and dtype: the default plan for WINDOW (``ropebridge plan --json``) gives each head h its predicted
worst score error e_h. The reference runs on CONTEXT tokens of the model's held-out text (what
``benchmarks/verdicts.py`` verifies on) twice: as it is, and with e_h x xi added to head h's score of every
(query, key) pair before the softmax, xi independent for every pair: ``sign`` (+-1) or ``uniform`` (in [-1, 1]).
Injected = max |logit difference| between the two passes. Beside it, the conversion's measured max |logit error|
from exact in verify (``benchmarks/results/verdicts_8k.json``): measured / injected is what a per-model prediction
would have to carry. Writes benchmarks/results/propagation.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torch
from _common import RESULTS, save, table

NOISES = ("sign", "uniform")


def predicted_errors(src: Path, dtype: str, window: int) -> list[float]:
    """Each head's predicted worst score error in the default plan (``ropebridge plan --json``)."""
    out = subprocess.run([sys.executable, "-m", "ropebridge", "plan", "--model", str(src), "--dtype", dtype,
                          "--window", str(window), "--json"], check=True, capture_output=True, text=True).stdout
    return [h["predicted_error"] for h in json.loads(out)["heads"]]


def injector(errors: list[float], noise: str, seed: int):
    """A ``reference_states`` observer that adds e_h xi to each head's scores: the weights ``(b, h, block, t)``
    become softmax(log weights + e_h xi), which is the softmax of the scores plus e_h xi (masked keys stay 0)."""
    e = torch.tensor(errors, dtype=torch.float64)[None, :, None, None]  # (1, h, 1, 1)
    gen = torch.Generator().manual_seed(seed)

    def inject(layer: int, start: int, content, dist, weights: torch.Tensor) -> None:
        xi = torch.rand(weights.shape, generator=gen, dtype=torch.float64) * 2 - 1  # (b, h, block, t)
        if noise == "sign":
            xi = xi.sign()
        weights.copy_(torch.softmax(weights.log() + e * xi, -1))

    return inject


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="demo,demo-mpt,demo-falcon,demo-baichuan,demo-jais")
    p.add_argument("--dtypes", default="bfloat16,float16")
    p.add_argument("--window", type=int, default=8192)
    p.add_argument("--context", type=int, default=8192)
    args = p.parse_args()
    from transformers import AutoTokenizer

    from ropebridge.checkpoint.model import SourceModel
    from ropebridge.checkpoint.reference import Blocks, reference_states
    from ropebridge.demo import data_dir

    measured = {(r["model"], r["dtype"]): r for r in json.loads((RESULTS / "verdicts_8k.json").read_text())["rows"]}
    rows = []
    for name in args.models.split(","):
        src = data_dir(name)
        model = SourceModel(src)
        text = (src / "heldout.txt").read_text()[:30_000]  # as benchmarks/verdicts.py writes its text file
        ids = torch.tensor(AutoTokenizer.from_pretrained(src)(text)["input_ids"][: args.context])[None]  # (1, s)
        head = model.head_rows(0, model.info.vocab_size)  # (V, D) float64
        t0 = time.perf_counter()
        clean = reference_states(model, ids, blocks=Blocks(256))[0] @ head.T  # (s, V)
        seconds = time.perf_counter() - t0
        for dtype in args.dtypes.split(","):
            errors = predicted_errors(src, dtype, args.window)
            row = {"model": name, "dtype": dtype, "window": args.window, "context": ids.shape[1],
                   "predicted_worst": max(errors), "reference_seconds": seconds}
            for noise in NOISES:
                hit = reference_states(model, ids, blocks=Blocks(256), observe=injector(errors, noise, 0))[0] @ head.T
                row[f"injected_{noise}"] = float((hit - clean).abs().max())
            m = measured.get((name, dtype))
            if m is not None and m.get("window") == args.window:
                row["measured"] = m["measured"]
                for noise in NOISES:
                    row[f"measured_over_{noise}"] = m["measured"] / row[f"injected_{noise}"]
                row["measured_over_predicted"] = m["measured"] / max(errors)
            rows.append(row)
            print({k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
    print(table(rows, ["model", "dtype", "predicted_worst", "injected_sign", "injected_uniform", "measured",
                       "measured_over_sign", "measured_over_uniform", "measured_over_predicted"]))
    print(f"wrote {save('propagation', {'rows': rows})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
