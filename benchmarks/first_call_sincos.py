"""torch's first sin/cos on a CPU worker thread, and what it does to a conversion.

    python -m benchmarks.first_call_sincos [--processes 16] [--model-processes 8] [--dtypes float32,bfloat16]

1. In ``--processes`` fresh processes (torch's default threads), the rotary table a float32 conversion's target
   builds, ``cat(p theta, p theta).cos()`` for positions p < 8192 and theta = (1, 2^-25) (rotary_dim 4, base
   2^50: the dummy pair and the exact pair), is computed twice. Reported: how often the first call differs from
   the second, on how many rows, and the largest error of the first call's cosines of the exact pair's angles
   (p 2^-25 <= 2^-12, whose float32 cosine is 1) and of the dummy pair's (p radians), against float64; the same
   with sin as the first call; then both in as many processes that first compute ``read_on_use.warm_threads``'s
   cosine of one element (``warmed``).
2. In ``--model-processes`` fresh processes per dtype (``--dtypes``), each of which first computes the exact
   float64 reference on 8192 tokens of the Falcon-RW demo's held-out text (other torch work, as in an evaluation),
   the demo converted for that dtype and an 8192-token window runs its first forward on those tokens, then a
   second; each is compared with the reference (max |logit error|; verify's limit in float32 is 1e-3), and the
   two with each other.

The exact pair makes the logit ``N (cos(theta i) sin(theta j) - sin(theta i) cos(theta j))`` with N theta ~
m sqrt(hd'): an error e in cos(theta i) costs N e sin(theta j) ~ m sqrt(hd') e j, so the pair needs the cosine
exact; a ladder's tables are rounded to the dtype after, where an error in float32 can move an entry by an ulp.
Writes benchmarks/results/first_call_sincos.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks._common import save, table

KINDS = ("fresh-cos", "fresh-sin", "warmed-cos", "warmed-sin")

TABLE_CHECK = r"""
import json, sys, torch
kind = sys.argv[1]
if kind.startswith("warmed"):
    torch.cos(torch.ones(1))  # read_on_use.warm_threads
f = torch.sin if kind.endswith("sin") else torch.cos
inv = torch.tensor([1.0, 2.0 ** -25])
freqs = torch.arange(8192)[None, :, None].float() * inv  # (1, p, 2)
emb = torch.cat((freqs, freqs), dim=-1)  # (1, p, 4), as transformers' rotary embedding builds it
first, second, exact = f(emb), f(emb), f(emb.double())
print(json.dumps({"process": kind, "rows_differing": int((first != second).any(-1).sum()),
                  "exact_pair_error": float((first[..., 1].double() - exact[..., 1]).abs().max()),
                  "dummy_pair_error": float((first[..., 0].double() - exact[..., 0]).abs().max()),
                  "threads": torch.get_num_threads()}))
"""

MODEL_CHECK = r"""
import json, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from ropebridge.checkpoint.model import SourceModel
from ropebridge.checkpoint.reference import Blocks, reference_states
src = SourceModel(sys.argv[2])
text = open(sys.argv[2] + "/heldout.txt").read()[:30_000]
ids = torch.tensor(AutoTokenizer.from_pretrained(sys.argv[2])(text)["input_ids"][:8192])[None]
exact = reference_states(src, ids, blocks=Blocks(256))[0] @ src.head_rows(0, src.info.vocab_size).T  # (s, V)
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=getattr(torch, sys.argv[3]))
with torch.no_grad():
    first, second = (model(ids).logits[0].double() for _ in range(2))  # (s, V) each
print(json.dumps({"dtype": sys.argv[3], "first_forward": float((first - exact).abs().max()),
                  "second_forward": float((second - exact).abs().max()),
                  "first_vs_second": float((first - second).abs().max())}))
"""


def run(code: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--processes", type=int, default=16)
    p.add_argument("--model-processes", type=int, default=8)
    p.add_argument("--dtypes", default="float32,bfloat16")
    args = p.parse_args()
    from ropebridge.demo import data_dir

    tables = [run(TABLE_CHECK, kind) for kind in KINDS for _ in range(args.processes)]
    print(table(tables, list(tables[0])))
    src = data_dir("demo-falcon")
    models = []
    for dtype in args.dtypes.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            dst = Path(tmp) / "dst"
            subprocess.run([sys.executable, "-m", "ropebridge", "convert", str(src), str(dst), "--dtype", dtype,
                            "--window", "8192"], check=True, capture_output=True)
            models += [run(MODEL_CHECK, str(dst), str(src), dtype) for _ in range(args.model_processes)]
    print(table(models, list(models[0])))
    for kind in KINDS:
        bad = [t for t in tables if t["process"] == kind and t["rows_differing"]]
        worst = f"; the exact pair's values off by up to {max(t['exact_pair_error'] for t in bad):.3g}" if bad else ""
        print(f"{kind}: the first call differs from the second in {len(bad)} of {args.processes} processes{worst}")
    for dtype in args.dtypes.split(","):
        rows = [m for m in models if m["dtype"] == dtype]
        first, second = [m["first_forward"] for m in rows], [m["second_forward"] for m in rows]
        moved = [m["first_vs_second"] for m in rows if m["first_vs_second"]]
        print(f"Falcon-RW demo, {dtype}, 8K: first forward {min(first):.3g} to {max(first):.3g} from exact, second "
              f"{min(second):.3g} to {max(second):.3g}; the first differs from the second in {len(moved)} of "
              f"{len(rows)} processes" + (f", by up to {max(moved):.3g}" if moved else ""))
    payload = {"tables": tables, "rows": models}
    print(f"wrote {save('first_call_sincos', payload)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
