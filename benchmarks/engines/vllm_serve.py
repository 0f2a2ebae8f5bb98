"""vLLM or SGLang on a GPU: the native ALiBi model and its ropebridge conversions served side by side, throughput
and error.

    python -m benchmarks.engines.vllm_serve [--engine vllm|sglang] [--models demo,demo-mpt,demo-falcon]
                                    [--targets gpt-neox,nemotron] [--dtype bfloat16] [--context 2048]
                                    [--batch 64] [--new-tokens 128]
    python -m benchmarks.engines.vllm_serve --models baichuan2-13b-shape,refact-1.6b-shape --targets llama \
        [--engine sglang]
    python -m benchmarks.engines.vllm_serve --models demo-jais,jais-30b-shape,btlm-3b-8k-shape --targets default

Needs a CUDA GPU and the engine (``pip install vllm`` or ``pip install sglang``, each bringing its own CUDA build
of torch: install it in an environment of its own with ropebridge). Where either is missing it says which,
measures nothing, writes nothing and exits 0.

Models: the embedded real-text models (``demo``, ``demo-mpt``, ``demo-falcon``, ``demo-baichuan``, ``demo-jais``:
held-out text, conversions calibrated on the last 10,000 characters of it) and the remote-code families' shapes
(``*-shape``: Baichuan2-13B's, Refact-1.6B's, Jais-30B's and BTLM-3B-8K's published geometry with 2 layers, random
weights N(0, 0.02), random token ids; ``tests/pico.build_remote``). Targets: names of ``ropebridge.targets.TARGETS``,
or ``default``, the target ``convert`` chooses for the model's family (``llama`` for Baichuan and Refact,
``stablelm`` for Jais and BTLM). Per model and per target: ``ropebridge convert`` of the model for DTYPE and a
window of CONTEXT; then each of native and converted in the engine (vLLM: ``LLM(model, dtype,
max_model_len=CONTEXT)``; SGLang: ``sglang.Engine(model_path, dtype, context_length=CONTEXT)``; their default
attention backends, token ids in, no tokenizer; a native model the engine does not run, MPT, Falcon-RW, Baichuan,
Refact, Jais and BTLM in current versions, is reported as refused with what it said):

- **error**: the log-probability the engine gives each next token of the first CONTEXT tokens against the exact
  float64 ALiBi forward pass's (``ropebridge.checkpoint.reference``): max and mean |Δ log p|, and the
  perplexity of each;
- **throughput**: BATCH prompts of 32 tokens, NEW_TOKENS greedy tokens each, generated tokens/s (one warm-up
  batch first).

Writes benchmarks/results/{engine}_serve.json and prints a table. The SGLang path has not yet run on a GPU.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path


TEXT_MODELS = ("demo", "demo-mpt", "demo-falcon", "demo-baichuan", "demo-jais")
SHAPES = {  # remote-code families' published geometry, 2 layers (``tests/pico.build_remote`` overrides)
    "baichuan2-13b-shape": ("baichuan2", dict(hidden_size=5120, num_attention_heads=40, num_hidden_layers=2,
                                              intermediate_size=13696, vocab_size=125696)),
    "refact-1.6b-shape": ("refact", dict(n_embd=2048, n_head=32, n_layer=2, vocab_size=49216)),
    "jais-30b-shape": ("btlm", dict(model_type="jais", architectures=["JAISLMHeadModel"], n_embd=7168, n_head=56,
                                    n_layer=2, n_inner=19114, vocab_size=84992, mup_width_scale=1 / 28,
                                    tie_word_embeddings=True)),  # Jais-30B spells muP as BTLM does
    "btlm-3b-8k-shape": ("btlm", dict(n_embd=2560, n_head=32, n_layer=2, n_inner=6826, vocab_size=50257,
                                      tie_word_embeddings=True)),
}
ENGINES = {"vllm": "vLLM", "sglang": "SGLang"}


def missing(engine: str = "vllm") -> str | None:
    """Why this machine cannot run the benchmark on ENGINE, or None."""
    import importlib.util

    import torch

    if not torch.cuda.is_available():
        return "no CUDA GPU (torch.cuda.is_available() is False)"
    if importlib.util.find_spec(engine) is None:
        return f"{ENGINES[engine]} is not installed (pip install {engine})"
    return None


def source(name: str, work: Path, context: int, batch: int) -> tuple[Path, list[int], list[list[int]], Path | None]:
    """Model NAME's directory, the CONTEXT token ids scored, BATCH prompts of 32 and the calibration text (None
    for a shape: random weights have nothing to calibrate on)."""
    if name in SHAPES:
        import torch

        from tests.pico import build_remote

        family, shape = SHAPES[name]
        src = build_remote(work / name, family, std=0.02, **shape)  # initialiser-sized weights: logits O(1)
        vocab = shape["vocab_size"]
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(0, vocab, (context + 32 * batch,), generator=g).tolist()
        return src, ids[:context], [ids[context + 32 * i: context + 32 * (i + 1)] for i in range(batch)], None
    from transformers import AutoTokenizer

    from benchmarks._common import calibration_text
    from ropebridge.demo import data_dir

    src = data_dir(name)
    ids = AutoTokenizer.from_pretrained(src)((src / "heldout.txt").read_text())["input_ids"]
    calib = work / f"{name}-calibration.txt"
    calib.write_text(calibration_text(src))
    return src, ids[:context], [ids[context + 32 * i: context + 32 * (i + 1)] for i in range(batch)], calib


def target_names(targets: str, src: Path) -> list[str]:
    """The targets named in TARGETS (comma-separated) for the model at SRC, ``default`` being its family's."""
    from ropebridge.checkpoint.config import from_config

    return [from_config(src).family_row.default_target if t == "default" else t for t in targets.split(",")]


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
        llm = LLM(model=str(path), dtype=dtype, max_model_len=context + 1, seed=0, enforce_eager=False,
                  skip_tokenizer_init=True)
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


def serve_sglang(path: Path, dtype: str, context: int, ids: list[int], prompts: list[list[int]],
                 new_tokens: int) -> dict:
    """One model in SGLang's offline engine: prompt log-probabilities of IDS and greedy throughput over PROMPTS."""
    import sglang

    try:
        engine = sglang.Engine(model_path=str(path), dtype=dtype, context_length=context + 1, random_seed=0,
                               skip_tokenizer_init=True)
    except Exception as e:  # noqa: BLE001 - SGLang's refusal of an architecture is the result
        return {"refused": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
    try:
        scored = engine.generate(input_ids=[ids], sampling_params={"max_new_tokens": 1, "temperature": 0.0},
                                 return_logprob=True, logprob_start_len=0)[0]
        logprobs = [lp for lp, _, _ in scored["meta_info"]["input_token_logprobs"][1:]]  # position 0 has none
        greedy = {"max_new_tokens": new_tokens, "temperature": 0.0, "ignore_eos": True}
        engine.generate(input_ids=prompts[:4], sampling_params=greedy)  # warm-up
        start = time.perf_counter()
        outs = engine.generate(input_ids=prompts, sampling_params=greedy)
        seconds = time.perf_counter() - start
    finally:
        engine.shutdown()
    generated = sum(o["meta_info"]["completion_tokens"] for o in outs)
    return {"logprobs": logprobs, "tokens_per_s": generated / seconds, "generated": generated, "seconds": seconds}


SERVE = {"vllm": serve, "sglang": serve_sglang}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engine", default="vllm", choices=tuple(ENGINES))
    p.add_argument("--models", default=",".join(TEXT_MODELS), help=f"of {', '.join((*TEXT_MODELS, *SHAPES))}")
    p.add_argument("--targets", default="gpt-neox,nemotron",
                   help="comma-separated targets; 'default': the one convert chooses for each model's family")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    p.add_argument("--context", type=int, default=2048)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--new-tokens", type=int, default=128)
    args = p.parse_args(argv)
    unknown = [m for m in args.models.split(",") if m not in (*TEXT_MODELS, *SHAPES)]
    if unknown:
        p.error(f"unknown model {unknown[0]!r}; choose from {', '.join((*TEXT_MODELS, *SHAPES))}")
    why = missing(args.engine)
    if why is not None:
        print(f"vllm_serve: {why}; nothing measured, nothing written")
        return 0
    from benchmarks._common import save, started_as, table

    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name in args.models.split(","):
            src, seq, prompts, calib = source(name, Path(work), args.context, args.batch)
            exact = exact_logprobs(src, seq)
            models = {"native": src}
            for target in target_names(args.targets, src):
                dst = Path(work) / f"{name}-{target}"
                calibrate = ["--calibration-text", str(calib)] if calib is not None else []
                subprocess.run([sys.executable, "-m", "ropebridge", "convert", str(src), str(dst),
                                "--dtype", args.dtype, "--window", str(args.context), "--target", target, *calibrate],
                               check=True)
                models[target] = dst
            for form, path in models.items():
                got = SERVE[args.engine](path, args.dtype, args.context, seq, prompts, args.new_tokens)
                row = {"model": name, "form": form, "dtype": args.dtype, "context": args.context}
                if "refused" in got:
                    rows.append({**row, "refused": got["refused"]})
                    continue
                diffs = [abs(a - b) for a, b in zip(got["logprobs"], exact)]
                rows.append({**row, "max_abs_dlogp": max(diffs), "mean_abs_dlogp": sum(diffs) / len(diffs),
                             "perplexity": math.exp(-sum(got["logprobs"]) / len(diffs)),
                             "perplexity_exact": math.exp(-sum(exact) / len(exact)),
                             "tokens_per_s": got["tokens_per_s"], "batch": args.batch, "new_tokens": args.new_tokens})
    import importlib

    import torch

    version = importlib.import_module(args.engine).__version__
    print(table(rows, ["model", "form", "max_abs_dlogp", "mean_abs_dlogp", "perplexity", "perplexity_exact",
                       "tokens_per_s", "refused"]))
    name = "vllm_serve" if args.engine == "vllm" else f"{args.engine}_serve"
    payload = {"command": started_as(), "engine": args.engine, args.engine: version,
               "gpu": torch.cuda.get_device_name(), "rows": rows}
    print(f"wrote {save(name, payload)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
