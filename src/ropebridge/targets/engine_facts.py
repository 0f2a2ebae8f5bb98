"""How each engine runs each target, as data: ``SUPPORT[target][column]`` is a ``support.Support`` (native,
backend or none; tested, measured, run or read; the engine's code; a note), one per column of
``support.COLUMNS``, read from the engines' sources at the versions ``support.ENGINES`` names (or run where it
says so). ``Target.support`` is its target's row; the docs' table, ``plan``'s and ``convert``'s lines and the
model card write them as sentences (``Support.cell``, ``support.runs_in``, ``engines.describe``).
"""

from __future__ import annotations

from .support import B, N, X, Support

_TRANSFORMERS = "`TransformersForCausalLM`"
_SMALL_BASE = "`--rope-base 10000 --rotary-dim 32 --pairs 3`"
_NO_CONVERTER = Support(X, "read", note="no converter")

SUPPORT = {
    "gpt-neox": {
        "transformers": Support(N, "tested"),
        "transformers-4": Support(N, "measured", note="reads the legacy `rotary_pct`/`rotary_emb_base` keys written "
                                                     "beside `rope_parameters`"),
        "vllm": Support(B, "read", _TRANSFORMERS, "its registry maps `GPTNeoXForCausalLM` to it"),
        "sglang": Support(B, "read", note="no GPT-NeoX model of its own"),
        "trtllm": Support(X, "read", note="no GPT-NeoX model; the TensorRT backend that had one was removed"),
        "llama.cpp": Support(N, "measured", note=f"F32 GGUF: set `gptneox.rope.freq_base` in the GGUF, or convert "
                                                 f"with {_SMALL_BASE}; run with `-fa off -ctk f32`"),
        "ctranslate2": Support(N, "measured", note="float32: set `rotary_emb_base` and `layer_norm_eps` in the spec "
                                                   f"and fold 1/√d into the query projection, or convert with "
                                                   f"{_SMALL_BASE}"),
    },
    "starcoder2": {
        "transformers": Support(N, "tested"),
        "transformers-4": Support(X, "measured", note="loads silently wrong"),
        "vllm": Support(B, "read", _TRANSFORMERS, "its registry"),
        "sglang": Support(X, "read", "`starcoder2.py`", "takes head dim = hidden / heads and no rope scaling"),
        "trtllm": Support(X, "not checked"),
        "llama.cpp": Support(X, ""),
        "ctranslate2": Support(X, ""),
    },
    "nemotron": {
        "transformers": Support(N, "tested"),
        "transformers-4": Support(N, "measured", note="the ladder: logits identical to 5.x; the single pair loads "
                                                     "silently wrong (ignores `rope_parameters`)"),
        "vllm": Support(N, "read", "`nemotron.py`", "unchanged from 0.33: `head_dim` from the config, "
                        "`get_act_fn(hidden_act)`, `rope_parameters` to `get_rope`; its rope run on the ladder: "
                        "frequencies and transformers' rotation bit for bit"),
        "sglang": Support(B, "read", note="no Nemotron model of its own"),
        "trtllm": Support(X, "read", note="its Nemotron hard-codes relu²"),
        "llama.cpp": Support(X, "read", note="hard-codes relu², Q/O of n_embd × n_embd"),
        "ctranslate2": _NO_CONVERTER,
    },
    "llama": {
        "transformers": Support(N, "tested"),
        "transformers-4": Support(N, "measured", "`benchmarks/engines/hf4_llama.py`", "float32 5.x's logits bit "
                                  "for bit; it reads the `rope_scaling` written beside `rope_parameters`"),
        "vllm": Support(N, "read", "`llama.py`", "unchanged from 0.33, reads `head_dim`, `attention_bias` for q, k, v "
                        "and o; its rope run: the plan's frequencies and transformers' rotation bit for bit"),
        "sglang": Support(N, "read", "`llama.py`", "takes `rope_parameters` as its `rope_scaling`; its rope run, as "
                          "vLLM's"),
        "trtllm": Support(N, "read", "`Attention`, `RopeParams.from_config`", "`Attention` takes `head_dim` from the "
                          "config and `attention_bias` for q, k, v and o; `RopeParams.from_config` reads "
                          "`rope_theta` and the llama3 `rope_scaling`; the same at 51ea5c9"),
        "llama.cpp": Support(N, "measured", "`benchmarks/engines/llamacpp_llama.py`", "its converter writes the rope "
                             "as `rope_freqs`; F32 GGUF within float32's tolerance"),
        "ctranslate2": _NO_CONVERTER,
    },
    "persimmon": {
        "transformers": Support(N, "tested"),
        "transformers-4": Support(N, "read", note="its Persimmon reads the top-level `partial_rotary_factor` and "
                                                 "`rope_theta` written beside `rope_parameters`; a one-off run on a "
                                                 "BLOOM pico gave 5.x's logits bit for bit in float32 and bfloat16"),
        "vllm": Support(X, "read", note="removed in 0.25: `PersimmonForCausalLM` in its registry's previously "
                                        "supported models"),
        "sglang": Support(N, "read", "`persimmon.py`", "head dim hidden / heads, `get_rope` with "
                          "`config.partial_rotary_factor` and `rope_parameters[\"rope_theta\"]`, biases on the fused "
                          "per-head QKV reordered at load; its rope run with the transformers 5.19 it pins: the "
                          "plan's frequencies, transformers' rotation bit for bit. With transformers 5.20 or later "
                          "the config object no longer has the `partial_rotary_factor` it reads directly"),
        "trtllm": Support(X, "not checked"),
        "llama.cpp": Support(X, "not checked"),
        "ctranslate2": _NO_CONVERTER,
    },
    "stablelm": {
        "transformers": Support(N, "tested"),
        "transformers-4": Support(N, "read", note="its StableLM reads the top-level `partial_rotary_factor` and "
                                                 "`rope_theta` written beside `rope_parameters`"),
        "vllm": Support(B, "read", _TRANSFORMERS, "its registry maps `StableLmForCausalLM` to it and it ships no "
                        "`stablelm.py` (0.33 ran it natively); transformers' StableLM calls the attention interface "
                        "vLLM sets"),
        "sglang": Support(N, "read", "`stablelm.py`", "head dim hidden / heads, `use_qkv_bias`, SiLU and a "
                          "sequential residual fixed; it reads `rope_pct`, which the config writes; its rope run "
                          "with transformers 5.19 and 5.20.2: the plan's frequencies and transformers' rotation bit "
                          "for bit"),
        "trtllm": Support(X, "read", note="no StableLM model"),
        "llama.cpp": Support(N, "read", note=f"its converter's StableLM writes no RoPE base, so the GGUF needs "
                                             f"`stablelm.rope.freq_base` set, or a conversion with {_SMALL_BASE}"),
        "ctranslate2": _NO_CONVERTER,
    },
}
