"""The converted architecture's own floor: how close any positional emulation could come in a dtype.

    python -m benchmarks.arch_floor [--models demo,demo-mpt,demo-falcon] [--contexts 2048,8192]
                                    [--dtypes bfloat16,float16] [--target gpt-neox|nemotron]

``fidelity.py``'s floor is the *source* model in a dtype with attention and its bias exact. A converted
checkpoint differs from the source in more than its positional term: the attention scale 1/sqrt(hd) becomes
GPT-NeoX's 1/sqrt(hd + R), folded into the query weights (an irrational factor, so every query weight is
rounded once more), the residual stream is wider, and transformers' GPT-NeoX computes its ops in the dtype
its own way. The **architecture floor** measures that part alone: the converted checkpoint (planned and
calibrated exactly as ``fidelity.py`` converts it), loaded by transformers in the dtype, with its rotary dims
dropped and the exact ALiBi bias added in a float64 attention (``EXACT_ALIBI``). No emulation can do better
in that checkpoint; the emulation's own cost is converted / architecture floor.

Per model, dtype and context: max |Δlogit| and mean KL against the exact float64 ALiBi reference of the
source floor, the architecture floor and the converted model (transformers' default attention). Prints a
table and writes benchmarks/results/arch_floor.json.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

import torch

from benchmarks._common import calibration_text, save, started_as, table
from benchmarks.fidelity import (CHILD, DTYPES, TEXT_MODELS, build_sources, compare, convert_for, forward_in_child,
                                 tokens)

# The child of fidelity.py with one change: an attention that drops the R rotary dims of q and k and adds
# the exact ALiBi bias -m (i - j) (slopes from the plan in ropebridge.json), all in float64.
EXACT_ALIBI = """
import json
from transformers import AttentionInterface
plan = json.load(open(sys.argv[1] + "/ropebridge.json"))["plan"]
R = plan["rotary_dim"]
slopes = torch.tensor([h["slope"] for h in plan["heads"]], dtype=torch.float64)[:, None, None]  # (h, 1, 1)

def exact_alibi(module, q, k, v, mask, scaling, dropout=0.0, **kwargs):  # q, k, v: (b, h, s, hd')
    scores = (q.double()[..., R:] @ k.double()[..., R:].transpose(-1, -2)) * scaling  # (b, h, s, t)
    s, t = scores.shape[-2:]
    dist = (torch.arange(s)[:, None] + (t - s) - torch.arange(t)[None, :]).double()  # (s, t)
    scores = (scores - slopes * dist).masked_fill(dist < 0, float("-inf"))
    out = torch.softmax(scores, -1) @ v.double()  # (b, h, s, hd')
    return out.transpose(1, 2).to(v.dtype), None  # (b, s, h, hd')

"""


def child_with(code: str, attention: str) -> str:
    """fidelity.py's child with CODE run before the model loads, and the model loaded with CODE's attention
    function named ATTENTION (registered with transformers' ``AttentionInterface``)."""
    head, body = CHILD.split("model = ", 1)
    register = f"""
AttentionInterface.register("{attention}", {attention})
_load = T.AutoModelForCausalLM.from_pretrained
T.AutoModelForCausalLM.from_pretrained = lambda *a, **k: _load(*a, attn_implementation="{attention}", **k)
"""
    return head + code + register + "model = " + body


ARCH_CHILD = child_with(EXACT_ALIBI, "exact_alibi")


class FloorCase(NamedTuple):
    """One (model, dtype, context) of the real-text models: the converted checkpoint PATH, the token ids
    (s,), the exact float64 reference hidden state REF (s, D), the float64 head (V, D), a temporary WORK
    directory for child runs and the three runs every row compares (``forward_in_child``'s form): ``floor``
    (the source in the dtype, ``fidelity.py``'s), ``arch`` (the architecture floor) and ``converted``."""

    name: str
    dtype: str
    context: int
    path: Path
    ids: torch.Tensor
    ref: torch.Tensor
    head64: torch.Tensor
    work: Path
    runs: dict


def floor_cases(cache: Path, names: list[str], dtypes: list[str], contexts: list[int], window: int,
                target: str = "gpt-neox"):
    """Yield a ``FloorCase`` per real-text model, context and dtype, its WORK directory alive until the next.
    Each model is converted per dtype as ``fidelity.py`` converts (planned for WINDOW, calibrated on the
    model's calibration text) onto TARGET, to ``arch-floor-{name}-{dtype}-{window}`` in CACHE (``-{target}``
    appended for a target other than gpt-neox)."""
    from ropebridge.checkpoint.model import SourceModel
    from ropebridge.checkpoint.reference import reference_hidden

    if any(n not in TEXT_MODELS for n in names):
        raise SystemExit(f"real-text models only: {', '.join(TEXT_MODELS)}")
    for name, src in build_sources(cache, names).items():
        text = cache / f"calibration-{name}.txt"
        text.write_text(calibration_text(src))
        suffix = "" if target == "gpt-neox" else f"-{target}"
        dst = {dtype: cache / f"arch-floor-{name}-{dtype}-{window}{suffix}" for dtype in dtypes}
        for dtype, path in dst.items():
            convert_for(src, path, dtype, window, text, target)
        model = SourceModel(src)
        for c in contexts:
            ids = tokens(name, src, c)
            ref = reference_hidden(model, ids)
            head64 = model.head_rows(0, model.info.vocab_size)
            for dtype, path in dst.items():
                with tempfile.TemporaryDirectory(dir=cache) as tmp:
                    work = Path(tmp)
                    runs = {"floor": {"hidden": reference_hidden(model, ids, round_to=DTYPES[dtype]),
                                      "head": head64.to(DTYPES[dtype]).double()},
                            "arch": forward_in_child(path, dtype, ids, work, ARCH_CHILD),
                            "converted": forward_in_child(path, dtype, ids, work)}
                    yield FloorCase(name, dtype, c, path, ids, ref, head64, work, runs)


def compare_case(case: FloorCase) -> dict:
    """``fidelity.compare`` of the case's runs, as a row naming model, dtype and context."""
    return {"model": case.name, "dtype": case.dtype, "context": case.context,
            **compare(case.name, case.runs, case.dtype, case.ids, case.ref, case.head64)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="demo,demo-mpt,demo-falcon")
    p.add_argument("--contexts", default="2048,8192")
    p.add_argument("--dtypes", default="bfloat16,float16")
    p.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "ropebridge-bench"))
    p.add_argument("--target", default="gpt-neox", help="gpt-neox (arch_floor.json) or nemotron "
                   "(arch_floor_nemotron.json)")
    args = p.parse_args()
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    contexts = [int(c) for c in args.contexts.split(",")]
    rows = []
    # as fidelity.py converts: planned for the longest context
    for case in floor_cases(cache, args.models.split(","), args.dtypes.split(","), contexts, max(contexts),
                            args.target):
        row = {**compare_case(case), "target": args.target}
        for w in ("arch", "converted"):
            row[f"{w}_over_floor"] = row[f"{w}_max_abs_logit_err"] / row["floor_max_abs_logit_err"]
        row["converted_over_arch"] = row["converted_max_abs_logit_err"] / row["arch_max_abs_logit_err"]
        rows.append(row)
        print({k: (f"{v:.3g}" if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
    cols = ["model", "dtype", "context", "floor_max_abs_logit_err", "arch_max_abs_logit_err",
            "converted_max_abs_logit_err", "arch_over_floor", "converted_over_floor", "converted_over_arch",
            "floor_mean_kl", "arch_mean_kl", "converted_mean_kl"]
    print(table(rows, cols))
    name = "arch_floor" if args.target == "gpt-neox" else f"arch_floor_{args.target}"
    print(f"wrote {save(name, {'command': started_as(), 'rows': rows})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
