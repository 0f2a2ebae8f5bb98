"""What the ladder's 16-bit rounding costs, and how small it would have to be to meet 2x the floor.

    python -m benchmarks.rounding_budget [--models demo,demo-mpt,demo-falcon] [--contexts 2048]
                                         [--dtypes bfloat16,float16] [--steps 1,0.5,0.25,0] [--rotary-dims 16,32,64]

The converted checkpoints of ``arch_floor.py`` (planned and calibrated as ``fidelity.py`` converts them), run
by transformers in the dtype with one change (``ROUNDED_LADDER``): the R rotary dims of q and k are rotated
exactly (float64 tables and products, integer positions) and then stored rounded to a step of lambda times
the dtype's ulp, and attention runs in float64. lambda = 1 is a 16-bit engine's storage of the rotated q and
k with nothing else rounded: if it measures what the converted model measures, the storage is the
emulation's whole cost. lambda < 1 is that storage with a finer step, which is what a ladder with
lambda times the amplitudes' root sum of squares would cost; lambda = 0 is the fit error alone (above the
architecture floor, ``arch_floor.py``). The lambda at which the model reaches 2x the floor is the factor by
which any emulation's amplitudes would have to shrink.

Beside it, per model and dtype, the ladder the planner fits for R = 16, 32, 64 rotary dims with the same
floors: the amplitudes' root sum of squares (the worst head) and its ratio to R = 32's, the lambda each
rotary width buys. Prints a table and writes benchmarks/results/rounding_budget.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from pathlib import Path

from benchmarks._common import save, table
from benchmarks.arch_floor import child_with, compare_case, floor_cases
from benchmarks.fidelity import forward_in_child

# The child of fidelity.py with the rotation and attention replaced (module doc). LADDER_STEP is lambda.
ROUNDED_LADDER = """
import json, os
import transformers.models.gpt_neox.modeling_gpt_neox as neox
from transformers import AttentionInterface
plan = json.load(open(path + "/ropebridge.json"))["plan"]
R = plan["rotary_dim"]
BITS = {"bfloat16": 8, "float16": 11}[dtype]  # significand bits: the ulp of x in [2^(e-1), 2^e) is 2^(e-BITS)
STEP = float(os.environ["LADDER_STEP"])
thetas = torch.tensor([p["theta"] for p in plan["heads"][0]["pairs"]], dtype=torch.float64)  # (R/2,)

def store(x):  # float64 x rounded to STEP ulps of the dtype (half to even, as a cast rounds)
    if STEP == 0:
        return x
    step = STEP * torch.ldexp(torch.ones_like(x), torch.frexp(x)[1] - BITS)
    return torch.round(x / step) * step

def rotate(x):  # x (b, h, s, hd'), positions 0..s-1: GPT-NeoX's half layout on the first R dims, exact
    ang = torch.arange(x.shape[-2], dtype=torch.float64)[:, None] * thetas[None, :]  # (s, R/2)
    cos, sin = torch.cos(ang).repeat(1, 2), torch.sin(ang).repeat(1, 2)  # (s, R)
    xr = x[..., :R].double()
    swapped = torch.cat([-xr[..., R // 2:], xr[..., : R // 2]], -1)  # (b, h, s, R)
    return torch.cat([store(xr * cos + swapped * sin), x[..., R:].double()], -1)  # (b, h, s, hd')

neox.apply_rotary_pos_emb = lambda q, k, cos, sin, unsqueeze_dim=1: (rotate(q), rotate(k))

def float64_attention(module, q, k, v, mask, scaling, dropout=0.0, **kwargs):  # q, k float64 (b, h, s, hd')
    scores = (q @ k.transpose(-1, -2)) * scaling  # (b, h, s, t)
    s, t = scores.shape[-2:]
    dist = torch.arange(s)[:, None] + (t - s) - torch.arange(t)[None, :]  # (s, t)
    out = torch.softmax(scores.masked_fill(dist < 0, float("-inf")), -1) @ v.double()  # (b, h, s, hd')
    return out.transpose(1, 2).to(v.dtype), None  # (b, s, h, hd')

"""
ROUNDED_CHILD = child_with(ROUNDED_LADDER, "float64_attention")


def amplitudes_by_width(plan: dict, widths: list[int]) -> dict:
    """The planner's ladder for each rotary width R with PLAN's slopes and floors: the worst head's root sum
    of squares of the amplitudes (logits) and its ratio to R = 32's."""
    from ropebridge.checkpoint.config import AlibiSource
    from ropebridge.emulation import PlanRequest
    from ropebridge.emulation import plan as make_plan

    slopes = tuple(h["slope"] for h in plan["heads"])
    floors = tuple((h.get("ladder") or h)["floor"] for h in plan["heads"])  # (0.1 records kept it on the head)
    source = AlibiSource("bloom", len(slopes), plan["head_dim"], 8.0, slopes)
    scale = 1 / math.sqrt(plan["head_dim"])  # N, M are stated for the source's 1/sqrt(hd)
    out = {}
    for r in widths:
        p = make_plan(source, PlanRequest(window=plan["window"], dtype=plan["dtype"], strategy="ladder", rotary_dim=r,
                                          floor=floors))
        rss = [math.sqrt(sum((t.N**2 + t.M**2) * scale**2 for t in h.pairs)) for h in p.heads]
        out[r] = {"rss_worst_head": max(rss),
                  "approximation_error_worst_head": max(h.approximation_error for h in p.heads)}
    ref = out.get(32, out[widths[0]])["rss_worst_head"]
    for r in widths:
        out[r]["rss_over_r32"] = out[r]["rss_worst_head"] / ref
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="demo,demo-mpt,demo-falcon")
    p.add_argument("--contexts", default="2048")
    p.add_argument("--dtypes", default="bfloat16,float16")
    p.add_argument("--steps", default="1,0.5,0.25,0", help="lambda values: rounding steps in ulps of the dtype")
    p.add_argument("--rotary-dims", default="16,32,64", help="R for the amplitude comparison ('' to skip)")
    p.add_argument("--window", type=int, default=8192, help="the window the checkpoints are planned for")
    p.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "ropebridge-bench"))
    args = p.parse_args()
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    steps = [float(x) for x in args.steps.split(",")]
    widths = [int(x) for x in args.rotary_dims.split(",") if x]
    contexts = [int(x) for x in args.contexts.split(",")]
    rows, widths_out = [], {}
    # the same checkpoints as arch_floor.py's
    for case in floor_cases(cache, args.models.split(","), args.dtypes.split(","), contexts, args.window):
        key = f"{case.name} {case.dtype}"
        if widths and key not in widths_out:
            plan = json.loads((case.path / "ropebridge.json").read_text())["plan"]
            widths_out[key] = amplitudes_by_width(plan, widths)
        for lam in steps:
            os.environ["LADDER_STEP"] = repr(lam)
            case.runs[f"step {lam:g}"] = forward_in_child(case.path, case.dtype, case.ids, case.work, ROUNDED_CHILD)
        row = compare_case(case)
        floor = row["floor_max_abs_logit_err"]
        for w in case.runs:
            if f"{w}_max_abs_logit_err" in row:
                row[f"{w}_over_floor"] = row[f"{w}_max_abs_logit_err"] / floor
        rows.append(row)
        print({k: (f"{v:.3g}" if isinstance(v, float) else v) for k, v in row.items()
               if k.endswith(("over_floor", "max_abs_logit_err"))}, flush=True)
    cols = ["model", "dtype", "context", "floor_max_abs_logit_err", "arch_over_floor", "converted_over_floor",
            *[f"step {lam:g}_over_floor" for lam in steps]]
    print(table(rows, cols))
    if widths_out:
        print(table([{"model dtype": k, **{f"R={r} rss": v[r]["rss_worst_head"] for r in widths},
                      **{f"R={r} / R=32": v[r]["rss_over_r32"] for r in widths}} for k, v in widths_out.items()],
                    ["model dtype", *[f"R={r} rss" for r in widths], *[f"R={r} / R=32" for r in widths]]))
    print(f"wrote {save('rounding_budget', {'rows': rows, 'amplitudes_by_rotary_dim': widths_out})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
