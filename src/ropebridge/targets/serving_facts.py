"""What the engines' serving options do to a conversion, as data: the settings measured to hold
(``benchmarks/engines/serving_options.py``: the five real-text families' ``--engine`` conversions against exact
ALiBi, the engine's own model of the source beside them), each with the benchmark's settings it stands for and the
numbers measured. The KV cache is not listed here: whether a cache holds depends on the plan, which
``emulation.kv_cache`` predicts (and ``plan``/``convert --kv-cache-dtype`` refuse where it breaks).
``tests/targets/test_serving_facts.py`` holds every fact to the stored results.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Measured:
    """A setting of ``engine`` measured to hold: ``setting`` as its flags say it, the benchmark's ``results``
    (setting names) it stands for, and what was measured (``words``)."""

    engine: str
    setting: str
    results: tuple[str, ...]
    words: str


MEASURED = (
    Measured("vllm", "--tensor-parallel-size 2", ("--tensor-parallel-size 2",),
             "perplexity within 0.12% of exact's"),
    Measured("vllm", "prefix caching", ("prefix caching, prompts sharing the scored prefix",),
             "prompts served from the cache, perplexity within 0.14%"),
    Measured("vllm", "chunked prefill", ("chunked prefill, --max-num-batched-tokens 256",),
             "a prompt 4 times the chunk, perplexity within 0.14%"),
    Measured("vllm", "batches of mixed lengths", ("8 requests of mixed lengths in one batch",),
             "8 requests of 128 to 1,024 tokens, perplexity within 0.17%"),
    Measured("sglang", "the radix cache", ("radix cache, prompts sharing the scored prefix",),
             "prompts served from the cache but for their last token, perplexity within 0.10%"),
    Measured("sglang", "chunked prefill", ("chunked prefill, --chunked-prefill-size 256",),
             "a prompt 4 times the chunk, perplexity within 0.11%"),
    Measured("sglang", "batches of mixed lengths", ("8 requests of mixed lengths in one batch",),
             "8 requests of 128 to 1,024 tokens, perplexity within 0.10%"),
    Measured("llama.cpp", "--flash-attn on, off or auto", ("F16, K/V f16 (defaults)", "F16, -fa off"),
             "perplexity within 0.03%"),
    Measured("llama.cpp", "--cache-type-v q8_0", ("F16, -ctv q8_0 -fa on",),
             "the values carry no pair: perplexity within 0.03%"),
    Measured("llama.cpp", "Q8_0 and Q4_K_M GGUF files", ("Q8_0", "Q4_K_M"),
             "within 1.32 times the mean |Δ log p| of llama.cpp's own model of the source under them"),
)


def measured(engine: str) -> tuple[Measured, ...]:
    """The settings of ``engine`` measured to hold."""
    return tuple(m for m in MEASURED if m.engine == engine)
