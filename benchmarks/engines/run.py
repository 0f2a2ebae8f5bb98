"""Proof in independent engines: an ALiBi checkpoint and its ropebridge conversion, each converted by the
engine's own converter and run by the engine's own kernels, against transformers' float32 BLOOM.

    python benchmarks/engines/run.py [--models demo,bloom560m] [--engines llama.cpp,ctranslate2] [--quick]

Per model: the native BLOOM checkpoint (float32; GPT-2's tokenizer, see below), ``ropebridge convert`` of it
(``--target gpt-neox``, float32), the transformers float32 logits of the native model on the same token ids
(the reference) and its greedy continuations with the top-2 margin of every step. Per engine and settings:
the engine's native BLOOM and the engine's converted model against that reference (max |Δlogit|, mean KL,
argmax agreement, greedy continuations and where they part from the reference, with the reference's
margin there). Engines run in their own cached virtual environments (``envs.py``): llama.cpp through
llama-cpp-python (compiled from source on first use, ~8 minutes on 2 cores) and its
``convert_hf_to_gguf.py`` at F32; CTranslate2 through its Transformers converter at float32.

The RoPE base: the default conversion puts the emulation pair on a large base (θ⁻²); the engines'
GPT-NeoX converters drop it, so it is set in the engine's own format afterwards (GGUF
``gptneox.rope.freq_base``; CTranslate2's per-layer ``rotary_base``). Runs with the base left as the
converters write it show what happens without that step. CTranslate2 also gets the attention scale
folded into its query projection (``worker_ct2.py --fold-scale``, which says why); runs without it are
reported too.

Half precision (llama.cpp): the frequency ladder converted with ``LADDER`` (float16, on the base 10000 that
llama.cpp's converter assumes, so no GGUF edit), converted by ``convert_hf_to_gguf.py`` at F16 and Q8_0 like
the native model, and run with llama.cpp's default settings (f16 K/V cache, flash attention off and on);
Q4_K_M made from the F32 GGUFs by llama.cpp's quantizer. Beside it the ladder planned for float32
(``LADDER32``: the fit exact, amplitudes free) at F32 and F16 in an f32 K cache, the plan for that setting,
and the float16 ladder on R = 64 rotary dims (``LADDER64``, head 32 -> 96) at F16 in the f16-K-cache settings.
The demo's ladder is calibrated like ``benchmarks/fidelity.py``'s: floors measured on the last
``_common.CALIBRATION_CHARS`` characters of the held-out text through the demo model's own tokenizer and weights (the
engine checkpoints carry GPT-2's tokenizer, which cannot tokenize for it), passed to ``convert`` as per-head
floors. The compared sequence (the first ``--context`` tokens) does not reach that text; the last greedy
prompt may. The random model's ladder is uncalibrated.

Tokenizer: llama.cpp's converter refuses a tokenizer whose pre-tokenizer hash it does not know (the demo
model's own 4096-token BPE is one). Both checkpoints therefore carry GPT-2's tokenizer, rebuilt from the
vocabulary file llama.cpp ships (``models/ggml-vocab-gpt-2.gguf``); the demo model's embedding is padded
with zero rows to GPT-2's 50257 entries (never fed; their logits are exactly 0 in every model). Token ids
come from the demo model's own tokenizer on its held-out text, so the logits compared are those of real
text.

Writes benchmarks/results/engines.json (``--quick``: engines_quick.json; the stored runs of engines and
models not run this time are kept, judged again under the current criterion) and prints a table.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import envs
from _common import bloom_560m_shaped, calibration_text, machine, table

log = logging.getLogger("engines")

DEMO_VOCAB = 50257  # GPT-2's vocabulary size: the demo model's 4096 rows padded with zeros
RECOMMENDED_LLAMA = {"flash_attn": False, "type_k": "f32", "type_v": "f16"}
LLAMA_SETTINGS = {  # name: (settings, rope base set in the GGUF metadata)
    "-fa off -ctk f32 (recommended)": (RECOMMENDED_LLAMA, True),
    "-fa off -ctk f32 -ctv f32": ({"flash_attn": False, "type_k": "f32", "type_v": "f32"}, True),
    "binding defaults (-fa off, f16 K/V cache)": ({"flash_attn": False, "type_k": "f16", "type_v": "f16"}, True),
    "-fa on (f16 K/V cache)": ({"flash_attn": True, "type_k": "f16", "type_v": "f16"}, True),
    "-fa off -ctk f32, base not set (converter's 10000)": (RECOMMENDED_LLAMA, False),
}
FIXED_BASE = {"rope_base": 10000.0, "rotary_dim": 32, "pairs": 3}
FIXED_BASE_LABEL = "converted with --rope-base 10000 --rotary-dim 32 --pairs 3, engine converter as is"
# Half precision: the frequency ladder on the base engines' converters assume (nothing set in the GGUF), the
# engine's default settings, native BLOOM in the same GGUF type and settings beside it.
LADDER = {"dtype": "float16", "emulation": "ladder", "rope_base": 10000.0, "rotary_dim": 32}
CALIBRATED = ("demo",)  # models whose ladder floors are measured (ladder_floors); the rest are uncalibrated
LADDER_LABEL = "ladder (--dtype float16 --rope-base 10000 --rotary-dim 32), engine converter as is"
LADDER32 = {**LADDER, "dtype": "float32"}  # for an f32 K cache: q and k never rounded to 16 bits
LADDER32_LABEL = "ladder (--dtype float32 --rope-base 10000 --rotary-dim 32), engine converter as is"
LADDER32_GGUF_TYPES = ("f32", "f16")
LADDER32_LLAMA = {"-fa off -ctk f32 (f16 V cache)": {"flash_attn": False, "type_k": "f32", "type_v": "f16"}}
# R = 64 (head 32 -> 96 on the demo, a size fast kernels take): half the amplitudes' root sum of squares
LADDER64 = {**LADDER, "rotary_dim": 64}
LADDER64_LABEL = "ladder (--dtype float16 --rope-base 10000 --rotary-dim 64), engine converter as is"
HALF_GGUF_TYPES = ("f32", "f16", "q8_0", "q4_k_m")  # f32: the float16 checkpoint widened
QUANTIZED = {"q4_k_m": "f32"}  # made by llama.cpp's quantizer from that GGUF (its converter writes no K-quants)
HALF_LLAMA = {  # llama.cpp's own defaults: f16 K/V cache, flash attention off, then on; then an f32 K cache
    "binding defaults (-fa off, f16 K/V cache)": {"flash_attn": False, "type_k": "f16", "type_v": "f16"},
    "-fa on (f16 K/V cache)": {"flash_attn": True, "type_k": "f16", "type_v": "f16"},
    "-fa off -ctk f32 (f16 V cache)": {"flash_attn": False, "type_k": "f32", "type_v": "f16"},
}
LADDER_RUNS = (  # converted checkpoint and GGUF file prefix, plan, its label, GGUF types, settings by label
    ("ladder", LADDER, LADDER_LABEL, HALF_GGUF_TYPES, HALF_LLAMA),
    ("ladder32", LADDER32, LADDER32_LABEL, LADDER32_GGUF_TYPES, LADDER32_LLAMA),
    ("ladder64", LADDER64, LADDER64_LABEL, ("f16",), {k: HALF_LLAMA[k] for k in list(HALF_LLAMA)[:2]}),
)
LADDERS = {prefix: plan for prefix, plan, *_ in LADDER_RUNS}
RECOMMENDED_CT2 = "float32, base set, 1/sqrt(d) folded into the queries (recommended)"
CT2_SETTINGS = {  # label: the key of the converted checkpoint's CTranslate2 directory (see ct2_dirs)
    RECOMMENDED_CT2: "converted+base+fold",
    "float32, base set in the spec, kernel applies 1/sqrt(d)": "converted+base",
    "float32, converter as is (base 10000)": "converted",
}


# ----------------------------------------------------------------------------- models and reference


def prepare_native(name: str, work: Path, env: envs.Env) -> Path:
    """The native float32 BLOOM checkpoint with GPT-2's tokenizer (see the module docstring)."""
    import transformers as T

    out = work / "native"
    if (out / "config.json").exists():
        return out
    tok = work / "gpt2-tokenizer"
    if not (tok / "tokenizer.json").exists():
        env.run([HERE / "worker_llamacpp.py", "tokenizer", env.llama_src / "models" / "ggml-vocab-gpt-2.gguf", tok],
                gguf=True)
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
    plan, _ = plan_checkpoint(data_dir(), request)
    return [h.ladder.floor for h in plan.heads]


def convert_rope(native: Path, work: Path, window: int, floors: dict[str, list[float] | None]) -> dict[str, Path]:
    """``ropebridge convert`` of each plan: the default plan (free base), the fixed base 10000 plan that engines
    dropping the base run as they are (FIXED_BASE: rotary dims and pairs per head), and the ladders named in
    FLOORS (keys of LADDERS, each with its floors per head, or uncalibrated where None)."""
    from ropebridge.convert import convert
    from ropebridge.emulation import PlanRequest

    plans = {"converted": {"dtype": "float32"}, "converted-base10000": {"dtype": "float32", **FIXED_BASE},
             **{key: {**LADDERS[key], "floor": f} for key, f in floors.items()}}
    out = {key: work / key for key in plans}
    for key, extra in plans.items():  # afresh every run: the plan changes with the code (engine files follow)
        convert(native, out[key], PlanRequest(window=window, **extra), force=True)
    return out


def stale(file: Path, src: Path) -> bool:
    """FILE is missing or older than the checkpoint SRC it is made from."""
    return not file.exists() or file.stat().st_mtime < (src / "config.json").stat().st_mtime


# ----------------------------------------------------------------------------- engines


def gguf_files(env: envs.Env, native: Path, converted: dict[str, Path], work: Path) -> dict[str, Path]:
    files = {"native": work / "native-f32.gguf", "converted": work / "converted-f32.gguf",
             "converted+base": work / "converted-f32-base.gguf",
             "converted-base10000": work / "converted-base10000-f32.gguf"}
    for key, src in (("native", native), ("converted", converted["converted"]),
                     ("converted-base10000", converted["converted-base10000"])):
        if stale(files[key], src):
            log.info("convert_hf_to_gguf.py %s --outtype f32", src.name)
            env.run([env.convert_hf_to_gguf, src, "--outtype", "f32", "--outfile", files[key]], gguf=True,
                    log_file=work / f"convert_hf_to_gguf-{key}.log")
    ladders = [run for run in LADDER_RUNS if run[0] in converted]  # none with --quick (main)
    made = [(t, "native", native) for t in HALF_GGUF_TYPES] if ladders else []
    made += [(t, prefix, converted[prefix]) for prefix, _, _, types, _ in ladders for t in types]
    for t, role, src in made:
        key = f"{role}-{t}"
        files[key] = work / f"{key}.gguf"
        if not stale(files[key], src):
            continue
        if t in QUANTIZED:  # from a GGUF made earlier in this loop
            log.info("llama_model_quantize %s-%s -> %s", role, QUANTIZED[t], t)
            env.run([HERE / "worker_llamacpp.py", "quantize", files[f"{role}-{QUANTIZED[t]}"], files[key], t],
                    log_file=work / f"quantize-{key}.log")
        else:
            log.info("convert_hf_to_gguf.py %s --outtype %s", src.name, t)
            env.run([env.convert_hf_to_gguf, src, "--outtype", t, "--outfile", files[key]], gguf=True,
                    log_file=work / f"convert_hf_to_gguf-{key}.log")
    if stale(files["converted+base"], converted["converted"]):
        base = json.loads((converted["converted"] / "config.json").read_text())["rotary_emb_base"]
        env.run([HERE / "worker_llamacpp.py", "set-base", files["converted"], files["converted+base"], base], gguf=True)
    return files


def ct2_dirs(env: envs.Env, native: Path, converted: dict[str, Path], work: Path) -> dict[str, Path]:
    jobs = {"native": (native, []), "converted": (converted["converted"], []),
            "converted+base": (converted["converted"], ["--keep-base"]),
            "converted+base+fold": (converted["converted"], ["--keep-base", "--fold-scale"]),
            "converted-base10000": (converted["converted-base10000"], [])}
    dirs = {key: work / f"ct2-{key.replace('+', '-')}" for key in jobs}
    for key, (src, flags) in jobs.items():
        if stale(dirs[key] / "model.bin", src):
            log.info("CTranslate2 converter: %s %s", src.name, " ".join(flags))
            env.run([HERE / "worker_ct2.py", "convert", src, dirs[key], *flags])
    return dirs


def cached_run(env: envs.Env, worker: str, job: dict, work: Path, *, fresh: bool) -> dict:
    """Run WORKER on JOB, or reuse the result of an identical earlier run: same job, same worker and
    comparison code, same model files (names, sizes, modification times)."""
    model = Path(job["model"])
    files = sorted(model.iterdir()) if model.is_dir() else [model]
    key = hashlib.sha256(json.dumps([job, (HERE / worker).read_text(), (HERE / "_compare.py").read_text(),
                                     [(f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files]],
                                    sort_keys=True).encode()).hexdigest()[:20]
    out = work / "results" / f"{key}.json"
    if out.exists() and not fresh:
        return json.loads(out.read_text())
    out.parent.mkdir(exist_ok=True)
    path = work / f"job-{key}.json"
    path.write_text(json.dumps({**job, "out": str(out) + ".tmp"}))
    t0 = time.perf_counter()
    env.run([HERE / worker, "run", path], gguf=worker == "worker_llamacpp.py")
    result = json.loads(Path(str(out) + ".tmp").read_text())
    result["seconds"] = time.perf_counter() - t0
    out.write_text(json.dumps(result))
    Path(str(out) + ".tmp").unlink()
    path.unlink()
    return result


def summarise(result: dict, ref: dict) -> dict:
    """Metrics of one model in one engine against the reference (and the exact float64 one)."""
    exact = result["exact"]
    result = {**result["transformers"], "greedy": result["greedy"]}
    agree = float(np.mean(np.array(result["argmax"]) == np.array(ref["argmax"])))
    partings = []
    for p, (got, want, gaps) in enumerate(zip(result["greedy"], ref["greedy"], ref["margins"])):
        for step, (a, b) in enumerate(zip(got, want)):
            if a != b:
                partings.append({"prompt": p, "step": step, "reference_margin": gaps[step]})
                break
    return {
        "max_abs_logit_diff": float(np.max(result["max_abs_by_position"])),
        "mean_kl": float(np.mean(result["kl_by_position"])),
        "argmax_agreement": agree,
        "greedy_identical": not partings,
        "greedy_partings": partings,
        "max_abs_by_position": result["max_abs_by_position"],
        "max_abs_vs_exact": float(np.max(exact["max_abs_by_position"])),
        "mean_kl_vs_exact": float(np.mean(exact["kl_by_position"])),
    }


def near_tie(parting: dict, errors: list[float]) -> bool:
    """A parting is a near-tie when the reference's own top-2 margin there is within twice the larger
    logit error of the two engine runs: such a step can go either way in any implementation."""
    return parting["reference_margin"] <= 2 * max(errors)


def engine_runs(engine: str, env: envs.Env, name: str, native: Path, converted: dict[str, Path], work: Path, ref: dict,
                args) -> list[dict]:
    seq, prompts = ref["sequence"], ref["prompts"]
    references = {"transformers": str(work / "reference.npy"), "exact": str(work / "exact.npy")}
    common = {"sequence": seq, "references": references, "prompts": prompts,
              "greedy_tokens": args.greedy_tokens}
    runs = []
    cache: dict[str, dict] = {}

    def once(worker, model, settings):  # a model runs once per settings, whatever rows share it
        key = json.dumps([str(model), settings], sort_keys=True)
        if key not in cache:
            job = {**common, "model": str(model), "settings": settings, "n_ctx": len(seq) + args.greedy_tokens + 64}
            cache[key] = cached_run(env, worker, job, work, fresh=args.fresh)
        return cache[key]

    if engine == "llama.cpp":
        files = gguf_files(env, native, converted, work)
        plan = {k: v for k, v in LLAMA_SETTINGS.items() if not args.quick or v[0] == RECOMMENDED_LLAMA}
        for label, (settings, with_base) in plan.items():
            st = {**settings, "threads": args.threads}
            nat = once("worker_llamacpp.py", files["native"], st)
            conv_file = files["converted+base" if with_base else "converted"]
            conv = once("worker_llamacpp.py", conv_file, st)
            runs.append(record(engine, name, label, {**st, "rope_freq_base": "GGUF metadata" if with_base
                                                     else "not set (10000)", "gguf": "F32"}, nat, conv, ref))
        if args.quick:
            return runs
        st = {**RECOMMENDED_LLAMA, "threads": args.threads}
        conv = once("worker_llamacpp.py", files["converted-base10000"], st)
        runs.append(record(engine, name, FIXED_BASE_LABEL, {**st, "rope_freq_base": "not set (10000)",
                                                            "gguf": "F32", "plan": FIXED_BASE},
                           once("worker_llamacpp.py", files["native"], st), conv, ref))
        floors = "calibrated" if name in CALIBRATED else "uncalibrated"
        for prefix, plan, plan_label, types, settings_by_label in LADDER_RUNS:
            for t in types:
                for label, settings in settings_by_label.items():
                    st = {**settings, "threads": args.threads}
                    runs.append(record(engine, name, f"{plan_label}, {floors}, {t.upper()} GGUF, {label}",
                                       {**st, "rope_freq_base": "not set (10000)", "gguf": t.upper(), "plan": plan,
                                        "floors": floors},
                                       once("worker_llamacpp.py", files[f"native-{t}"], st),
                                       once("worker_llamacpp.py", files[f"{prefix}-{t}"], st), ref))
    elif engine == "transformers-4":
        st = {"threads": args.threads, "dtype": "float32"}
        nat = once("worker_hf4.py", native, st)
        for label, key in (("float32, config as written (legacy rotary_pct/rotary_emb_base keys)", "converted"),
                           ("converted with --rope-base 10000 --rotary-dim 32 --pairs 3", "converted-base10000")):
            if args.quick and key != "converted":
                continue
            conv = once("worker_hf4.py", converted[key], st)
            runs.append(record(engine, name, label, {**st, **({"plan": FIXED_BASE} if key != "converted" else {})},
                               nat, conv, ref))
    else:
        dirs = ct2_dirs(env, native, converted, work)
        st = {"threads": args.threads, "compute_type": "float32", "device": "cpu"}
        nat = once("worker_ct2.py", dirs["native"], st)
        for label, key in CT2_SETTINGS.items():
            if args.quick and label != RECOMMENDED_CT2:
                continue
            conv = once("worker_ct2.py", dirs[key], st)
            runs.append(record(engine, name, label, {
                **st, "rotary_base": "set in the spec" if "base" in key else "converter's (10000)",
                "queries_scale": "1, 1/sqrt(d) folded into the query projection" if "fold" in key
                else "kernel's 1/sqrt(d) (GEMM alpha)"}, nat, conv, ref))
        if args.quick:
            return runs
        conv = once("worker_ct2.py", dirs["converted-base10000"], st)
        runs.append(record(engine, name, FIXED_BASE_LABEL, {**st, "rotary_base": "converter's (10000)",
                                                            "plan": FIXED_BASE}, nat, conv, ref))
    return runs


def record(engine, name, label, settings, nat, conv, ref) -> dict:
    n = summarise(nat, ref)
    c = summarise(conv, ref)
    errors = [n["max_abs_logit_diff"], c["max_abs_logit_diff"]]
    ratio = c["max_abs_logit_diff"] / n["max_abs_logit_diff"] if n["max_abs_logit_diff"] > 0 else float("inf")
    ratio_exact = c["max_abs_vs_exact"] / n["max_abs_vs_exact"]
    unexplained = [p for p in c["greedy_partings"] if not near_tie(p, errors)]
    # An engine's error is its distance from the exact (float64) ALiBi model. The transformers float32
    # reference carries its own ALiBi rounding (2.3e-4 on the demo model at 2K), and an engine whose native
    # BLOOM adds the bias in the same order inherits it (CTranslate2: 1.1e-4 from the reference, 2.2e-4 from
    # exact; transformers 4.x: 0): against that reference an exact conversion would measure as the
    # reference's own error. Both ratios are reported; the criterion uses the exact one.
    return {
        "engine": engine, "model": name, "label": label, "settings": settings,
        "context": len(ref["sequence"]), "greedy_prompts": len(ref["prompts"]),
        "greedy_tokens": len(ref["greedy"][0]),
        "converted_max_abs_logit_diff": c["max_abs_logit_diff"],
        "native_max_abs_logit_diff": n["max_abs_logit_diff"],
        "ratio": ratio,
        "converted_mean_kl": c["mean_kl"], "native_mean_kl": n["mean_kl"],
        "converted_max_abs_logit_diff_vs_exact": c["max_abs_vs_exact"],
        "native_max_abs_logit_diff_vs_exact": n["max_abs_vs_exact"],
        "ratio_vs_exact": ratio_exact,
        "argmax_agreement": c["argmax_agreement"], "native_argmax_agreement": n["argmax_agreement"],
        "greedy_identical": c["greedy_identical"], "native_greedy_identical": n["greedy_identical"],
        "greedy_partings": c["greedy_partings"], "native_greedy_partings": n["greedy_partings"],
        "greedy_partings_not_near_tie": unexplained,
        "criterion": CRITERION,
        "passes": judge(ratio_exact, unexplained),
        "seconds": {"native": nat["seconds"], "converted": conv["seconds"]},
        "converted_max_abs_by_position_256": block_max(c["max_abs_by_position"]),
        "native_max_abs_by_position_256": block_max(n["max_abs_by_position"]),
    }


CRITERION = "ratio_vs_exact <= 1.5 and no greedy parting outside a near-tie"


def judge(ratio_vs_exact: float, partings_not_near_tie: list) -> bool:
    """The issue's criterion (see ``record``): within 1.5x of the engine's native error from the exact
    model, and greedy continuations that part from the reference only at near-ties."""
    return bool(ratio_vs_exact <= 1.5 and not partings_not_near_tie)


def merge(runs: list[dict], out: Path) -> list[dict]:
    """This invocation's runs plus the stored runs of the (engine, model) pairs it did not run, those
    judged again under the current criterion."""
    ran = {(r["engine"], r["model"]) for r in runs}
    kept = [r for r in (json.loads(out.read_text()) if out.exists() else []) if (r["engine"], r["model"]) not in ran]
    for r in kept:
        r["criterion"], r["passes"] = CRITERION, judge(r["ratio_vs_exact"], r["greedy_partings_not_near_tie"])
    return kept + runs


def block_max(values: list[float], block: int = 256) -> list[float]:
    return [float(np.nan_to_num(np.max(values[i:i + block]), nan=np.inf)) for i in range(0, len(values), block)]


# ----------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="demo,bloom560m")
    p.add_argument("--engines", default="llama.cpp,ctranslate2,transformers-4")
    p.add_argument("--context", type=int, default=2048)
    p.add_argument("--window", type=int, default=None, help="conversion window (default: the context)")
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--greedy-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--env-dir", type=Path, default=None)
    p.add_argument("--work-dir", type=Path, default=None)
    p.add_argument("--fresh", action="store_true",
                   help="rebuild every checkpoint, engine file and run (default: reuse what the work directory holds)")
    p.add_argument("--quick", action="store_true",
                   help="demo model, 256 tokens, 2 prompts x 16 tokens, recommended settings; cached engine "
                        "environments only")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    if args.quick:
        args.models, args.context, args.prompts, args.greedy_tokens = "demo", 256, 2, 16
    root = args.env_dir or envs.default_root()
    work_root = args.work_dir or root / "work"
    engines = [e for e in args.engines.split(",") if e]
    bad = [e for e in engines if e not in envs.PACKAGES]
    if bad:
        p.error(f"unknown engine {bad[0]!r}; known: {', '.join(envs.PACKAGES)}")
    env = {e: envs.ensure(e, root, reuse_only=args.quick) for e in engines}
    any_env = env[engines[0]]
    runs = []
    for name in args.models.split(","):
        if name not in ("demo", "bloom560m"):
            p.error(f"unknown model {name!r}; known: demo, bloom560m")
        work = work_root / f"{name}-{args.context}"
        if args.fresh and work.exists():
            shutil.rmtree(work)
        work.mkdir(parents=True, exist_ok=True)
        native = prepare_native(name, work, any_env)
        seq, prompts = token_ids(name, native, args.context, args.prompts, args.prompt_len)
        log.info("%s: transformers float32 reference at %d tokens", name, len(seq))
        ref = reference(native, seq, prompts, args.greedy_tokens, work)
        window = args.window or args.context
        # the ladders run in llama.cpp's half-precision rows only, which --quick skips
        ladders = LADDERS if "llama.cpp" in engines and not args.quick else {}
        floors = {key: ladder_floors(name, window, ladder) for key, ladder in ladders.items()}
        converted = convert_rope(native, work, window, floors)
        for engine in engines:
            log.info("%s: %s", name, engine)
            runs += engine_runs(engine, env[engine], name, native, converted, work, ref, args)
    cols = ["engine", "model", "label", "native_max_abs_logit_diff", "converted_max_abs_logit_diff", "ratio",
            "ratio_vs_exact", "argmax_agreement", "greedy_identical", "passes"]
    print(table(runs, cols))
    out = HERE.parent / "results" / ("engines_quick.json" if args.quick else "engines.json")
    context = {"machine": machine(), "command": " ".join(["python", *sys.argv]),
               "reference": "transformers float32 BloomForCausalLM (eager) on the same token ids"}
    out.write_text(json.dumps(merge([{**r, **context} for r in runs], out), indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
