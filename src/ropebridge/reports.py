"""Reports and figures: the figures of ``plan``, ``rope`` and the demo, the demo's report, and the plotting
helpers ``verify --report`` draws with (``verify.report``). Every figure function returns a ``matplotlib.figure.Figure``
(no pyplot state, no display needed); matplotlib is imported when a figure is made."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING


from .emulation import EmulationPlan
from .emulation.error_model import distance_grid, emulated_bias

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from .analysis import RopeAnalysis


def new_figure(width: float = 7.0, height: float = 4.0) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def label_axes(ax, xlabel: str, ylabel: str, title: str, legend: bool = True) -> None:
    """Axis labels, title, a log-friendly grid and (where lines are labelled) the legend of one panel."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    if legend:
        ax.legend()


def wavelength_figure(analysis: RopeAnalysis) -> Figure:
    """Wavelength per pair (log scale), default against the chosen scaling, with the context as a line."""
    fig = new_figure()
    ax = fig.add_subplot()
    idx = [p.index for p in analysis.pairs]
    rope_type = analysis.rope_parameters.get("rope_type", analysis.rope_parameters.get("type", "default"))
    ax.semilogy(idx, [p.wavelength for p in analysis.pairs], "o-", ms=3, label="default")
    scaled = [p.scaled_wavelength if math.isfinite(p.scaled_wavelength) else float("nan") for p in analysis.pairs]
    if rope_type != "default":
        ax.semilogy(idx, scaled, "s-", ms=3, label=rope_type)
    ax.axhline(analysis.context, color="k", ls="--", lw=1, label=f"context {analysis.context}")
    label_axes(ax, "pair index i", "wavelength 2π/θᵢ (tokens)",
           f"RoPE wavelengths, head_dim {analysis.head_dim}, base {analysis.rope_parameters.get('rope_theta')}")
    return fig


def emulation_figure(plan, heads: list[int] | None = None) -> Figure:
    """For a few heads: the ALiBi line -m d against the emulated bias (left), and the predicted error
    against distance on a log scale (right: sine approximation, rounding bound at the last position, total)."""
    import numpy as np

    from .emulation.error_model import matter_distance, rounding_bound, approximation_error

    if heads is None:
        order = sorted(range(len(plan.heads)), key=lambda h: -plan.heads[h].slope)
        heads = sorted({order[0], order[len(order) // 2], order[-1]})
    fig = new_figure(11.0, 4.2)
    left, right = fig.subplots(1, 2)
    d = distance_grid(plan.window, 1025)
    for h in heads:
        hp = plan.heads[h]
        (line,) = left.plot(d, -hp.slope * d, lw=1, label=f"head {h} ALiBi (m={hp.slope:.3g})")
        left.plot(d, emulated_bias(hp.specs(), plan.scale, d), "--", color=line.get_color(), lw=1.5,
                  label=f"head {h} emulated")
        dm = distance_grid(matter_distance(hp.slope, plan.window, plan.cutoff), 513)
        sine = approximation_error(hp.slope, hp.specs(), plan.scale, dm)
        rnd = rounding_bound(hp.specs(), plan.scale, np.full_like(dm, plan.window), plan.window - dm, plan.dtype,
                             hp.split)
        right.semilogy(dm[1:], sine[1:] + rnd[1:], color=line.get_color(), label=f"head {h} total")
        right.semilogy(dm[1:], np.maximum(sine[1:], 1e-300), ":", color=line.get_color(), label=f"head {h} sine")
    left.set_ylim(-3 * plan.cutoff, 1)
    left.set_xlabel("distance d (tokens)")
    left.set_ylabel("bias (logits)")
    left.set_title(f"ALiBi vs emulation, window {plan.window}")
    left.legend(fontsize=7)
    right.set_xlabel("distance d (tokens), up to where the bias matters")
    right.set_ylabel(f"predicted |error| (logits), {plan.dtype}")
    right.axhline(plan.tolerance, color="k", ls="--", lw=1, label="tolerance")
    right.set_title("error model: sine approximation + rounding")
    right.legend(fontsize=7)
    for ax in (left, right):
        ax.grid(True, which="both", alpha=0.3)
    return fig


def ladder_figure(plan, heads: list[int] | None = None) -> Figure:
    """For a few heads of a ladder plan: the fitted bias against -m d on a log-distance axis, with the floor
    -C and the exact distance W (left), and the fit error |f(d) - s + m d| up to W against the predicted
    rounding (right); δ the fit's softmax-invariant shift, taken off the bias on the left."""
    import numpy as np

    from .emulation.ladder_fit import ladder_bias

    if heads is None:
        order = sorted(range(len(plan.heads)), key=lambda h: -plan.heads[h].slope)
        heads = sorted({order[0], order[len(order) // 2], order[-1]})
    fig = new_figure(11.0, 4.2)
    left, right = fig.subplots(1, 2)
    d = np.unique(np.round(np.geomspace(1, plan.window, 2000)))
    for h in heads:
        hp = plan.heads[h]
        thetas = [p.theta for p in hp.pairs]
        a = [-p.N * plan.scale for p in hp.pairs]
        b = [p.M * plan.scale for p in hp.pairs]
        f = ladder_bias(a, b, thetas, d) - hp.ladder.shift  # its softmax-invariant shift taken off
        (line,) = left.semilogx(d, -hp.slope * d, lw=1, label=f"head {h} ALiBi (m={hp.slope:.3g})")
        left.semilogx(d, f, "--", color=line.get_color(), lw=1.5, label=f"head {h} ladder")
        left.axvline(hp.ladder.exact_distance, color=line.get_color(), ls=":", lw=1)
        near = d[d <= hp.ladder.exact_distance]
        right.loglog(near,
                     np.maximum(np.abs(ladder_bias(a, b, thetas, near) - hp.ladder.shift + hp.slope * near), 1e-12),
                     color=line.get_color(), label=f"head {h} fit error")
        right.axhline(hp.rounding_error, color=line.get_color(), ls="--", lw=1, label=f"head {h} rounding")
    floor = max(hp.ladder.floor for hp in plan.heads)
    left.axhline(-floor, color="k", ls="--", lw=1, label=f"-C (C = {floor:.3g})")
    left.set_ylim(-2.5 * floor, 5)
    left.set_xlabel("distance d (tokens, log)")
    left.set_ylabel("bias (logits)")
    left.set_title(f"ALiBi vs ladder ({plan.pairs_per_head} pairs, base {plan.base:.3g}), window {plan.window}")
    left.legend(fontsize=7)
    right.set_xlabel("distance d <= W (tokens)")
    right.set_ylabel(f"|error| (logits), {plan.dtype}")
    right.set_title("fit error (exact arithmetic) and predicted rounding")
    right.legend(fontsize=7)
    for ax in (left, right):
        ax.grid(True, which="both", alpha=0.3)
    return fig


# -- ropebridge demo --------------------------------------------------------------------------------------------
def heads_figure(plan: EmulationPlan):
    """One panel per head: ALiBi's -m d against the emulated bias, over the whole window."""
    n = len(plan.heads)
    cols = min(3, n)
    rows = (n + cols - 1) // cols
    fig = new_figure(3.6 * cols, 2.8 * rows)
    d = distance_grid(plan.window, 513)
    for k, hp in enumerate(plan.heads):
        ax = fig.add_subplot(rows, cols, k + 1)
        ax.plot(d, -hp.slope * d, lw=2.5, alpha=0.4, label="ALiBi −m·d")
        ax.plot(d, emulated_bias(hp.specs(), plan.scale, d), "--", lw=1.2, label="RoPE pair")
        ax.set_title(f"head {hp.head}: m = {hp.slope:.4g}", fontsize=9)
        ax.set_xlabel("distance d", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.3)
        if k == 0:
            ax.legend(fontsize=7)
    return fig


def perplexity_figure(by_context: dict, train_context: int):
    """Held-out perplexity of native and converted against the context; ``by_context``: lists under "context",
    "native" and "converted"."""
    fig = new_figure()
    ax = fig.add_subplot()
    ax.plot(by_context["context"], by_context["native"], "o-", lw=3, alpha=0.5, label="native ALiBi")
    ax.plot(by_context["context"], by_context["converted"], "s--", label="converted RoPE (GPT-NeoX)")
    ax.axvline(train_context, color="k", ls=":", lw=1, label=f"training context {train_context}")
    ax.set_xscale("log", base=2)
    label_axes(ax, "context (tokens)", "held-out perplexity", "perplexity against context")
    return fig


def write_demo_report(report, plan: EmulationPlan, out: Path) -> None:
    heads_figure(plan).savefig(out / "alibi_vs_emulated.png", dpi=110)
    emulation_figure(plan).savefig(out / "error_vs_distance.png", dpi=110)
    perplexity_figure(report.ppl_by_context, report.train_context).savefig(out / "perplexity_vs_context.png", dpi=110)
    (out / "report.json").write_text(json.dumps(report.to_dict(), indent=1))
    r = report
    by = r.ppl_by_context
    rows = "\n".join(f"| {c} | {a:.4f} | {b:.4f} |" for c, a, b in zip(by["context"], by["native"], by["converted"]))
    extrapolated = (f"| perplexity at {r.eval_context} tokens ({r.eval_context // r.train_context}x, extrapolation) | "
                    f"{r.ppl_native_extrapolated:.6f} | {r.ppl_converted_extrapolated:.6f} |")
    timed = (f"| forward time, {r.eval_context} tokens | {r.forward_seconds_native * 1e3:.1f} ms | "
             f"{r.forward_seconds_converted * 1e3:.1f} ms |")
    one_line = lambda s: s.replace(chr(10), " ").replace("|", "/")  # noqa: E731  (a markdown cell)
    text = f"""# ropebridge demo

An ALiBi language model ({r.source_model}, vocabulary {r.vocab_size}, trained at
context {r.train_context} on the Python documentation; final validation loss {r.final_val_loss:.3f}) converted
into a stock RoPE model (GPT-NeoX, float32) and evaluated on {r.heldout_tokens} held-out tokens.

| | native ALiBi | converted RoPE |
|---|---|---|
| perplexity at the training context ({r.train_context}) | {r.ppl_native:.6f} | {r.ppl_converted:.6f} |
{extrapolated}
{timed}

- largest relative perplexity difference: {r.ppl_relative_diff:.2e}; max |Δlogit| over every evaluated
  token: {r.max_abs_logit_diff:.2e}
- an untrained model of the same shape: perplexity {r.ppl_random_model:.0f} (the trained one: {r.ppl_native:.1f})
- conversion: {r.convert_seconds:.2f} s, RoPE base {r.rope_base:.4g}, worst predicted emulation error
  {r.worst_predicted_error:.2e} logits
- greedy continuation of "{r.prompt}" ({'identical' if r.greedy_identical else 'DIFFERENT'}):

| native | converted |
|---|---|
| {one_line(r.continuation_native)} | {one_line(r.continuation_converted)} |

## Perplexity against context

| context | native | converted |
|---|---|---|
{rows}

![perplexity](perplexity_vs_context.png)

## The emulation, head by head

![heads](alibi_vs_emulated.png)

![error](error_vs_distance.png)
"""
    (out / "report.md").write_text(text)
