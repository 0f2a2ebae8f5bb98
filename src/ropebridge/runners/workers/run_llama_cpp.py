"""A GGUF file in llama.cpp, through llama-cpp-python's ``Llama`` as ``llama-server`` runs it: the job protocol's
worker (``_job``), run in an interpreter with llama-cpp-python (standard library, numpy and the binding only).

``job["options"]`` are llama.cpp's: ``cache_type_k`` and ``cache_type_v`` (``--cache-type-k``/``-v``: f32, f16,
bf16, q8_0, q4_0, ...; default f16) and ``flash_attn`` (``--flash-attn`` on, off or auto, llama.cpp's default;
the binding takes on or off only, so auto is passed as llama.cpp's own ``LLAMA_FLASH_ATTN_TYPE_AUTO``). The
weights' type is the file's. ``job["vocab"]``, where given, scores over the first ``vocab`` ids only (a benchmark
whose GGUF carries a padded vocabulary; the rows past it are never fed).

Scored: each sequence evaluated in one pass (``logits_all``), log p of each next token from the float64
log-softmax of llama.cpp's logits; then each prompt continued greedily one token at a time through its KV cache,
with the log p of each token chosen.
"""

from __future__ import annotations

import os

import _job


def _log_softmax(np, row, vocab):
    x = np.asarray(row[:vocab], dtype=np.float64)
    top = x.max()
    return x - top - np.log(np.exp(x - top).sum())


def run(job: dict) -> dict:
    import numpy as np
    import llama_cpp
    from llama_cpp import llama_cpp as lib

    options, vocab = job["options"], job.get("vocab")
    kwargs = {"model_path": job["model"], "n_ctx": job["max_model_len"], "logits_all": True, "seed": 0,
              "verbose": False, "n_threads": os.cpu_count(), "n_threads_batch": os.cpu_count()}
    for key, arg in (("cache_type_k", "type_k"), ("cache_type_v", "type_v")):
        if key in options:
            kwargs[arg] = getattr(lib, f"GGML_TYPE_{options[key].upper()}")
    flash = options.get("flash_attn", "auto")
    enabled = lib.LLAMA_FLASH_ATTN_TYPE_ENABLED
    if flash == "auto":  # the binding writes its "enabled" constant for True: llama.cpp's auto, as llama-server
        lib.LLAMA_FLASH_ATTN_TYPE_ENABLED = lib.LLAMA_FLASH_ATTN_TYPE_AUTO
    try:
        llm = llama_cpp.Llama(flash_attn=flash != "off", **kwargs)
    except Exception as exc:  # noqa: BLE001 - the engine's refusal of the file is the result
        return {"refused": _job.said(exc)}
    finally:
        lib.LLAMA_FLASH_ATTN_TYPE_ENABLED = enabled
    logprobs = []
    for seq in job["sequences"]:
        llm.reset()
        llm.eval(seq)
        logprobs.append([float(_log_softmax(np, llm.scores[i], vocab)[t]) for i, t in enumerate(seq[1:])])
    greedy, greedy_logprobs = [], []
    for prompt in job["prompts"] if job["greedy_tokens"] else ():
        llm.reset()
        llm.eval(prompt)
        tokens, lps = [], []
        for _ in range(job["greedy_tokens"]):
            logp = _log_softmax(np, llm.scores[llm.n_tokens - 1], vocab)
            tokens.append(int(np.argmax(logp)))
            lps.append(float(logp[tokens[-1]]))
            llm.eval([tokens[-1]])
        greedy.append(tokens)
        greedy_logprobs.append(lps)
    meta = llm.metadata
    facts = {"engine": f"llama.cpp (llama-cpp-python {llama_cpp.__version__})",
             "architecture": meta.get("general.architecture"), "file_type": meta.get("general.file_type"),
             "type_k": options.get("cache_type_k", "f16"), "type_v": options.get("cache_type_v", "f16"),
             "flash_attn": flash, "device": "cpu"}
    return {"logprobs": logprobs, "greedy": greedy, "greedy_logprobs": greedy_logprobs, "facts": facts}


if __name__ == "__main__":
    _job.main(run)
