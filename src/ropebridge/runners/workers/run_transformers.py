"""A checkpoint in transformers, as ``AutoModelForCausalLM`` loads and runs it (its default attention): the job
protocol's worker (``_job``), run in any interpreter with torch and transformers (ropebridge's own by default).

``job["options"]``: ``attn_implementation`` (transformers' keyword: ``sdpa``, ``eager``), else the model's default.
Scored: each sequence of ``job["sequences"]`` alone, log p of each next token from the float32 log-softmax of the
logits; then each prompt continued greedily with transformers' KV cache (``generate``), with the log p of each
token chosen.
"""

from __future__ import annotations

import _job


def run(job: dict) -> dict:
    import torch
    import transformers

    torch.cos(torch.ones(1))  # a process's first cosine first: docs/decisions.md, "torch's first sine or cosine"
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    dtype = getattr(torch, job.get("dtype") or "float32")
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(job["model"], dtype=dtype, **job["options"]).eval()
    except Exception as exc:  # noqa: BLE001 - the engine's refusal of the model is the result
        return {"refused": _job.said(exc)}
    logprobs, greedy, greedy_logprobs = [], [], []
    with torch.no_grad():
        for seq in job["sequences"]:
            ids = torch.tensor([seq])  # (1, s)
            logp = torch.log_softmax(model(ids).logits[0, :-1].float(), dim=-1)  # (s - 1, V)
            logprobs.append(logp.gather(1, ids[0, 1:, None])[:, 0].tolist())
        for prompt in job["prompts"] if job["greedy_tokens"] else ():
            ids = torch.tensor([prompt])  # (1, p)
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=job["greedy_tokens"],
                                 min_new_tokens=job["greedy_tokens"], do_sample=False, eos_token_id=None,
                                 pad_token_id=0, output_scores=True, return_dict_in_generate=True)
            tokens = out.sequences[0, ids.shape[1]:].tolist()
            greedy.append(tokens)
            greedy_logprobs.append([float(torch.log_softmax(s[0].float(), -1)[t]) for s, t in zip(out.scores, tokens)])
    facts = {"engine": f"transformers {transformers.__version__}", "architecture": model.config.architectures[0],
             "attention": model.config._attn_implementation, "dtype": str(model.dtype).replace("torch.", ""),
             "device": "cpu"}
    return {"logprobs": logprobs, "greedy": greedy, "greedy_logprobs": greedy_logprobs, "facts": facts}


if __name__ == "__main__":
    _job.main(run)
