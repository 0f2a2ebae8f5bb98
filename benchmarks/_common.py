"""Shared helpers of the benchmark scripts: machine description, tables, JSON output, model building."""

from __future__ import annotations

import json
import os
import platform
import re
import sys
from pathlib import Path

import torch

# torch 2.13's first sin/cos in a process may compute a worker thread's part less accurately (docs/decisions.md,
# "torch's first sine or cosine"); one cosine first, as verify's models run after (read_on_use.warm_threads).
torch.cos(torch.ones(1))

RESULTS = Path(__file__).resolve().parent / "results"
# The ladder's calibration text for the real-text models: the last 10,000 characters of heldout.txt (~2,900
# tokens, of which convert reads 2,048); the evaluations read the first 512 / 2K / 8K tokens (~30,000
# characters at 8K), so they do not overlap up to 8K. At 32K the evaluation reads nearly all of the text.
CALIBRATION_CHARS = 10_000


def calibration_text(model_dir: Path) -> str:
    """The last ``CALIBRATION_CHARS`` characters of a real-text model's held-out text."""
    return (Path(model_dir) / "heldout.txt").read_text()[-CALIBRATION_CHARS:]


def cpu_model(info: str | None = None) -> str | None:
    """The CPU's model name and the vector extensions engines dispatch on, from ``info`` (default ``/proc/cpuinfo``;
    None where there is none): the same build computes other bfloat16 numbers on another CPU (oneDNN picks its
    kernels by ISA)."""
    if info is None:
        try:
            info = Path("/proc/cpuinfo").read_text()
        except OSError:
            return None
    name = re.search(r"^model name\s*:\s*(.+)$", info, flags=re.M)
    flags = re.search(r"^flags\s*:\s*(.+)$", info, flags=re.M)
    isa = sorted(f for f in (flags.group(1).split() if flags else ()) if f in ("avx2", "avx512f", "avx512_bf16",
                                                                             "amx_bf16", "amx_tile"))
    return " ".join([name.group(1).strip() if name else "unknown", *(f"+{f}" for f in isa)])


def machine() -> dict:
    return {
        "cpus": os.cpu_count(),
        "cpu": cpu_model(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }


def table(rows: list[dict], columns: list[str]) -> str:
    def fmt(v):
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v)

    widths = [max(len(c), *(len(fmt(r.get(c, ""))) for r in rows)) for c in columns]
    lines = ["  ".join(c.rjust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(fmt(r.get(c, "")).rjust(w) for c, w in zip(columns, widths)) for r in rows]
    return "\n".join(lines)


SCHEMA = ("machine", "command", "rows")  # every result file's keys (``results``); others beside them


def started_as() -> str:
    """How this process was started, as a user types it: ``python -m benchmarks.NAME ARGS`` for a study run as a
    module (``sys.argv[0]`` is then the module's file), ``python SCRIPT ARGS`` otherwise."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = spec.name.removesuffix(".__main__") if spec is not None else ""
    head = ["-m", name] if name and name != "__main__" else sys.argv[:1]
    return " ".join(["python", *head, *sys.argv[1:]])


def payload(rows: list, *, command: str | None = None, **extras) -> dict:
    """A result file's content: the machine, the command that made it (this process's unless given), the rows
    (a list, one per measurement the tables show) and whatever else the study keeps beside them."""
    if not isinstance(rows, list):
        raise TypeError(f"a result's rows are a list, not {type(rows).__name__}")
    return {"machine": machine(), "command": command or started_as(), "rows": rows, **extras}


def save(name: str, content: dict) -> Path:
    """Write ``content`` (``rows`` and what goes beside them) as benchmarks/results/NAME.json in the one schema."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    extras = {k: v for k, v in content.items() if k not in SCHEMA}
    path.write_text(json.dumps(payload(content["rows"], command=content.get("command"), **extras), indent=1))
    return path


def bloom_560m_shaped(directory: Path, *, layers: int = 24, vocab: int = 250880, shard: str = "200MB", seed: int = 0,
                      hidden: int = 1024, heads: int = 16):
    """A random BLOOM checkpoint cached in ``directory``: BLOOM-560M's shape (24 layers, hidden 1024, 16 heads)
    unless told otherwise."""
    import transformers as T

    if (directory / "config.json").exists():
        return directory
    T.logging.set_verbosity_error()
    torch.manual_seed(seed)
    config = T.BloomConfig(n_layer=layers, hidden_size=hidden, n_head=heads, vocab_size=vocab)
    model = T.BloomForCausalLM(config).eval()
    model.save_pretrained(directory, max_shard_size=shard)
    return directory
