"""The GPU check: fidelity and speed of converted checkpoints on one CUDA device, in one command that fits the GPU
machine (one H200, torch with CUDA, transformers, no vLLM, SGLang or flash-attn; under 8 minutes).

    python -m benchmarks.gpu_check [--layers 8] [--contexts 2048,8192,32768] [--out gpu_check]

1. **Fidelity**: the embedded real-text models converted with the defaults to bfloat16 (``demo`` to gpt-neox and
   nemotron, ``demo-baichuan`` to llama), run with SDPA on the device on 2K and 8K tokens of held-out text: max
   |Δlogit| and perplexity against the exact float64 reference computed on the device
   (``reference_states(device="cuda")``), and the SDPA backend that runs the model's attention (the first of
   flash, efficient, cuDNN and math that accepts its shapes, as PyTorch's own priority order picks).
2. **Speed**: a BLOOM-7b1-shaped random checkpoint (hidden 4096, 32 heads of 128, vocabulary 250880; ``--layers``
   of its 30, stored bfloat16) converted to nemotron and gpt-neox: prefill tokens/s at each context and decode
   tokens/s (transformers' static cache for the converted models), against native BLOOM in transformers (eager,
   its only path; its own cache) and against native ALiBi on PyTorch's FlexAttention (the same weights, an ALiBi
   ``score_mod``: what a user would run instead of converting), each with its peak device memory. A context that
   does not fit is recorded as out of memory.

Writes benchmarks/results/gpu_check.json and prints a table. Without a CUDA device it says so in one line and
exits 2; ``--device cpu`` runs everything on the CPU at small sizes (``--quick``), which the test suite does.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch
from benchmarks._common import machine, save, table

FIDELITY = (("demo", "gpt-neox"), ("demo", "nemotron"), ("demo-baichuan", "llama"))
BLOOM_7B1 = dict(hidden_size=4096, n_head=32, vocab_size=250880)
QUICK_BLOOM = dict(hidden_size=128, n_head=4, vocab_size=512)
DECODE_TOKENS = 32


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def peak_reset(device: str) -> None:
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_gb(device: str) -> float | None:
    return torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None


def sdpa_backend(model, ids: torch.Tensor) -> str:
    """The SDPA backend that runs ``model`` on ``ids``: the first of PyTorch's priority order that accepts it."""
    if ids.device.type != "cuda":
        return "cpu"
    from torch.nn.attention import SDPBackend, sdpa_kernel

    for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION),
                          ("cudnn", SDPBackend.CUDNN_ATTENTION), ("math", SDPBackend.MATH)):
        try:
            with torch.no_grad(), sdpa_kernel([backend]):
                model(ids[:, :64])
            return name
        except RuntimeError:
            continue
    return "none"


def convert_to(src: Path, dst: Path, target: str, window: int) -> Path:
    from ropebridge.convert import convert
    from ropebridge.emulation import PlanRequest

    return convert(src, dst, PlanRequest(window=window, dtype="bfloat16", target=target), force=True).destination


def fidelity_row(name: str, target: str, context: int, device: str, work: Path) -> dict:
    """One real-text model on one target at one context (module doc, 1)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ropebridge.checkpoint.model import SourceModel
    from ropebridge.checkpoint.reference import reference_states
    from ropebridge.demo import data_dir

    src = data_dir(name)
    dst = convert_to(src, work / f"{name}-{target}", target, max(context, 2048))
    text = (src / "heldout.txt").read_text()
    ids = AutoTokenizer.from_pretrained(src)(text, return_tensors="pt")["input_ids"][:, :context].to(device)
    model = AutoModelForCausalLM.from_pretrained(dst, dtype=torch.bfloat16, attn_implementation="sdpa").to(device)
    source = SourceModel(src)
    with torch.no_grad():
        logits = model(ids).logits.double()[0]  # (s, V)
        exact = reference_states(source, ids, device=device)[0] @ source.head_rows(0,
                                                                                   source.info.vocab_size).T.to(device)
    nll = lambda z: float(torch.nn.functional.cross_entropy(z[:-1], ids[0, 1:]))  # noqa: E731
    row = {"part": "fidelity", "model": name, "target": target, "context": ids.shape[1],
           "max_abs_logit_err": float((logits - exact).abs().max()), "ppl_converted": math.exp(nll(logits)),
           "ppl_exact": math.exp(nll(exact)), "sdpa_backend": sdpa_backend(model, ids)}
    del model
    return row


def flex_bloom(model):
    """Native BLOOM's weights run with FlexAttention and an ALiBi ``score_mod`` (bias -m (i - j), the slopes
    transformers' BLOOM uses), causal: what a user would run instead of converting. Returns
    ``run(ids (b, s), caches=None, offset=0) -> (logits (b, s, V), caches)``: without caches a causal prompt, with
    them ``ids`` at positions ``offset ...`` seeing every cached key. One ``score_mod`` per mode, defined once,
    reads the offset from a tensor, so the compiled kernel is reused from step to step."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    from ropebridge.alibi import slopes as alibi_slopes

    cfg, core = model.config, model.transformer
    h, hd = cfg.n_head, cfg.hidden_size // cfg.n_head
    device = next(model.parameters()).device
    m = torch.tensor(alibi_slopes(h), dtype=torch.float32, device=device)  # (h,)
    offset_now = torch.zeros((), dtype=torch.int64, device=device)  # the first new query's position when decoding
    if device.type == "cuda":
        attend = torch.compile(flex_attention)
    else:  # the CPU test: the unfused path, its warning that it is unfused not printed
        import warnings

        def attend(*args, **kwargs):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                return flex_attention(*args, **kwargs)

    def prompt_mod(score, b, head, q, kv):
        return score - m[head] * (q - kv)

    def decode_mod(score, b, head, q, kv):
        return score - m[head] * (q + offset_now - kv)

    def causal(b, head, q, kv):
        return q >= kv

    def block(layer, x, cache, mask):
        a = layer.input_layernorm(x)
        qkv = layer.self_attention.query_key_value(a).view(*x.shape[:2], h, 3, hd)  # (b, s, h, 3, hd)
        q, k, v = (qkv[..., i, :].transpose(1, 2) for i in range(3))  # (b, h, s, hd)
        if cache is None:
            ctx = attend(q, k, v, score_mod=prompt_mod, block_mask=mask)
        else:
            k, v = torch.cat([cache[0], k], 2), torch.cat([cache[1], v], 2)  # (b, h, t, hd)
            ctx = attend(q, k, v, score_mod=decode_mod)
        y = layer.self_attention.dense(ctx.transpose(1, 2).reshape(*x.shape[:2], h * hd)) + x  # (b, s, D)
        mlp = layer.mlp
        return y + mlp.dense_4h_to_h(mlp.gelu_impl(mlp.dense_h_to_4h(layer.post_attention_layernorm(y)))), (k, v)

    def run(ids, caches=None, offset=0):
        x = core.word_embeddings_layernorm(core.word_embeddings(ids))  # (b, s, D)
        s = ids.shape[1]
        mask = create_block_mask(causal, None, None, s, s, device=device) if caches is None else None  # every layer
        offset_now.fill_(offset)
        new = []
        for i, layer in enumerate(core.h):
            x, kv = block(layer, x, None if caches is None else caches[i], mask)
            new.append(kv)
        return model.lm_head(core.ln_f(x)), new

    return run


def speed_rows(layers: int, contexts: list[int], device: str, work: Path, shape: dict) -> list[dict]:
    """The speed part (module doc, 2): native eager, native on FlexAttention, converted nemotron and gpt-neox."""
    import transformers as T
    from benchmarks.verify_scale import random_checkpoint

    src = random_checkpoint(work / "bloom", T.BloomConfig(n_layer=layers, **shape))
    models = {"native (eager)": src, "native (FlexAttention)": src}
    for target in ("nemotron", "gpt-neox"):
        models[f"{target} (SDPA)"] = convert_to(src, work / target, target, max(contexts))
    rows = []
    for label, path in models.items():
        peak_reset(device)
        kwargs = {"attn_implementation": "sdpa"} if "SDPA" in label else {}
        model = T.AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16, **kwargs).to(device).eval()
        flex = flex_bloom(model) if "Flex" in label else None
        for context in contexts:
            row = {"part": "speed", "model": label, "layers": layers, "context": context}
            ids = torch.randint(0, shape["vocab_size"], (1, context), device=device)
            try:
                row.update(_prefill(model, flex, ids, device))
                row.update(_decode(model, flex, ids, device, static="SDPA" in label))
            except torch.OutOfMemoryError:
                row["error"] = "out of memory"
            row["peak_gb"] = peak_gb(device)
            rows.append(row)
            print(table([row], list(row)), flush=True)
            peak_reset(device)
        del model
    return rows


def _prefill(model, flex, ids: torch.Tensor, device: str) -> dict:
    with torch.no_grad():
        run = (lambda: flex(ids)) if flex else (lambda: model(ids, use_cache=False))  # noqa: E731
        run()  # warm up (compiles the flex kernel)
        sync(device)
        start = time.perf_counter()
        run()
        sync(device)
    return {"prefill_tokens_per_s": ids.shape[1] / (time.perf_counter() - start)}


def _decode(model, flex, ids: torch.Tensor, device: str, static: bool) -> dict:
    """Greedy decode tokens/s after a prompt of up to 2048 tokens: the converted models with transformers' static
    cache, native BLOOM with its own, FlexAttention with its keys and values kept (one warm-up pass first)."""
    prompt = ids[:, : min(ids.shape[1], 2048)]
    with torch.no_grad():
        for timed in (False, True):
            n = DECODE_TOKENS if timed else 4
            sync(device)
            start = time.perf_counter()
            if flex:
                logits, caches = flex(prompt)
                for step in range(n):
                    logits, caches = flex(logits[:, -1:].argmax(-1), caches, prompt.shape[1] + step)
            else:
                model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n, min_new_tokens=n,
                               do_sample=False, pad_token_id=0,
                               **({"cache_implementation": "static"} if static else {}))
            sync(device)
    seconds = time.perf_counter() - start
    return {"decode_tokens_per_s": DECODE_TOKENS / seconds,
            "decode_cache": "kept keys and values" if flex else ("static" if static else "its own")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--layers", type=int, default=8, help="of BLOOM-7b1's 30 (default 8, to fit 8 minutes)")
    p.add_argument("--contexts", default="2048,8192,32768")
    p.add_argument("--fidelity-contexts", default="2048,8192")
    p.add_argument("--quick", action="store_true", help="tiny shapes and contexts (the CPU test)")
    p.add_argument("--out", default="gpu_check", help="results name, or a FILE.json")
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_check: no CUDA device (torch.cuda.is_available() is False); run it on the GPU machine",
              file=sys.stderr)
        return 2
    started = time.perf_counter()
    contexts = [int(c) for c in args.contexts.split(",")]
    fidelity_contexts = [int(c) for c in args.fidelity_contexts.split(",")]
    shape = QUICK_BLOOM if args.quick else BLOOM_7B1
    rows = []
    work = Path(tempfile.mkdtemp(prefix="gpu_check_"))
    try:
        for name, target in FIDELITY:
            for context in fidelity_contexts:
                rows.append(fidelity_row(name, target, context, args.device, work))
                print(table(rows[-1:], list(rows[-1])), flush=True)
        rows += speed_rows(args.layers, contexts, args.device, work, shape)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    info = {**machine(), "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu"}
    payload = {"machine": info, "command": " ".join(["python -m benchmarks.gpu_check", *(argv or sys.argv[1:])]),
               "seconds": time.perf_counter() - started, "rows": rows}
    out = Path(args.out)
    if out.suffix == ".json":  # a path of its own (the CPU test), else a results name
        out.write_text(json.dumps(payload, indent=1))
    else:
        out = save(args.out, payload)
    print(f"wrote {out}")
    print(json.dumps({"seconds": payload["seconds"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
