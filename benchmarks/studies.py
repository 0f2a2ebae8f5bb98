"""Every study, as data: the script that runs it and the results it writes (``benchmarks/results/NAME.json``, in the
one schema of ``_common.payload``). ``tables.py`` writes the index into benchmarks/README.md from these rows and
each script's own first sentence; ``tests/benchmarks/test_studies.py`` holds every committed result to one study
and every script that writes results to a row here.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Study:
    """``script``: its path from the repository's root; ``results``: the names of the files it writes (none: it has
    not run, as the GPU studies); ``engine``: the engine it runs in its own environment, if any."""

    script: str
    results: tuple[str, ...]
    engine: str = ""

    @property
    def command(self) -> str:
        """How it is run, from the repository's root: as a module of the ``benchmarks`` (or ``scripts``) package."""
        return "python -m " + self.script.removesuffix(".py").replace("/", ".")

    def summary(self) -> str:
        """The first sentence of the script's docstring, on one line."""
        doc = ast.get_docstring(ast.parse((ROOT / self.script).read_text())) or ""
        first = " ".join(doc.split("\n\n")[0].split()).split(". ")[0]
        return (first if first.endswith(("?", ".")) else first + ".").replace("|", "\\|")  # a markdown cell


STUDIES = (
    Study("benchmarks/convert_560m.py", ("convert_560m", "convert_560m_cold")),
    Study("benchmarks/convert_width.py", ("convert_width", "convert_width_w8192")),
    Study("benchmarks/verify_scale.py", ("verify_scale",)),
    Study("benchmarks/library_choices.py", ("library_choices",)),
    Study("benchmarks/plan_time.py", ("plan_time",)),
    Study("benchmarks/default_shapes.py", ("default_shapes",)),
    Study("benchmarks/speed_memory.py", ("speed_memory", "speed_memory_2048_8192")),
    Study("benchmarks/fidelity.py", ("fidelity",)),
    Study("benchmarks/long_window.py", ("long_window",)),
    Study("benchmarks/verdicts.py", ("verdicts", "verdicts_8k")),
    Study("benchmarks/propagation.py", ("propagation",)),
    Study("benchmarks/float32_error.py", ("float32_error",)),
    Study("benchmarks/first_call_sincos.py", ("first_call_sincos",)),
    Study("benchmarks/arch_floor.py", ("arch_floor", "arch_floor_nemotron")),
    Study("benchmarks/target_spread.py", ("target_spread",)),
    Study("benchmarks/rotary_width.py", ("rotary_width",)),
    Study("benchmarks/rounding_budget.py", ("rounding_budget",)),
    Study("benchmarks/gpu_check.py", (), "torch on a GPU"),
    Study("benchmarks/engines/run.py", ("engines",), "llama.cpp, CTranslate2"),
    Study("benchmarks/engines/llamacpp_families.py", ("llamacpp_families",), "llama.cpp"),
    Study("benchmarks/engines/llamacpp_llama.py", ("llamacpp_llama",), "llama.cpp"),
    Study("benchmarks/engines/llamacpp_cost.py", ("llamacpp_cost",), "llama.cpp"),
    Study("benchmarks/engines/hf4_llama.py", ("hf4_llama",), "transformers 4.x"),
    Study("benchmarks/engines/engine_rope.py", ("vllm_rope", "sglang_rope"), "vLLM, SGLang"),
    Study("benchmarks/engines/vllm_run.py", ("vllm_engine",), "vLLM"),
    Study("benchmarks/engines/vllm_cost.py", ("vllm_cost",), "vLLM"),
    Study("benchmarks/engines/sglang_run.py", ("sglang_engine",), "SGLang"),
    Study("benchmarks/engines/serving_options.py", ("serving_options",), "vLLM, llama.cpp, SGLang"),
    Study("benchmarks/engines/readme_serve.py", ("readme_serve",), "vLLM"),
    Study("benchmarks/engines/vllm_serve.py", (), "vLLM or SGLang on a GPU"),
    Study("benchmarks/serving_table.py", ("serving_table",)),
    Study("scripts/checkpoint_digests.py", ("checkpoint_digests",)),
)


def index() -> str:
    """The studies as a markdown table: its command, what it measures, the engine it runs, the results it keeps."""
    out = ["| command | what it measures | engine | results |", "|---|---|---|---|"]
    for s in STUDIES:
        kept = ", ".join(f"`{name}.json`" for name in s.results) or "not run yet"
        out.append(f"| `{s.command}` | {s.summary()} | {s.engine or '—'} | {kept} |")
    return "\n".join(out)
