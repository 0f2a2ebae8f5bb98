"""What verify keeps: ``verify --report DIR``'s ``report.md`` and ``report.json``, with the error
by position and the attention probabilities per layer as figures (``reports``' plotting helpers), and the
result in the model card (``record_verification``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from .. import _interrupt
from ..checkpoint.config import FAMILIES
from ..reports import label_axes, new_figure
from .verdict import rows


def _attention_figure(source_probs, converted_probs, reference_probs):
    fig = new_figure()
    ax = fig.add_subplot()
    layers = range(len(converted_probs))
    if reference_probs:
        ax.semilogy(layers, [float((c.double() - r).abs().max()) for c, r in zip(converted_probs, reference_probs)],
                    "o-", label="converted vs exact float64 ALiBi")
        if source_probs:
            ax.semilogy(layers, [float((n.double() - r).abs().max()) for n, r in zip(source_probs, reference_probs)],
                        "s-", label="source vs exact float64 ALiBi")
    if source_probs:
        ax.semilogy(layers,
                    [float((c.double() - n.double()).abs().max()) for c, n in zip(converted_probs, source_probs)],
                    "^-", label="converted vs source")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    label_axes(ax, "layer", "max |Δ attention probability|", "attention probabilities per layer")
    return fig


def _position_figure(report):
    fig = new_figure()
    ax = fig.add_subplot()
    err = [max(e, 1e-12) for e in report.error_by_position]
    ax.semilogy(range(len(err)), err, lw=1)
    label_axes(ax, "position", "max over vocab |Δ logit|", f"converted vs exact float64 ALiBi, {report.dtype}",
           legend=False)
    return fig


ATTENTION_TOKENS = 256  # the tokens whose attention maps the report compares (they grow with s^2)


def write_report(report, out: Path, ids: torch.Tensor) -> None:
    """Write ``report.md``, ``report.json``, ``error_by_position.png`` and ``attention_by_layer.png`` into ``out``:
    the rows of ``verdict.rows`` as a table, and the attention probabilities of the first ``ATTENTION_TOKENS`` of
    ``ids`` ``(1, s)``, every model's weights read as they are used (transformers' eager attention, the exact
    reference)."""
    from ..checkpoint.model import SourceModel
    from ..checkpoint.reference import attention_probs
    from ..numerics import DTYPES
    from .read_on_use import ReadOnUseModel

    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report.to_dict(), indent=1))
    r = report
    lines = [f"# ropebridge verify: {'PASSED' if r.passed else 'FAILED'}", "",
             f"- source: `{r.source}` ({r.family}, attention: {r.source_attention})",
             f"- converted: `{r.converted}` (transformers, SDPA)", f"- dtype {r.dtype}, context {r.context} tokens", "",
             "| check | value | judged |", "|---|---|---|",
             *(f"| {what} | {value} | {how} |".replace("||", "\\|\\|") for what, value, how in rows(r)),
             "", *(f"- failure: {f}" for f in r.failures)]
    if r.measured:
        _position_figure(r).savefig(out / "error_by_position.png", dpi=110)
        head = ids[:, :ATTENTION_TOKENS]
        with torch.no_grad():
            conv = ReadOnUseModel(r.converted, DTYPES[r.dtype], attn_implementation="eager")
            conv_probs = list(conv.model.get_decoder()(input_ids=head, output_attentions=True).attentions)
            source_probs = None
            if r.source_ran and FAMILIES[r.family].eager_attention_maps:  # eager Falcon adds the bias twice
                source_model = ReadOnUseModel(r.source, DTYPES[r.dtype])
                source_probs = list(source_model.model.get_decoder()(input_ids=head, output_attentions=True).attentions)
            ref_probs = attention_probs(SourceModel(r.source), head)
        _attention_figure(source_probs, conv_probs, ref_probs).savefig(out / "attention_by_layer.png", dpi=110)
        lines += ["", "![error by position](error_by_position.png)", "",
                  "![attention by layer](attention_by_layer.png)",
                  ""]
        if r.transformers_deviation is not None:
            lines.append(f"Native {r.family} runs as the family defines it (transformers' own: "
                         f"{r.transformers_deviation}; its numbers are reported separately).")
        if r.source_ran and not FAMILIES[r.family].eager_attention_maps:
            lines.append(f"transformers' eager {r.family}, the only path that returns attention maps, does not compute "
                         "the family's attention (Falcon adds the bias twice), so its maps are not shown.")
    (out / "report.md").write_text("\n".join(lines) + "\n")


VERIFIED = "## Verification"  # the model card's section verify writes


def record_verification(card: Path, report) -> None:
    """Write ``verify``'s result (a ``VerifyReport``) into the model card at ``card`` as its "Verification"
    section, replacing an earlier one: the numbers a reader of the checkpoint would ask for first."""
    text = card.read_text()
    head, _, rest = text.partition(f"\n{VERIFIED}\n")
    tail = rest[rest.find("\n## ") + 1:] if "\n## " in rest else ""

    table = [f"| verdict | {'PASSED' if report.passed else 'FAILED: ' + '; '.join(report.failures)} | |",
             f"| tokens, dtype | {report.context}, {report.dtype} | |",
             *(f"| {what} | {value} | {how} |".replace("||", "\\|\\|") for what, value, how in rows(report))]
    section = (f"\n{VERIFIED}\n\n`ropebridge verify` against `{report.source}`:\n\n| | | |\n|---|---|---|\n"
               + "\n".join(table) + "\n")
    tmp = card.with_name(f".{card.name}.tmp")
    with _interrupt.removed_if_interrupted(tmp):
        tmp.write_text(head.rstrip("\n") + "\n" + section + ("\n" + tail if tail else ""))
        os.replace(tmp, card)  # the card is at every instant the old one or the new one
