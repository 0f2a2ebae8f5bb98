"""Logits compared a block of the vocabulary at a time, so no ``(b, s, V)`` tensor of a large vocabulary is held.

Each *side* is a function ``(a, c) -> (b, s, c - a)`` float64: the logits of vocabulary rows ``[a, c)`` (the exact
reference, or a model's head applied to its final hidden states). One pass over the vocabulary keeps, per position,
each side's running maximum, its sum of ``exp(logit - max)`` (so its log-sum-exp), its argmax and, where asked, the
logit of a target token; and per pair (p, q) the max ``|p - q|`` and the running sum ``sum exp(p - max_p) (p - q)``,
rescaled whenever ``max_p`` grows, from which

    KL(softmax p || softmax q) = sum_v softmax(p)_v (p_v - q_v) - lse(p) + lse(q)

(the online softmax of Milakov & Gimelshein 2018, applied to the KL's first term). Every result equals the one
computed from whole logits to float64 rounding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

Side = Callable[[int, int], torch.Tensor]


@dataclass(frozen=True)
class SideStats:
    """Per position ``(b, s)``: argmax, and where asked log-sum-exp, the log-probability of the target and that of
    the argmax (``top_logprob``: its margin over the target is ``top_logprob - target_logprob``)."""

    lse: torch.Tensor | None
    argmax: torch.Tensor
    target_logprob: torch.Tensor | None
    top_logprob: torch.Tensor | None = None


@dataclass(frozen=True)
class PairStats:
    """Per position ``(b, s)``: max ``|p - q|`` over the vocabulary and, where asked, KL(softmax p || softmax q)."""

    max_abs_diff: torch.Tensor
    kl: torch.Tensor | None


def vocab_block(positions: int, largest: int, budget_bytes: int, row_bytes: int = 0) -> int:
    """Vocabulary rows per block such that the float64 logit blocks of sides with ``positions`` rows in all (the
    largest ``largest``) and their exponentials, two temporaries of the largest (a difference, a product), and the
    ``row_bytes`` each vocabulary row of the heads takes while its block is computed fit ``budget_bytes``: at least
    1. A short context gives large blocks, where the heads' rows, not the logits, fill the budget."""
    return max(1, budget_bytes // max(1, 8 * (2 * positions + 2 * largest) + row_bytes))


@torch.no_grad()
def compare(sides: dict[str, Side], pairs: Sequence[tuple[str, str]], vocab: int, block: int, *,
            views: dict[str, tuple[str, tuple[slice, ...]]] | None = None,
            targets: dict[str, torch.Tensor] | None = None, kl: Sequence[tuple[str, str]] = (),
            ) -> tuple[dict[str, SideStats], dict[tuple[str, str], PairStats]]:
    """One pass over vocabulary rows ``[0, vocab)`` in blocks of ``block``: each side's ``SideStats`` and each
    pair's ``PairStats`` (module doc); the KL of the pairs in ``kl`` only, and the log-sum-exp of the sides they
    and ``targets`` name only (the others' are not computed: None). ``views``: name -> (side, index), a side's
    logits indexed (its first sequence, its first positions) without computing them again; ``targets``: name ->
    token ids ``(b, s)`` whose log-probabilities that side keeps (the next token, for perplexity)."""
    views, targets = views or {}, targets or {}
    summed = set(targets) | {name for pair in kl for name in pair}  # the sides whose log-sum-exp is kept
    m: dict[str, torch.Tensor] = {}
    z: dict[str, torch.Tensor] = {}
    best: dict[str, torch.Tensor] = {}
    arg: dict[str, torch.Tensor] = {}
    tgt: dict[str, torch.Tensor] = {}
    diff: dict[tuple[str, str], torch.Tensor] = {}
    cross: dict[tuple[str, str], torch.Tensor] = {}
    for a in range(0, vocab, block):
        c = min(vocab, a + block)
        logits = {name: side(a, c) for name, side in sides.items()}  # each (b, s, c - a) float64
        logits.update({name: logits[base][index] for name, (base, index) in views.items()})
        new_m = {}
        for name, x in logits.items():
            top, where = x.max(-1)  # (b, s)
            if name not in m:
                new_m[name] = top
                z[name] = torch.zeros_like(top)
                best[name], arg[name] = top, where + a
                tgt[name] = torch.zeros_like(top)
            else:
                new_m[name] = torch.maximum(m[name], top)
                better = top > best[name]  # the first index of the largest value, as argmax
                best[name], arg[name] = torch.where(better, top, best[name]), torch.where(better, where + a, arg[name])
            if name in targets:
                t = targets[name]
                inside = (t >= a) & (t < c)
                picked = x.gather(-1, (t - a).clamp(0, c - a - 1)[..., None])[..., 0]
                tgt[name] = torch.where(inside, picked, tgt[name])
        weights = {name: torch.exp(logits[name] - new_m[name][..., None]) for name in summed}  # once per block
        for p, q in pairs:
            delta = logits[p] - logits[q]
            d = delta.abs().amax(-1)
            diff[p, q] = d if (p, q) not in diff else torch.maximum(diff[p, q], d)
            if (p, q) in kl:
                term = (weights[p] * delta).sum(-1)
                old = cross.get((p, q))
                cross[p, q] = term if old is None else old * torch.exp(m[p] - new_m[p]) + term
            del delta
        for name in summed:
            shrink = torch.exp(m[name] - new_m[name]) if name in m else 0.0
            z[name] = z[name] * shrink + weights.pop(name).sum(-1)
        m.update(new_m)
    lse = {name: m[name] + torch.log(z[name]) for name in summed}
    side_stats = {name: SideStats(lse.get(name), arg[name], tgt[name] - lse[name] if name in targets else None,
                                  best[name] - lse[name] if name in lse else None) for name in m}
    pair_stats = {(p, q): PairStats(diff[p, q], cross[p, q] / z[p] - lse[p] + lse[q] if (p, q) in kl else None)
                  for p, q in pairs}
    return side_stats, pair_stats
