"""The engine recipes of benchmarks/engines/README.md, run exactly as printed.

A recipe is a ``bash`` block after ``<!-- recipe: NAME -->``. The recipes run with ``bash -e``, in the README's
order, in one directory under the work directory, as a user would run them from a checkout of ropebridge with
llama.cpp cloned beside it: ``llama.cpp`` and ``benchmarks`` are links there (to the llama.cpp tree of the engine's
source distribution and to this checkout's benchmarks), and ``python`` and ``ropebridge`` on ``PATH`` are the recipe's
engine environment's Python (llama.cpp's requirements, or ``ctranslate2`` with transformers 4.x) and this checkout's
ropebridge.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

from benchmarks.engines import envs

HERE = Path(__file__).resolve().parent
README = HERE / "README.md"
log = logging.getLogger("engines")


def blocks(text: str | None = None) -> dict[str, str]:
    """Every recipe in the README: name -> its bash block."""
    text = README.read_text() if text is None else text
    return dict(re.findall(r"<!-- recipe: ([\w.+-]+) -->\n```bash\n(.*?)```", text, flags=re.S))


def run(names: list[str], work: Path, env: dict[str, envs.Env]) -> Path:
    """Run the recipes NAMES as printed, in the README's order, one after another in WORK/recipes (made afresh:
    a later recipe may use what an earlier one wrote, as a reader following the README would); ENV: each
    recipe's engine environment. Returns that directory."""
    where = work / "recipes"
    subprocess.run(["rm", "-rf", str(where)], check=True)
    (where / "bin").mkdir(parents=True)
    (where / "benchmarks").symlink_to(HERE.parent)
    for name, script in blocks().items():
        if name not in names:
            continue
        link = where / "llama.cpp"
        if not link.is_symlink():
            link.symlink_to(env[name].llama_src)
        shims = {"python": f'exec "{env[name].python}" "$@"',
                 "ropebridge": f'exec "{sys.executable}" -m ropebridge "$@"'}
        for cmd, line in shims.items():  # scripts, not links: a venv's Python finds its venv through its own path
            (where / "bin" / cmd).write_text(f"#!/bin/sh\n{line}\n")
            (where / "bin" / cmd).chmod(0o755)
        log.info("recipe %s, as printed in %s", name, README.relative_to(HERE.parents[1]))
        proc = subprocess.run(["bash", "-e", "-c", script], cwd=where, capture_output=True, text=True,
                              env={**os.environ, "PATH": f"{where / 'bin'}{os.pathsep}{os.environ['PATH']}"})
        (where / f"recipe-{name}.log").write_text(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            raise RuntimeError(f"recipe {name} failed (exit {proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    return where
