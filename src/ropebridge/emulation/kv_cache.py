"""A KV cache in another format than the model's dtype, and what it does to a plan.

An engine stores every key after its rotation, and the emulation lives on the keys' rotary dims: pair r's k is
``(0, s)`` rotated to ``s (-sin θj, cos θj)`` (s = the head's split, 1 for the ladder). A cache coarser than the
model's dtype rounds those components again, and the score error of pair r is ``q_r · Δk``: ALiBi's bias, added
inside the kernel, is never stored, which is why the engines' own ALiBi models do not feel it.

``FORMATS``: each cache format by the name the engines give it (vLLM's and SGLang's ``--kv-cache-dtype``, llama.cpp's
``--cache-type-k``), as data: a float format rounds each value relative to itself (unit roundoff ``u``, largest
finite value ``top``); a block format stores blocks of 32 values along the head dim with one scale each, every
value within half a step of ``block max / levels`` (q8_0: 127 levels each side; q4_0: 8), and llama.cpp's CPU
kernels multiply it with the query quantized the same way to q8_0 (``query_levels``: its ``vec_dot_type``), so the
query's pairs, whose amplitudes span orders of magnitude within a block, are rounded to its largest's 1/254.

The prediction (``cache_error``), as ``ladder_fit`` predicts the dtype's own rounding (uniform rounding within half
a step, independent, the extreme over the window's (query, key) pairs): the keys' term ``extreme · σ_k ·
sqrt(Σ_r A_r²)``, σ_k = u/√3 or 1/(2 levels √3) per unit amplitude; for a block format the query's term ``extreme
· sqrt(R/2) · A_max / (2 query_levels √3)`` (R components, each times a key component of mean square 1/2).

A cache *holds* for a plan (``holds``) where it adds nothing (``auto``; a float format no coarser than the plan's
dtype, every stored value within its range: the values are the model's, stored again as they are), or where its
prediction is within the plan's own predicted rounding. Measured (``benchmarks/engines/serving_options.py``):
fp8 (e4m3) +4.6% perplexity on the BLOOM demo's bfloat16 conversion (transformers' cache rounded to fp8 as vLLM
stores it), e5m2 +15%; SGLang's own fp8_e4m3 cache +4.7% to +11.4% on the five families' bfloat16 conversions, fp8_e5m2
+15% to +25%; llama.cpp's q8_0 K cache +0.5% to +3.2% on float16 conversions and +0.5% to +0.9% on
bfloat16 ones, q4_0 +160% to +650%; an f16 cache and a q8_0 V cache hold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..numerics import largest, unit_roundoff
from .ladder_fit import extreme_factor

BLOCK = 32  # values per block of llama.cpp's quantized caches


@dataclass(frozen=True)
class CacheFormat:
    """How a cache stores a value: ``kind`` ``float`` (unit roundoff ``u``, largest finite ``top``) or ``block``
    (``levels`` steps each side of zero per block of ``BLOCK``, the query quantized to ``query_levels`` as the
    kernel multiplies); the engines that name it so."""

    name: str
    kind: str
    engines: tuple[str, ...]
    u: float = 0.0
    top: float = math.inf
    levels: int = 0
    query_levels: int = 0

    @property
    def sigma(self) -> float:
        """The rounding of a pair's score per unit amplitude (module doc)."""
        step = self.u if self.kind == "float" else 1 / (2 * self.levels)
        return step / math.sqrt(3)


# SGLang's mxfp8 and fp4 caches (Blackwell GPUs only) are not modelled: a plan is never made for them
_VLLM, _LLAMA, _SGLANG = ("vllm",), ("llama.cpp",), ("sglang",)
FORMATS = {f.name: f for f in (
    CacheFormat("auto", "float", ("vllm", "transformers", "sglang")),  # the model's own dtype: nothing more
    CacheFormat("f32", "float", _LLAMA, u=unit_roundoff("float32"), top=largest("float32")),
    CacheFormat("bfloat16", "float", _VLLM + _SGLANG, u=unit_roundoff("bfloat16"), top=largest("bfloat16")),
    CacheFormat("bf16", "float", _LLAMA + _SGLANG, u=unit_roundoff("bfloat16"), top=largest("bfloat16")),
    CacheFormat("float16", "float", _VLLM, u=unit_roundoff("float16"), top=largest("float16")),
    CacheFormat("f16", "float", _LLAMA, u=unit_roundoff("float16"), top=largest("float16")),
    CacheFormat("fp8", "float", _VLLM, u=2.0**-4, top=448.0),  # vLLM's fp8 is e4m3, at its default scale 1.0
    CacheFormat("fp8_e4m3", "float", _VLLM + _SGLANG, u=2.0**-4, top=448.0),  # SGLang's scale too is 1.0 by default
    CacheFormat("fp8_e5m2", "float", _VLLM + _SGLANG, u=2.0**-3, top=57344.0),
    CacheFormat("q8_0", "block", _LLAMA, levels=127, query_levels=127),  # the query as q8_0: its vec_dot_type
    CacheFormat("q5_1", "block", _LLAMA, levels=31, query_levels=127),
    CacheFormat("q5_0", "block", _LLAMA, levels=16, query_levels=127),
    CacheFormat("q4_1", "block", _LLAMA, levels=15, query_levels=127),
    CacheFormat("iq4_nl", "block", _LLAMA, levels=8, query_levels=127),  # non-linear 4-bit levels: q4_0's taken
    CacheFormat("q4_0", "block", _LLAMA, levels=8, query_levels=127),
)}


def cache_error(plan, name: str, positions: int | None = None) -> float:
    """The worst head's predicted score error (logits) the cache ``name`` adds to ``plan`` (an ``EmulationPlan``)
    over ``positions`` (default: its window; module doc); inf where a stored k is beyond the format's largest
    value; 0 for ``auto``."""
    fmt = FORMATS[name]
    if name == "auto":
        return 0.0
    extreme = extreme_factor(plan.window if positions is None else positions)
    scale = 1 / math.sqrt(plan.head_dim)
    worst = 0.0
    for head in plan.heads:
        if head.split > fmt.top:
            return math.inf
        amplitudes = [math.hypot(p.N, p.M) * scale for p in head.pairs]  # logits
        error = extreme * fmt.sigma * math.sqrt(sum(a * a for a in amplitudes))
        if fmt.query_levels:
            error += extreme * math.sqrt(len(amplitudes)) * max(amplitudes) / (2 * fmt.query_levels * math.sqrt(3))
        worst = max(worst, error)
    return worst


def holds(plan, name: str) -> bool:
    """Whether cache ``name`` keeps ``plan`` as planned (module doc): it adds nothing, or its prediction is within
    the plan's own predicted rounding."""
    fmt, error = FORMATS[name], cache_error(plan, name)
    if name == "auto" or fmt.kind == "float" and fmt.u <= unit_roundoff(plan.dtype) and math.isfinite(error):
        return True
    return error <= plan.worst_head.rounding_error


def holding(plan, engine: str) -> list[str]:
    """The cache formats ``engine`` names that hold for ``plan``, finest first."""
    names = [n for n, f in FORMATS.items() if engine in f.engines and holds(plan, n)]
    return sorted(names, key=lambda n: FORMATS[n].sigma)


def check(plan, name: str | None, engine: str | None) -> None:
    """``ValueError`` in one line where cache ``name`` (None: the model's dtype) breaks ``plan``: what it adds
    against what the plan allows, and the caches ``engine`` keeps that hold (all engines' where None)."""
    if name is None or holds(plan, name):
        return
    fmt = FORMATS[name]
    error = cache_error(plan, name)
    how = (f"stores each key rounded to {-math.log2(fmt.u):.0f} significant bits" if fmt.kind == "float" else
           f"stores each key in blocks of {BLOCK} at 1/{2 * fmt.levels} of the block's largest value and rounds "
           f"the query to 1/{2 * fmt.query_levels} of its block's as it multiplies")
    added = "beyond its range" if math.isinf(error) else f"a predicted {error:.3g} logits"
    engines = [engine] if engine is not None else sorted({e for f in FORMATS.values() for e in f.engines})
    kept = {n for e in engines for n in holding(plan, e)}
    held = sorted((n for n in FORMATS if n in kept), key=lambda n: FORMATS[n].sigma)  # finest first, then table order
    values = " (V in a quantized cache holds: it carries no pair)" if fmt.kind == "block" else ""
    raise ValueError(f"--kv-cache-dtype {name} breaks this {plan.dtype} plan: it {how}, which adds {added} to the "
                     f"emulation's pairs, beyond the plan's own rounding {plan.worst_head.rounding_error:.3g}; the "
                     f"caches that hold for it: {', '.join(held)}{values}")
