"""Targets: the stock architectures a converted checkpoint takes, as one table of entries with one interface.

Each ``Target`` names its transformers class and ``model_type``, the emulations it can carry, whether it rotates a
block of ``base^(-2r/R)`` pairs, and the engines that run it; its code (``Target.code()``, imported when a conversion
needs it) provides ``layout(src, plan)``, ``add_tensors(src, layout, writer)``, ``config(src, layout, plan, dtype)``,
``geometry(src, layout)`` (the numbers recorded in ``ropebridge.json``) and ``shapes(config)`` (what a converted
``config.json`` says is served: layers, heads, kv_heads, head_dim, hidden, intermediate). ``docs/targets.md``
compares them.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True)
class Target:
    name: str
    architecture: str  # the transformers class a converted checkpoint names
    model_type: str  # its config.json's model_type
    emulations: tuple[str, ...]  # strategies of ``emulation.STRATEGIES`` it can carry
    rotary_block: bool  # the single pair is a pair of a base^(-2r/R) block (else it turns at a free theta)
    module: str  # its code, in this package
    engines: str  # where it runs (one line, for ``convert``'s last line and the docs)

    def default_emulation(self, dtype: str) -> str:
        """The ladder in half precision where the target carries it (its rounding does not grow with the context);
        the exact single pair in float32 and on targets that rotate one pair."""
        return "ladder" if dtype != "float32" and "ladder" in self.emulations else "single"

    def served_head_dim(self, plan) -> int:
        """The head dim this target serves a plan at: hd + R (the rotary block of gpt-neox, the ladder), or hd + 2
        (a compact target's single pair)."""
        block = plan.rotary_dim is not None and (self.rotary_block or plan.strategy == "ladder")
        return plan.head_dim + (plan.rotary_dim if block else 2)

    def code(self) -> ModuleType:
        return importlib.import_module(f"{__name__}.{self.module}")


def of_model_type(model_type: str | None) -> Target | None:
    """The target whose converted checkpoints carry ``model_type``, or None."""
    return next((t for t in TARGETS.values() if t.model_type == model_type), None)


TARGETS = {t.name: t for t in (
    Target("gpt-neox", "GPTNeoXForCausalLM", "gpt_neox", ("ladder", "single", "fixed-base"), True, "gpt_neox",
           "transformers 4.x/5.x, vLLM, TensorRT-LLM (TensorRT backend), llama.cpp, CTranslate2"),
    Target("starcoder2", "Starcoder2ForCausalLM", "starcoder2", ("single",), False, "starcoder2",
           "transformers 5.x"),
    Target("nemotron", "NemotronForCausalLM", "nemotron", ("ladder", "single"), False, "nemotron",
           "transformers 5.x (4.x with the ladder), vLLM"),
)}
