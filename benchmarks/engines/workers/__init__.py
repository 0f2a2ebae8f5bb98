"""The scripts that run inside an engine's own interpreter, by path (``FOLDER / "worker_vllm.py"``): each imports
the standard library, the engine and its siblings here, never ropebridge or the benchmarks."""

from pathlib import Path

FOLDER = Path(__file__).resolve().parent
