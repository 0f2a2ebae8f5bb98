"""Fidelity across dtypes and contexts: native ALiBi and converted RoPE, each against an exact float64 ALiBi
reference (``ropebridge.checkpoint.reference``, blockwise attention).

    python -m benchmarks.fidelity [--quick] [--models demo,demo-mpt,demo-falcon,mpt,falcon,bloom560m]
                                  [--contexts 512,2048,8192] [--merge]
    python -m benchmarks.fidelity --models demo-baichuan --merge

For every model, dtype (float32, bfloat16, float16) and context: max |Δlogit| and mean KL(reference || model)
of the native model (transformers; Falcon: its default SDPA path, which rounds the ALiBi bias to bfloat16;
none for a remote-code family such as Baichuan, which transformers cannot build)
and of the converted model (converted *for that dtype*), their ratio (converted / native: <= 1 means the
conversion adds no more error than the native model's own rounding), in half precision the **floor** (the
source model in that dtype with attention and its bias exact, ``reference_hidden(round_to=…)``, as FA2 and
vLLM add ALiBi in float32) and converted / floor, and, on real text (the demo models: BLOOM, MPT and
Falcon-RW trained on the same corpus), the perplexity of each; on real text at 2048 also whether the converted
model's greedy continuation (transformers' ``generate``, ``GREEDY_TOKENS`` tokens) is the reference's. Logits are
compared a block of positions at a time (a 560M model's logits at 8K would take 16 GB). Prints a table and writes
benchmarks/results/fidelity.json (or fidelity_quick.json).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from benchmarks._common import RESULTS, bloom_560m_shaped, calibration_text, save
from benchmarks._common import table as text_table


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# The native models run transformers' eager attention, which materialises (h, s, s) scores: BLOOM-560M at 8K
# peaks at ~20 GB (benchmarks/speed_memory.py), the demo model at 32K would need ~25 GB per score tensor.
# Every model therefore runs in a child process (an out-of-memory kill costs only that row's native
# numbers), before the float64 reference is built; those long contexts are in the defaults but slow.
DEFAULT_CONTEXTS = {"demo": "512,2048,8192,32768", "demo-mpt": "512,2048,8192,32768",
                    "demo-falcon": "512,2048,8192,32768", "demo-baichuan": "2048,8192,32768",
                    "demo-jais": "2048,8192,32768", "mpt": "512,2048,8192", "falcon": "512,2048,8192",
                    "bloom560m": "512,2048,8192", "bloom-hd128": "2048,8192"}
# Real-text models shipped as package data (scripts/train_demo_model.py --family …): name -> data directory
TEXT_MODELS = {"demo": "demo", "demo-mpt": "demo-mpt", "demo-falcon": "demo-falcon", "demo-baichuan": "demo-baichuan",
               "demo-jais": "demo-jais"}
GREEDY_CONTEXT, GREEDY_TOKENS = 2048, 32
CHILD = """
import sys, torch, transformers as T
path, dtype, ids_file, out = sys.argv[1:]
model = T.AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)).eval()
base = getattr(model, "transformer", None) or getattr(model, "gpt_neox", None) or model.model
with torch.no_grad():
    hidden = base(torch.load(ids_file)[None]).last_hidden_state[0]  # (s, D) in dtype
torch.save({"hidden": hidden, "head": model.get_output_embeddings().weight.detach()}, out)
"""
GREEDY = """
import sys, torch, transformers as T
path, dtype, ids_file, out, n = sys.argv[1:]
model = T.AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)).eval()
ids = torch.load(ids_file)[None]
with torch.no_grad():
    new = model.generate(ids, max_new_tokens=int(n), do_sample=False, min_new_tokens=int(n))[0, ids.shape[1]:]
torch.save(new, out)
"""


def build_sources(cache: Path, names: list[str]) -> dict[str, Path]:
    from tests.pico import build

    from ropebridge.demo import data_dir

    out = {}
    for name in names:
        if name in TEXT_MODELS:
            out[name] = data_dir(TEXT_MODELS[name])
        elif name in ("mpt", "falcon"):
            path = cache / f"pico-{name}"
            if not (path / "config.json").exists():
                build(path, {"mpt": "mpt", "falcon": "falcon-rw"}[name])
            out[name] = path
        elif name == "bloom560m":
            out[name] = bloom_560m_shaped(cache / "bloom560m-shaped-24x250880")
        elif name == "bloom-hd128":  # BLOOM-1b7's heads (16 of 128, hidden 2048), 4 layers, random weights
            out[name] = bloom_560m_shaped(cache / "bloom-hd128-4x4096", layers=4, vocab=4096, hidden=2048, heads=16)
        else:
            raise SystemExit(f"unknown model {name}")
    return out


def tokens(name: str, src: Path, n: int) -> torch.Tensor:
    if name in TEXT_MODELS:
        from transformers import AutoTokenizer

        ids = AutoTokenizer.from_pretrained(src)((src / "heldout.txt").read_text())["input_ids"]
        if len(ids) < n:
            ids = (ids * (n // len(ids) + 1))
        return torch.tensor(ids[:n])
    vocab = 320 if name in ("mpt", "falcon") else 1000
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(0))


def convert_for(src: Path, dst: Path, dtype: str, window: int, calibration: Path | None,
                target: str | None = None, kernel: str = "any") -> None:
    """``ropebridge convert`` of SRC for DTYPE, WINDOW, TARGET (None: the family's default) and KERNEL with the
    defaults, calibrated on the text file CALIBRATION if given (a plan that misses its tolerance is refused, as
    for a user)."""
    subprocess.run([sys.executable, "-m", "ropebridge", "convert", str(src), str(dst), "--dtype", dtype,
                    "--window", str(window), *(["--target", target] if target else []), "--kernel", kernel,
                    "--json", "--force",
                    *(["--calibration-text", str(calibration)] if calibration is not None else [])],
                   check=True, capture_output=True)


def forward_in_child(path: Path, dtype: str, ids: torch.Tensor, work: Path, script: str = CHILD,
                     *extra: str) -> dict | torch.Tensor | str:
    """Last hidden state (s, D) and output head (V, D), in DTYPE, computed in a child process running SCRIPT
    (default ``CHILD``; ``GREEDY``: the greedy continuation, with the token count in EXTRA); or the reason it
    failed (an out-of-memory kill included)."""
    ids_file, out = work / "ids.pt", work / f"{path.name}-{dtype}.pt"
    torch.save(ids, ids_file)
    proc = subprocess.run([sys.executable, "-c", script, str(path), dtype, str(ids_file), str(out), *extra],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        if proc.returncode == -9:
            return "failed: killed (out of memory)"
        if proc.returncode < 0:
            return f"failed: killed by signal {-proc.returncode}"
        return "failed: " + (proc.stderr.strip().splitlines() or ["?"])[-1][:100]
    result = torch.load(out)
    out.unlink()
    return result


@torch.no_grad()
def compare(name, runs: dict, dtype, ids, ref_hidden, head64) -> dict:
    """RUNS: {"native"|"converted": forward_in_child's result}."""
    out = {}
    hidden, heads = {}, {}
    if "greedy_identical" in runs:
        out["greedy_identical"] = runs.pop("greedy_identical")
    for which, res in runs.items():
        if isinstance(res, str):
            out[which] = res
        else:
            hidden[which], heads[which] = res["hidden"], res["head"]
    n = ids.shape[0]
    stats = {w: {"max": 0.0, "kl": 0.0, "nll": 0.0} for w in hidden}
    ref_nll = 0.0
    for a in range(0, n, 256):
        b = min(n, a + 256)
        ref = ref_hidden[a:b] @ head64.T  # (block, V) float64
        lr = torch.log_softmax(ref, -1)
        tgt = ids[a + 1: b + 1]  # next tokens (one fewer in the last block)
        ref_nll += float(-lr[: len(tgt)].gather(1, tgt[:, None]).sum())
        for w in hidden:
            got = (hidden[w][a:b] @ heads[w].T).double()
            lg = torch.log_softmax(got, -1)
            s = stats[w]
            worst = float((got - ref).abs().max())  # NaN where either side is: kept, never a small number
            s["max"] = math.nan if math.isnan(worst) or math.isnan(s["max"]) else max(s["max"], worst)
            s["kl"] += float((lr.exp() * (lr - lg)).sum())
            s["nll"] += float(-lg[: len(tgt)].gather(1, tgt[:, None]).sum())
    for w, s in stats.items():
        out[f"{w}_max_abs_logit_err"] = s["max"]
        out[f"{w}_mean_kl"] = s["kl"] / n
        if name in TEXT_MODELS:
            out[f"{w}_ppl"] = math.exp(s["nll"] / (n - 1))
    if name in TEXT_MODELS:
        out["reference_ppl"] = math.exp(ref_nll / (n - 1))
    if "floor_max_abs_logit_err" in out and "converted_max_abs_logit_err" in out:
        out["ratio_floor"] = out["converted_max_abs_logit_err"] / max(out["floor_max_abs_logit_err"], 1e-30)
    if "native_max_abs_logit_err" in out and "converted_max_abs_logit_err" in out:
        out["ratio_max"] = out["converted_max_abs_logit_err"] / max(out["native_max_abs_logit_err"], 1e-30)
        out["ratio_kl"] = out["converted_mean_kl"] / max(out["native_mean_kl"], 1e-300)
    return out


@torch.no_grad()
def reference_greedy(model, ids: torch.Tensor, n: int) -> torch.Tensor:
    """The exact float64 reference's greedy continuation ``(n,)`` of ``ids`` ``(s,)``."""
    from ropebridge.checkpoint.reference import reference_hidden

    head64 = model.head_rows(0, model.info.vocab_size)
    out = ids
    for _ in range(n):
        out = torch.cat([out, (reference_hidden(model, out)[-1] @ head64.T).argmax()[None]])
    return out[len(ids):]


NAMES = {"demo": "demo (BLOOM)", "demo-mpt": "MPT, real text", "demo-falcon": "Falcon-RW, real text",
         "demo-baichuan": "Baichuan-13B arch., real text", "demo-jais": "Jais arch. (muP), real text",
         "bloom560m": "BLOOM-560M shape", "mpt": "MPT pico", "falcon": "Falcon-RW pico",
         "bloom-hd128": "BLOOM, 16 heads of 128"}


def table(payload: dict) -> str:
    """The stored results (``payload``) as the docs' table (``markdown``)."""
    return markdown(payload["rows"])


def markdown(rows: list[dict]) -> str:
    """The README's table: one row per model, dtype and context of the results file."""
    def num(row, key, fmt="{:.2g}"):
        v = row.get(key)
        return fmt.format(v) if isinstance(v, float) else "—"

    out = ["| model | dtype | context | native max err | floor max err | converted max err | converted / native "
           "| converted / floor | KL converted / native | perplexity native / floor / converted / exact "
           "| greedy = exact |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        reason = str(r.get("native", ""))
        native = (num(r, "native_max_abs_logit_err") if "native_max_abs_logit_err" in r
                  else "remote code" if "remote code" in reason
                  else "out of memory" if "memory" in reason or "allocate" in reason
                  else "refused (max_seq_len)" if "size of tensor" in reason else "failed")
        ppl = "" if r.get("reference_ppl") is None else " / ".join(
            num(r, k, "{:.2f}") for k in ("native_ppl", "floor_ppl", "converted_ppl", "reference_ppl"))
        label = NAMES.get(r["model"],
                          r["model"]) + ("" if r.get("target", "gpt-neox") == "gpt-neox" else f", {r['target']}")
        if r.get("kernel", "any") != "any":
            label += f", R = {r['rotary_dim']} (--kernel {r['kernel']})"
        out.append(f"| {label} | {r['dtype']} | {r['context']} | {native} | "
                   f"{num(r, 'floor_max_abs_logit_err')} | {num(r, 'converted_max_abs_logit_err')} | "
                   f"{num(r, 'ratio_max')} | {num(r, 'ratio_floor')} | {num(r, 'ratio_kl')} | {ppl} | "
                   f"{ {True: 'yes', False: 'no'}.get(r.get('greedy_identical'), '') } |")
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="demo, mpt and falcon picos at 512 and 2048")
    p.add_argument("--models", help="comma-separated: demo, demo-mpt, demo-falcon, demo-baichuan, demo-jais, "
                                    "mpt, falcon, bloom560m, bloom-hd128")
    p.add_argument("--contexts", help="comma-separated contexts (default: DEFAULT_CONTEXTS per model)")
    p.add_argument("--dtypes", default="float32,bfloat16,float16")
    p.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "ropebridge-bench"))
    p.add_argument("--target", help="the converted models' target (default: each family's, as convert chooses)")
    p.add_argument("--kernel", default="any", help="the kernel the head dim is chosen for (default any)")
    p.add_argument("--merge", action="store_true", help="replace only the rows measured now in the results file")
    p.add_argument("--table", action="store_true", help="print the README table of the stored results and exit")
    args = p.parse_args()
    if args.table:
        rows = json.loads((RESULTS / "fidelity.json").read_text())["rows"]
        order = list(NAMES)
        rows.sort(key=lambda r: (order.index(r["model"]) if r["model"] in order else 99, r["context"],
                                 ["float32", "bfloat16", "float16"].index(r["dtype"])))
        contexts = {int(c) for c in (args.contexts or "2048,8192,32768").split(",")}
        models = set(args.models.split(",")) if args.models else None
        print(markdown([r for r in rows if r["context"] in contexts and (models is None or r["model"] in models)]))
        return 0
    from ropebridge.checkpoint.config import FAMILIES
    from ropebridge.checkpoint.model import SourceModel
    from ropebridge.checkpoint.reference import reference_hidden

    names = (args.models or ("demo,mpt,falcon" if args.quick else
                             "demo,demo-mpt,demo-falcon,mpt,falcon,bloom560m")).split(",")
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    sources = build_sources(cache, names)
    rows = []
    for name, src in sources.items():
        asked = args.contexts or ("512,2048" if args.quick else DEFAULT_CONTEXTS[name])
        contexts = [int(c) for c in asked.split(",")]
        model = SourceModel(src)
        dtypes = args.dtypes.split(",")
        text = None
        if name in TEXT_MODELS:  # the ladder's floors measured on text the evaluation does not read (up to 8K)
            text = cache / f"calibration-{name}.txt"
            text.write_text(calibration_text(src))
        def converted(dtype):
            return cache / f"fidelity-{name}-{args.target or 'default'}-{args.kernel}-{dtype}-{max(contexts)}"

        for dtype in dtypes:  # converted afresh every run: the plan changes with the code
            convert_for(src, converted(dtype), dtype, max(contexts), text if dtype != "float32" else None,
                        args.target, args.kernel)
        for c in contexts:
            ids = tokens(name, src, c)
            with tempfile.TemporaryDirectory(dir=cache) as work:
                # natives first, the float32 one while this process holds nothing large
                runs = {dtype: {} for dtype in dtypes}
                for which in ("native", "converted"):
                    for dtype in dtypes:
                        if which == "native" and FAMILIES[model.info.family].attention is None:
                            runs[dtype][which] = f"remote code: transformers has no {model.info.family} class"
                            continue
                        path = src if which == "native" else converted(dtype)
                        runs[dtype][which] = forward_in_child(path, dtype, ids, Path(work))
                greedy = {}
                if name in TEXT_MODELS and c == GREEDY_CONTEXT:
                    for dtype in dtypes:
                        greedy[dtype] = forward_in_child(converted(dtype), dtype, ids, Path(work), GREEDY,
                                                         str(GREEDY_TOKENS))
            if greedy:
                expected = reference_greedy(model, ids, GREEDY_TOKENS)
                for dtype, got in greedy.items():
                    runs[dtype]["greedy_identical"] = got if isinstance(got, str) else bool(torch.equal(got, expected))
            ref = reference_hidden(model, ids)
            head64 = model.head_rows(0, model.info.vocab_size)
            for dtype in dtypes:
                if dtype != "float32":  # the floor: this dtype everywhere but attention and the bias (exact)
                    dt = DTYPES[dtype]
                    runs[dtype]["floor"] = {"hidden": reference_hidden(model, ids, round_to=dt),
                                            "head": head64.to(dt).double()}
                record = json.loads((converted(dtype) / "ropebridge.json").read_text())
                row = {"model": name, "target": record["target"], "kernel": args.kernel,
                       "rotary_dim": record["geometry"].get("rotary_dim"),
                       "dtype": dtype, "context": c, **compare(name, runs[dtype], dtype, ids, ref, head64)}
                rows.append(row)
                print({k: (f"{v:.3g}" if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
            del runs, ref, head64
    cols = ["model", "dtype", "context", "native_max_abs_logit_err", "floor_max_abs_logit_err",
            "converted_max_abs_logit_err", "ratio_max", "ratio_floor", "native_mean_kl", "converted_mean_kl",
            "ratio_kl", "native_ppl", "floor_ppl", "converted_ppl", "reference_ppl"]
    print(text_table(rows, cols))
    name = "fidelity_quick" if args.quick else "fidelity"
    if args.merge and (RESULTS / f"{name}.json").exists():
        def key(r):
            return r["model"], r.get("target", "gpt-neox"), r.get("kernel", "any"), r["dtype"], r["context"]

        fresh = {key(r) for r in rows}
        old = json.loads((RESULTS / f"{name}.json").read_text())["rows"]
        rows = [r for r in old if key(r) not in fresh] + rows
    path = save(name, {"rows": rows})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
