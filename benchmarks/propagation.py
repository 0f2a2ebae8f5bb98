"""How a head's score error reaches the logits: every verified conversion's measured max |logit error| against the
plan's predicted worst score error over the positions verify compared, and (``--inject``) the exact float64
reference run again with the plan's score error injected into its attention scores.

    python -m benchmarks.propagation [--models demo,demo-mpt,demo-falcon,demo-baichuan,demo-jais]
                                     [--dtypes bfloat16,float16] [--inject]

For every half-precision row of ``benchmarks/results/verdicts.json`` and ``verdicts_8k.json`` (model, dtype,
window W, CONTEXT tokens of held-out text), the default plan for W (``ropebridge plan --json``) gives the
prediction over the window and over the CONTEXT positions verify compared (``cross_dtype.predicted_in``);
measured / predicted is what ``limit.LOGIT_FACTOR`` must cover; ``limit`` is the one verify judged by (its row).

``--inject`` runs the reference on those CONTEXT tokens as it is and with an error added to head h's score of
every (query i, key j) before the softmax, and reports the max |logit difference| between the two passes:

- ``plan``: what the plan says the conversion's score error is: its bias in exact arithmetic less ALiBi's,
  ``f_h(d) - δ_h + m_h d`` at d = i - j (the sine error for a single pair), plus the rounding as the error model
  states it, independent Gaussian draws of standard deviation ``rounding_error_h / sqrt(2 ln n)``
  (``ladder_fit.extreme_factor``: the plan's rounding is the extreme of n such draws);
- ``sign``: the head's predicted worst error e_h with a random sign, at every (i, j).

Without ``--inject`` the injected numbers stored in the results file are kept. Writes
benchmarks/results/propagation.json.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from benchmarks._common import RESULTS, save, started_as, table

NOISES = ("plan", "sign")
KEY = ("model", "dtype", "window", "context")


def default_plan(src: Path, dtype: str, window: int) -> dict:
    """The default plan of ``src`` for ``dtype`` and ``window`` (``ropebridge plan --json``)."""
    out = subprocess.run([sys.executable, "-m", "ropebridge", "plan", "--model", str(src), "--dtype", dtype,
                          "--window", str(window), "--json"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def score_errors(plan: dict, context: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per head: the plan's signed score error in exact arithmetic at every distance 0..context ``(h, context)``,
    and the standard deviation of its rounding ``(h,)`` (module doc), float64."""
    from ropebridge.emulation.ladder_fit import extreme_factor

    scale = 1 / math.sqrt(plan["head_dim"])
    d = np.arange(context, dtype=np.float64)
    pattern, sigma = [], []
    for h in plan["heads"]:
        theta = np.array([p["theta"] for p in h["pairs"]])
        ang = np.multiply.outer(d, theta)  # (context, P)
        bias = scale * (np.cos(ang) @ np.array([p["M"] for p in h["pairs"]])
                        - np.sin(ang) @ np.array([p["N"] for p in h["pairs"]]))  # (context,)
        shift = (h.get("ladder") or {}).get("shift", 0.0)
        pattern.append(bias - shift + h["slope"] * d)
        sigma.append(h["rounding_error"] / extreme_factor(plan["window"]))
    return torch.tensor(np.array(pattern)), torch.tensor(sigma)


def with_error(slopes: list[float], error):
    """A ``reference_states`` observer that replaces the weights ``(b, h, block, t)`` with the softmax of the
    scores (content less ``slopes`` times the distance) plus ``error(start, dist, weights)`` ``(b, h, block, t)``;
    future keys stay at -inf."""
    m = torch.tensor(slopes, dtype=torch.float64)[None, :, None, None]  # (1, h, 1, 1)

    def inject(layer: int, start: int, content, dist, weights: torch.Tensor) -> None:
        logits = (content - m * dist[:, None] + error(start, dist, weights)).masked_fill(dist[:, None] < 0, -math.inf)
        weights.copy_(torch.softmax(logits, -1))

    return inject


def injector(plan: dict, context: int, noise: str, seed: int):
    """``with_error`` of the injected error (``noise``, module doc)."""
    pattern, sigma = score_errors(plan, context)  # (h, context), (h,)
    worst = torch.tensor([h["predicted_error"] for h in plan["heads"]], dtype=torch.float64)  # (h,)
    gen = torch.Generator().manual_seed(seed)

    def error(start: int, dist, weights: torch.Tensor) -> torch.Tensor:
        if noise == "plan":
            err = pattern[:, dist.clamp(min=0).long()].permute(1, 0, 2, 3)  # (b, h, block, t)
            return err + sigma[None, :, None, None] * torch.randn(weights.shape, generator=gen, dtype=torch.float64)
        xi = torch.randint(0, 2, weights.shape, generator=gen).to(torch.float64) * 2 - 1
        return worst[None, :, None, None] * xi

    return with_error([h["slope"] for h in plan["heads"]], error)


class HeldOut:
    """Model ``name``'s exact float64 reference on its held-out text, tokenized as benchmarks/verdicts.py gives it to
    verify (its first 30,000 characters)."""

    def __init__(self, name: str):
        from transformers import AutoTokenizer

        from ropebridge.checkpoint.model import SourceModel
        from ropebridge.demo import data_dir

        src = data_dir(name)
        self.model = SourceModel(src)
        self.ids = AutoTokenizer.from_pretrained(src)((src / "heldout.txt").read_text()[:30_000])["input_ids"]
        self.head = self.model.head_rows(0, self.model.info.vocab_size)  # (V, D) float64

    def tokens(self, context: int) -> torch.Tensor:
        """The first ``context`` tokens ``(1, s)``."""
        return torch.tensor(self.ids[:context])[None]

    def logits(self, ids: torch.Tensor, observe=None) -> torch.Tensor:
        """The reference's logits ``(s, V)`` on ``ids`` ``(1, s)``, with ``observe`` (``with_error``) if given."""
        from ropebridge.checkpoint.reference import Blocks, reference_states

        return reference_states(self.model, ids, blocks=Blocks(256), observe=observe)[0] @ self.head.T


def verified_rows(models: list[str], dtypes: list[str]) -> list[dict]:
    """The verified conversions of ``models`` in ``dtypes``: the rows of the verdict tables, by ``KEY``."""
    out = {}
    for name in ("verdicts", "verdicts_8k"):
        for r in json.loads((RESULTS / f"{name}.json").read_text())["rows"]:
            if r["model"] in models and r["dtype"] in dtypes:
                out[tuple(r[k] for k in KEY)] = r
    return [out[k] for k in sorted(out)]


def injected(name: str, cases: list[dict], plans: dict, seed: int) -> dict:
    """The injected max |logit difference| per noise for ``cases`` of model ``name``, by ``KEY``."""
    ref = HeldOut(name)
    out = {}
    for context in sorted({c["context"] for c in cases}):
        ids = ref.tokens(context)  # (1, s)
        t0 = time.perf_counter()
        clean = ref.logits(ids)  # (s, V)
        seconds = time.perf_counter() - t0
        for c in (c for c in cases if c["context"] == context):
            plan = plans[c["model"], c["dtype"], c["window"]]
            row = {"reference_s": seconds}
            for noise in NOISES:
                hit = ref.logits(ids, injector(plan, ids.shape[1], noise, seed))
                row[f"injected_{noise}"] = float((hit - clean).abs().max())
            out[tuple(c[k] for k in KEY)] = row
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="demo,demo-mpt,demo-falcon,demo-baichuan,demo-jais")
    p.add_argument("--dtypes", default="bfloat16,float16")
    p.add_argument("--inject", action="store_true", help="run the injected reference passes again")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    from ropebridge.demo import data_dir
    from ropebridge.emulation.cross_dtype import predicted_in
    from ropebridge.emulation.plan import EmulationPlan
    from ropebridge.limit import LOGIT_FACTOR

    cases = verified_rows(args.models.split(","), args.dtypes.split(","))
    plans = {}
    for c in cases:
        key = (c["model"], c["dtype"], c["window"])
        if key not in plans:
            plans[key] = default_plan(data_dir(c["model"]), c["dtype"], c["window"])
    stored = {}
    path = RESULTS / "propagation.json"
    if path.exists():
        stored = {tuple(r[k] for k in KEY): r for r in json.loads(path.read_text())["rows"]}
    if args.inject:
        for name in args.models.split(","):
            stored.update(injected(name, [c for c in cases if c["model"] == name], plans, args.seed))
    rows = []
    for c in cases:
        key = tuple(c[k] for k in KEY)
        plan = EmulationPlan.from_dict(plans[key[:3]])
        row = dict(zip(KEY, key))
        row["predicted_window"] = predicted_in(plan, c["dtype"])
        row["predicted"] = predicted_in(plan, c["dtype"], positions=c["context"])
        row["measured"] = c["measured"]
        row["measured_over_predicted"] = c["measured"] / row["predicted"]
        row["limit"] = c["limit"]  # verify's own, judged with the prediction over the same positions
        row["within"] = row["measured"] <= row["limit"]
        found = stored.get(key, {})
        if "reference_s" in found:
            row["reference_s"] = found["reference_s"]
        for noise in NOISES:
            if f"injected_{noise}" in found:
                row[f"injected_{noise}"] = found[f"injected_{noise}"]
                row[f"measured_over_{noise}"] = c["measured"] / found[f"injected_{noise}"]
        rows.append(row)
    ratios = [r["measured_over_predicted"] for r in rows]
    print(table(rows, [*KEY, "predicted_window", "predicted", "measured", "measured_over_predicted", "limit",
                       "injected_plan", "measured_over_plan"]))
    print(f"measured / predicted over the positions compared: {min(ratios):.3g} to {max(ratios):.3g}; "
          f"LOGIT_FACTOR {LOGIT_FACTOR:g}")
    print(f"wrote {save('propagation', {'command': started_as(), 'rows': rows})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
