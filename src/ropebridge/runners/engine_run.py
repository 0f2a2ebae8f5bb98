"""What a user asks of an engine run (``EngineRun``): which engine, in which interpreter, with which of its serving
options, and for llama.cpp which GGUF file; validated once, on construction."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .serving_options import RUNNERS, Runner


@dataclass(frozen=True)
class EngineRun:
    """``engine`` (a key of ``RUNNERS``), its serving ``options`` by the engine's own names (only those its runner
    takes), the interpreter it runs in (``python``; None: the current one) and, for an engine that loads a GGUF
    file, that file (``gguf``: the file the user serves, made from the converted checkpoint)."""

    engine: str
    options: dict[str, Any] = field(default_factory=dict)
    python: str | None = None
    gguf: str | None = None

    def __post_init__(self) -> None:
        if self.engine not in RUNNERS:
            raise ValueError(f"--engine must be one of {', '.join(RUNNERS)}; got {self.engine!r}")
        runner = self.runner
        checked = {}
        for key, value in self.options.items():
            if key not in {o.key for o in runner.options}:
                raise ValueError(f"{key} is not an option of --engine {self.engine}, which takes "
                                 f"{', '.join(o.flag for o in runner.options)}")
            try:
                checked[key] = runner.option(key).check(value)
            except ValueError as exc:  # each engine names its own values: say whose
                raise ValueError(f"--engine {self.engine}: {exc}") from None
        object.__setattr__(self, "options", dict(sorted(checked.items())))
        if runner.loads == "gguf" and self.gguf is None:
            raise ValueError(f"--engine {self.engine} runs a GGUF file: give it with --gguf FILE (made from DST by "
                             "llama.cpp's convert_hf_to_gguf.py, as docs/targets.md says)")
        if runner.loads != "gguf" and self.gguf is not None:
            raise ValueError(f"--gguf is for --engine llama.cpp; --engine {self.engine} runs DST itself")
        if self.gguf is not None and not Path(self.gguf).is_file():
            raise ValueError(f"--gguf {self.gguf}: no such file")

    @property
    def runner(self) -> Runner:
        return RUNNERS[self.engine]

    @property
    def interpreter(self) -> str:
        return self.python or sys.executable

    def flags(self) -> list[str]:
        """The options as the engine's command line writes them (``--kv-cache-dtype fp8``)."""
        out = []
        for key, value in self.options.items():
            option = self.runner.option(key)
            if option.kind is bool:
                out.append(option.flag if value else "--no-" + option.flag[2:])
            else:
                out += [option.flag, str(value)]
        return out

    def describe(self) -> str:
        """The engine and its options in words: ``vLLM --kv-cache-dtype fp8``."""
        return " ".join([self.runner.title, *self.flags()] + ([f"({Path(self.gguf).name})"] if self.gguf else []))

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "title": self.runner.title, "flags": self.flags(), "options": dict(self.options),
                "python": self.interpreter, "gguf": self.gguf}
