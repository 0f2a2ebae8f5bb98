"""cos/sin tables and the rotation: the hand example, relative-position property, layouts, partial rotary, HF."""

import math

import pytest
import torch
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from ropebridge.rope import (
    apply_rope,
    cos_sin,
    half_to_interleaved,
    interleaved_to_half,
    inv_freq,
    rope_angles,
)


def rotate(q, position, freqs, layout="half"):
    cos, sin = cos_sin(freqs, torch.tensor([position]), layout=layout, dtype=torch.float64)
    return apply_rope(q[None, None, None, :], cos, sin, layout=layout)[0, 0, 0]


def test_hand_example_90_degrees():
    # theta = 90 deg, q = (1, 2), k = (2, 1): positions (1, 2) and (3, 4) both give 3, equal positions give 4.
    freqs = torch.tensor([math.pi / 2], dtype=torch.float64)
    q = torch.tensor([1.0, 2.0], dtype=torch.float64)
    k = torch.tensor([2.0, 1.0], dtype=torch.float64)
    torch.testing.assert_close(rotate(q, 1, freqs), torch.tensor([-2.0, 1.0], dtype=torch.float64))
    for m, n in ((1, 2), (3, 4)):
        assert rotate(q, m, freqs) @ rotate(k, n, freqs) == pytest.approx(3.0, abs=1e-15)
    for m in (0, 5):
        assert rotate(q, m, freqs) @ rotate(k, m, freqs) == pytest.approx(4.0, abs=1e-15)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_scores_depend_only_on_offset(layout):
    g = torch.Generator().manual_seed(1)
    freqs, _ = inv_freq(32, {"rope_theta": 10000.0})
    q, k = torch.randn(2, 32, dtype=torch.float64, generator=g)
    for delta in (0, 1, 7, 100):
        scores = [rotate(q, m, freqs, layout) @ rotate(k, m + delta, freqs, layout) for m in (0, 13, 999, 50000)]
        # float64 angles up to 5e4 rad: cos/sin carry ~|angle| * 2^-53 error each
        torch.testing.assert_close(torch.stack(scores), scores[0].expand(4), rtol=0, atol=1e-9)


def test_layouts_agree_after_permutation():
    g = torch.Generator().manual_seed(2)
    freqs, _ = inv_freq(16, {"rope_theta": 500.0})
    x = torch.randn(2, 3, 5, 16, dtype=torch.float64, generator=g)  # (b, h, s, d)
    pos = torch.arange(10, 15)
    p = half_to_interleaved(16)
    assert p.tolist() == [0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15]
    assert torch.equal(p[interleaved_to_half(16)], torch.arange(16))
    half = apply_rope(x, *cos_sin(freqs, pos, layout="half", dtype=torch.float64), layout="half")
    inter = apply_rope(x[..., p], *cos_sin(freqs, pos, layout="interleaved", dtype=torch.float64), layout="interleaved")
    torch.testing.assert_close(inter, half[..., p], rtol=0, atol=0)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_partial_rotary_passes_the_rest_through(layout):
    freqs, _ = inv_freq(32, {"rope_theta": 10000.0, "partial_rotary_factor": 0.25})  # r = 8
    x = torch.randn(1, 2, 6, 32, dtype=torch.float64)
    out = apply_rope(x, *cos_sin(freqs, torch.arange(6), layout=layout, dtype=torch.float64), layout=layout)
    assert torch.equal(out[..., 8:], x[..., 8:])
    assert not torch.equal(out[..., 1:, :8], x[..., 1:, :8])
    torch.testing.assert_close(out[..., 0, :], x[..., 0, :], rtol=0, atol=0)  # position 0: identity


def test_kv_cache_offset_equals_slice_of_full_table():
    freqs, _ = inv_freq(64, {"rope_theta": 10000.0})
    full_cos, full_sin = cos_sin(freqs, torch.arange(300))
    cos, sin = cos_sin(freqs, torch.arange(250, 300))
    assert torch.equal(cos, full_cos[250:]) and torch.equal(sin, full_sin[250:])
    batch_cos, _ = cos_sin(freqs, torch.tensor([[0, 1, 2], [7, 8, 9]]))
    assert batch_cos.shape == (2, 3, 64) and torch.equal(batch_cos[1], full_cos[7:10])


def test_matches_transformers_rotation_and_tables():
    # transformers: angles in float32, cos/sin cast to the model dtype; we mirror with angle_dtype=float32.
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = LlamaConfig(hidden_size=256, num_attention_heads=4, max_position_embeddings=8192,
                         rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                          "original_max_position_embeddings": 2048})
    emb = LlamaRotaryEmbedding(config)
    x = torch.randn(2, 4, 20, 64)
    pos = torch.arange(3000, 3020)[None].expand(2, -1)
    hf_cos, hf_sin = emb(x, pos)
    freqs, factor = inv_freq(64, dict(config.rope_parameters))
    assert factor == pytest.approx(emb.attention_scaling, rel=1e-15)
    # transformers' own float32 frequencies through our tables: the same float32 angles, so the tables agree
    # to the float32 rounding of cos/sin and of the factor product (a few ulp)
    cos, sin = cos_sin(emb.inv_freq, pos, angle_dtype=torch.float32)
    torch.testing.assert_close(cos * factor, hf_cos, rtol=2**-21, atol=2**-23)
    torch.testing.assert_close(sin * factor, hf_sin, rtol=2**-21, atol=2**-23)
    q, k = torch.randn(2, 2, 4, 20, 64)
    hq, hk = apply_rotary_pos_emb(q, k, hf_cos, hf_sin)
    torch.testing.assert_close(apply_rope(q, cos * factor, sin * factor, layout="half"), hq, rtol=0, atol=0)
    torch.testing.assert_close(apply_rope(k, cos * factor, sin * factor, layout="half"), hk, rtol=0, atol=0)
    # float64 angles are closer to exact than transformers' float32 ones, never farther than its rounding
    exact = torch.outer(pos[0].double(), freqs)
    c64, _ = cos_sin(freqs, pos[0], dtype=torch.float64)
    err32 = (hf_cos[0, :, :32].double() / factor - exact.cos()).abs().max()
    err64 = (c64[:, :32] - exact.cos()).abs().max()
    assert err64 <= err32


def test_tables_cast_once_from_wide_angles():
    freqs, _ = inv_freq(64, {"rope_theta": 10000.0})
    cos16, _ = cos_sin(freqs, torch.arange(5000, 5010), dtype=torch.bfloat16)
    cos64, _ = cos_sin(freqs, torch.arange(5000, 5010), dtype=torch.float64)
    assert cos16.dtype == torch.bfloat16
    assert torch.equal(cos16, cos64.to(torch.bfloat16))  # one rounding, from float64


def test_bad_input():
    freqs, _ = inv_freq(8, {"rope_theta": 10000.0})
    with pytest.raises(ValueError, match="integers"):
        rope_angles(freqs, torch.tensor([0.5]))
    with pytest.raises(ValueError, match="angle_dtype"):
        rope_angles(freqs, torch.arange(3), angle_dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="layout"):
        cos_sin(freqs, torch.arange(3), layout="sideways")
    cos, sin = cos_sin(freqs, torch.arange(3))
    with pytest.raises(ValueError, match="rotary dim"):
        apply_rope(torch.zeros(1, 1, 3, 4), cos, sin, layout="half")
