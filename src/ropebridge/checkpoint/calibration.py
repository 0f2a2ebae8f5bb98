"""The ladder's floor C per head, measured on calibration text through the source model.

Beyond ``W = C/m`` the ladder only keeps its bias below -C (``ladder`` module doc). A key there must
carry no softmax weight, so C must exceed the cutoff (``emulation.ladder.default_cutoff``) plus the largest
advantage a far key's content logit has over the best exact logit near the query. Per head and query i,
with content logits ``s_ij = qk_scale q_i.k_j``:

    A(i) = max_{j <= i} s_ij  -  max_{j <= i} (s_ij - m (i - j))

(zero when the best key is also the best after ALiBi; large when a distant key's content would win
without the bias). ``C_h = cutoff + margin * max over layers and queries of A(i)``, computed with the
exact float64 forward pass of ``reference`` (the model's weights in float64, a block of rows at a time); this
module gives the second term, ``emulation.ladder.head_floors`` adds the cutoff.
"""

from __future__ import annotations


import torch

from .. import _log
from .model import SourceModel
from .reference import reference_states

log = _log.logger(__name__)

DEFAULT_MARGIN = 1.25  # calibration text is a sample: the advantage elsewhere can be larger
CALIBRATION_TOKENS = 2048


class AdvantageTracker:
    """An ``observe`` for ``reference.reference_states``: per head, the largest A(i) (module doc) of the batch's
    first row over every layer and query it sees, ``worst`` ``(h,)`` float64 on the device the reference runs on."""

    def __init__(self, slopes) -> None:
        self.slopes = torch.tensor(list(slopes), dtype=torch.float64)[:, None, None]  # (h, 1, 1)
        self.worst = torch.zeros(len(slopes), dtype=torch.float64)

    def __call__(self, layer: int, start: int, content: torch.Tensor, dist: torch.Tensor, weights) -> None:
        content, dist = content[0], dist[0]  # (h, block, t), (block, t): the first row
        if self.worst.device != content.device:
            self.slopes, self.worst = self.slopes.to(content.device), self.worst.to(content.device)
        content = content.masked_fill(dist < 0, float("-inf"))  # causal
        advantage = content.amax(-1) - (content - self.slopes * dist).amax(-1)  # (h, block)
        torch.maximum(self.worst, advantage.amax(-1), out=self.worst)


def content_advantage(src: SourceModel, input_ids: torch.Tensor) -> torch.Tensor:
    """The largest A(i) of each head over every layer and query of ``input_ids`` ``(s,)``, float64 ``(h,)``."""
    tracker = AdvantageTracker(src.info.slopes)
    reference_states(src, input_ids[None], observe=tracker)
    return tracker.worst


def calibrated_advantages(src: SourceModel, directory, text: str, *, margin: float = DEFAULT_MARGIN,
                          tokens: int = CALIBRATION_TOKENS) -> list[float]:
    """``margin * A`` per head (logits) from ``text`` (its first ``tokens`` tokens through the tokenizer in the
    source ``directory``): what the floor C adds to the cutoff."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(directory)
    except Exception as exc:  # no or broken tokenizer files: one line for the CLI
        raise ValueError(f"--calibration-text needs the source's tokenizer, which does not load from {directory}: "
                         f"{type(exc).__name__}") from None
    ids = torch.tensor(tokenizer(text)["input_ids"][:tokens])
    if len(ids) < 16:
        raise ValueError(f"the calibration text gives {len(ids)} tokens; at least 16 are needed")
    adv = content_advantage(src, ids)
    log.info("calibration on %d tokens: content advantage per head %s", len(ids), [round(float(a), 2) for a in adv])
    return [margin * float(a) for a in adv]
