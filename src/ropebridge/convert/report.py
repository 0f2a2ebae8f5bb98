"""``verify --report DIR``: a Markdown report with plots (error against position, attention per layer)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from .verdict import describe


def _attention_figure(native_probs, converted_probs, reference_probs):
    from ..plots import _figure

    fig = _figure()
    ax = fig.add_subplot()
    layers = range(len(converted_probs))
    if reference_probs:
        ax.semilogy(layers, [float((c.double() - r).abs().max()) for c, r in zip(converted_probs, reference_probs)],
                    "o-", label="converted vs exact float64 ALiBi")
        if native_probs:
            ax.semilogy(layers, [float((n.double() - r).abs().max()) for n, r in zip(native_probs, reference_probs)],
                        "s-", label="native vs exact float64 ALiBi")
    if native_probs:
        ax.semilogy(layers, [float((c.double() - n.double()).abs().max()) for c, n in zip(converted_probs, native_probs)],
                    "^-", label="converted vs native")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("layer")
    ax.set_ylabel("max |Δ attention probability|")
    ax.set_title("attention probabilities per layer")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return fig


def _position_figure(report):
    from ..plots import _figure

    fig = _figure()
    ax = fig.add_subplot()
    err = [max(e, 1e-12) for e in report.error_by_position]
    ax.semilogy(range(len(err)), err, lw=1)
    ax.set_xlabel("position")
    ax.set_ylabel("max over vocab |Δ logit|")
    ax.set_title(f"converted vs native, {report.dtype}")
    ax.grid(True, which="both", alpha=0.3)
    return fig


def write_report(report, out: Path, native, converted, ids: torch.Tensor) -> None:
    """Write ``report.md``, ``report.json``, ``error_by_position.png`` and ``attention_by_layer.png`` into ``out``."""
    from transformers import AutoModelForCausalLM

    from ..checkpoint.model import SourceModel
    from ..checkpoint.reference import reference_logits

    out.mkdir(parents=True, exist_ok=True)
    if not report.measured:  # the bytes differ: nothing was run, the failures are the report
        (out / "report.json").write_text(json.dumps(report.to_dict(), indent=1))
        (out / "report.md").write_text("\n".join(["# ropebridge verify: FAILED", "",
                                                   f"- source: `{report.source}`", f"- converted: `{report.converted}`",
                                                   f"- functional check skipped: {report.functional_skipped}", "",
                                                   *(f"- failure: {f}" for f in report.failures)]) + "\n")
        return
    _position_figure(report).savefig(out / "error_by_position.png", dpi=110)
    ids = ids[:, :512]  # attention maps grow with s^2
    eager = AutoModelForCausalLM.from_pretrained(report.converted, dtype=converted.dtype, attn_implementation="eager").eval()
    with torch.no_grad():
        conv_probs = list(eager(ids, output_attentions=True).attentions)
        native_probs = None
        if report.family != "falcon":  # transformers' eager Falcon adds the ALiBi bias twice
            native_probs = list(native(ids, output_attentions=True).attentions)
        ref_probs: list = []
        if report.reference_converted_max_err is not None:
            src = SourceModel(report.source)
            reference_logits(src, ids, probs_out=ref_probs)
    _attention_figure(native_probs, conv_probs, ref_probs).savefig(out / "attention_by_layer.png", dpi=110)
    (out / "report.json").write_text(json.dumps(report.to_dict(), indent=1))
    r = report
    lines = [
        f"# ropebridge verify: {'PASSED' if r.passed else 'FAILED'}",
        "",
        f"- source: `{r.source}` ({r.family}, attention: {r.source_attention})",
        f"- converted: `{r.converted}` (transformers, SDPA)",
        f"- dtype {r.dtype}, context {r.context} tokens",
        "",
        "| check | value | threshold |",
        "|---|---|---|",
        f"| bytes | {describe(r.byte_check)} | identical |",
        f"| max \\|Δ logit\\| (converted vs native) | {r.max_abs_logit_diff:.3e} | reported |",
        f"| left-padded batch, max \\|Δ logit\\| | {r.padded_max_abs_logit_diff:.3e} | {r.thresholds['limit']:.3g} + both models' error |",
        f"| mean KL(native ‖ converted) | {r.mean_kl:.3e} | |",
        f"| top-1 agreement | {r.top1_agreement:.4f} | |",
        f"| greedy generation ({len(r.greedy_native)} tokens, KV cache) | "
        f"{'identical' if r.greedy_identical else f'differs from token {r.greedy_first_divergence}'} | "
        f"{'identical' if r.thresholds['greedy_identical'] else 'reported'} |",
    ]
    if r.transformers_native_max_abs_logit_diff is not None:
        lines.append(f"| converted vs transformers' own {r.family} ({r.transformers_native_deviation}) | "
                     f"{r.transformers_native_max_abs_logit_diff:.3e} | reported |")
    if r.ppl_native is not None:
        lines.append(f"| perplexity native / converted | {r.ppl_native:.6g} / {r.ppl_converted:.6g} | |")
    if r.reference_native_max_err is not None:
        lines += [
            f"| native vs exact float64 ALiBi, max \\|Δ logit\\| | {r.reference_native_max_err:.3e} | |",
            f"| converted vs exact float64 ALiBi, max \\|Δ logit\\| | {r.reference_converted_max_err:.3e} | {r.thresholds['limit']:.3g} |",
        ]
    lines += ["", *(f"- failure: {f}" for f in r.failures), "",
              "![error by position](error_by_position.png)", "", "![attention by layer](attention_by_layer.png)", ""]
    if r.transformers_native_deviation is not None:
        lines.append(f"Native {r.family} runs as the family defines it (transformers' own: "
                     f"{r.transformers_native_deviation}; its numbers are reported separately).")
    if r.family == "falcon":
        lines.append("Falcon's eager path, the only one that returns attention maps, adds the bias twice, so its "
                     "maps are not shown.")
    (out / "report.md").write_text("\n".join(lines) + "\n")
