"""How an engine runs a target, as read from the engines' own sources at a named version: the engines
(``ENGINES``), the columns of the docs' table (``COLUMNS``: those engines and two read but not chosen from,
transformers 4.57 and CTranslate2), and one cell of it (``Support``: ``native``, the engine's own model class runs
the target's architecture; ``backend``, its Transformers backend runs transformers' class with the engine's
attention kernels; or ``none``, with how that was established: tested, measured, run, read). Each row of
``targets.TARGETS`` holds one ``Support`` per column; ``runs_in`` says a row in one line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

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
    Engine("vllm", "vLLM", "0.34.0", kernel="vllm-cpu"),  # its CPU sizes, which its GPU backends run too
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


def runs_in(row: Mapping[str, Support]) -> str:
    """A target's ``support`` in one line: the engines that run it natively, then those whose Transformers backend
    runs it."""
    natives = [TITLES[c] for c in COLUMNS if row[c].kind == N]
    backends = [TITLES[c] for c in COLUMNS if row[c].kind == B]
    words = ", ".join(natives) if natives else "no engine natively"
    if backends:
        words += ("; through their Transformers backends: " if len(backends) > 1 else
                  "; through its Transformers backend: ") + ", ".join(backends)
    return words
