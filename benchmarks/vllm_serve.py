"""vLLM on a GPU: the native ALiBi model and its ropebridge conversions served side by side, throughput and error.

    python benchmarks/vllm_serve.py [--models demo,demo-mpt,demo-falcon] [--targets gpt-neox,nemotron]
                                    [--dtype bfloat16] [--context 2048] [--batch 64] [--new-tokens 128]

Needs a CUDA GPU and vLLM (``pip install vllm``, which brings its own CUDA build of torch: install it in an
environment of its own with ropebridge). Where either is missing it says which, measures nothing, writes
nothing and exits 0.

Per model (the embedded real-text models) and per target: ``ropebridge convert`` of the model for DTYPE and a
window of CONTEXT, calibrated on the last 10,000 characters of its held-out text; then each of native and
converted in vLLM (``LLM(model, dtype, max_model_len=CONTEXT)``, its default attention backend; native MPT and
Falcon-RW are not in current vLLM and are reported as refused if it says so):

- **error**: the log-probability vLLM gives each next token of the first CONTEXT held-out tokens
  (``prompt_logprobs``) against the exact float64 ALiBi forward pass's (``ropebridge.checkpoint.reference``):
  max and mean |Δ log p|, and the perplexity of each;
- **throughput**: BATCH prompts of 32 held-out tokens, NEW_TOKENS greedy tokens each, generated tokens/s
  (one warm-up batch first).

Writes benchmarks/results/vllm_serve.json and prints a table.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

TEXT_MODELS = ("demo", "demo-mpt", "demo-falcon")


def missing() -> str | None:
    """Why this machine cannot run the benchmark, or None."""
    import importlib.util

    import torch

    if not torch.cuda.is_available():
        return "no CUDA GPU (torch.cuda.is_available() is False)"
    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed (pip install vllm)"
    return None


def exact_logprobs(src: Path, ids: list[int]) -> list[float]:
    """log p(ids[i+1] | ids[:i+1]) of the exact float64 ALiBi model, i < len(ids) - 1."""
    import torch

    from ropebridge.checkpoint.model import SourceModel
    from ropebridge.checkpoint.reference import reference_hidden

    model = SourceModel(src)
    hidden = reference_hidden(model, torch.tensor(ids))  # (s, D) float64
    head = model.head_rows(0, model.info.vocab_size)  # (V, D) float64
    out = []
    for lo in range(0, len(ids) - 1, 256):
        logp = torch.log_softmax(hidden[lo:lo + 256] @ head.T, dim=-1)  # (block, V)
        nxt = torch.tensor(ids[lo + 1: lo + 257])
        out += logp[torch.arange(len(nxt)), nxt].tolist()
    return out


def serve(path: Path, dtype: str, context: int, ids: list[int], prompts: list[list[int]], new_tokens: int) -> dict:
    """One model in vLLM: prompt log-probabilities of IDS and greedy throughput over PROMPTS."""
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    try:
        llm = LLM(model=str(path), dtype=dtype, max_model_len=context + 1, seed=0, enforce_eager=False)
    except Exception as e:  # noqa: BLE001 - vLLM's refusal of an architecture is the result
        return {"refused": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
    scored = llm.generate([TokensPrompt(prompt_token_ids=ids)],
                          SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=0.0))[0]
    logprobs = [d[t].logprob for d, t in zip(scored.prompt_logprobs[1:], ids[1:])]  # position 0 has none
    greedy = SamplingParams(max_tokens=new_tokens, temperature=0.0, ignore_eos=True)
    batch = [TokensPrompt(prompt_token_ids=p) for p in prompts]
    llm.generate(batch[:4], greedy)  # warm-up
    start = time.perf_counter()
    outs = llm.generate(batch, greedy)
    seconds = time.perf_counter() - start
    generated = sum(len(o.outputs[0].token_ids) for o in outs)
    del llm
    return {"logprobs": logprobs, "tokens_per_s": generated / seconds, "generated": generated, "seconds": seconds}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(TEXT_MODELS))
    p.add_argument("--targets", default="gpt-neox,nemotron")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    p.add_argument("--context", type=int, default=2048)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--new-tokens", type=int, default=128)
    args = p.parse_args(argv)
    why = missing()
    if why is not None:
        print(f"vllm_serve: {why}; nothing measured, nothing written")
        return 0
    from transformers import AutoTokenizer

    from _common import calibration_text, save, table
    from ropebridge.demo import data_dir

    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name in args.models.split(","):
            src = data_dir(name)
            ids = AutoTokenizer.from_pretrained(src)((src / "heldout.txt").read_text())["input_ids"]
            seq = ids[: args.context]
            prompts = [ids[args.context + 32 * i: args.context + 32 * (i + 1)] for i in range(args.batch)]
            exact = exact_logprobs(src, seq)
            calib = Path(work) / f"{name}-calibration.txt"
            calib.write_text(calibration_text(src))
            models = {"native": src}
            for target in args.targets.split(","):
                dst = Path(work) / f"{name}-{target}"
                subprocess.run([sys.executable, "-m", "ropebridge", "convert", str(src), str(dst), "--dtype", args.dtype,
                                "--window", str(args.context), "--target", target, "--calibration-text", str(calib)],
                               check=True)
                models[target] = dst
            for form, path in models.items():
                got = serve(path, args.dtype, args.context, seq, prompts, args.new_tokens)
                row = {"model": name, "form": form, "dtype": args.dtype, "context": args.context}
                if "refused" in got:
                    rows.append({**row, "refused": got["refused"]})
                    continue
                diffs = [abs(a - b) for a, b in zip(got["logprobs"], exact)]
                rows.append({**row, "max_abs_dlogp": max(diffs), "mean_abs_dlogp": sum(diffs) / len(diffs),
                             "perplexity": math.exp(-sum(got["logprobs"]) / len(diffs)),
                             "perplexity_exact": math.exp(-sum(exact) / len(exact)),
                             "tokens_per_s": got["tokens_per_s"], "batch": args.batch, "new_tokens": args.new_tokens})
    import torch
    import vllm

    print(table(rows, ["model", "form", "max_abs_dlogp", "mean_abs_dlogp", "perplexity", "perplexity_exact",
                       "tokens_per_s", "refused"]))
    print(f"wrote {save('vllm_serve', {'command': ' '.join(['python', *sys.argv]), 'vllm': vllm.__version__, 'gpu': torch.cuda.get_device_name(), 'rows': rows})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
