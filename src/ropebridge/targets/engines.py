"""The serving engines, and how each runs each target, as read from the engines' own sources at a named version.

``ENGINES``: the engines and the version read. ``SUPPORT[target][engine]``: ``native`` (the engine's own model
class runs the target's architecture), ``backend`` (its Transformers backend runs transformers' class, with the
engine's attention kernels) or ``none``, and how that was established (tested, measured, run, read). From these
two tables alone: ``choose`` picks, for a source and an engine, the target that engine runs natively (the family's
default first), else one its Transformers backend runs; ``per_family`` gives the docs' table of that choice for
every family (``benchmarks/tables.py`` writes both tables into docs/targets.md and the README, and its
``--check`` in the suite fails where they differ).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

KINDS = ("native", "backend", "none")


@dataclass(frozen=True)
class Engine:
    """One engine: its name for ``--engine``, its name in words, the version whose source was read, and the
    attention kernel (``targets.kernels``) whose head sizes it must run (``any`` where it has a fallback for
    every size)."""

    name: str
    title: str
    version: str
    kernel: str = "any"

    @property
    def label(self) -> str:
        return f"{self.title} {self.version}".strip()


ENGINES = {e.name: e for e in (
    Engine("transformers", "transformers", "5.x"),
    Engine("vllm", "vLLM", "0.34.0"),
    Engine("sglang", "SGLang", "0.5.23"),
    Engine("trtllm", "TensorRT-LLM (PyTorch backend)", "c6d3bb2", kernel="trtllm"),
    Engine("llama.cpp", "llama.cpp", ""),
)}
COLUMNS = ("transformers", "transformers-4", "vllm", "sglang", "trtllm", "llama.cpp", "ctranslate2")
TITLES = {"transformers": "transformers 5.x", "transformers-4": "transformers 4.57", "vllm": "vLLM 0.34.0",
          "sglang": "SGLang 0.5.23", "trtllm": "TensorRT-LLM (PyTorch backend)", "llama.cpp": "llama.cpp",
          "ctranslate2": "CTranslate2"}


@dataclass(frozen=True)
class Support:
    """How one engine runs one target: ``kind`` (``KINDS``) and what was established, in words."""

    kind: str
    how: str

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"support kind must be one of {KINDS}, got {self.kind!r}")

    def cell(self) -> str:
        names = {"native": "native", "backend": "Transformers backend", "none": "no"}
        return f"{names[self.kind]} ({self.how})" if self.how else names[self.kind]


N, B, X = "native", "backend", "none"
SUPPORT: dict[str, dict[str, Support]] = {
    "gpt-neox": {
        "transformers": Support(N, "tested"),
        "transformers-4": Support(N, "measured: reads the legacy `rotary_pct`/`rotary_emb_base` keys written beside "
                                     "`rope_parameters`"),
        "vllm": Support(B, "its registry maps `GPTNeoXForCausalLM` to `TransformersForCausalLM`; read"),
        "sglang": Support(B, "no GPT-NeoX model of its own; read"),
        "trtllm": Support(X, "no GPT-NeoX model; the TensorRT backend that had one was removed"),
        "llama.cpp": Support(N, "measured, F32 GGUF: set `gptneox.rope.freq_base` in the GGUF, or convert with "
                                "`--rope-base 10000 --rotary-dim 32 --pairs 3`; run with `-fa off -ctk f32`"),
        "ctranslate2": Support(N, "measured, float32: set `rotary_emb_base` and `layer_norm_eps` in the spec and fold "
                                  "1/√d into the query projection, or convert with `--rope-base 10000 --rotary-dim 32 "
                                  "--pairs 3`"),
    },
    "nemotron": {
        "transformers": Support(N, "tested"),
        "transformers-4": Support(N, "the ladder: measured, logits identical to 5.x; the single pair loads silently "
                                     "wrong (ignores `rope_parameters`)"),
        "vllm": Support(N, "`nemotron.py`, unchanged from 0.33: `head_dim` from the config, `get_act_fn(hidden_act)`, "
                           "`rope_parameters` to `get_rope`; its rope run on the ladder: frequencies and rotation "
                           "transformers' bit for bit"),
        "sglang": Support(B, "no Nemotron model of its own; read"),
        "trtllm": Support(X, "its Nemotron hard-codes relu²"),
        "llama.cpp": Support(X, "hard-codes relu², Q/O of n_embd × n_embd"),
        "ctranslate2": Support(X, "no converter"),
    },
    "starcoder2": {
        "transformers": Support(N, "tested"),
        "transformers-4": Support(X, "loads silently wrong"),
        "vllm": Support(B, "registry; read"),
        "sglang": Support(X, "its own `starcoder2.py` takes head dim = hidden / heads and no rope scaling"),
        "trtllm": Support(X, "not checked"),
        "llama.cpp": Support(X, ""),
        "ctranslate2": Support(X, ""),
    },
    "persimmon": {
        "transformers": Support(N, "tested"),
        "transformers-4": Support(N, "read: its Persimmon reads the top-level `partial_rotary_factor` and "
                                     "`rope_theta` written beside `rope_parameters`; a one-off run on a BLOOM pico gave "
                                     "5.x's logits bit for bit in float32 and bfloat16"),
        "vllm": Support(X, "removed in 0.25: `PersimmonForCausalLM` in its registry's previously supported models"),
        "sglang": Support(N, "`persimmon.py`: head dim hidden / heads, `get_rope` with `config.partial_rotary_factor` "
                             "and `rope_parameters[\"rope_theta\"]`, biases on the fused per-head QKV reordered at "
                             "load; its rope run with the transformers 5.19 it pins: the plan's frequencies, "
                             "transformers' rotation bit for bit. With transformers 5.20 or later the config object "
                             "no longer has the `partial_rotary_factor` it reads directly"),
        "trtllm": Support(X, "not checked"),
        "llama.cpp": Support(X, "not checked"),
        "ctranslate2": Support(X, "no converter"),
    },
    "llama": {
        "transformers": Support(N, "tested"),
        "transformers-4": Support(N, "measured, `benchmarks/engines/hf4_llama.py`: float32 5.x's logits bit for bit; "
                                     "it reads the `rope_scaling` written beside `rope_parameters`"),
        "vllm": Support(N, "`llama.py`, unchanged from 0.33, reads `head_dim`, `attention_bias` for q, k, v and o; "
                           "its rope run: the plan's frequencies and transformers' rotation bit for bit"),
        "sglang": Support(N, "`llama.py` takes `rope_parameters` as its `rope_scaling`; its rope run, as vLLM's"),
        "trtllm": Support(N, "read: `Attention` takes `head_dim` from the config and `attention_bias` for q, k, v "
                             "and o; `RopeParams.from_config` reads `rope_theta` and the llama3 `rope_scaling`; "
                             "NVIDIA/TensorRT-LLM at c6d3bb2 and 51ea5c9"),
        "llama.cpp": Support(N, "measured, `benchmarks/engines/llamacpp_llama.py`: its converter writes the rope as "
                                "`rope_freqs`; F32 GGUF within float32's tolerance"),
        "ctranslate2": Support(X, "no converter"),
    },
    "stablelm": {
        "transformers": Support(N, "tested"),
        "transformers-4": Support(N, "read: its StableLM reads the top-level `partial_rotary_factor` and `rope_theta` "
                                     "written beside `rope_parameters`"),
        "vllm": Support(B, "0.34 maps `StableLmForCausalLM` to `TransformersForCausalLM` and ships no `stablelm.py` "
                           "(0.33 ran it natively); transformers' StableLM calls the attention interface vLLM sets; "
                           "read"),
        "sglang": Support(N, "`stablelm.py`: head dim hidden / heads, `use_qkv_bias`, SiLU and a sequential residual "
                             "fixed; it reads `rope_pct`, which the config writes; its rope run with transformers 5.19 "
                             "and 5.20.2: the plan's frequencies and transformers' rotation bit for bit"),
        "trtllm": Support(X, "no StableLM model; read"),
        "llama.cpp": Support(N, "read, not run: its converter's StableLM writes no RoPE base, so the GGUF needs "
                                "`stablelm.rope.freq_base` set, or a conversion with `--rope-base 10000 --rotary-dim 32 "
                                "--pairs 3`"),
        "ctranslate2": Support(X, "no converter"),
    },
}

# The families as the per-family table shows them: (label, family, block, parallel residual).
FAMILY_FORMS = (
    ("BLOOM, BLOOMZ, Poro", "bloom", "layernorm", False),
    ("MPT, Replit", "mpt", "layernorm", False),
    ("Falcon-RW, sequential as published", "falcon", "layernorm", False),
    ("Falcon with `parallel_attn`", "falcon", "layernorm", True),
    ("Baichuan-13B, Baichuan2-13B", "baichuan", "rmsnorm-gated", False),
    ("Refact-1.6B", "refact", "unbiased-layernorm-gated", False),
    ("Jais, BTLM", "jais", "layernorm-gated", False),
)


@dataclass(frozen=True)
class Choice:
    """The target ``choose`` picked for an engine, how the engine runs it, and the sentence that says so."""

    target: str
    kind: str
    sentence: str


def _carriers(info) -> list[str]:
    """The targets that carry ``info``'s block and residual, the family's default first."""
    from ..checkpoint.config import FAMILIES
    from . import TARGETS

    default = FAMILIES[info.family].default_target if info.family in FAMILIES else None
    names = sorted(TARGETS, key=lambda t: t != default)
    return [t for t in names if TARGETS[t].carries(info)]


def choose(info, engine: str) -> Choice:
    """The target for a source (anything with ``family``, ``block``, ``parallel``) served on ``engine``: the first
    the engine runs natively, the family's default first; else the first its Transformers backend runs; else
    ``ValueError`` in one line naming what the engine lacks."""
    e = ENGINES[engine]
    carriers = _carriers(info)
    for kind in ("native", "backend"):
        found = [t for t in carriers if SUPPORT[t][engine].kind == kind]
        if found:
            return Choice(found[0], kind, describe(found[0], engine) + ("" if kind == "native" else
                                                                      " (it runs none natively)"))
    carry = "carries" if len(carriers) == 1 else "carry"
    raise ValueError(f"--engine {engine}: {e.label} runs no target that carries this {info.family} model "
                     f"({', '.join(carriers)} {carry} it; {e.title} runs none of them)")


def describe(target: str, engine: str) -> str:
    """How ``engine`` runs ``target``, in one line."""
    e, support = ENGINES[engine], SUPPORT[target][engine]
    how = {"native": "natively", "backend": "through its Transformers backend", "none": "not at all"}[support.kind]
    return f"{e.label} runs {target} {how}"


def family_forms() -> list[tuple[str, SimpleNamespace]]:
    """``FAMILY_FORMS`` as (label, a source as ``choose`` takes it: ``family``, ``block``, ``parallel``)."""
    return [(label, SimpleNamespace(family=family, block=block, parallel=parallel))
            for label, family, block, parallel in FAMILY_FORMS]


def per_family() -> list[tuple[str, dict[str, str]]]:
    """Per family form (``FAMILY_FORMS``), the targets each engine runs natively for it and those its Transformers
    backend runs: ``label (default target)`` -> ``{engine: words}``."""
    from ..checkpoint.config import FAMILIES

    out = []
    for label, info in family_forms():
        carriers, cells = _carriers(info), {}
        for engine in ENGINES:
            if engine == "transformers":
                continue
            natives = [t for t in carriers if SUPPORT[t][engine].kind == "native"]
            backends = [t for t in carriers if SUPPORT[t][engine].kind == "backend"]
            words = ", ".join(natives) if natives else "none natively"
            cells[engine] = words + (f"; backend: {', '.join(backends)}" if backends else "")
        out.append((f"{label} ({FAMILIES[info.family].default_target})", cells))
    return out
