"""The engine benchmark's checkpoints: the native BLOOM with GPT-2's tokenizer, the token ids, the transformers
and exact float64 references, and ``ropebridge convert`` of every plan the rows need."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from benchmarks._common import bloom_560m_shaped, calibration_text

from benchmarks.engines import envs
from benchmarks.engines.settings import CALIBRATED, DEMO_VOCAB, FIXED_BASE, LADDERS, NEMOTRON_LADDER
from benchmarks.engines.workers import FOLDER as WORKERS



def prepare_native(name: str, work: Path, env: envs.Env) -> Path:
    """The native float32 BLOOM checkpoint with GPT-2's tokenizer (see the module docstring)."""
    import transformers as T

    out = work / "native"
    if (out / "config.json").exists():
        return out
    tok = work / "gpt2-tokenizer"
    if not (tok / "tokenizer.json").exists():
        env.run([WORKERS / "worker_llamacpp.py", "tokenizer", env.llama_src, tok], gguf=True)
    tmp = work / "native.tmp"
    if name == "demo":
        from ropebridge.demo import data_dir

        model = T.AutoModelForCausalLM.from_pretrained(data_dir(), dtype=torch.float32)
        rows = model.get_input_embeddings().weight.shape[0]
        model.resize_token_embeddings(DEMO_VOCAB, mean_resizing=False)
        with torch.no_grad():
            model.get_input_embeddings().weight[rows:].zero_()
        model.save_pretrained(tmp)
    else:
        bloom_560m_shaped(tmp)
    for f in tok.iterdir():
        (tmp / f.name).write_bytes(f.read_bytes())
    tmp.rename(out)
    return out


def token_ids(name: str, native: Path, context: int, prompts: int, prompt_len: int):
    """The demo model's held-out text, through the demo model's own tokenizer (demo) or the checkpoint's
    GPT-2 tokenizer (the random model): a sequence of CONTEXT ids and PROMPTS prompts from later text."""
    import transformers as T
    from ropebridge.demo import data_dir

    tok = T.AutoTokenizer.from_pretrained(data_dir() if name == "demo" else native)
    ids = tok((data_dir() / "heldout.txt").read_text())["input_ids"]
    if len(ids) < context + prompts * prompt_len:
        raise SystemExit(f"--context {context}: the held-out text has {len(ids)} tokens")
    step = (len(ids) - context - prompt_len) // max(prompts, 1)
    return ids[:context], [ids[context + i * step: context + i * step + prompt_len] for i in range(prompts)]


@torch.no_grad()
def reference(native: Path, seq: list[int], prompts: list[list[int]], greedy_tokens: int, out: Path) -> dict:
    """transformers float32 BLOOM (eager, its only path): logits of SEQ saved as (s, V) .npy, and the
    greedy continuation of every prompt through its KV cache with the top-1/top-2 margin at each step."""
    import transformers as T

    cached = out / "reference.json"
    if cached.exists() and (out / "reference.npy").exists():
        ref = json.loads(cached.read_text())
        if ref["sequence"] == seq and ref["prompts"] == prompts and len(ref["greedy"][0]) == greedy_tokens:
            return ref
    model = T.AutoModelForCausalLM.from_pretrained(native, dtype=torch.float32).eval()
    logits = model(torch.tensor([seq])).logits[0]  # (s, V)
    np.save(out / "reference.npy", logits.numpy())
    argmax = logits.argmax(-1).tolist()
    del logits
    greedy, margins = [], []
    for prompt in prompts:
        res = model(torch.tensor([prompt]), use_cache=True)
        new, gaps = [], []
        for _ in range(greedy_tokens):
            top = res.logits[0, -1].topk(2)
            nxt = int(top.indices[0])
            new.append(nxt)
            gaps.append(float(top.values[0] - top.values[1]))
            res = model(torch.tensor([[nxt]]), past_key_values=res.past_key_values, use_cache=True)
        greedy.append(new)
        margins.append(gaps)
    del model
    exact_reference(native, seq, out / "exact.npy")
    ref = {"sequence": seq, "prompts": prompts, "argmax": argmax, "greedy": greedy, "margins": margins}
    cached.write_text(json.dumps(ref))
    return ref


@torch.no_grad()
def exact_reference(native: Path, seq: list[int], path: Path, block: int = 256) -> None:
    """Logits of ropebridge's exact float64 ALiBi forward pass (blockwise attention), (s, V) float64 .npy."""
    from ropebridge.checkpoint.model import SourceModel
    from ropebridge.checkpoint.reference import reference_hidden

    model = SourceModel(native)
    hidden = reference_hidden(model, torch.tensor(seq))  # (s, D) float64
    head = model.head_rows(0, model.info.vocab_size)  # (V, D) float64
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float64, shape=(len(seq), head.shape[0]))
    for lo in range(0, len(seq), block):
        out[lo:lo + block] = (hidden[lo:lo + block] @ head.T).numpy()  # (block, V)
    out.flush()


def ladder_floors(name: str, window: int, ladder: dict) -> list[float] | None:
    """The demo's calibrated floors per head for the ladder plan LADDER (module doc; the cutoff is the
    dtype's); None (uncalibrated) for the random model."""
    if name not in CALIBRATED:
        return None
    from ropebridge.demo import data_dir
    from ropebridge.emulation import PlanRequest
    from ropebridge.planning import plan_checkpoint

    request = PlanRequest(window=window, calibration_text=calibration_text(data_dir()), **ladder)
    plan, _, _ = plan_checkpoint(data_dir(), request)
    return [h.ladder.floor for h in plan.heads]


def convert_rope(native: Path, work: Path, window: int, floors: dict[str, list[float] | None],
                 needed: set[str]) -> dict[str, Path]:
    """``ropebridge convert`` of each plan: the default plan (free base), the fixed base 10000 plan that engines
    dropping the base run as they are (FIXED_BASE: rotary dims and pairs per head), the ladders named in
    FLOORS (keys of LADDERS, each with its floors per head, or uncalibrated where None), and the Nemotron ladder
    where a row in NEEDED (the rows' checkpoints) runs it."""
    from ropebridge.convert import convert
    from ropebridge.emulation import PlanRequest

    plans = {"converted": {"dtype": "float32"}, "converted-base10000": {"dtype": "float32", **FIXED_BASE},
             **{key: {**LADDERS[key], "floor": f} for key, f in floors.items()},
             **({"nemotron-ladder": NEMOTRON_LADDER} if "nemotron-ladder" in needed else {})}
    out = {key: work / key for key in plans}
    for key, extra in plans.items():  # afresh every run: the plan changes with the code (engine files follow)
        convert(native, out[key], PlanRequest(window=window, **extra), force=True)
    return out
