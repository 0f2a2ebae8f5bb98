"""Runs inside the CTranslate2 engine environment (never ropebridge's).

    python worker_ct2.py convert SRC OUT [--keep-base] [--fold-scale]
    python worker_ct2.py run JOB.json

``convert`` runs CTranslate2's own Transformers converter (the code behind ``ct2-transformers-converter``)
in float32. Its GPT-NeoX loader drops two values the checkpoint's config.json carries: the RoPE base
(``rotary_emb_base``; 10000 applies) and ``layer_norm_eps`` (CTranslate2's default 1e-5 applies).
With ``--keep-base`` they are written into the converted spec, the fields CTranslate2 itself defines
(``self_attention.rotary_base`` per layer, ``config.layer_norm_epsilon``), the same kind of step as
setting ``rope.freq_base`` in a GGUF file; kernels stay the engine's.

``--fold-scale`` (GPT-NeoX only) moves the attention scale 1/√d out of the kernel: the query rows of the
fused QKV projection (weight and bias) are multiplied by CTranslate2's own float32 1/√d, once, in float64,
and the spec's ``queries_scale`` (a field CTranslate2 defines) is set to 1. Why: CTranslate2 passes the
scale as the alpha of its q·kᵀ GEMM, and its result is that of a product whose *keys* were scaled first
(a GEMM may fold alpha into its packed operand; with MKL and with oneDNN alike). For RoPE-emulated ALiBi
that rounds alpha·sin(jθ), a relative 2^-24 on each of the two large products (≈ m·√d·position) that
cancel in the score, so the error has bands where the binade of alpha·position is young (demo model: query
positions in (1.5·2^k, 2^(k+1)]). A torch re-run of the converted demo model with the keys scaled before
the product reproduces CTranslate2's logits to 1.3e-5 (the error it explains: 3.4e-4). With the scale
folded into the queries, alpha is 1 and the products round no more than the queries' own values make them
(demo model: exact again, 1.2e-5 from the exact result).

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


class SpecSettingConverter(TransformersConverter):
    """CTranslate2's converter, then the spec fields named in the module docstring."""

    def __init__(self, src: str, *, keep_base: bool, fold_scale: bool):
        super().__init__(src, low_cpu_mem_usage=True)
        self.keep_base, self.fold_scale = keep_base, fold_scale

    def _load(self):
        spec = super()._load()
        config = json.loads((Path(self._model_name_or_path) / "config.json").read_text())
        if config.get("model_type") != "gpt_neox":
            return spec
        if self.keep_base:
            base = np.float32(config.get("rotary_emb_base", 10000))
            for layer in spec.decoder.layer:
                layer.self_attention.rotary_base = base
            spec.config.layer_norm_epsilon = float(config["layer_norm_eps"])
        if self.fold_scale:
            heads = config["num_attention_heads"]
            d = config["hidden_size"] // heads
            scale = float(np.float32(1) / np.sqrt(np.float32(d)))  # the kernel's own: 1.f / std::sqrt(float(d))
            for layer in spec.decoder.layer:
                att = layer.self_attention
                for name in ("weight", "bias"):  # rows [Q | K | V] after CTranslate2's own reordering
                    t = np.array(getattr(att.linear[0], name), dtype=np.float32)
                    t[:heads * d] = (t[:heads * d].astype(np.float64) * scale).astype(np.float32)
                    setattr(att.linear[0], name, t)
                att.queries_scale = np.float32(1)
        return spec


def convert(src: str, out: str, keep_base: bool, fold_scale: bool) -> int:
    conv = SpecSettingConverter(src, keep_base=keep_base, fold_scale=fold_scale)  # no flag: the spec as converted
    conv.convert(out, quantization="float32", force=True)
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
        sys.exit(convert(sys.argv[2], sys.argv[3], "--keep-base" in sys.argv[4:], "--fold-scale" in sys.argv[4:]))
    sys.exit(run(sys.argv[2]))
