"""Figures of the benchmark results: speed and memory against context, fidelity against context per dtype.

    python -m benchmarks.plot_results

Reads benchmarks/results/speed_memory.json and fidelity.json and writes speed_memory.png and fidelity.png beside
them.
"""

from __future__ import annotations

import json
import sys

from benchmarks._common import RESULTS
from matplotlib.figure import Figure


def load(name: str) -> dict | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def speed_memory(data: dict) -> Figure:
    fig = Figure(figsize=(11, 4), layout="constrained")
    speed, memory = fig.subplots(1, 2)
    for variant, style in (("native", "o-"), ("converted", "s--"), ("limit", "^:")):
        runs = [r for r in data["runs"] if r["variant"] == variant and r["status"] == "ok"]
        label = {"native": "native BLOOM (eager ALiBi)", "converted": "converted GPT-NeoX (SDPA RoPE)",
                 "limit": "converted, emulation removed (limit)"}[variant]
        speed.plot([r["length"] for r in runs], [r["tokens_per_s"] for r in runs], style, label=label)
        memory.plot([r["length"] for r in runs], [r["peak_rss_mb"] / 1024 for r in runs], style, label=label)
        top = max((r["peak_rss_mb"] / 1024 for r in data["runs"] if r["status"] == "ok"), default=1.0)
        for r in (r for r in data["runs"] if r["variant"] == variant and r["status"] != "ok"):
            for ax in (speed, memory):
                y = top if ax is memory else max(x["tokens_per_s"] for x in data["runs"] if x["status"] == "ok")
                ax.annotate(f"{variant}: {r['status']}", (r["length"], y), ha="right", va="top", fontsize=8,
                            color="C3")
    for ax, title, ylabel in ((speed, "prefill speed", "tokens/s"), (memory, "peak memory", "peak RSS (GiB)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("prompt length (tokens)")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{title}, BLOOM-560M shape, float32, {data['machine']['cpus']} CPU cores")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    return fig


def fidelity(data: dict) -> Figure:
    rows = data["rows"]
    models = sorted({r["model"] for r in rows})
    fig = Figure(figsize=(3.6 * len(models), 3.6), layout="constrained")
    axes = fig.subplots(1, len(models), squeeze=False)[0]
    for ax, model in zip(axes, models):
        for k, dtype in enumerate(("float32", "bfloat16", "float16")):
            sel = sorted((r for r in rows if r["model"] == model and r["dtype"] == dtype), key=lambda r: r["context"])
            native = [r for r in sel if "native_max_abs_logit_err" in r]  # native may have failed (MPT > max_seq_len)
            ax.loglog([r["context"] for r in native], [r["native_max_abs_logit_err"] for r in native], "o-",
                      color=f"C{k}", alpha=0.5, label=f"{dtype} native")
            ax.loglog([r["context"] for r in sel], [r["converted_max_abs_logit_err"] for r in sel], "s--",
                      color=f"C{k}", label=f"{dtype} converted")
        ax.set_title(model)
        ax.set_xlabel("context (tokens)")
        ax.set_ylabel("max |logit − float64 exact ALiBi|")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    return fig


def main() -> int:
    speed = load("speed_memory")
    if speed:
        speed_memory(speed).savefig(RESULTS / "speed_memory.png", dpi=110)
        print(f"wrote {RESULTS / 'speed_memory.png'}")
    fid = load("fidelity")
    if fid:
        fidelity(fid).savefig(RESULTS / "fidelity.png", dpi=110)
        print(f"wrote {RESULTS / 'fidelity.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
