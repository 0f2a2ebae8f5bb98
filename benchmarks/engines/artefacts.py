"""The engine benchmark's artefacts: what each engine runs, made by the engine's own converters from the
checkpoints (GGUF files for llama.cpp, CTranslate2 directories, the checkpoints themselves for transformers 4.x)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from benchmarks.engines import envs
from benchmarks.engines.settings import HALF_GGUF_TYPES, LADDER_RUNS, QUANTIZED
from benchmarks.engines.workers import FOLDER as WORKERS

log = logging.getLogger("engines")


def stale(file: Path, src: Path) -> bool:
    """FILE is missing or older than the checkpoint SRC it is made from."""
    return not file.exists() or file.stat().st_mtime < (src / "config.json").stat().st_mtime


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
    made += [(t, prefix, converted[prefix]) for prefix, _, types, _ in ladders for t in types]
    for t, role, src in made:
        key = f"{role}-{t}"
        files[key] = work / f"{key}.gguf"
        if not stale(files[key], src):
            continue
        if t in QUANTIZED:  # from a GGUF made earlier in this loop
            log.info("llama_model_quantize %s-%s -> %s", role, QUANTIZED[t], t)
            env.run([WORKERS / "worker_llamacpp.py", "quantize", files[f"{role}-{QUANTIZED[t]}"], files[key], t],
                    log_file=work / f"quantize-{key}.log")
        else:
            log.info("convert_hf_to_gguf.py %s --outtype %s", src.name, t)
            env.run([env.convert_hf_to_gguf, src, "--outtype", t, "--outfile", files[key]], gguf=True,
                    log_file=work / f"convert_hf_to_gguf-{key}.log")
    if stale(files["converted+base"], converted["converted"]):
        base = json.loads((converted["converted"] / "config.json").read_text())["rotary_emb_base"]
        env.run([WORKERS / "worker_llamacpp.py", "set-base", files["converted"], files["converted+base"], base],
                gguf=True)
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
            env.run([WORKERS / "worker_ct2.py", "convert", src, dirs[key], *flags])
    return dirs


def hf4_models(env: envs.Env, native: Path, converted: dict[str, Path], work: Path) -> dict[str, Path]:
    """transformers 4.x loads the checkpoints as they are."""
    return {"native": native, **converted}
