"""Fidelity at long windows: the default conversion against the exact float64 ALiBi reference at 16K to 128K.

    python -m benchmarks.long_window [--models demo,demo-mpt] [--windows 16384,32768,65536,131072]
                                     [--dtypes float32,bfloat16] [--merge]
    python -m benchmarks.long_window --table

For every model, window W and dtype: ``ropebridge convert SRC DST --dtype D --window W`` (the defaults, nothing
calibrated), then, on W tokens of real text,
- perplexity of the converted model (transformers, in D) and of the exact reference
  (``checkpoint.reference.reference_hidden``, float64, blockwise attention), over the W - G real tokens;
- max |Δlogit| and mean KL(reference || converted) over those positions, a block of positions at a time
  (``fidelity.compare``);
- greedy at the end of the window: the converted model continues the W - G real tokens by G tokens
  (``generate``, greedy, its KV cache), and the reference's argmax is read at each of those G steps given the same
  prefix (teacher-forced: if all G agree, the reference's own greedy continuation is the same); the count of
  leading tokens that agree is reported;
- the time of each stage.

Text: the demo models' held-out documents, rebuilt from the corpus they came from (Debian's python3.11-doc,
every 25th ``.rst.txt`` source in sorted path order, as ``scripts/train_demo_model.py`` holds them out: 89,882
tokens with this tokenizer, none trained on), joined as the training script joins them; for a window longer than that
the same tokens follow again from the start. The repeat begins 89,882 tokens back, where the flattest head's bias
(m = 2^-8 for 6 heads) is below -350: exact ALiBi gives it no weight, and a conversion that leaked weight there
would show in the perplexity.

Cost: the converted run's and the reference's times are fitted as a s + c s^2 (``cost_model``) on the two shortest
windows and checked against the longer ones; the fit on all of them gives the estimate at 2^20 tokens.
Writes benchmarks/results/long_window.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from benchmarks._common import RESULTS, save
from benchmarks._common import table as text_table
from benchmarks.fidelity import compare

GREEDY_TOKENS = 32
MODELS = {"demo": "demo (BLOOM)", "demo-mpt": "MPT, real text", "demo-falcon": "Falcon-RW, real text"}
CHILD = """
import sys, time, torch, transformers as T
path, dtype, ids_file, out, n = sys.argv[1:]
model = T.AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)).eval()
prompt = torch.load(ids_file)[None]  # (1, s)
with torch.no_grad():
    t0 = time.perf_counter()
    new = model.generate(prompt, max_new_tokens=int(n), min_new_tokens=int(n), do_sample=False)[0, prompt.shape[1]:]
    t1 = time.perf_counter()
    base = getattr(model, "transformer", None) or getattr(model, "gpt_neox", None) or model.model
    hidden = base(prompt).last_hidden_state[0]  # (s, D) in dtype
    t2 = time.perf_counter()
torch.save({"new": new, "hidden": hidden, "head": model.get_output_embeddings().weight.detach(),
            "greedy_s": t1 - t0, "forward_s": t2 - t1}, out)
"""


def corpus_ids(cache: Path, tokenizer_dir: Path) -> list[int]:
    """The held-out documents' token ids (``scripts/train_demo_model.py``'s split), cached in CACHE."""
    path = cache / "heldout-ids.json"
    if path.exists():
        return json.loads(path.read_text())
    from scripts.train_demo_model import fetch_corpus
    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory(dir=cache) as work:
        _, held, _ = fetch_corpus(Path(work))
    ids = AutoTokenizer.from_pretrained(tokenizer_dir)("\n\n".join(held))["input_ids"]
    path.write_text(json.dumps(ids))
    return ids


def window_ids(ids: list[int], n: int) -> torch.Tensor:
    """The first N tokens of IDS, IDS again from the start where it is shorter."""
    return torch.tensor((ids * (n // len(ids) + 1))[:n])


def timed(fn, *args, **kw):
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    return out, time.perf_counter() - t0


def convert(src: Path, dst: Path, dtype: str, window: int) -> None:
    subprocess.run([sys.executable, "-m", "ropebridge", "convert", str(src), str(dst), "--dtype", dtype,
                    "--window", str(window), "--force", "--json"], check=True, capture_output=True)


def run_converted(dst: Path, dtype: str, prompt: torch.Tensor, work: Path) -> dict:
    """The converted model's greedy continuation and hidden states over PROMPT ``(s,)``, in a child process."""
    ids_file, out = work / "prompt.pt", work / "converted.pt"
    torch.save(prompt, ids_file)
    subprocess.run([sys.executable, "-c", CHILD, str(dst), dtype, str(ids_file), str(out), str(GREEDY_TOKENS)],
                   check=True, capture_output=True)
    return torch.load(out)


def query_block(heads: int, s: int) -> int:
    """Reference queries per block so one (h, block, s) float64 tensor stays within 256 MiB."""
    return max(16, min(512, (256 << 20) // (8 * heads * s)))


class Reference:
    """Exact float64 reference passes over ``prompt + tail``, kept by tail: the hidden states ``(s + G, D)``."""

    def __init__(self, model, prompt: torch.Tensor):
        from ropebridge.checkpoint.reference import Blocks

        self.model, self.prompt, self.passes, self.seconds = model, prompt, {}, []
        self.blocks = Blocks(queries=query_block(model.info.n_heads, len(prompt) + GREEDY_TOKENS))
        self.head = model.head_rows(0, model.info.vocab_size)  # (V, D) float64

    def hidden(self, tail: torch.Tensor) -> torch.Tensor:
        """The reference's hidden states ``(s + len(tail), D)`` over the prompt and TAIL ``(n,)``; a pass already run
        serves any tail it begins with (a row depends on the tokens before it only)."""
        from ropebridge.checkpoint.reference import reference_hidden

        key = tuple(tail.tolist())
        for seen, h in self.passes.items():
            if seen[: len(key)] == key:
                return h[: len(self.prompt) + len(key)]
        h, s = timed(reference_hidden, self.model, torch.cat([self.prompt, tail]), blocks=self.blocks)
        self.seconds.append(s)
        self.passes[key] = h
        return h

    def greedy_agreement(self, new: torch.Tensor) -> int:
        """Leading tokens of NEW ``(G,)`` that are the reference's argmax given the prompt and NEW before them.
        The prediction of step j reads the prompt and new[:j]: a pass over another tail decides the steps up to
        where the two tails part, so a second pass runs only when every step it decides agrees."""
        s, tokens = len(self.prompt), new.tolist()
        for seen, h in list(self.passes.items()) + [(None, None)]:
            if seen is None:  # no pass decides it: one over prompt + new[:-1] decides every step
                seen, h = tuple(tokens[:-1]), self.hidden(new[:-1])
            shared = next((j for j, (a, b) in enumerate(zip(seen, tokens)) if a != b), len(seen))
            steps = min(shared, len(seen)) + 1  # steps 0 … shared read only tokens the two tails share
            argmax = (h[s - 1: s - 1 + steps] @ self.head.T).argmax(-1).tolist()  # (steps,)
            for j, (a, b) in enumerate(zip(argmax, tokens)):
                if a != b:
                    return j
            if steps >= len(tokens):
                return len(tokens)
        raise AssertionError("unreachable: the last pass decides every step")


def fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(a, c) of t = a s + c s^2 through POINTS by least squares."""
    s = torch.tensor([p[0] for p in points], dtype=torch.float64)
    t = torch.tensor([p[1] for p in points], dtype=torch.float64)
    a = torch.stack([s, s * s], 1)
    sol = torch.linalg.lstsq(a, t[:, None]).solution[:, 0]
    return float(sol[0]), float(sol[1])


def cost_model(rows: list[dict]) -> dict:
    """Per model and dtype: the converted run's and the reference's seconds fitted as a s + c s^2 (attention is the
    s^2) on the two shortest windows, their prediction at every longer window beside the measurement, and the
    estimate at 2^20 tokens of the fit on every window, plus convert's time at the longest (it does not grow with
    s: the plan is the same few heads)."""
    out = {}
    for key in sorted({(r["model"], r["dtype"]) for r in rows}):
        mine = sorted((r for r in rows if (r["model"], r["dtype"]) == key), key=lambda r: r["window"])
        if len(mine) < 3:
            continue
        entry = {"fit_on": [r["window"] for r in mine[:2]], "one_million_s": mine[-1]["convert_s"]}
        for stage in ("converted_s", "reference_s"):
            pts = [(r["window"], r[stage]) for r in mine]
            a, c = fit(pts[:2])
            a_all, c_all = fit(pts)
            entry["one_million_s"] += a_all * 2**20 + c_all * 2**40
            entry[stage] = {"a": a_all, "c": c_all, "checked": [
                {"window": w, "predicted_s": a * w + c * w * w, "measured_s": t} for w, t in pts[2:]]}
        out[f"{key[0]} {key[1]}"] = entry
    return out


def markdown(rows: list[dict]) -> str:
    """The fidelity table: one row per model, dtype and window."""
    out = ["| model | dtype | window | max \\|Δlogit\\| | mean KL | perplexity converted / exact | perplexity Δ | "
           f"greedy = exact (of {GREEDY_TOKENS}) | convert | converted run | exact reference |",
           "|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
    for r in sorted(rows, key=lambda r: (list(MODELS).index(r["model"]), r["window"], r["dtype"] != "float32")):
        out.append(f"| {MODELS.get(r['model'], r['model'])} | {r['dtype']} | {r['window']:,} | "
                   f"{r['max_abs_logit_err']:.2g} | {r['mean_kl']:.2g} | {r['converted_ppl']:.2f} / "
                   f"{r['reference_ppl']:.2f} | {100 * r['ppl_rel']:+.2g}% | {r['greedy_agree']} | "
                   f"{r['convert_s']:.0f} s | {r['converted_s']:.0f} s | {r['reference_s']:.0f} s |")
    return "\n".join(out)


def table(payload: dict) -> str:
    """The stored results (``payload``) as the docs' table (``markdown``)."""
    return markdown(payload["rows"])


def cost_table(payload: dict) -> str:
    """The stored results (``payload``) as the docs' cost table (``cost_markdown``)."""
    return cost_markdown(payload["rows"])


def cost_markdown(rows: list[dict]) -> str:
    """The cost table: each stage's fit a s + c s^2, its prediction against the measurement at the longer windows,
    and 2^20 tokens."""
    out = ["| model | dtype | stage | c (s per token²) | a (s per token) | predicted / measured at longer windows "
           "| 2^20 tokens, all stages |", "|---|---|---|---:|---:|---|---:|"]
    for key, entry in cost_model(rows).items():
        model, dtype = key.split(" ")
        for stage in ("converted_s", "reference_s"):
            fit_ = entry[stage]
            checks = ", ".join(f"{c['window'] // 1024}K: {c['predicted_s']:.0f} / {c['measured_s']:.0f} s"
                               for c in fit_["checked"])
            total = f"{entry['one_million_s'] / 3600:.1f} h" if stage == "reference_s" else ""
            out.append(f"| {MODELS.get(model, model)} | {dtype} | {stage.removesuffix('_s').replace('_', ' ')} | "
                       f"{fit_['c']:.3g} | {fit_['a']:.3g} | {checks} | {total} |")
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="demo,demo-mpt")
    p.add_argument("--windows", default="16384,32768,65536,131072")
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "ropebridge-bench"))
    p.add_argument("--merge", action="store_true", help="replace only the rows measured now in the results file")
    p.add_argument("--table", action="store_true", help="print the table of the stored results and exit")
    args = p.parse_args()
    path = RESULTS / "long_window.json"
    if args.table:
        stored = json.loads(path.read_text())["rows"]
        print(markdown(stored) + "\n\n" + cost_markdown(stored))
        return 0
    from ropebridge.checkpoint.model import SourceModel
    from ropebridge.demo import data_dir

    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    ids = corpus_ids(cache, data_dir("demo"))
    print(f"held-out text: {len(ids)} tokens", flush=True)
    old = json.loads(path.read_text())["rows"] if args.merge and path.exists() else []
    rows: list[dict] = []
    for name in args.models.split(","):
        src = data_dir(name)
        model = SourceModel(src)
        for window in (int(w) for w in args.windows.split(",")):
            n = window - GREEDY_TOKENS
            ref = Reference(model, window_ids(ids, n))
            fresh = []
            for dtype in args.dtypes.split(","):
                dst = cache / f"long-{name}-{dtype}-{window}"
                _, convert_s = timed(convert, src, dst, dtype, window)
                with tempfile.TemporaryDirectory(dir=cache) as work:
                    got = run_converted(dst, dtype, ref.prompt, Path(work))
                agree = ref.greedy_agreement(got["new"])
                h_ref = ref.hidden(torch.empty(0, dtype=torch.long))  # (n, D): the prompt's rows
                found = compare(name, {"converted": got}, dtype, ref.prompt, h_ref, ref.head)
                stats = {"max_abs_logit_err": found["converted_max_abs_logit_err"],
                         "mean_kl": found["converted_mean_kl"], "converted_ppl": found["converted_ppl"],
                         "reference_ppl": found["reference_ppl"]}
                fresh.append({"model": name, "dtype": dtype, "window": window, "prompt_tokens": n, **stats,
                              "ppl_rel": stats["converted_ppl"] / stats["reference_ppl"] - 1, "greedy_agree": agree,
                              "convert_s": convert_s, "converted_s": got["greedy_s"] + got["forward_s"],
                              "greedy_s": got["greedy_s"], "forward_s": got["forward_s"],
                              "load": os.getloadavg()[0]})
                print({k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in fresh[-1].items()}, flush=True)
            for row in fresh:  # every row needs one pass; a second ran only to decide a greedy step
                row.update(reference_s=ref.seconds[0], reference_passes=len(ref.seconds))
            rows += fresh
            del ref
            keys = {(r["model"], r["dtype"], r["window"]) for r in rows}  # saved after every window
            kept = [r for r in old if (r["model"], r["dtype"], r["window"]) not in keys] + rows
            saved = save("long_window", {"heldout_tokens": len(ids), "greedy_tokens": GREEDY_TOKENS, "rows": kept})
    print(text_table(kept, ["model", "dtype", "window", "max_abs_logit_err", "mean_kl", "converted_ppl",
                            "reference_ppl", "greedy_agree", "convert_s", "converted_s", "reference_s"]))
    print(cost_markdown(kept))
    print(f"wrote {saved}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
