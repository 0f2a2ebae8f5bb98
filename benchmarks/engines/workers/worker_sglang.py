"""Runs inside the SGLang environment (``envs.py``: sglang 0.5.23 with the torch 2.14.1 and transformers 5.19 it
pins, no ropebridge): one checkpoint served by SGLang's HTTP server on this machine's CPU, on token ids given by the
job (the offline engine is the package's runner, ``ropebridge/runners/workers/run_sglang.py``).

    python worker_sglang.py serve JOB.json     # JOB's command (python -m sglang.launch_server ...), over HTTP

It runs SGLang as shipped with ``--device cpu``: without ``SGLANG_USE_CPU_ENGINE`` (its CPU engine, which needs
``sgl_kernel``'s CPU build, absent from every registry), SGLang takes the platform for neither CUDA nor its CPU
engine, chooses its ``torch_native`` attention backend, and runs each fused op's ``forward_native``. Building its
``RotaryEmbedding`` on that platform imports ``vllm._custom_ops`` (the fallback kernel of a GPU it does not list),
which it never calls there: the environment carries a stand-in that raises if called (``envs.STAND_INS``).

JOB (JSON): ``model`` (directory), ``dtype``, ``ids`` (the scored sequence), ``prompts`` (lists of ids),
``greedy_tokens``, ``command`` (argv), ``port``; ``out``: where the result goes. The result: ``logprobs`` (log p of
ids[i + 1] after ids[:i + 1]: ``input_token_logprobs`` of a request with ``logprob_start_len`` 0;
``reported_ids``: where the token id it reports beside a log-probability is not the one given), ``greedy`` (each
prompt's ``output_ids`` at temperature 0, ``ignore_eos``), ``architecture`` (the class SGLang loaded, from its log),
``dtype`` (its KV cache's); or ``refused``: what SGLang said when it would not load or run the model.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import _server
from sglang_log import facts

START_TIMEOUT = 600  # seconds for the server to answer /health (it starts in about 30 s on 2 cores)


def _refusal(text: str) -> str:
    """The last line of SGLang's output that names an error (its exception, after the traceback)."""
    lines = [line.strip() for line in text.splitlines() if re.search(r"\w+(Error|Exception): ", line)]
    return lines[-1][:400] if lines else text.strip().splitlines()[-1][:400] if text.strip() else ""


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
    return {**facts(log_path.read_text()), **_scored(scored, ids), "greedy": greedy, "start_seconds": start}


def main() -> None:
    mode, path = sys.argv[1], Path(sys.argv[2])
    job = json.loads(path.read_text())
    result = {"serve": serve}[mode](job)
    Path(job["out"]).write_text(json.dumps(result))


if __name__ == "__main__":  # SGLang spawns its scheduler and detokenizer: the work runs only in the main process
    main()
