"""A checkpoint in SGLang, through its offline engine (``sglang.Engine``), as ``python -m sglang.launch_server`` with
the same options runs it: the job protocol's worker (``_job``), run in SGLang's interpreter (standard library and
SGLang only).

``job["options"]`` are ``sglang.Engine``'s keywords, which are the server's flags; everything else is SGLang's
default. Without a GPU it runs with ``device="cpu"`` (its ``torch_native`` attention and each op's native path, as
``--device cpu`` does) and a KV cache of ``CPU_KV_TOKENS`` tokens (``max_total_tokens``: otherwise SGLang takes most of
the machine's memory), unless the options set them; with tensor parallelism ``SGLANG_CPU_OMP_THREADS_BIND`` splits
the cores between the ranks unless the environment sets it (SGLang otherwise asks for a NUMA node per rank). SGLang
takes fewer than ``context_len - 6`` input tokens, so a job longer than the model's ``max_position_embeddings``
allows sets ``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN`` and a ``context_length`` that holds it.

Scored: the sequences of ``job["sequences"]`` as one batch (one request of several, as a server receives a batch),
with ``return_logprob`` from position 0 (``input_token_logprobs``: the log p of each next token; position 0 has
none), taken by position (``facts["reported_ids"]``: per sequence, [position, id given, id reported] where the id
SGLang names beside a log p is not the one given); then every prompt of ``job["prompts"]`` continued greedily by
``greedy_tokens`` tokens, with the log p SGLang gives each token it chose.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import _job

CPU_KV_TOKENS = 32768
RESERVED = 6  # SGLang's input limit is context_len - 1, less 5 (its tp_worker), exclusive


def run(job: dict) -> dict:
    options = dict(job["options"])
    config = json.loads((Path(job["model"]) / "config.json").read_text())
    longest = job["max_model_len"] + RESERVED
    if longest > config.get("max_position_embeddings", longest):
        os.environ.setdefault("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "1")
        options.setdefault("context_length", longest)
    import torch

    if not torch.cuda.is_available():
        options.setdefault("device", "cpu")
        options.setdefault("max_total_tokens", CPU_KV_TOKENS)
        if int(options.get("tp_size", 1)) > 1:
            os.environ.setdefault("SGLANG_CPU_OMP_THREADS_BIND", _job.core_binds(int(options["tp_size"])))
    import sglang

    try:
        engine = sglang.Engine(model_path=job["model"], dtype=job.get("dtype") or "auto", random_seed=0, **options)
    except Exception as exc:  # noqa: BLE001 - the engine's refusal of the model is the result
        return {"refused": _job.said(exc)}
    try:
        seqs = [list(s) for s in job["sequences"]]
        outs = engine.generate(input_ids=seqs, return_logprob=True, logprob_start_len=0,
                               sampling_params={"max_new_tokens": 1, "temperature": 0.0}) if seqs else []
        got = [out["meta_info"]["input_token_logprobs"][1:len(s)] for s, out in zip(seqs, outs)]
        logprobs = [[lp for lp, _, _ in g] for g in got]
        reported = [[[i + 1, t, r] for i, ((_, r, _), t) in enumerate(zip(g, s[1:])) if r != t]
                    for s, g in zip(seqs, got)]
        greedy, greedy_logprobs, cached = [], [], []
        for p in job["prompts"] if job["greedy_tokens"] else []:
            out = engine.generate(input_ids=list(p), return_logprob=True, logprob_start_len=len(p),
                                  sampling_params={"max_new_tokens": job["greedy_tokens"], "temperature": 0.0,
                                                   "ignore_eos": True})
            greedy.append(list(out["output_ids"]))
            greedy_logprobs.append([lp for lp, _, _ in out["meta_info"]["output_token_logprobs"]])
            cached.append(out["meta_info"].get("cached_tokens"))
        info = engine.get_server_info()
    finally:
        engine.shutdown()
    facts = {"engine": f"sglang {sglang.__version__}", "dtype": job.get("dtype") or "auto",
             "kv_cache_dtype": info.get("kv_cache_dtype"), "attention_backend": info.get("attention_backend"),
             "device": info.get("device"), "max_total_tokens": info.get("max_total_num_tokens"),
             "tp_size": info.get("tp_size"), "chunked_prefill_size": info.get("chunked_prefill_size"),
             "prompt_tokens_from_prefix_cache": cached, "reported_ids": reported}
    return {"logprobs": logprobs, "greedy": greedy, "greedy_logprobs": greedy_logprobs, "facts": facts}


if __name__ == "__main__":  # SGLang spawns its scheduler: the work runs in the main process only
    _job.main(run)
