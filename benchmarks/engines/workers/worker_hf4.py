"""Runs inside the transformers 4.x environment (never ropebridge's, which runs 5.x): the checkpoint as
transformers 4.x loads it, float32, eager attention for BLOOM (its only path) and the default for GPT-NeoX.

    python worker_hf4.py run JOB.json

JOB: {"model": DIR, "sequence": [ids], "references": {name: NPY}, "prompts": [[ids]], "greedy_tokens": K,
"settings": {"threads": n}, "out": JSON}: the comparison of the logits with each reference (``_compare``)
and the K greedy tokens after each prompt (``generate``, KV cache, no sampling, no stop token).
"""

import json
import sys
from pathlib import Path

import torch
import transformers

from _compare import against_references


@torch.no_grad()
def run(job_path: str) -> int:
    job = json.loads(Path(job_path).read_text())
    torch.set_num_threads(job["settings"]["threads"])
    model = transformers.AutoModelForCausalLM.from_pretrained(job["model"], torch_dtype=torch.float32).eval()
    logits = model(torch.tensor([job["sequence"]])).logits[0].numpy()  # (s, V)
    result = against_references(logits, job["references"])
    del logits
    greedy = []
    for prompt in job["prompts"]:
        ids = torch.tensor([prompt])
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=job["greedy_tokens"],
                             min_new_tokens=job["greedy_tokens"], do_sample=False, eos_token_id=None,
                             pad_token_id=0)
        greedy.append(out[0, len(prompt):].tolist())
    result["greedy"] = greedy
    result["transformers_version"] = transformers.__version__
    Path(job["out"]).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[2]))
