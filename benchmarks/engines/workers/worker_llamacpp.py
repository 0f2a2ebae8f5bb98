"""Runs inside the llama.cpp engine environment (never ropebridge's), with llama.cpp's ``gguf-py`` on the
path.

    python worker_llamacpp.py tokenizer LLAMA_CPP_DIR OUT_DIR
    python worker_llamacpp.py set-base IN.gguf OUT.gguf BASE|CHECKPOINT
    python worker_llamacpp.py quantize IN.gguf OUT.gguf TYPE
    python worker_llamacpp.py run JOB.json
    python worker_llamacpp.py speed JOB.json

``tokenizer`` writes GPT-2's tokenizer as llama.cpp ships it into OUT_DIR (``gpt2_vocab.gpt2_tokenizer``).

``set-base`` copies a GGUF file with ``<arch>.rope.freq_base`` set (llama.cpp's GPT-NeoX converter writes
none, so 10000 would apply), through gguf-py's own metadata copier: BASE, or the ``rotary_emb_base`` of the
converted CHECKPOINT the GGUF was made from.

``quantize`` writes IN quantized to TYPE (``QUANT_FTYPES``) by llama.cpp's own quantizer
(``llama_model_quantize``, what ``llama-quantize`` calls, with its default parameters); its converter writes
no K-quants.

``run`` JOB: {"model": GGUF, "sequence": [ids], "references": {name: NPY}, "prompts": [[ids]], "greedy_tokens": K,
"n_ctx": C, "settings": {"flash_attn": bool, "type_k": "f32"|"f16", "type_v": ..., "threads": n},
"out": JSON}. Writes the comparison of the logits with each reference (``_compare``) and the K greedy
tokens after each prompt, generated one token at a time through the engine's KV cache.

``speed`` JOB: {"model": GGUF, "sequence": [ids], "prefill": P, "decode_tokens": K, "rounds": R, "n_ctx": C,
"threads": n, "out": JSON}: the seconds of R prefills of the first P ids (one ``eval``, after a warm-up) and of R
decodes of K tokens one at a time after a 32-token prompt, the engine's defaults otherwise (f16 K/V cache).
"""

import json
import sys
from pathlib import Path

GGML_TYPES = {"f32": 0, "f16": 1}  # llama_cpp.GGML_TYPE_F32, GGML_TYPE_F16
QUANT_FTYPES = {"q4_k_m": "LLAMA_FTYPE_MOSTLY_Q4_K_M", "q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0"}


def tokenizer(llama_dir: str, out: str) -> int:
    from gpt2_vocab import gpt2_tokenizer

    gpt2_tokenizer(Path(llama_dir), Path(out))
    return 0


def set_base(src: str, dst: str, base: str) -> int:
    """BASE: a number, or a converted checkpoint directory whose config.json carries ``rotary_emb_base``."""
    import gguf

    if Path(base).is_dir():
        base = json.loads((Path(base) / "config.json").read_text())["rotary_emb_base"]
    from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata

    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(dst, arch=arch, endianess=reader.endianess)
    copy_with_new_metadata(reader, writer, {f"{arch}.rope.freq_base": MetadataDetails(
        gguf.GGUFValueType.FLOAT32, float(base))}, [])
    return 0


def quantize(src: str, dst: str, kind: str) -> int:
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, QUANT_FTYPES[kind])
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), params)
    return 0 if rc == 0 else 1


def run(job_path: str) -> int:
    import llama_cpp
    import numpy as np

    from _compare import against_references

    job = json.loads(Path(job_path).read_text())
    st = job["settings"]
    llm = llama_cpp.Llama(
        model_path=job["model"], n_ctx=job["n_ctx"], n_batch=job["n_ctx"], n_ubatch=min(job["n_ctx"], 512),
        logits_all=True, flash_attn=st["flash_attn"], type_k=GGML_TYPES[st["type_k"]],
        type_v=GGML_TYPES[st["type_v"]], n_threads=st["threads"], n_threads_batch=st["threads"],
        seed=0, verbose=False)
    ids = job["sequence"]
    llm.eval(ids)
    result = against_references(llm.scores[: len(ids)], job["references"])
    greedy = []
    for prompt in job["prompts"]:
        llm.reset()
        llm.eval(prompt)
        new = []
        for _ in range(job["greedy_tokens"]):
            nxt = int(np.argmax(llm.scores[llm.n_tokens - 1]))
            new.append(nxt)
            llm.eval([nxt])
        greedy.append(new)
    result["greedy"] = greedy
    Path(job["out"]).write_text(json.dumps(result))
    return 0


def speed(job_path: str) -> int:
    import time

    import llama_cpp
    import numpy as np

    job = json.loads(Path(job_path).read_text())
    llm = llama_cpp.Llama(model_path=job["model"], n_ctx=job["n_ctx"], n_batch=job["prefill"], n_ubatch=512,
                          n_threads=job["threads"], n_threads_batch=job["threads"], seed=0, verbose=False)
    ids = job["sequence"]
    out = {"prefill_seconds": [], "decode_seconds": []}
    for r in range(job["rounds"] + 1):  # the first is a warm-up
        llm.reset()
        t = time.perf_counter()
        llm.eval(ids[:job["prefill"]])
        if r:
            out["prefill_seconds"].append(time.perf_counter() - t)
        llm.reset()
        llm.eval(ids[:32])
        t = time.perf_counter()
        for _ in range(job["decode_tokens"]):
            llm.eval([int(np.argmax(llm.scores[llm.n_tokens - 1]))])
        if r:
            out["decode_seconds"].append(time.perf_counter() - t)
    Path(job["out"]).write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    cmd, *rest = sys.argv[1:]
    if cmd == "tokenizer":
        sys.exit(tokenizer(*rest))
    if cmd == "set-base":
        sys.exit(set_base(*rest))
    if cmd == "quantize":
        sys.exit(quantize(*rest))
    if cmd == "speed":
        sys.exit(speed(*rest))
    sys.exit(run(*rest))
