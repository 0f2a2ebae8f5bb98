"""verify's typed stages: every comparison between two named sides, only those the stages ran, each side's logits
formed as its model forms them."""

from types import SimpleNamespace

import torch

from ropebridge.verify.stages import COMPARED, Converted, Reference, Side, Source, held, sides, views


def _stages(source: bool, baseline: bool, transformers: bool):
    g = torch.Generator().manual_seed(0)
    h = lambda b, s: torch.randn(b, s, 8, generator=g, dtype=torch.float64)  # noqa: E731
    mask = torch.tensor([[1] * 5, [0, 0, 1, 1, 1]])
    reference = Reference(h(1, 5), mask, torch.zeros(2), h(1, 5) if baseline else None)
    converted = Converted(h(1, 5), h(2, 5))
    ran = Source(h(1, 5), h(1, 3), (h(1, 5), h(1, 3)) if transformers else None) if source else None
    rows = torch.randn(11, 8, generator=g, dtype=torch.float64)
    model = SimpleNamespace(logits_block=lambda x, a, c: x @ rows[a:c].T)
    src = SimpleNamespace(head_rows=lambda a, c: rows[a:c])
    return reference, converted, ran, src, model


def test_only_the_comparisons_whose_stages_ran_are_made():
    for source, baseline, transformers, count in ((False, False, False, 2), (False, True, False, 3),
                                                  (True, False, False, 5), (True, True, True, 8)):
        reference, converted, ran, src, model = _stages(source, baseline, transformers)
        made, pairs = sides(src, reference, converted, ran, {s: model for s in Side}, torch.bfloat16, "cpu")
        ran_sides = {Side.EXACT, Side.EXACT0, Side.CONVERTED, Side.CONVERTED_BATCH} | (
            {Side.BASELINE} if baseline else set()) | ({Side.SOURCE, Side.SOURCE_HEAD, Side.EXACT_HEAD} if source
                                                        else set()) | (
            {Side.TRANSFORMERS, Side.TRANSFORMERS_HEAD} if transformers else set())
        assert pairs == [(c.a, c.b) for c in COMPARED if {c.a, c.b} <= ran_sides] and len(pairs) == count
        assert set(made) | {Side.EXACT0, Side.EXACT_HEAD} >= ran_sides
        assert len(held(reference, converted, ran)) == 3 + (2 + 2 * transformers) * source + baseline


def test_each_side_s_logits_are_its_hidden_states_through_its_head():
    reference, converted, ran, src, model = _stages(True, True, False)
    made, _ = sides(src, reference, converted, ran, {s: model for s in Side}, torch.bfloat16, "cpu")
    rows = src.head_rows(2, 7)
    exact = made[Side.EXACT](2, 7)  # (2, s, 5): the ids' logits, and row 1's real positions the ids' prefix
    assert torch.equal(exact[0], (reference.ids @ rows.T)[0]) and torch.equal(exact[1, 2:], exact[0, :3])
    assert torch.equal(exact[1, :2], torch.zeros(2, 5))
    assert torch.equal(made[Side.CONVERTED](2, 7), converted.ids @ rows.T)
    baseline = reference.baseline @ rows.T.to(torch.bfloat16).double()  # the head's rows in the dtype too
    assert torch.equal(made[Side.BASELINE](2, 7), baseline)
    assert views(3)[Side.EXACT_HEAD] == (Side.EXACT, (slice(0, 1), slice(0, 3)))
    assert len({s.value for s in Side}) == len(Side)
