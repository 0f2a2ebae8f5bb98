"""The Nemotron ladder against the GPT-NeoX ladder, segment by segment: is a difference in max |Δlogit| larger
than the statistic's own spread?

    python -m benchmarks.target_spread [--models demo,demo-mpt,demo-falcon] [--dtypes bfloat16,float16]
                                       [--segments 4] [--length 2048] [--window 8192]

Both targets converted as ``fidelity.py`` converts them (the same plan: calibrated on the last 10,000
characters of the held-out text, planned for WINDOW), each run by transformers in the dtype on SEGMENTS
consecutive stretches of LENGTH held-out tokens (each from position 0), against the exact float64 ALiBi
forward pass of the source: max |Δlogit| and mean KL per segment, their ratio Nemotron / GPT-NeoX, and the
max over all segments. ``fidelity.py``'s rows are segment 0. Prints a table and writes
benchmarks/results/target_spread.json.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch
from benchmarks._common import calibration_text, save, started_as, table
from benchmarks.fidelity import DTYPES, convert_for

TARGETS = ("gpt-neox", "nemotron")


def segment_errors(models: dict, ref_logits: torch.Tensor, ids: torch.Tensor) -> dict:
    """Max |Δlogit| and mean KL(exact || model) of each target's model on IDS (s,) against REF_LOGITS (s, V)."""
    out = {}
    ref_logp = torch.log_softmax(ref_logits, -1)  # (s, V)
    with torch.no_grad():
        for target, model in models.items():
            logits = model(ids[None]).logits[0].double()  # (s, V)
            logp = torch.log_softmax(logits, -1)
            out[target] = {"max_abs_logit_err": (logits - ref_logits).abs().max().item(),
                           "mean_kl": (ref_logp.exp() * (ref_logp - logp)).sum(-1).mean().item()}
    return out


def main() -> int:
    import transformers as T

    from ropebridge.checkpoint.model import SourceModel
    from ropebridge.checkpoint.reference import reference_hidden
    from ropebridge.demo import data_dir

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="demo,demo-mpt,demo-falcon")
    p.add_argument("--dtypes", default="bfloat16,float16")
    p.add_argument("--segments", type=int, default=4)
    p.add_argument("--length", type=int, default=2048)
    p.add_argument("--window", type=int, default=8192)
    p.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "ropebridge-bench"))
    args = p.parse_args()
    T.logging.set_verbosity_error()
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.models.split(","):
        src = data_dir(name)
        text = cache / f"calibration-{name}.txt"
        text.write_text(calibration_text(src))
        ids_all = T.AutoTokenizer.from_pretrained(src)((src / "heldout.txt").read_text())["input_ids"]
        if len(ids_all) < args.segments * args.length:
            raise SystemExit(f"{name}: {len(ids_all)} held-out tokens, fewer than {args.segments} x {args.length}")
        source = SourceModel(src)
        head = source.head_rows(0, source.info.vocab_size)  # (V, D) float64
        for dtype in args.dtypes.split(","):
            models = {}
            for target in TARGETS:
                dst = cache / f"spread-{name}-{target}-{dtype}-{args.window}"
                convert_for(src, dst, dtype, args.window, text, target)
                models[target] = T.AutoModelForCausalLM.from_pretrained(dst, dtype=DTYPES[dtype]).eval()
            for seg in range(args.segments):
                ids = torch.tensor(ids_all[seg * args.length:(seg + 1) * args.length])
                errors = segment_errors(models, reference_hidden(source, ids) @ head.T, ids)
                row = {"model": name, "dtype": dtype, "segment": seg,
                       **{f"{t}_{k}": v for t, e in errors.items() for k, v in e.items()}}
                row["ratio_max"] = row["nemotron_max_abs_logit_err"] / row["gpt-neox_max_abs_logit_err"]
                row["ratio_kl"] = row["nemotron_mean_kl"] / row["gpt-neox_mean_kl"]
                rows.append(row)
                print({k: (f"{v:.3g}" if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
    print(table(rows, ["model", "dtype", "segment", "gpt-neox_max_abs_logit_err", "nemotron_max_abs_logit_err",
                       "ratio_max", "ratio_kl"]))
    payload = {"command": started_as(), "length": args.length, "window": args.window, "rows": rows}
    print(f"wrote {save('target_spread', payload)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
