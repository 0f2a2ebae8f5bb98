"""The engines' own virtual environments, created once and cached (never ropebridge's environment: the
engines' converters pin transformers 4.x, ropebridge runs on 5.x).

Layout under ROOT (``--env-dir``, default ``$ROPEBRIDGE_ENGINE_ENVS`` or ``~/.cache/ropebridge/engines``):
``llama.cpp/``, ``ctranslate2/`` and ``transformers-4/`` (virtual environments, each with a stamp file
naming what it was built from) and ``src/llama_cpp_python-<version>/`` (the source distribution, which
carries llama.cpp's ``convert_hf_to_gguf.py``, its ``gguf-py`` and its vocabulary files).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("engines")

HERE = Path(__file__).resolve().parent
CONSTRAINTS = HERE / "constraints.txt"
LLAMA_CPP_PYTHON = "0.3.36"
COMMON = ["transformers", "torch", "numpy", "safetensors", "sentencepiece", "protobuf"]
PACKAGES = {
    "llama.cpp": [f"llama-cpp-python=={LLAMA_CPP_PYTHON}", *COMMON],
    "ctranslate2": ["ctranslate2==4.8.5", *COMMON],
    "transformers-4": COMMON,  # transformers 4.x as constraints.txt pins it
}
# llama.cpp built for a generic x86-64 CPU: a -march=native build crashed this machine's quantized (Q8_0,
# Q4_K_M) runs with SIGSEGV and SIGILL, where the generic build runs them
BUILD_ENV = {"llama.cpp": {"CMAKE_ARGS": "-DGGML_NATIVE=OFF"}}


class EngineCrash(RuntimeError):
    """The engine's process died by a signal (a segmentation fault in its kernels): a result, not a bug here."""


@dataclass(frozen=True)
class Env:
    name: str
    python: Path
    llama_src: Path  # vendor/llama.cpp inside the llama-cpp-python sdist

    @property
    def convert_hf_to_gguf(self) -> Path:
        return self.llama_src / "convert_hf_to_gguf.py"

    @property
    def gguf_py(self) -> Path:
        return self.llama_src / "gguf-py"

    def run(self, args: list[str], *, gguf: bool = False, log_file: Path | None = None) -> None:
        """Run ``python ARGS`` in this environment; output goes to LOG_FILE, shown only on failure."""
        env = dict(os.environ)
        if gguf:
            env["PYTHONPATH"] = str(self.gguf_py)
        proc = subprocess.run([str(self.python), *map(str, args)], check=False, env=env, capture_output=True, text=True)
        if log_file is not None:
            log_file.write_text(proc.stdout + proc.stderr)
        if proc.returncode < 0:  # killed by a signal: the engine itself crashed
            raise EngineCrash(f"{self.name} crashed (signal {-proc.returncode}) in {' '.join(map(str, args[:2]))}")
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr)[-3000:]
            raise RuntimeError(f"{self.name}: {' '.join(map(str, args[:2]))} failed:\n{tail}")


def default_root() -> Path:
    return Path(os.environ.get("ROPEBRIDGE_ENGINE_ENVS", Path.home() / ".cache" / "ropebridge" / "engines"))


def _stamp(name: str) -> dict:
    return {"packages": PACKAGES[name], "constraints": CONSTRAINTS.read_text(), "build": BUILD_ENV.get(name, {})}


def _pip(python: Path, args: list[str], env: dict[str, str] | None = None) -> None:
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args], check=True,
                   env={**os.environ, **(env or {})})


def llama_source(root: Path) -> Path:
    """Download and unpack the llama-cpp-python sdist once; return its vendored llama.cpp tree."""
    src = root / "src" / f"llama_cpp_python-{LLAMA_CPP_PYTHON}"
    tree = src / "vendor" / "llama.cpp"
    if (tree / "convert_hf_to_gguf.py").exists():
        return tree
    (root / "src").mkdir(parents=True, exist_ok=True)
    log.info("downloading the llama-cpp-python %s source distribution", LLAMA_CPP_PYTHON)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
                    "--no-binary", ":all:", f"llama-cpp-python=={LLAMA_CPP_PYTHON}", "-d", str(root / "src")],
                   check=True)
    with tarfile.open(root / "src" / f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz") as tar:
        tar.extractall(root / "src", filter="data")
    return tree


def ensure(name: str, root: Path, *, reuse_only: bool = False) -> Env:
    """The engine's environment, created (or completed) unless its stamp says it is current."""
    venv = root / name
    python = venv / "bin" / "python"
    stamp = venv / ".ropebridge-env.json"
    current = stamp.exists() and json.loads(stamp.read_text()) == _stamp(name)
    if not current:
        if reuse_only:
            raise SystemExit(f"no cached {name} environment under {root}: run once without --quick")
        root.mkdir(parents=True, exist_ok=True)
        if not python.exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        if name == "llama.cpp":
            log.info("installing llama-cpp-python %s (compiles llama.cpp: about 8 minutes on 2 cores)",
                     LLAMA_CPP_PYTHON)
        else:
            log.info("installing %s", " ".join(PACKAGES[name]))
        _pip(python, ["-c", str(CONSTRAINTS), *PACKAGES[name]], BUILD_ENV.get(name))
        stamp.write_text(json.dumps(_stamp(name)))
    return Env(name, python, llama_source(root))
