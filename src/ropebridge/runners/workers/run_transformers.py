"""A checkpoint in transformers, as ``AutoModelForCausalLM`` loads and runs it (its default attention): the job
protocol's worker (``_job``), run in any interpreter with torch and transformers (ropebridge's own by default).

``job["options"]``: ``attn_implementation`` (transformers' keyword: ``sdpa``, ``eager``), else the model's default;
``kv_cache_dtype`` (vLLM's names): transformers keeps its KV cache in the model's dtype, so a cache in another
format is its ``DynamicCache`` with every K and V it stores rounded to that format and read back in the model's
dtype (fp8 = fp8_e4m3 at scale 1.0, saturating, as vLLM stores them): what such a cache does to the numbers,
through transformers' kernels. Scored: each sequence of ``job["sequences"]`` alone, through that cache where one is
asked, log p of each next token from the float32 log-softmax of the logits; then each prompt continued greedily
with the KV cache (``generate``), with the log p of each token chosen.
"""

from __future__ import annotations

import _job


STORED = {"fp8": "float8_e4m3fn", "fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2", "bfloat16": "bfloat16",
          "float16": "float16"}  # a cache format (vLLM's name) -> the torch dtype its values are stored in


def _rounding_cache(torch, transformers, model, stored: str):
    """A ``DynamicCache`` whose every K and V ``(b, h, s, hd)`` is stored rounded to ``stored`` (a torch dtype's
    name; torch's cast to fp8 saturates, as vLLM's does) and read back in the model's dtype."""
    fmt = getattr(torch, stored)

    class Rounded(transformers.DynamicCache):
        def update(self, key_states, value_states, layer_idx, *args, **kwargs):
            return super().update(key_states.to(fmt).to(key_states.dtype), value_states.to(fmt).to(value_states.dtype),
                                  layer_idx, *args, **kwargs)

    return Rounded(config=model.config)


def run(job: dict) -> dict:
    import torch
    import transformers

    torch.cos(torch.ones(1))  # a process's first cosine first: docs/decisions.md, "torch's first sine or cosine"
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    dtype = getattr(torch, job.get("dtype") or "float32")
    options = dict(job["options"])
    stored = STORED.get(options.pop("kv_cache_dtype", "auto"))
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(job["model"], dtype=dtype, **options).eval()
    except Exception as exc:  # noqa: BLE001 - the engine's refusal of the model is the result
        return {"refused": _job.said(exc)}
    logprobs, greedy, greedy_logprobs = [], [], []
    with torch.no_grad():
        cache = (lambda: None) if stored is None else (lambda: _rounding_cache(torch, transformers, model, stored))
        for seq in job["sequences"]:
            ids = torch.tensor([seq])  # (1, s)
            logits = model(ids, past_key_values=cache(), use_cache=stored is not None).logits  # (1, s, V)
            logp = torch.log_softmax(logits[0, :-1].float(), dim=-1)  # (s - 1, V)
            logprobs.append(logp.gather(1, ids[0, 1:, None])[:, 0].tolist())
        for prompt in job["prompts"] if job["greedy_tokens"] else ():
            ids = torch.tensor([prompt])  # (1, p)
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=job["greedy_tokens"],
                                 min_new_tokens=job["greedy_tokens"], do_sample=False, eos_token_id=None,
                                 pad_token_id=0, output_scores=True, return_dict_in_generate=True,
                                 past_key_values=cache())
            tokens = out.sequences[0, ids.shape[1]:].tolist()
            greedy.append(tokens)
            greedy_logprobs.append([float(torch.log_softmax(s[0].float(), -1)[t]) for s, t in zip(out.scores, tokens)])
    facts = {"engine": f"transformers {transformers.__version__}", "architecture": model.config.architectures[0],
             "attention": model.config._attn_implementation, "dtype": str(model.dtype).replace("torch.", ""),
             "kv_cache_dtype": job["options"].get("kv_cache_dtype", "auto"), "device": "cpu"}
    return {"logprobs": logprobs, "greedy": greedy, "greedy_logprobs": greedy_logprobs, "facts": facts}


if __name__ == "__main__":
    _job.main(run)
