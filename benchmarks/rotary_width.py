"""The ladder's rotary width per window: R = 16 beside R = 32 on the real-text models, against the exact float64
ALiBi reference, with the plan's prediction and tolerance.

    python -m benchmarks.rotary_width [--models demo,demo-mpt] [--windows 2048,4096,8192] [--widths 16,32]
                                      [--dtypes bfloat16,float16]

Why: the KV cache grows with the served head dim hd + R. On vLLM (its CPU attention's sizes) a head of 64 serves
at 96 with R = 32 (a KV budget holds 0.67x the sequences) and at 80 with R = 16 (0.8x); the planner takes R >= 32
(``emulation.ladder.MIN_ROTARY_DIM``). Per model (the embedded BLOOM, MPT, Falcon-RW, Baichuan and Jais, heads of
32), window W, dtype and width R: ``ropebridge convert SRC DST --dtype D --window W --rotary-dim R --accept-error``
(the defaults otherwise; ``--accept-error`` so that a plan predicted above the tolerance is measured too, and
marked), the converted model run by transformers on the first W tokens of the held-out text (the text repeated
where it is shorter: never at 8K), against the exact reference: max |Δlogit|, mean KL, perplexity; beside the
plan's worst predicted error, its tolerance and verify's limit over the window (convert's ``verify_limit``).

Writes benchmarks/results/rotary_width.json and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks._common import save, started_as, table
from benchmarks.fidelity import TEXT_MODELS, build_sources, compare, forward_in_child, tokens


def convert(src: Path, dst: Path, dtype: str, window: int, width: int) -> dict:
    proc = subprocess.run([sys.executable, "-m", "ropebridge", "convert", str(src), str(dst), "--dtype", dtype,
                           "--window", str(window), "--rotary-dim", str(width), "--accept-error", "--json",
                           "--force"], check=True, capture_output=True, text=True)
    return json.loads(proc.stdout)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(TEXT_MODELS))
    p.add_argument("--windows", default="2048,4096,8192")
    p.add_argument("--widths", default="16,32")
    p.add_argument("--dtypes", default="bfloat16,float16")
    p.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "ropebridge-bench"))
    args = p.parse_args()
    from ropebridge.checkpoint.model import SourceModel
    from ropebridge.checkpoint.reference import reference_hidden

    sources = build_sources(Path(args.cache), args.models.split(","))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name, src in sources.items():
            model = SourceModel(src)
            head64 = model.head_rows(0, model.info.vocab_size)
            for window in map(int, args.windows.split(",")):
                ids = tokens(name, src, window)
                ref_hidden = reference_hidden(model, ids)  # (s, D) float64
                for dtype in args.dtypes.split(","):
                    for width in map(int, args.widths.split(",")):
                        dst = work / f"{name}-{dtype}-{window}-{width}"
                        summary = convert(src, dst, dtype, window, width)
                        plan = json.loads((dst / "ropebridge.json").read_text())["plan"]
                        res = compare(name, {"converted": forward_in_child(dst, dtype, ids, work)}, dtype, ids,
                                      ref_hidden, head64)
                        predicted = summary["worst_predicted_error"]
                        limit = summary["verify_limit"]  # convert's statement: over the window, no baseline
                        row = {"model": name, "window": window, "dtype": dtype, "rotary_dim": width,
                               "served_head_dim": plan["head_dim"] + width, "predicted": predicted,
                               "tolerance": plan["tolerance"], "meets_tolerance": plan["meets_tolerance"],
                               "limit": limit, "measured": res["converted_max_abs_logit_err"],
                               "mean_kl": res["converted_mean_kl"], "ppl": res["converted_ppl"],
                               "ppl_exact": res["reference_ppl"],
                               "ppl_rel": res["converted_ppl"] / res["reference_ppl"] - 1}
                        row["within_limit"] = row["measured"] <= limit
                        rows.append(row)
                        print(table([row], list(row)), flush=True)
                        subprocess.run(["rm", "-rf", str(dst)], check=True)
    cols = ["model", "window", "dtype", "rotary_dim", "predicted", "tolerance", "measured", "limit", "mean_kl",
            "ppl_rel"]
    print(table(rows, cols))
    out = save("rotary_width", {"command": started_as(), "load_avg": os.getloadavg()[0],
                                "rows": rows})
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
