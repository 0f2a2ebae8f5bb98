"""Targets: the stock architectures a converted checkpoint takes, as one table whose rows hold every fact of a
target (``TARGETS``), the attention kernels' head sizes (``kernels``) and the ``llama`` target's rope
(``llama_rope``).

A row names the transformers class and ``model_type``, the strategies it can carry, where it puts the emulation
(a block of ``base^(-2r/R)`` pairs in the padded residual, or one pair per head on the ``pair_dims`` it rotates),
its LayerNorm convention and MLP tensor names, the engines that run it and how each serves it. The code that writes
a target's tensors and config sits above the planner (``writers``, one writer per target); ``docs/targets.md``
compares the targets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..frequencies import engine_frequencies
from . import llama_rope
from .support import COLUMNS, TITLES, Support, runs_in

PAIR_DIMS = ("block", "first-and-middle", "first-two", "whole-head")  # rotary block; (0, hd'/2); (0, 1); (k, k + hd'/2)
ROPE_FORMS = ("block", "llama3")  # base^(-2r/R) on a block or a free theta on one pair; llama3 bands (llama_rope)
SINGLE_BLOCK_DIMS = 4  # a rotary block's single pair: pair 0 turns at 1 rad/token, pair 1 at base^(-1/2) = theta
OPPOSED_DIMS = 4  # the whole head's two opposed pairs, dims (0, hd'/2) and (1, hd'/2 + 1)
BLOCKS = {  # the source blocks a target carries exactly (``SourceInfo.block``), as a refusal names them
    "layernorm": "LayerNorm and a plain MLP", "rmsnorm-gated": "RMSNorm and a gated MLP",
    "unbiased-layernorm-gated": "LayerNorm without bias and a gated MLP",
    "layernorm-gated": "LayerNorm with bias and a gated MLP"}


@dataclass(frozen=True, kw_only=True)
class Target:
    """One stock architecture, a row of keywords. ``strategies``: those of ``emulation.STRATEGIES`` it can carry;
    ``rotary_block``: it rotates a block of ``base^(-2r/R)`` pairs (else its single pair turns at a free theta);
    ``pair_dims``: where a head's single pair sits (``PAIR_DIMS``); ``support``: how each engine runs it (one
    ``support.Support`` per column of ``support.COLUMNS``; its row of the facts table ``engine_facts.SUPPORT``
    unless given; ``engines`` says it in one line); ``serving``: how each engine serves it, with ``{dst}``,
    ``{dtype}``, ``{window}`` and ``{base}`` filled in by the model card; ``blocks``: the source blocks (``BLOCKS``)
    it carries exactly; ``rope_form`` (``ROPE_FORMS``): how its engines compute the pairs' frequencies, which the
    plan follows. Its tensors' names and norms are its writer's (``writers``)."""

    name: str
    architecture: str  # the transformers class a converted checkpoint names
    model_type: str  # its config.json's model_type
    strategies: tuple[str, ...]
    rotary_block: bool
    pair_dims: str
    serving: tuple[str, ...]
    support: Mapping[str, Support] | None = None  # None: its row of ``engine_facts.SUPPORT``
    blocks: tuple[str, ...] = ("layernorm",)
    rope_form: str = "block"
    parallel_residual: bool = False  # it carries a source whose attention and MLP run in parallel

    def __post_init__(self) -> None:
        if self.pair_dims not in PAIR_DIMS or self.rope_form not in ROPE_FORMS or not set(self.blocks) <= set(BLOCKS):
            raise ValueError(f"target {self.name}: pair_dims {self.pair_dims!r}, rope_form {self.rope_form!r} and "
                             f"blocks {self.blocks!r} must be of {PAIR_DIMS}, {ROPE_FORMS} and {tuple(BLOCKS)}")
        if self.support is None:
            from .engine_facts import SUPPORT

            if self.name not in SUPPORT:
                raise ValueError(f"target {self.name}: no row in engine_facts.SUPPORT; add one or pass support")
            object.__setattr__(self, "support", SUPPORT[self.name])
        if set(self.support) != set(COLUMNS):
            raise ValueError(f"target {self.name}: support must name every engine column {COLUMNS}, got "
                             f"{tuple(self.support)}")

    @property
    def engines(self) -> str:
        """Where it runs, in one line (``support.runs_in``)."""
        return runs_in(self.support)

    def check_source(self, info) -> None:
        """``ValueError`` in one line when this target cannot carry ``info``'s residual (a parallel one) or block
        (``SourceInfo.block``) exactly, naming the targets that can; a source without a block (heads and slopes
        alone) plans on any target. The one place these refusals are made (the writers rely on it)."""
        if getattr(info, "parallel", False) and not self.parallel_residual:
            fits = " or ".join(t.name for t in TARGETS.values() if t.carries(info))
            raise ValueError(f"--target {self.name} has a sequential residual only; this {info.family} model runs "
                             f"attention and MLP in parallel: use --target {fits}")
        block = getattr(info, "block", None)
        if block is not None and block not in self.blocks:
            fits = " or ".join(t.name for t in TARGETS.values() if t.carries(info))
            use = f"use --target {fits}" if fits else "no target carries it yet"
            raise ValueError(f"--target {self.name} cannot carry this {info.family} model exactly (it has "
                             f"{BLOCKS.get(block, block)}): {use}")

    def carries(self, info) -> bool:
        """Whether this target carries ``info``'s block (``SourceInfo.block``) and residual exactly."""
        return getattr(info, "block", None) in (None, *self.blocks) and (
            self.parallel_residual or not getattr(info, "parallel", False))

    def default_strategy(self, dtype: str) -> str:
        """The ladder in half precision where the target carries it (its rounding does not grow with the context);
        the exact single pair in float32 and on targets that rotate one pair."""
        return "ladder" if dtype != "float32" and "ladder" in self.strategies else "single"

    def ladder_frequencies(self, base: float, rotary_dim: int, head_dim: int,
                           window: int) -> tuple[dict[str, Any] | None, np.ndarray]:
        """The ladder's pair frequencies ``(R/2,)`` as this target's engines compute them for ``base`` and the
        served ``head_dim`` hd + R, and the ``rope_parameters`` its config records: a block rope's ``base^(-2r/R)``
        in float32 (``frequencies.engine_frequencies``; none recorded), or the llama3 bands on the whole head
        (``llama_rope.ladder_rope``). ``ValueError`` where the engines cannot compute them."""
        if self.rope_form == "llama3":
            return llama_rope.ladder_rope(base, rotary_dim, head_dim, window)
        return None, engine_frequencies(base, rotary_dim)

    def single_pair(self, theta: float, head_dim: int, window: int) -> SinglePair:
        """Where this target puts the single strategy's pair at ``theta`` for a source of ``head_dim``
        (``SinglePair``): opposed on a llama3 whole head, pair 1 of a rotary block, else one free pair."""
        if self.rope_form == "llama3":
            rope, thetas = llama_rope.opposed_rope(theta, head_dim + OPPOSED_DIMS, window)
            return SinglePair("opposed", tuple(thetas), OPPOSED_DIMS, rope_parameters=rope)
        if self.rotary_block:
            return SinglePair("block", (theta,), SINGLE_BLOCK_DIMS, float(theta**-2.0))
        return SinglePair("free", (theta,))

    def single_head_dim(self, head_dim: int) -> int:
        """The head dim the single strategy serves a source of ``head_dim`` at (``single_pair``): hd + 4 on a rotary
        block (pair 1 of 4 dims) or a whole head (two opposed pairs), hd + 2 for one free pair."""
        return head_dim + (SINGLE_BLOCK_DIMS if self.rotary_block else
                           OPPOSED_DIMS if self.pair_dims == "whole-head" else 2)

    def served_head_dim(self, head_dim: int, rotary_dim: int | None, strategy: str) -> int:
        """The head dim this target serves a plan at: hd + R (the rotary block of gpt-neox, the ladder, the whole
        head's opposed pairs), or hd + 2 (a compact target's single pair)."""
        block = rotary_dim is not None and (self.rotary_block or strategy == "ladder" or self.pair_dims == "whole-head")
        return head_dim + (rotary_dim if block else 2)


@dataclass(frozen=True)
class SinglePair:
    """How a target carries the single strategy's pair at ``theta`` (``Target.single_pair``): ``placement``
    ``opposed`` (the whole head turns: pairs 0 and 1 at the ``thetas`` its llama3 rope gives, opposed,
    ``rope_parameters`` recorded; ``emulation.single``), ``block`` (pair 1 of a rotary block of ``rotary_dim``
    at ``base`` theta^-2) or ``free`` (one pair at theta, scaled in place)."""

    placement: str
    thetas: tuple[float, ...]
    rotary_dim: int | None = None
    base: float | None = None
    rope_parameters: dict[str, Any] | None = None

    def plan_fields(self) -> dict[str, Any]:
        """The plan's fields this placement sets (``EmulationPlan``'s ``base``, ``rotary_dim``,
        ``rope_parameters``), those it leaves None left out."""
        return {k: v for k, v in (("base", self.base), ("rotary_dim", self.rotary_dim),
                                  ("rope_parameters", self.rope_parameters)) if v is not None}


def of_model_type(model_type: str | None) -> Target | None:
    """The target whose converted checkpoints carry ``model_type``, or None."""
    return next((t for t in TARGETS.values() if t.model_type == model_type), None)


def carrying(strategy: str) -> tuple[str, ...]:
    """The names of the targets that carry ``strategy``."""
    return tuple(t.name for t in TARGETS.values() if strategy in t.strategies)


_HF = "transformers{versions}: `AutoModelForCausalLM.from_pretrained(\"{{dst}}\")`{note}"
_VLLM = "vLLM: `vllm serve {dst} --dtype {dtype} --max-model-len {window}`"
TARGETS = {t.name: t for t in (
    Target(name="gpt-neox", architecture="GPTNeoXForCausalLM", model_type="gpt_neox",
           strategies=("ladder", "single", "fixed-base"), rotary_block=True, pair_dims="block",
           serving=(_HF.format(versions="", note=" (4.x and 5.x)"), _VLLM,
            "llama.cpp: `convert_hf_to_gguf.py {dst}` drops the RoPE base; set `gptneox.rope.freq_base` to {base} "
            "in the GGUF, or convert with `--rope-base 10000` (docs/targets.md in ropebridge)"),
           parallel_residual=True),
    Target(name="starcoder2", architecture="Starcoder2ForCausalLM", model_type="starcoder2", strategies=("single",),
           rotary_block=False, pair_dims="first-and-middle",
           serving=(_HF.format(versions=" 5.x", note=""),)),
    Target(name="nemotron", architecture="NemotronForCausalLM", model_type="nemotron",
           strategies=("ladder", "single"), rotary_block=False, pair_dims="first-two",
           serving=(_HF.format(versions="", note=" (5.x; 4.x with the ladder)"), _VLLM)),
    Target(name="llama", architecture="LlamaForCausalLM", model_type="llama", strategies=("ladder", "single"),
           rotary_block=False, pair_dims="whole-head",
           serving=(_HF.format(versions="", note=" (4.x and 5.x)"), _VLLM,
            "SGLang: `python -m sglang.launch_server --model-path {dst} --dtype {dtype}`"),
           blocks=("rmsnorm-gated", "unbiased-layernorm-gated"), rope_form="llama3"),
    Target(name="persimmon", architecture="PersimmonForCausalLM", model_type="persimmon",
           strategies=("ladder", "single", "fixed-base"), rotary_block=True, pair_dims="block",
           serving=(_HF.format(versions="", note=" (4.x and 5.x)"),
            "SGLang: `python -m sglang.launch_server --model-path {dst} --dtype {dtype}` (transformers 5.19, as "
            f"{TITLES['sglang']} pins it)")),
    Target(name="stablelm", architecture="StableLmForCausalLM", model_type="stablelm",
           strategies=("ladder", "single", "fixed-base"), rotary_block=True, pair_dims="block",
           serving=(_HF.format(versions="", note=" (4.x and 5.x)"), _VLLM,
            "SGLang: `python -m sglang.launch_server --model-path {dst} --dtype {dtype}`",
            "llama.cpp: `convert_hf_to_gguf.py {dst}` drops the RoPE base; set `stablelm.rope.freq_base` to {base} "
            "in the GGUF, or convert with `--rope-base 10000` (docs/targets.md in ropebridge)"),
           blocks=("layernorm-gated", "unbiased-layernorm-gated")),
)}
