"""The converted checkpoint's model card (``README.md``, Hugging Face conventions: a YAML header, then prose):
the base model, how it was converted (the command, the plan), how to verify it, how to serve it in each engine that
runs its target, and which of those engines' serving options hold for its plan (``serving_options``)."""

from __future__ import annotations


from .. import __version__
from ..emulation import EmulationPlan, kv_cache
from ..emulation.request import PlanRequest
from ..targets import Target
from ..targets.serving_facts import measured
from ..targets.support import RUN, TITLES

# the engines whose cache is planned for, and the flag that names it
CACHE_FLAG = {"vllm": "--kv-cache-dtype", "sglang": "--kv-cache-dtype", "llama.cpp": "--cache-type-k"}


def serving_options(plan: EmulationPlan, engine: str) -> str:
    """One line for ``engine`` (a key of ``CACHE_FLAG``): the KV caches it keeps that hold for ``plan`` and those
    that break it (``emulation.kv_cache``, predicted), then the settings measured to hold (``serving_facts``)."""
    names = [n for n, f in kv_cache.FORMATS.items() if engine in f.engines]
    held = [n for n in names if kv_cache.holds(plan, n)]
    broken = [n for n in names if n not in held]
    words = f"{TITLES[engine]} (measured with {RUN[engine]}): `{CACHE_FLAG[engine]}` {', '.join(held)} hold"
    if broken:
        worst = max(kv_cache.cache_error(plan, n) for n in broken)
        words += (f"; {', '.join(broken)} break this plan (up to {worst:.3g} logits predicted, beyond its own "
                  f"rounding {plan.worst_head.rounding_error:.3g})")
    facts = measured(engine)
    if facts:
        words += "; measured to hold: " + "; ".join(f"{m.setting} ({m.words})" for m in facts)
    return words


def command_flags(request: PlanRequest) -> list[str]:
    """The ``convert`` options that differ from their defaults (how, not what: ``--jobs`` left out)."""
    defaults = PlanRequest()
    flags = []
    for key, value in request.to_dict().items():
        if key in ("jobs", "progress") or value == getattr(defaults, key) or value is None:
            continue
        if key == "floor" and isinstance(value, tuple):
            value = value[0] if len(set(value)) == 1 else None  # per-head floors come from calibration text
            if value is None:
                continue
        if key == "advantage":
            flags.append("--calibration-text FILE")
            continue
        flags += [f"--{key.replace('_', '-')}", f"{value:g}" if isinstance(value, float) else str(value)]
    if request.calibration_text is not None:
        flags.append("--calibration-text FILE")
    return flags


def model_card(src: str, dst_name: str, plan: EmulationPlan, target: Target, request: PlanRequest,
               hub_id: bool = False) -> str:
    """The card's text (markdown with a YAML header); ``hub_id``: SRC is a hub id (then the card's base model)."""
    command = " ".join(["ropebridge convert", src, dst_name, *command_flags(request)])
    served = target.served_head_dim(plan.head_dim, plan.rotary_dim, plan.strategy)
    base = "free theta" if plan.base is None else f"{plan.base:.6g}"
    w = plan.worst_head
    how = (plan.strategy_label, plan.dtype, plan.window, plan.rotary_dim or 2, served, base,
           f"{w.predicted_error:.3g} (head {w.head})", f"{plan.tolerance:.3g}")
    header = ["---", "library_name: transformers", "pipeline_tag: text-generation",
              "tags:", "- ropebridge", "- rope", f"- {target.name}"]
    if hub_id:
        header.append(f"base_model: {src}")
    header.append("---")
    serving = "\n".join(f"- {line.format(dst=dst_name, dtype=plan.dtype, window=plan.window, base=base)}"
                        for line in target.serving)
    options = "\n".join(f"- {serving_options(plan, e)}" for e in CACHE_FLAG if target.support[e].kind != "none")
    return "\n".join(header) + f"""

# {dst_name}

`{src}` (an ALiBi {plan.family} model) converted by ropebridge {__version__} into a stock
`{target.architecture}` checkpoint: each head's ALiBi bias is emulated by rotary dims whose rotated q·k adds
≈ −m·d to the score, so engines without ALiBi run it.

## How it was converted

```bash
{command}
```

| strategy | dtype | window | rotary dims | served head dim | RoPE base | worst predicted error (logits) | tolerance |
|---|---|---:|---:|---:|---|---:|---:|
| {" | ".join(map(str, how))} |

The window is a hard limit: beyond {plan.window} tokens the emulated bias is not planned
(`max_position_embeddings` says so). The whole plan is in `ropebridge.json`.

## How to verify it

```bash
ropebridge verify {src} {dst_name} --context 2048 --card
```

compares it with the source and with an exact float64 ALiBi forward pass (exit 1 when a check fails), and with
`--card` records the result below.

## How to serve it

{serving}

## Serving options

{options or "- no engine's options were measured for this target"}

A KV cache coarser than the plan's dtype rounds the keys' rotary pairs again (ALiBi's own bias is never stored);
`ropebridge plan --kv-cache-dtype FORMAT` says whether a cache holds, and `ropebridge verify --engine ENGINE` runs
the checkpoint in the engine with the options you serve with.
"""
