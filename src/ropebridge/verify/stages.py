"""verify's functional check as typed stages: each run of a model (its weights read as used) gives its final hidden
states, and ``Side`` names the logits they give, so the comparisons are written between names, not strings.

- ``Converted``: DST as transformers runs it, on the ids ``(1, s, D)`` and on the left-padded batch ``(2, s, D)``;
- ``Reference``: the exact float64 reference on the ids ``(1, s, D)`` (its logits on the padded batch are those,
  placed as the batch holds them: ``padded_like``), the content advantage it observed, and in half precision the
  baseline (SRC in the dtype, attention and bias exact) on the ids;
- ``Source``: SRC as the family defines it (``deviations.as_defined``) on the ids and on its first ``READING_TOKENS``,
  and, where transformers deviates from the definition, transformers' own numbers on both.

``sides`` turns them into the logit producers ``logit_stats.compare`` takes and ``COMPARED`` says which pairs are
compared (``Comparison``: what it measures, the two sides).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import torch

from . import logit_stats


class Side(str, Enum):
    """The logits a verify forms, by what produced them (a ``str``: ``logit_stats`` keys them)."""

    EXACT = "exact"  # the exact reference on the padded batch (2, s)
    EXACT0 = "exact0"  # its row 0: the ids
    EXACT_HEAD = "exact_head"  # its row 0's first READING_TOKENS positions
    CONVERTED = "conv"  # DST on the ids
    CONVERTED_BATCH = "conv_batch"  # DST on the padded batch
    BASELINE = "baseline"  # SRC in the dtype, attention and bias exact
    SOURCE = "source"  # SRC as the family defines it, on the ids
    SOURCE_HEAD = "source_head"  # the same on the first READING_TOKENS tokens alone
    TRANSFORMERS = "hf"  # SRC as transformers' class computes it, where it deviates
    TRANSFORMERS_HEAD = "hf_head"


VIEWS = {Side.EXACT0: (Side.EXACT, (slice(0, 1),))}  # EXACT_HEAD's: ``views``, from the reading's length


@dataclass(frozen=True)
class Converted:
    ids: torch.Tensor  # (1, s, D')
    batch: torch.Tensor  # (2, s, D')


@dataclass(frozen=True)
class Reference:
    ids: torch.Tensor  # (1, s, D) float64: the exact reference on the ids
    mask: torch.Tensor  # (2, s): the padded batch's, whose exact states are the ids' (``padded_like``)
    advantage: torch.Tensor  # (h,) the largest content advantage per head (``calibration.AdvantageTracker``)
    baseline: torch.Tensor | None  # (1, s, D) in half precision; None in float32


def padded_like(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The exact reference's ``(2, s, …)`` on the left-padded batch (``measure.padded_batch``, whose ``mask`` is
    ``(2, s)``) from its ``(1, s, …)`` on the ids: row 0 those, row 1's real positions those of the ids' prefix
    they hold, its padding zeros (never compared). The reference takes positions from the cumulative mask, so a
    left-padded sequence's states are those of the sequence alone (tests/checkpoint/test_reference.py)."""
    out = x.new_zeros(2, *x.shape[1:])
    out[0] = x[0]
    real = int(mask[1].sum())
    out[1, mask.shape[1] - real:] = x[0, :real]
    return out


@dataclass(frozen=True)
class Source:
    ids: torch.Tensor  # (1, s, D)
    head: torch.Tensor  # (1, m, D)
    transformers: tuple[torch.Tensor, torch.Tensor] | None  # (ids, head) as transformers computes them


@dataclass(frozen=True)
class Comparison:
    """One comparison ``verify`` reports: ``what`` it measures, the side judged against (``a``) and the other."""

    what: str
    a: Side
    b: Side


COMPARED = (
    Comparison("judged: converted vs exact, on the ids", Side.EXACT0, Side.CONVERTED),
    Comparison("judged: converted vs exact, the padded batch", Side.EXACT, Side.CONVERTED_BATCH),
    Comparison("baseline: SRC in the dtype vs exact", Side.EXACT0, Side.BASELINE),
    Comparison("reported: source vs converted", Side.SOURCE, Side.CONVERTED),
    Comparison("reported: source vs exact", Side.SOURCE, Side.EXACT0),
    Comparison("the reading of SRC: source vs exact on its first tokens", Side.SOURCE_HEAD, Side.EXACT_HEAD),
    Comparison("reported: transformers' own vs converted", Side.TRANSFORMERS, Side.CONVERTED),
    Comparison("transformers' own reading vs exact", Side.TRANSFORMERS_HEAD, Side.EXACT_HEAD),
)


def views(reading: int) -> dict[Side, tuple[Side, tuple[slice, ...]]]:
    """The sides that are slices of another: row 0 of the exact batch, and its first ``reading`` positions."""
    return {**VIEWS, Side.EXACT_HEAD: (Side.EXACT, (slice(0, 1), slice(0, reading)))}


def head_reader(source_model, device) -> logit_stats.Side:
    """SRC's head rows ``[a, c)`` transposed ``(D, c - a)``, float64, read once per block."""
    read: dict[tuple[int, int], torch.Tensor] = {}

    def head(a: int, c: int) -> torch.Tensor:
        if (a, c) not in read:
            read.clear()
            read[a, c] = source_model.head_rows(a, c).T.to(device)
        return read[a, c]

    return head


def baseline_side(baseline: torch.Tensor, head: logit_stats.Side, dtype: torch.dtype) -> logit_stats.Side:
    """The baseline's logits ``(b, s, c - a)``: its hidden states ``(b, s, D)`` through SRC's head rows in the dtype
    too."""
    return lambda a, c: baseline @ head(a, c).to(dtype).double()


def sides(source_model, reference: Reference, converted: Converted, source: Source | None, models: dict,
          dtype: torch.dtype, device) -> tuple[dict[Side, logit_stats.Side], list[tuple[Side, Side]]]:
    """The logit producers of every side the stages gave (``(a, c) -> (b, s, c - a)`` float64, vocabulary rows
    ``[a, c)``: the exact side's and the baseline's through SRC's head rows, each model's through its own head,
    ``models[side]``) and the pairs of ``COMPARED`` whose both sides exist."""
    head = head_reader(source_model, device)
    made: dict[Side, logit_stats.Side] = {
        Side.EXACT: lambda a, c: padded_like(reference.ids @ head(a, c), reference.mask)}
    if reference.baseline is not None:
        made[Side.BASELINE] = baseline_side(reference.baseline, head, dtype)
    hidden = {Side.CONVERTED: converted.ids, Side.CONVERTED_BATCH: converted.batch}
    if source is not None:
        hidden |= {Side.SOURCE: source.ids, Side.SOURCE_HEAD: source.head}
        if source.transformers is not None:
            hidden |= {Side.TRANSFORMERS: source.transformers[0], Side.TRANSFORMERS_HEAD: source.transformers[1]}
    for name, h in hidden.items():
        made[name] = lambda a, c, h=h, m=models[name]: m.logits_block(h, a, c).double()
    present = set(made) | set(VIEWS) | {Side.EXACT_HEAD}
    return made, [(c.a, c.b) for c in COMPARED if c.a in present and c.b in present]


def held(reference: Reference, converted: Converted, source: Source | None) -> list[torch.Tensor]:
    """Every hidden state the logits are formed from (the reference's batch, each model's, the baseline)."""
    out = [reference.ids, converted.ids, converted.batch]
    if source is not None:
        out += [source.ids, source.head, *(source.transformers or ())]
    return out + ([reference.baseline] if reference.baseline is not None else [])
