"""What ``verify --engine`` measured in the engine and how it is judged: ``EngineCheck`` (the numbers), ``judge``
(the failures), ``rows`` (the report's rows). ``in_engine`` measures it.

An engine returns log-probabilities, not logits: log p of a token is its logit less the log-sum-exp of the row, so
|Δ log p| is held to verify's limit on |Δ logit| (``limit.limit``) as it is; in half precision its mean over the
tokens to ``MEAN_FACTOR`` times the baseline's. A greedy parting is a failure where
exact's own margin at that step (its top log p less that of the engine's token, after the same prefix) is above
``NEAR_TIE`` times the limit: an engine within the limit in every logit could not have chosen that token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NEAR_TIE = 2.0  # a parting at exact's margin up to this times the limit is a near tie: reported, not judged
# In half precision the mean |Δ log p| is held to this times the baseline's (SRC in the dtype, attention and bias
# exact, on the same tokens): a setting that moves every token a little (an fp8 KV cache) stays within the limit on
# the max and moves the perplexity by percents. Measured (benchmarks/engines/serving_options.py, 1,024 tokens of
# text): the five real-text families' conversions with every vLLM setting that ran, bfloat16, 3.3-3.8 times their
# baseline's mean; in llama.cpp, float16, 4.4-6.4, and 8.4 with a q8_0 V cache (which moves native MPT 5.5 times);
# an fp8 KV cache (transformers' cache rounded to fp8 as vLLM stores it) 35-43 times (24 on random ids, the demo),
# SGLang's own fp8_e4m3 cache 35-43 times (every SGLang setting that holds 3.2-3.8), llama.cpp's q8_0 K cache 12.6-216.
MEAN_FACTOR = 16.0
# the facts an engine resolved that the report names (vLLM's, SGLang's and llama.cpp's words for them)
REPORTED = ("architecture", "dtype", "kv_cache_dtype", "tensor_parallel_size", "tp_size", "attention_backend",
            "chunked_prefill_size", "quantization", "type_k", "type_v", "flash_attn", "file_type")


@dataclass
class EngineCheck:
    """DST run by an engine (``run``: the engine, its options, the interpreter, the GGUF file) against exact on
    the same ids. ``facts``: what the engine resolved (its version, architecture, dtype, cache); ``refused``:
    what it said where it would not run DST. Scored ids: ``max_err`` and ``mean_err`` (|Δ log p| of each next
    token), the perplexities (exact's and the engine's). Decode: the engine's greedy tokens after the prompt,
    ``decode_max_err`` (|Δ log p| of each, exact's after the same prefix), and the first step where the engine's
    token is not exact's argmax (``parting``, exact's ``parting_margin`` there)."""

    run: dict[str, Any]
    facts: dict[str, Any] = field(default_factory=dict)
    refused: str | None = None
    seconds: float | None = None
    max_err: float | None = None
    mean_err: float | None = None
    ppl_exact: float | None = None
    ppl_engine: float | None = None
    greedy_tokens: int = 0
    decode_max_err: float | None = None
    parting: int | None = None
    parting_margin: float | None = None
    baseline_mean_err: float | None = None  # half precision: the baseline's mean |Δ log p| on the same tokens

    @property
    def mean_limit(self) -> float | None:
        """``MEAN_FACTOR`` times the baseline's mean |Δ log p| (None in float32, where the max decides)."""
        return None if self.baseline_mean_err is None else MEAN_FACTOR * self.baseline_mean_err

    @property
    def label(self) -> str:
        """The engine and the options it ran with, as the engine's command line writes them."""
        words = [self.run["title"], *self.run["flags"]]
        gguf = self.run.get("gguf")
        return " ".join(words) + ("" if gguf is None else f" ({Path(gguf).name})")


def judge(check: EngineCheck, limit: float, why: str) -> list[str]:
    """The failures of ``check`` against ``limit`` (``why``: where it comes from, in words): the engine did not run
    DST; a measured number that is not finite; max |Δ log p| above the limit on the scored ids or on the decoded
    tokens; in half precision, mean |Δ log p| above ``MEAN_FACTOR`` times the baseline's; a greedy parting not at
    a near tie (module doc)."""
    where = f"in {check.label}"
    if check.refused is not None:
        return [f"{where}: the engine did not run DST: {check.refused}"]
    out = []
    numbers = {"max |Δ log p|": check.max_err, "mean |Δ log p|": check.mean_err, "perplexity": check.ppl_engine,
               "decode max |Δ log p|": check.decode_max_err}
    out += [f"{where}: {name} is {value}: not a finite number" for name, value in numbers.items()
            if value is not None and not math.isfinite(value)]
    bar = f"the limit {limit:.3g} ({why})"
    if check.max_err is not None and check.max_err > limit:
        out.append(f"{where}: max |Δ log p| from exact ALiBi {check.max_err:.3g} > {bar}")
    if check.mean_err is not None and check.mean_limit is not None and not check.mean_err <= check.mean_limit:
        out.append(f"{where}: mean |Δ log p| from exact ALiBi {check.mean_err:.3g} > {check.mean_limit:.3g} "
                   f"({MEAN_FACTOR:g} x the baseline's {check.baseline_mean_err:.3g}): every token moves, the "
                   f"perplexity by {100 * (check.ppl_engine / check.ppl_exact - 1):+.2f}%")
    if check.decode_max_err is not None and check.decode_max_err > limit:
        out.append(f"{where}: greedy decoding through its KV cache, max |Δ log p| {check.decode_max_err:.3g} > {bar}")
    if check.parting is not None and not check.parting_margin <= NEAR_TIE * limit:
        out.append(f"{where}: greedy output parts from exact's at token {check.parting}, where exact's margin is "
                   f"{check.parting_margin:.3g} (> {NEAR_TIE:g} x the limit: not a near tie)")
    return out


def rows(check: EngineCheck, bar: str) -> list[tuple[str, str, str]]:
    """The engine's rows of the report (what, measured, how it is judged; ``bar``: the limit in words)."""
    if check.refused is not None:
        return [("engine", f"did not run DST: {check.refused}", "judged")]
    facts = check.facts
    resolved = ", ".join(f"{k} {facts[k]}" for k in REPORTED if facts.get(k) is not None)
    out = [("engine", facts.get("engine", check.run["engine"]), f"reported: {resolved}"),
           ("scored tokens", f"{check.max_err:.3e}", f"max |Δ log p| from exact; {bar}"),
           ("mean |Δ log p|", f"{check.mean_err:.3e}", "reported" if check.mean_limit is None else
            f"judged: <= {check.mean_limit:.3g} ({MEAN_FACTOR:g} x the baseline's mean {check.baseline_mean_err:.3g})"),
           ("perplexity", f"exact {check.ppl_exact:.6g}, engine {check.ppl_engine:.6g} "
                          f"({100 * (check.ppl_engine / check.ppl_exact - 1):+.2f}%)", "reported")]
    if check.greedy_tokens:
        same = "identical to exact's" if check.parting is None else \
            f"parts at token {check.parting} (exact's margin there {check.parting_margin:.3g})"
        out += [(f"decode ({check.greedy_tokens} tokens)", f"{check.decode_max_err:.3e}",
                 f"max |Δ log p| through its KV cache; {bar}"),
                ("greedy", same, f"judged: a parting beyond a near tie ({NEAR_TIE:g} x the limit) fails")]
    if check.seconds is not None:
        out.append(("engine time", f"{check.seconds:.1f}s", "its start included"))
    return out
