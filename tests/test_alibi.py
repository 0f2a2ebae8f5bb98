"""ALiBi slopes for any head count against BLOOM, MPT and Falcon in transformers; bias and reference attention."""

import math

import pytest
import torch
from transformers.models.bloom.modeling_bloom import build_alibi_tensor as bloom_alibi
from transformers.models.falcon.modeling_falcon import build_alibi_tensor as falcon_alibi
from oracles import press_reference
from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

from ropebridge import alibi


def test_paper_examples():
    # 8 heads: 1/2, 1/4, ..., 1/256 (§3)
    assert alibi.slopes(8).tolist() == [2.0**-k for k in range(1, 9)]
    # 16 heads (BLOOM-560M): steepest 2^-0.5 ~ 0.7071
    assert alibi.slopes(16)[0].item() == pytest.approx(2**-0.5, rel=1e-16)


@pytest.mark.parametrize("n", range(1, 129))
def test_slopes_equal_reference_and_transformers(n):
    ours = alibi.slopes(n)
    # float64 reference: start**k accumulates a few ulp; ours is 2^(-8k/n) evaluated directly
    torch.testing.assert_close(ours, torch.tensor(press_reference(n), dtype=torch.float64), rtol=1e-14, atol=0)
    # BLOOM raises a float32-rounded base (relative error <= 2^-24) to integer powers k <= 2n, so its
    # slope k carries up to k * 2^-24 plus the rounding of pow itself
    bloom = bloom_alibi(torch.ones(1, 2), n, torch.float32)[:, 0, 1]  # slope * key position 1
    torch.testing.assert_close(ours.float(), bloom, rtol=(2 * n + 2) * 2**-24, atol=0)
    # MPT evaluates 2^(-8k/n) from exact-ish float32 exponents: a few float32 ulp
    mpt = -build_mpt_alibi_tensor(n, 2)[:, 0, 0]  # slope * (1 - 2)
    torch.testing.assert_close(ours.float(), mpt, rtol=8 * 2**-24, atol=0)
    # Falcon rounds its slopes to bfloat16 even in float32 models
    falcon = falcon_alibi(torch.ones(1, 2), n, torch.float32)[:, 0, 1]
    torch.testing.assert_close(ours.to(torch.bfloat16).float(), falcon, rtol=0, atol=0)


def test_max_bias_generalises_like_mpt():
    for n in (4, 12, 24):
        mpt = -build_mpt_alibi_tensor(n, 2, alibi_bias_max=16)[:, 0, 0]
        torch.testing.assert_close(alibi.slopes(n, max_bias=16).float(), mpt, rtol=8 * 2**-24, atol=0)


def test_bias_matrix_and_offset():
    m = torch.tensor([0.5, 0.25], dtype=torch.float64)
    b = alibi.bias(m, 3)
    assert b.shape == (2, 3, 3)
    assert b[0].tolist() == [[0.0, -math.inf, -math.inf], [-0.5, 0.0, -math.inf], [-1.0, -0.5, 0.0]]
    # one cached query at position 4 over 5 keys
    assert alibi.bias(m, 1, 5)[1, 0].tolist() == [-1.0, -0.75, -0.5, -0.25, 0.0]


def test_reference_attention_is_softmax_with_bias():
    g = torch.Generator().manual_seed(3)
    q, k, v = torch.randn(3, 1, 2, 4, 8, generator=g, dtype=torch.float64)
    m = alibi.slopes(2)
    out = alibi.attention_reference(q, k, v, m)
    # by hand for head 1, query 2
    scores = q[0, 1, 2] @ k[0, 1, :3].T / math.sqrt(8) - m[1] * torch.tensor([2.0, 1.0, 0.0], dtype=torch.float64)
    torch.testing.assert_close(out[0, 1, 2], torch.softmax(scores, -1) @ v[0, 1, :3], rtol=1e-14, atol=1e-14)
    # row-constant shifts (BLOOM adds +m*j instead of -m*(i-j)) do not change the output
    scores_bloom = q[0, 1, 2] @ k[0, 1, :3].T / math.sqrt(8) + m[1] * torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64)
    torch.testing.assert_close(torch.softmax(scores_bloom, -1) @ v[0, 1, :3], out[0, 1, 2], rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_bad_head_count(bad):
    with pytest.raises(ValueError, match="n_heads"):
        alibi.slopes(bad)
