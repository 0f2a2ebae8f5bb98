"""SGLang serving the conversions: every embedded real-text model converted with ``--engine sglang`` in bfloat16,
float16 and float32, run by SGLang 0.5.23 on this machine's CPU through its offline engine and through its HTTP
server, beside what SGLang does with the source itself, all against the exact float64 ALiBi forward pass.

    python -m benchmarks.engines.sglang_run [--models demo,demo-mpt] [--dtypes bfloat16] [--apis offline,serve]
                                            [--kinds native,converted] [--context 2048] [--work-dir DIR] [--fresh]

SGLang is sglang 0.5.23 in an environment of its own (``envs.py``, created in about 2 minutes from a warm pip cache),
run with ``--device cpu`` (its ``torch_native`` attention and each op's native path), a KV cache of
``MAX_TOTAL_TOKENS`` tokens (without it SGLang takes most of the machine's memory) and radix caching off:

- ``offline``: ``sglang.Engine(model_path=DST, dtype=D, device="cpu", ...)`` by the package's runner
  (``ropebridge.runners``, the worker ``verify --engine sglang`` runs), token ids in, ``return_logprob`` with
  ``logprob_start_len=0`` and greedy ``generate``;
- ``serve``: ``python -m sglang.launch_server --model-path DST --dtype D --device cpu ...`` started as a user types
  it, then ``/generate`` over HTTP on 127.0.0.1 with the token ids, as a client would.

Per model (``scoring.MODELS``, judged as ``vllm_run.py`` judges them: ``scoring.py``): the first CONTEXT - 7 tokens
of its held-out text (the most SGLang takes in a window of CONTEXT: ``RESERVED``) and 4 prompts of 32 tokens after
it, each continued by 32 tokens; per dtype, ``ropebridge convert SRC DST --engine sglang --dtype D --window
CONTEXT``. Native rows give SGLang the source the same two ways (Baichuan-13B as its hub repository has it,
``--trust-remote-code`` and the ``auto_map`` to its configuration code: ``hub_baichuan``); SGLang has no BLOOM, MPT,
Falcon-RW or Jais model, and what it said is the row. Each row: the perplexity (exact and SGLang), max |Δ log p|,
the greedy continuations against the exact model's, and the class SGLang loaded.

Writes benchmarks/results/sglang_engine.json (rows not run this time are kept) and prints the table.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

from benchmarks.engines import envs, scoring
from benchmarks.engines.scoring import (GREEDY, MODELS, PPL_LIMIT, arguments, convert, exact, row, run_engine,
                                        run_worker, save, token_ids)
from benchmarks.engines.workers import sglang_log
from benchmarks.engines.workers import FOLDER as WORKERS

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

log = logging.getLogger("engines")
APIS = ("offline", "serve")
OUT = ROOT / "benchmarks" / "results" / "sglang_engine.json"
PORT = 30011
MAX_TOTAL_TOKENS = 32768  # the KV cache's tokens, as VLLM_CPU_KVCACHE_SPACE bounds vLLM's
RESERVED = 7  # SGLang takes fewer than context_len - 6 input tokens (tp_worker.py: context_len - 1, less 5)
REMOTE_CODE = {"demo-baichuan"}  # sources whose hub repositories need --trust-remote-code


def serve_command(env: envs.Env, model: Path, dtype: str, remote_code: bool = False) -> list[str]:
    """``python -m sglang.launch_server --model-path MODEL --dtype DTYPE --device cpu`` as a user types it, with the
    KV cache bounded, radix caching off and a fixed port."""
    return [str(env.python), "-m", "sglang.launch_server", "--model-path", str(model), "--dtype", dtype, "--device",
            "cpu", "--port", str(PORT), "--max-total-tokens", str(MAX_TOTAL_TOKENS), "--disable-radix-cache",
            *(["--trust-remote-code"] if remote_code else [])]


def worker(env: envs.Env, api: str, model: Path, dtype: str, ref: dict, work: Path, remote_code: bool = False) -> dict:
    """MODEL in DTYPE through API (its output kept in WORK/logs): ``offline`` by the package's runner
    (``runners/workers/run_sglang.py``, what ``verify --engine sglang`` runs), with the bounded cache, radix caching
    off and SGLang's info log (the class it loaded); ``serve`` by ``worker_sglang.py``'s HTTP client."""
    if api == "offline":
        from ropebridge.runners import Job

        longest = max(len(ref["ids"]), *(len(p) + GREEDY for p in ref["prompts"]))
        job = Job(model=str(model), dtype=dtype, max_model_len=longest, sequences=[ref["ids"]], prompts=ref["prompts"],
                  greedy_tokens=GREEDY, options={"max_total_tokens": MAX_TOTAL_TOKENS, "disable_radix_cache": True,
                                                 "log_level": "info", "trust_remote_code": remote_code})
        out = run_engine(env.python, "run_sglang.py", job, work, f"{dtype}-{api}")
        if "refused" in out:
            return out
        read = sglang_log.facts(out.pop("log"))  # the class it loaded, its cache's dtype
        return {**out, **read, "reported_ids": out["reported_ids"][0]}
    job = {"model": str(model), "dtype": dtype, "max_total_tokens": MAX_TOTAL_TOKENS, "ids": ref["ids"],
           "prompts": ref["prompts"], "greedy_tokens": GREEDY, "trust_remote_code": remote_code,
           "command": serve_command(env, model, dtype, remote_code), "port": PORT}
    return run_worker(env, [WORKERS / "worker_sglang.py", api], job, work, f"{dtype}-{api}")


def hub_baichuan(source: Path, work: Path) -> Path:
    """The embedded Baichuan-13B as its hub repository has it: its config's ``auto_map`` to a
    ``configuration_baichuan.py`` beside it, the code that ``--trust-remote-code`` runs (``BaichuanConfig``: the
    config's keys as attributes) and without which transformers does not know the model type."""
    import shutil

    dst = work / "demo-baichuan-hub"
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(source, dst)
    config = json.loads((dst / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "configuration_baichuan.BaichuanConfig"}
    (dst / "config.json").write_text(json.dumps(config, indent=1))
    (dst / "configuration_baichuan.py").write_text(
        "from transformers import PretrainedConfig\n\n\nclass BaichuanConfig(PretrainedConfig):\n"
        "    model_type = \"baichuan\"\n")
    return dst


def row_for(name: str, kind: str, dtype: str, api: str, result: dict, ref: dict, dst: Path | None) -> dict:
    return row(name, kind, dtype, api, result, ref, dst, {
        "sglang_dtype": result.get("dtype"), "architecture": result.get("architecture"),
        "reported_ids": result.get("reported_ids")})


def table(payload: dict) -> str:
    """The stored rows as markdown (``benchmarks/tables.py`` writes it into benchmarks/engines/README.md)."""
    return scoring.table(payload, "SGLang")


def main(argv: list[str] | None = None) -> int:
    args = arguments(__doc__, MODELS, APIS, argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    models, dtypes, apis, kinds = args.models, args.dtypes, args.apis, args.kinds
    root = args.env_dir or envs.default_root()
    env = envs.ensure("sglang", root)
    work = (args.work_dir or root / "work") / f"sglang-{args.context}"
    work.mkdir(parents=True, exist_ok=True)
    from ropebridge.demo import data_dir

    rows = []
    for name in models:
        ids, prompts = token_ids(name, args.context + 1 - RESERVED)  # the most SGLang takes in the window
        log.info("%s: the exact float64 reference on %d tokens", name, len(ids))
        ref = exact(name, ids, prompts, work)
        source = hub_baichuan(data_dir(name), work) if name in REMOTE_CODE else data_dir(name)
        for dtype in dtypes:
            if "native" in kinds:
                for api in apis:
                    log.info("%s: the source, %s, %s", name, dtype, api)
                    result = worker(env, api, source, dtype, ref, work, name in REMOTE_CODE)
                    rows.append(row_for(name, "native", dtype, api, result, ref, None))
            if "converted" in kinds:
                dst = convert("sglang", name, dtype, args.context, work, args.fresh)
                for api in apis:
                    log.info("%s: converted, %s, %s", name, dtype, api)
                    rows.append(row_for(name, "converted", dtype, api, worker(env, api, dst, dtype, ref, work), ref,
                                        dst))
    save(OUT, rows, ["model", "kind", "dtype", "api", "architecture", "ppl_exact", "ppl", "ppl_rel", "max_abs_dlogp",
                     "greedy", "passes"], MODELS,
         {"sglang": envs.RUN["sglang"], "max_total_tokens": MAX_TOTAL_TOKENS, "context": args.context,
          "ppl_limit": PPL_LIMIT})
    return 0


if __name__ == "__main__":
    sys.exit(main())
