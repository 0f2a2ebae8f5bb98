"""Runs inside the SGLang environment (``envs.py``: sglang 0.5.23 with the torch 2.14.1 and transformers 5.19 it
pins, no ropebridge): one checkpoint in SGLang on this machine's CPU, through its offline engine or its HTTP server,
on token ids given by the job.

    python worker_sglang.py offline JOB.json   # sglang.Engine: input log-probabilities, greedy continuations
    python worker_sglang.py serve JOB.json     # JOB's command (python -m sglang.launch_server ...), over HTTP

Both run SGLang as shipped with ``--device cpu``: without ``SGLANG_USE_CPU_ENGINE`` (its CPU engine, which needs
``sgl_kernel``'s CPU build, absent from every registry), SGLang takes the platform for neither CUDA nor its CPU
engine, chooses its ``torch_native`` attention backend, and runs each fused op's ``forward_native``. Building its
``RotaryEmbedding`` on that platform imports ``vllm._custom_ops`` (the fallback kernel of a GPU it does not list),
which it never calls there: the environment carries a stand-in that raises if called (``envs.STAND_INS``).

JOB (JSON): ``model`` (directory), ``dtype``, ``max_total_tokens`` (the KV cache's size: without it SGLang takes
most of the machine's memory), ``ids`` (the scored sequence), ``prompts`` (lists of ids), ``greedy_tokens``;
``serve``: ``command`` (argv), ``port``; ``offline``: ``trust_remote_code``; ``out``: where the result goes. The
result: ``logprobs`` (log p of ids[i + 1] after ids[:i + 1]: ``input_token_logprobs`` of a request with
``logprob_start_len`` 0; ``reported_ids``: where the token id it reports beside a log-probability is not the one
given), ``greedy`` (each prompt's ``output_ids`` at temperature 0, ``ignore_eos``),
``architecture`` (the class SGLang loaded, from its log), ``dtype`` (its KV cache's); or ``refused``: what SGLang
said when it would not load or run the model. Radix (prefix) caching is off: it would serve a repeated prompt from
its cache.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

import _server

START_TIMEOUT = 600  # seconds for the server to answer /health (it starts in about 30 s on 2 cores)


def _refusal(text: str) -> str:
    """The last line of SGLang's output that names an error (its exception, after the traceback)."""
    lines = [line.strip() for line in text.splitlines() if re.search(r"\w+(Error|Exception): ", line)]
    return lines[-1][:400] if lines else text.strip().splitlines()[-1][:400] if text.strip() else ""


def _facts(log: str) -> dict:
    arch = re.search(r"Load weight end\..*?type=(\w+)", log)
    dtype = re.search(r"KV Cache is allocated\. dtype: torch\.(\w+)", log)
    return {"architecture": arch.group(1) if arch else None, "dtype": dtype.group(1) if dtype else None}


def _request(ids: list[int], *, max_new_tokens: int, logprobs: bool) -> dict:
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0.0,
                                                  "ignore_eos": True}}
    return {**body, "return_logprob": True, "logprob_start_len": 0} if logprobs else body


def _scored(out: dict, ids: list[int]) -> dict:
    """log p of ids[1:], from ``input_token_logprobs`` ([logprob, token id, text] per input token, the first None),
    and where the token id it reports is not the one given (``reported_ids``: [position, given, reported])."""
    got = out["meta_info"]["input_token_logprobs"][1:len(ids)]
    if len(got) != len(ids) - 1:
        raise ValueError(f"SGLang scored {len(got)} tokens of {len(ids) - 1}")
    return {"logprobs": [lp for lp, _, _ in got],
            "reported_ids": [[i + 1, t, r] for i, ((_, r, _), t) in enumerate(zip(got, ids[1:])) if r != t]}


def offline(job: dict) -> dict:
    """``sglang.Engine`` in this process, as a user builds it: the model, ``dtype``, ``device="cpu"``; its output
    (the scheduler's, in the processes it starts) kept in OUT.engine.log, read back for the class it loaded (and by
    the driver when SGLang ends this process: it kills its process tree when its scheduler fails)."""
    import sglang

    t0 = time.perf_counter()
    with open(job["out"] + ".engine.log", "w+") as sink:
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)  # SGLang's processes inherit it
        try:
            engine = sglang.Engine(model_path=job["model"], dtype=job["dtype"], device="cpu",
                                   max_total_tokens=job["max_total_tokens"], disable_radix_cache=True,
                                   trust_remote_code=job.get("trust_remote_code", False),
                                   log_level="info")  # the server's level
        except Exception as exc:  # noqa: BLE001 - SGLang's refusal of a model is the result
            sink.seek(0)
            return {"refused": _refusal(f"{sink.read()}\n{type(exc).__name__}: {exc}")}
        finally:
            os.dup2(saved, 2)
        start = time.perf_counter() - t0
        try:
            ids = job["ids"]
            scored = engine.generate(**_request(ids, max_new_tokens=1, logprobs=True))
            outs = [engine.generate(**_request(p, max_new_tokens=job["greedy_tokens"], logprobs=False))
                    for p in job["prompts"]]
        finally:
            engine.shutdown()
        sink.seek(0)
        facts = _facts(sink.read())
    return {**facts, **_scored(scored, ids), "greedy": [o["output_ids"] for o in outs], "start_seconds": start}


def serve(job: dict) -> dict:
    """Start ``job["command"]`` (the server, as a user types it), wait for /health, then ask ``/generate`` for the
    input log-probabilities of ``ids`` and the greedy continuations of ``prompts``, token ids in and out, as a client
    would (``_server``)."""
    port, log_path = job["port"], Path(job["out"] + ".server.log")
    try:
        with _server.running(job["command"], port, log_path, _refusal, timeout=START_TIMEOUT) as start:
            ids = job["ids"]
            scored = _server.post(port, "/generate", _request(ids, max_new_tokens=1, logprobs=True))
            greedy = [_server.post(port, "/generate", _request(p, max_new_tokens=job["greedy_tokens"],
                                                               logprobs=False))["output_ids"] for p in job["prompts"]]
    except _server.Refused as exc:  # what SGLang said, as the offline engine's refusal is
        return {"refused": _refusal(log_path.read_text()) or str(exc)}
    return {**_facts(log_path.read_text()), **_scored(scored, ids), "greedy": greedy, "start_seconds": start}


def main() -> None:
    mode, path = sys.argv[1], Path(sys.argv[2])
    job = json.loads(path.read_text())
    result = {"offline": offline, "serve": serve}[mode](job)
    Path(job["out"]).write_text(json.dumps(result))


if __name__ == "__main__":  # SGLang spawns its scheduler and detokenizer: the work runs only in the main process
    main()
