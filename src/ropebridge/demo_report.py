"""Markdown report and figures of ``ropebridge demo``."""

from __future__ import annotations

import json
from pathlib import Path

from .emulation import EmulationPlan
from .emulation.error_model import distance_grid, emulated_bias


def heads_figure(plan: EmulationPlan):
    """One panel per head: ALiBi's -m d against the emulated bias, over the whole window."""
    from .plots import _figure

    n = len(plan.heads)
    cols = min(3, n)
    rows = (n + cols - 1) // cols
    fig = _figure(3.6 * cols, 2.8 * rows)
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
    from .plots import _figure

    fig = _figure()
    ax = fig.add_subplot()
    ax.plot(by_context["context"], by_context["native"], "o-", lw=3, alpha=0.5, label="native ALiBi")
    ax.plot(by_context["context"], by_context["converted"], "s--", label="converted RoPE (GPT-NeoX)")
    ax.axvline(train_context, color="k", ls=":", lw=1, label=f"training context {train_context}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("context (tokens)")
    ax.set_ylabel("held-out perplexity")
    ax.set_title("perplexity against context")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return fig


def write_demo_report(report, plan: EmulationPlan, out: Path) -> None:
    from .plots import emulation_figure

    heads_figure(plan).savefig(out / "alibi_vs_emulated.png", dpi=110)
    emulation_figure(plan).savefig(out / "error_vs_distance.png", dpi=110)
    perplexity_figure(report.ppl_by_context, report.train_context).savefig(out / "perplexity_vs_context.png", dpi=110)
    (out / "report.json").write_text(json.dumps(report.to_dict(), indent=1))
    r = report
    by = r.ppl_by_context
    rows = "\n".join(f"| {c} | {a:.4f} | {b:.4f} |" for c, a, b in zip(by["context"], by["native"], by["converted"]))
    text = f"""# ropebridge demo

An ALiBi language model ({r.source_model}, vocabulary {r.vocab_size}, trained at
context {r.train_context} on the Python documentation; final validation loss {r.final_val_loss:.3f}) converted
into a stock RoPE model (GPT-NeoX, float32) and evaluated on {r.heldout_tokens} held-out tokens.

| | native ALiBi | converted RoPE |
|---|---|---|
| perplexity at the training context ({r.train_context}) | {r.ppl_native:.6f} | {r.ppl_converted:.6f} |
| perplexity at {r.eval_context} tokens ({r.eval_context // r.train_context}x, extrapolation) | {r.ppl_native_extrapolated:.6f} | {r.ppl_converted_extrapolated:.6f} |
| forward time, {r.eval_context} tokens | {r.forward_seconds_native * 1e3:.1f} ms | {r.forward_seconds_converted * 1e3:.1f} ms |

- largest relative perplexity difference: {r.ppl_relative_diff:.2e}; max |Δlogit| over every evaluated
  token: {r.max_abs_logit_diff:.2e}
- an untrained model of the same shape: perplexity {r.ppl_random_model:.0f} (the trained one: {r.ppl_native:.1f})
- conversion: {r.convert_seconds:.2f} s, RoPE base {r.rope_base:.4g}, worst predicted emulation error
  {r.worst_predicted_error:.2e} logits
- greedy continuation of "{r.prompt}" ({'identical' if r.greedy_identical else 'DIFFERENT'}):

| native | converted |
|---|---|
| {r.continuation_native.replace(chr(10), ' ').replace('|', '/')} | {r.continuation_converted.replace(chr(10), ' ').replace('|', '/')} |

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
