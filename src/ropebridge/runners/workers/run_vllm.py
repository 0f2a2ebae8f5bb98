"""A checkpoint in vLLM, through its offline API (``vllm.LLM``), as a server built with the same options runs it:
the job protocol's worker (``_job``), run in vLLM's interpreter (standard library and vLLM only).

``job["options"]`` are ``vllm.LLM``'s keywords, which are ``vllm serve``'s flags (``kv_cache_dtype`` is
``--kv-cache-dtype``); everything else is vLLM's default (prefix caching on, chunked prefill, compiled graphs),
as ``vllm serve`` runs. A job one token longer than the model's ``max_position_embeddings`` (the token vLLM must
generate after a sequence scored to the model's length) sets ``VLLM_ALLOW_LONG_MAX_MODEL_LEN``. On a CPU, where vLLM
otherwise reserves most of the machine's memory for its KV cache, ``VLLM_CPU_KVCACHE_SPACE`` is 1 (GiB) and, with tensor
parallelism, ``VLLM_CPU_OMP_THREADS_BIND`` splits the cores between the ranks, unless the environment sets them.

Scored: every sequence of ``job["sequences"]`` in one batch, ``prompt_logprobs=0`` (log p of each next token, as
vLLM computes it: position 0 has none); then every prompt of ``job["prompts"]`` continued greedily by
``greedy_tokens`` tokens in one batch, with the log p vLLM gives each token it chose and how many of each prompt's
tokens came from the prefix cache (``facts["prompt_tokens_from_prefix_cache"]``: vLLM looks up no cached prefix
for a request that asks for prompt log-probabilities, so only the greedy requests can hit the cache).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import _job


def run(job: dict) -> dict:
    options = dict(job["options"])
    config = json.loads((Path(job["model"]) / "config.json").read_text())
    if job["max_model_len"] > config.get("max_position_embeddings", job["max_model_len"]):
        # the one token vLLM must generate after a sequence scored up to the model's length lies past it
        os.environ.setdefault("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")
    import torch

    if not torch.cuda.is_available():  # vLLM's CPU platform
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        if int(options.get("tensor_parallel_size", 1)) > 1:
            os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", _job.core_binds(int(options["tensor_parallel_size"])))
    import vllm
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    try:
        llm = LLM(model=job["model"], dtype=job.get("dtype") or "auto", max_model_len=job["max_model_len"], seed=0,
                  **options)
    except Exception as exc:  # noqa: BLE001 - the engine's refusal of the model is the result
        return {"refused": _job.said(exc)}
    sequences = job["sequences"]
    scored = llm.generate([TokensPrompt(prompt_token_ids=s) for s in sequences],
                          SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=0.0), use_tqdm=False)
    logprobs = [[d[t].logprob for d, t in zip(o.prompt_logprobs[1:], s[1:])] for o, s in zip(scored, sequences)]
    greedy, greedy_logprobs, cached = [], [], []
    if job["prompts"] and job["greedy_tokens"]:
        params = SamplingParams(max_tokens=job["greedy_tokens"], temperature=0.0, ignore_eos=True, logprobs=0)
        for o in llm.generate([TokensPrompt(prompt_token_ids=p) for p in job["prompts"]], params, use_tqdm=False):
            tokens = list(o.outputs[0].token_ids)
            greedy.append(tokens)
            greedy_logprobs.append([step[t].logprob for step, t in zip(o.outputs[0].logprobs, tokens)])
            cached.append(o.num_cached_tokens)
    config = llm.llm_engine.vllm_config
    cache, model = config.cache_config, config.model_config
    blocks = cache.num_gpu_blocks
    facts = {"engine": f"vllm {vllm.__version__}", "architecture": model.architectures[0],
             "head_size": model.get_head_size(), "dtype": str(model.dtype).replace("torch.", ""),
             "kv_cache_dtype": str(cache.cache_dtype), "kv_cache_tokens": None if blocks is None else
             blocks * cache.block_size, "tensor_parallel_size": config.parallel_config.tensor_parallel_size,
             "quantization": model.quantization, "prefix_caching": cache.enable_prefix_caching,
             "prompt_tokens_from_prefix_cache": cached, "max_num_batched_tokens":
             config.scheduler_config.max_num_batched_tokens, "device": "cuda" if torch.cuda.is_available() else "cpu"}
    return {"logprobs": logprobs, "greedy": greedy, "greedy_logprobs": greedy_logprobs, "facts": facts}


if __name__ == "__main__":  # vLLM spawns its engine core: the work runs in the main process only
    _job.main(run)
