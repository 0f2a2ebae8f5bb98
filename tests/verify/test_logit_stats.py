"""Logits compared a vocabulary block at a time: every statistic equals the whole-logit one to float64 rounding,
whatever the block."""

import pytest
import torch

from ropebridge.verify.logit_stats import compare, vocab_block

EPS = torch.finfo(torch.float64).eps


def _sides(seed=0, b=2, s=20, v=777):
    g = torch.Generator().manual_seed(seed)
    p = 6 * torch.randn(b, s, v, generator=g, dtype=torch.float64)
    q = p + 0.5 * torch.randn(b, s, v, generator=g, dtype=torch.float64)
    r = 9 * torch.randn(b, s, v, generator=g, dtype=torch.float64) + 30  # another scale and offset
    return {name: t for name, t in dict(p=p, q=q, r=r).items()}


@pytest.mark.parametrize("block", [1, 7, 100, 777, 10_000])
def test_the_blocked_statistics_are_the_whole_ones(block):
    logits = _sides()
    sides = {n: (lambda a, c, t=t: t[..., a:c]) for n, t in logits.items()}
    targets = torch.randint(0, 777, (2, 20), generator=torch.Generator().manual_seed(3))
    stats, pairs = compare(sides, [("p", "q"), ("r", "q"), ("p0", "q0")], 777, block, targets={"q": targets},
                           views={"p0": ("p", (slice(0, 1),)), "q0": ("q", (slice(0, 1),))},
                           kl=[("p", "q"), ("r", "q")])
    for name, t in logits.items():
        assert torch.equal(stats[name].argmax, t.argmax(-1))
        scale = float(t.abs().max())
        assert float((stats[name].lse - torch.logsumexp(t, -1)).abs().max()) <= 64 * EPS * scale
    # asked for neither: the views' log-sum-exp and their pair's KL are not computed
    assert stats["p0"].lse is None and pairs["p0", "q0"].kl is None and stats["p0"].target_logprob is None
    logq = torch.log_softmax(logits["q"], -1).gather(-1, targets[..., None])[..., 0]
    assert float((stats["q"].target_logprob - logq).abs().max()) <= 64 * EPS * float(logits["q"].abs().max())
    assert stats["p"].target_logprob is None
    for p, q in [("p", "q"), ("r", "q")]:
        a, b = logits[p], logits[q]
        assert torch.equal(pairs[p, q].max_abs_diff, (a - b).abs().amax(-1))
        # independent: torch's own KL of the log-softmaxes
        kl = torch.nn.functional.kl_div(torch.log_softmax(b, -1), torch.log_softmax(a, -1), log_target=True,
                                        reduction="none").sum(-1)
        assert float((pairs[p, q].kl - kl).abs().max()) <= 1e3 * EPS * float((a.abs() + b.abs()).max())
    assert torch.equal(pairs["p0", "q0"].max_abs_diff, pairs["p", "q"].max_abs_diff[:1])


def test_kl_is_zero_on_itself_and_positive_otherwise():
    logits = _sides(1)
    sides = {n: (lambda a, c, t=t: t[..., a:c]) for n, t in logits.items()}
    asked = [("p", "p2"), ("p", "q"), ("q", "p")]
    _, pairs = compare({**sides, "p2": sides["p"]}, asked, 777, 50, kl=asked)
    assert float(pairs["p", "p2"].kl.abs().max()) <= 1e3 * EPS * 6 * 10
    assert bool((pairs["p", "q"].kl > 0).all()) and bool((pairs["q", "p"].kl > 0).all())
    assert not torch.equal(pairs["p", "q"].kl, pairs["q", "p"].kl)  # KL is not symmetric


def test_the_block_fits_the_budget():
    # every side's logits and their exponentials, a difference and a product of the largest side, in float64
    held = 8 * (2 * 5 * 1024 + 2 * 2048)
    rows = vocab_block(5 * 1024, 2048, 64 << 20)
    assert rows * held <= 64 << 20 < (rows + 1) * held
    assert vocab_block(10**9, 10**9, 1) == 1
    # a short context: the heads' rows, not the logits, fill the budget (16 tokens, BLOOM-560M's width)
    per_row = 8 * (2 * 34 + 2 * 16) + 8 * (1024 + 2 * 1088 + 2 * 1024)
    rows = vocab_block(34, 16, 256 << 20, row_bytes=8 * (1024 + 2 * 1088 + 2 * 1024))
    assert rows * per_row <= 256 << 20 < (rows + 1) * per_row and rows < vocab_block(34, 16, 256 << 20) // 50
