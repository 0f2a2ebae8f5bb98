"""Where a float32 conversion's error comes from: every float32 row of the verdict tables, its plan's predicted
worst score error against verify's measured max |logit error|, and the exact float64 reference run again with the
rounding of the target's q.k kernel injected into its scores.

    python -m benchmarks.float32_error [--models demo,demo-mpt,demo-falcon,demo-baichuan,demo-jais] [--seed 0]

The plan's prediction (``cross_dtype.predicted_in`` over the CONTEXT positions verify compared) covers the pair's
own arithmetic. A kernel's q.k also sums the head's hd content dims, and where its order (SIMD lanes, blocks)
adds them to a partial sum holding one of the pair's products, N sin(theta i) ~ K i with K = N theta, each is
rounded at that size: half an ulp of K i, K i = m i / sigma in logit units (sigma = 1/sqrt(hd'), m the head's
slope per logit). ``injected`` is that rounding as noise: independent Gaussian draws of standard deviation

    sigma_h(i) = sigma * hu32(m_h i / sigma) * sqrt(hd / 3)

(hd uniform roundings in +-hu) added to head h's score of every (query i, key j <= i) before the softmax of the
exact reference, and the max |logit difference| this makes on the CONTEXT tokens. ``kernel_score`` checks the
noise model against the kernel: the converted model in float32 through transformers, its first layer's scores
q.k as torch computes them against the same in float64, at the last query, max over heads and keys (``noise_score``:
4 sigma_h(i) there, the extreme of ~i draws). Writes benchmarks/results/float32_error.json.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from benchmarks._common import save, started_as, table
from benchmarks.propagation import HeldOut, default_plan, verified_rows, with_error

KEY = ("model", "window", "context")


def noise_sd(plan: dict, positions: torch.Tensor) -> torch.Tensor:
    """sigma_h(i) (module doc) at query ``positions`` ``(n,)``: ``(h, n)``, float64."""
    from ropebridge.numerics import half_ulp

    sigma = 1 / math.sqrt(plan["head_dim"] + plan["rotary_dim"])
    slopes = np.array([h["slope"] for h in plan["heads"]])[:, None]  # (h, 1)
    hu = half_ulp(slopes * positions.numpy()[None, :] / sigma, "float32")  # (h, n)
    return torch.tensor(sigma * hu * math.sqrt(plan["head_dim"] / 3))


def injector(plan: dict, seed: int):
    """``propagation.with_error`` of Gaussian noise of standard deviation sigma_h(i) (module doc)."""
    gen = torch.Generator().manual_seed(seed)

    def error(start: int, dist, weights: torch.Tensor) -> torch.Tensor:
        sd = noise_sd(plan, torch.arange(start, start + weights.shape[2], dtype=torch.float64))  # (h, block)
        return sd[None, :, :, None] * torch.randn(weights.shape, generator=gen, dtype=torch.float64)

    return with_error([h["slope"] for h in plan["heads"]], error)


def kernel_score(src: Path, plan: dict, ids: torch.Tensor, window: int) -> float:
    """The converted model's first-layer score error in float32 at the last query (module doc)."""
    from transformers import AutoModelForCausalLM

    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "ropebridge", "convert", str(src), tmp, "--dtype", "float32",
                        "--window", str(window), "--force"], check=True, capture_output=True)
        model = AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32)
        seen = {}
        attention = torch.nn.functional.scaled_dot_product_attention
        import transformers.integrations.sdpa_attention as sdpa

        def spy(q, k, v, *args, **kwargs):  # q, k (b, h, s, hd')
            seen.setdefault("qk", (q[0, :, -1:].clone(), k[0].clone()))
            return attention(q, k, v, *args, **kwargs)

        sdpa.torch.nn.functional.scaled_dot_product_attention = spy
        try:
            with torch.no_grad():
                model(ids)
        finally:
            sdpa.torch.nn.functional.scaled_dot_product_attention = attention
    q, k = seen["qk"]  # (h, 1, hd'), (h, s, hd')
    s32 = (q @ k.transpose(-1, -2)).double()  # (h, 1, s)
    s64 = q.double() @ k.double().transpose(-1, -2)
    return float((s32 - s64).abs().max()) / math.sqrt(q.shape[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="demo,demo-mpt,demo-falcon,demo-baichuan,demo-jais")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    from ropebridge.demo import data_dir
    from ropebridge.emulation.cross_dtype import predicted_in
    from ropebridge.emulation.plan import EmulationPlan

    rows = []
    for name in args.models.split(","):
        cases = verified_rows([name], ["float32"])
        if not cases:
            continue
        src, ref = data_dir(name), HeldOut(name)
        for context in sorted({c["context"] for c in cases}):
            ids = ref.tokens(context)  # (1, s)
            t0 = time.perf_counter()
            clean = ref.logits(ids)  # (s, V)
            seconds = time.perf_counter() - t0
            for c in (c for c in cases if c["context"] == context):
                plan = default_plan(src, "float32", c["window"])
                hit = ref.logits(ids, injector(plan, args.seed))
                row = {k: c[k] for k in KEY}
                row["predicted"] = predicted_in(EmulationPlan.from_dict(plan), "float32", positions=context)
                row["measured"] = c["measured"]
                row["measured_over_predicted"] = c["measured"] / row["predicted"]
                row["limit"] = c["limit"]  # verify's own (the dtype's tolerance at the window, here)
                row["injected"] = float((hit - clean).abs().max())
                row["measured_over_injected"] = c["measured"] / row["injected"]
                row["kernel_score"] = kernel_score(src, plan, ids, c["window"])
                row["noise_score"] = 4 * float(noise_sd(plan, torch.tensor([context - 1.0])).max())
                row["reference_s"] = seconds
                rows.append(row)
                print(table([row], list(row)), flush=True)
    print(table(rows, [*KEY, "predicted", "measured", "measured_over_predicted", "injected", "measured_over_injected",
                       "kernel_score", "noise_score"]))
    for col in ("measured_over_predicted", "measured_over_injected"):
        v = [r[col] for r in rows]
        print(f"{col}: {min(v):.3g} to {max(v):.3g}")
    print(f"wrote {save('float32_error', {'command': started_as(), 'rows': rows})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
