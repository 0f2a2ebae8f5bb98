"""Runs inside the CTranslate2 engine environment (never ropebridge's).

    python worker_ct2.py convert SRC OUT [--keep-base]
    python worker_ct2.py run JOB.json

``convert`` runs CTranslate2's own Transformers converter (the code behind ``ct2-transformers-converter``)
in float32. Its GPT-NeoX loader drops two values the checkpoint's config.json carries: the RoPE base
(``rotary_emb_base``; 10000 applies) and ``layer_norm_eps`` (CTranslate2's default 1e-5 applies).
With ``--keep-base`` they are written into the converted spec, the fields CTranslate2 itself defines
(``self_attention.rotary_base`` per layer, ``config.layer_norm_epsilon``), the same kind of step as
setting ``rope.freq_base`` in a GGUF file; weights and kernels stay the engine's.

``run`` JOB: {"model": DIR, "sequence": [ids], "references": {name: NPY}, "prompts": [[ids]], "greedy_tokens": K,
"settings": {"threads": n}, "out": JSON}: the comparison of the logits with each reference (``_compare``)
and the K greedy tokens after each prompt from the engine's own decoding loop (``generate_tokens``,
top-k 1, KV cache).
"""

import json
import sys
from pathlib import Path

import ctranslate2
import numpy as np
from ctranslate2.converters import TransformersConverter


class BaseKeepingConverter(TransformersConverter):
    def _load(self):
        spec = super()._load()
        config = json.loads((Path(self._model_name_or_path) / "config.json").read_text())
        if config.get("model_type") == "gpt_neox":
            base = np.float32(config.get("rotary_emb_base", 10000))
            for layer in spec.decoder.layer:
                layer.self_attention.rotary_base = base
            spec.config.layer_norm_epsilon = float(config["layer_norm_eps"])
        return spec


def convert(src: str, out: str, keep_base: bool) -> int:
    cls = BaseKeepingConverter if keep_base else TransformersConverter
    cls(src, low_cpu_mem_usage=True).convert(out, quantization="float32", force=True)
    return 0


def run(job_path: str) -> int:
    from _compare import against_references

    job = json.loads(Path(job_path).read_text())
    gen = ctranslate2.Generator(job["model"], device="cpu", compute_type="float32",
                                inter_threads=1, intra_threads=job["settings"]["threads"])
    logits = np.array(gen.forward_batch([job["sequence"]]))[0]  # (s, V)
    result = against_references(logits, job["references"])
    del logits
    vocab = json.loads((Path(job["model"]) / "vocabulary.json").read_text())
    index = {tok: i for i, tok in enumerate(vocab)}
    result["greedy"] = [
        [index[step.token] for step in gen.generate_tokens([vocab[i] for i in prompt], max_length=job["greedy_tokens"],
                                                           sampling_topk=1, end_token=[])]
        for prompt in job["prompts"]]
    Path(job["out"]).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "convert":
        sys.exit(convert(sys.argv[2], sys.argv[3], "--keep-base" in sys.argv[4:]))
    sys.exit(run(sys.argv[2]))
