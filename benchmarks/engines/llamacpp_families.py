"""llama.cpp's own ALiBi beside the conversions, per family: the embedded MPT, Jais and Baichuan real-text models
through llama.cpp's converter and its native MPT, JAIS and Baichuan graphs, and their ``--engine llama.cpp``
conversions through the same converter, in one engine, against the exact float64 ALiBi forward pass.

    python -m benchmarks.engines.llamacpp_families [--models demo-mpt,demo-jais,demo-baichuan] [--write]

The llama.cpp environment of ``envs.py`` (llama-cpp-python 0.3.36 and the ``convert_hf_to_gguf.py`` of its
llama.cpp). llama.cpp runs ALiBi natively for BLOOM (``run.py``), MPT, JAIS, Refact (``llamacpp_llama.py``) and
Baichuan-13B (``llama-arch``). Per model:

- **native**: the source with GPT-2's tokenizer and vocabulary (``gpt2_vocab.py``: llama.cpp's converter refuses
  the demos' own tokenizer; the model's ids keep their rows), ``architectures`` as the hub's checkpoints name it
  where transformers' spelling differs (MPT: ``MPTForCausalLM``, which llama.cpp registers; transformers writes
  ``MptForCausalLM``), then ``convert_hf_to_gguf.py --outtype f32``;
- **converted**: ``ropebridge convert SRC DST --engine llama.cpp --dtype float32 --window CONTEXT`` (gpt-neox for
  MPT, stablelm for Jais, llama for Baichuan), the same tokenizer step, ``convert_hf_to_gguf.py --outtype f32``,
  and, where llama.cpp's converter writes no RoPE base (its GPT-NeoX and StableLM), the base set in the GGUF
  (``worker_llamacpp.py set-base``), as docs/targets.md says to.

Both run with ``-fa off`` and an f32 K/V cache (``worker_llamacpp.py run``) on the first CONTEXT tokens of the
held-out text and 4 prompts continued greedily by 32 tokens, against the exact model's logits and greedy
continuations (``scoring.exact``). A pair passes, as ``run.py``'s rows do, when the converted model's max |Δlogit|
from exact is within 1.5x the native model's in the same engine and its greedy tokens part from exact's only at
near-ties (exact's top-2 margin within twice the larger of the two errors). A native the engine cannot build is a
row saying what it said.

The table goes to stdout; ``--write`` stores ``benchmarks/results/llamacpp_families.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from benchmarks._common import machine, started_as
from benchmarks.engines import envs
from benchmarks.engines.scoring import GREEDY, exact, token_ids
from benchmarks.engines.workers import FOLDER as WORKERS

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


log = logging.getLogger("engines")
RESULTS = ROOT / "benchmarks" / "results" / "llamacpp_families.json"
MODELS = ("demo-mpt", "demo-jais", "demo-baichuan")
HUB_ARCHITECTURE = {"mpt": "MPTForCausalLM"}  # the hub's spelling where transformers' differs
# converter flags tried where the converter as is fails on the source: JAIS reads its slopes tensor with .item(),
# which fails on the lazy (meta) tensors the converter uses by default
RETRY_FLAGS = {"jais": ["--no-lazy"]}
# llama.cpp's JAIS requires an output.weight, which its converter takes from lm_head.weight only: a source whose
# head is tied to its embedding (and stores no lm_head) gets the tied head written out, the same matrix
UNTIE = {"jais": ("transformer.wte.weight", "lm_head.weight")}
SETTINGS = {"flash_attn": False, "type_k": "f32", "type_v": "f32", "threads": 2}
RATIO = 1.5


def exact_logits(name: str, ids: list[int], work: Path) -> Path:
    """The exact float64 model's logits of IDS, (s, V) float64, saved once."""
    import torch

    from ropebridge.checkpoint.model import SourceModel
    from ropebridge.checkpoint.reference import reference_hidden
    from ropebridge.demo import data_dir

    out = work / f"exact-{name}-{len(ids)}.npy"
    if not out.exists():
        model = SourceModel(data_dir(name))
        logits = reference_hidden(model, torch.tensor(ids)) @ model.head_rows(0, model.info.vocab_size).T
        np.save(out, logits.numpy())
    return out


def gguf(env: envs.Env, checkpoint: Path, base_from_config: bool, log_dir: Path, flags: tuple[str, ...] = (),
         vocab: bool = True, outtype: str = "f32") -> Path:
    """CHECKPOINT with GPT-2's vocabulary (unless it has it), through llama.cpp's converter at OUTTYPE with FLAGS
    (and the base set where asked)."""
    if vocab:
        env.run([WORKERS / "gpt2_vocab.py", env.llama_src, checkpoint], gguf=True,
                log_file=log_dir / f"{checkpoint.name}-vocab.log")
    out = checkpoint.with_suffix(".gguf")
    env.run([env.convert_hf_to_gguf, checkpoint, "--outtype", outtype, "--outfile", out, *flags], gguf=True,
            log_file=log_dir / f"{checkpoint.name}-gguf.log")
    if base_from_config:
        config = json.loads((checkpoint / "config.json").read_text())
        base = config.get("rotary_emb_base") or config.get("rope_theta") or config["rope_parameters"]["rope_theta"]
        based = checkpoint.with_suffix(".base.gguf")
        env.run([WORKERS / "worker_llamacpp.py", "set-base", out, based, str(base)], gguf=True)
        out = based
    return out


def prepare_native(native: Path, family: str) -> str | None:
    """A copy of a source made ready for llama.cpp's converter, in place: the tied head written out where its graph
    needs one (``UNTIE``), ``architectures`` as the hub spells it (``HUB_ARCHITECTURE``). Returns what was written
    for the head, if anything."""
    config = json.loads((native / "config.json").read_text())
    if family in HUB_ARCHITECTURE:
        config["architectures"] = [HUB_ARCHITECTURE[family]]
        (native / "config.json").write_text(json.dumps(config, indent=1))
    if family not in UNTIE:
        return None
    from safetensors.torch import load_file, save_file

    emb, head = UNTIE[family]
    tensors = load_file(native / "model.safetensors")
    if head in tensors:
        return None
    tensors[head] = tensors[emb].clone()
    save_file(tensors, native / "model.safetensors", metadata={"format": "pt"})
    return f"the tied head written as {head}"


def run(env: envs.Env, model: Path, ids: list[int], prompts: list[list[int]], reference: Path, work: Path) -> dict:
    job = work / f"{model.stem}.job.json"
    out = work / f"{model.stem}.result.json"
    job.write_text(json.dumps({"model": str(model), "sequence": ids, "references": {"exact": str(reference)},
                               "prompts": prompts, "greedy_tokens": GREEDY, "n_ctx": len(ids) + GREEDY + 64,
                               "settings": SETTINGS, "out": str(out)}))
    env.run([WORKERS / "worker_llamacpp.py", "run", job], gguf=True)
    return json.loads(out.read_text())


def summary(result: dict, ref: dict) -> dict:
    e = result["exact"]
    partings = []
    for p, (got, want, gaps) in enumerate(zip(result["greedy"], ref["greedy"], ref["margins"])):
        step = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), None)
        if step is not None:
            partings.append({"prompt": p, "step": step, "exact_margin": gaps[step]})
    return {"max_abs_logit_diff": float(np.max(e["max_abs_by_position"])),
            "mean_kl": float(np.mean(e["kl_by_position"])),
            "argmax_agreement": float(np.mean(np.array(e["argmax"]) == np.array(
                [int(np.argmax(r)) for r in np.load(ref["logits"], mmap_mode="r")]))),
            "greedy_partings": partings}


def _last_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return lines[-1][:300] if lines else str(exc)[:300]


def case(env: envs.Env, name: str, context: int, work: Path) -> dict:
    from ropebridge.demo import data_dir

    src = data_dir(name)
    ids, prompts = token_ids(name, context + 1)  # CONTEXT ids scored
    ref = {**exact(name, ids, prompts, work), "logits": str(exact_logits(name, ids, work))}
    family = json.loads((src / "config.json").read_text())["model_type"]
    row = {"model": name, "family": family, "context": len(ids), "settings": "-fa off -ctk f32 -ctv f32, F32 GGUF"}
    native = work / f"{name}-native"
    shutil.rmtree(native, ignore_errors=True)
    shutil.copytree(src, native)
    untied = prepare_native(native, family)
    if untied:
        row["native_head"] = untied
    try:
        row["native"] = summary(run(env, gguf(env, native, False, work), ids, prompts, Path(ref["logits"]), work), ref)
    except RuntimeError as exc:  # llama.cpp's converter or loader refused the source: the row says what it said
        row["native"] = {"refused": _last_line(exc)}
        flags = RETRY_FLAGS.get(family)
        if flags:
            try:
                result = run(env, gguf(env, native, False, work, tuple(flags), vocab=False), ids, prompts,
                             Path(ref["logits"]), work)
                row["native"] = {**summary(result, ref), "as_is": row["native"]["refused"], "flags": flags}
            except RuntimeError as again:
                row["native"]["with_flags"] = f"{' '.join(flags)}: {_last_line(again)}"
    conv = work / f"{name}-llamacpp"
    shutil.rmtree(conv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "ropebridge", "convert", str(src), str(conv), "--engine", "llama.cpp",
                    "--dtype", "float32", "--window", str(context)], check=True, capture_output=True)
    record = json.loads((conv / "ropebridge.json").read_text())
    row.update(target=record["target"], strategy=record["plan"]["strategy"])
    row["converted"] = summary(run(env, gguf(env, conv, record["target"] != "llama", work), ids, prompts,
                                   Path(ref["logits"]), work), ref)
    c, n = row["converted"], row["native"]
    if "refused" in n:
        row["ratio_vs_exact"] = None
        larger = c["max_abs_logit_diff"]
    else:
        row["ratio_vs_exact"] = c["max_abs_logit_diff"] / max(n["max_abs_logit_diff"], 1e-30)
        larger = max(c["max_abs_logit_diff"], n["max_abs_logit_diff"])
    far = [p for p in c["greedy_partings"] if p["exact_margin"] > 2 * larger]
    row["passes"] = (row["ratio_vs_exact"] is None or row["ratio_vs_exact"] <= RATIO) and not far
    return row


def table(payload: dict) -> str:
    """The stored rows as markdown."""
    def greedy(side: dict) -> str:
        parts = side.get("greedy_partings")
        return "identical" if not parts else f"{len(parts)} of 4 part (exact margin ≤ " \
            f"{max(p['exact_margin'] for p in parts):.2g})"

    out = ["| model | llama.cpp native: vs exact, greedy | converted (target, strategy): vs exact, greedy | ratio | "
           "passes |", "|---|---|---|---:|---|"]
    for r in payload["rows"]:
        n, c = r["native"], r["converted"]
        native = (f"refused: {n['refused']}" if "refused" in n else
                  f"{n['max_abs_logit_diff']:.2g}, {greedy(n)}")
        if "as_is" in n:
            native += f" (converter with `{' '.join(n['flags'])}`; as is: {n['as_is']})"
        if "with_flags" in n:
            native += f"; with {n['with_flags']}"
        if r.get("native_head"):
            native += f"; {r['native_head']}"
        ratio = "—" if r["ratio_vs_exact"] is None else f"{r['ratio_vs_exact']:.2g}"
        out.append(f"| {r['model']} ({r['family']}) | {native} | {r['target']}, {r['strategy']}: "
                   f"{c['max_abs_logit_diff']:.2g}, {greedy(c)} | {ratio} | {'yes' if r['passes'] else 'no'} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--context", type=int, default=2048)
    p.add_argument("--env-dir", type=Path, default=None)
    p.add_argument("--work-dir", type=Path, default=None)
    p.add_argument("--write", action="store_true")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    root = args.env_dir or envs.default_root()
    env = envs.ensure("llama.cpp", root)
    work = (args.work_dir or root / "work") / f"llamacpp-families-{args.context}"
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.models.split(","):
        log.info("%s", name)
        rows.append(case(env, name, args.context, work))
    payload = {"command": started_as(), "llama_cpp_python": envs.LLAMA_CPP_PYTHON, "rows": rows}
    print(table(payload))
    if args.write:
        RESULTS.write_text(json.dumps({"machine": machine(), **payload}, indent=1))
        print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
