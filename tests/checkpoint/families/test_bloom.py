"""BLOOM's row: Press et al.'s slopes as they are (max bias 8), its sizes and the variant it refuses."""

import math

import pytest
from oracles import press_reference

from ropebridge.checkpoint.config import from_config

BLOOM_560M = {"model_type": "bloom", "n_layer": 24, "hidden_size": 1024, "n_head": 16, "vocab_size": 250880}


def test_bloom_560m_reads_press_slopes_unscaled():
    info = from_config(BLOOM_560M)
    assert (info.family, info.n_heads, info.head_dim, info.intermediate_size) == ("bloom", 16, 64, 4096)
    assert list(info.slopes) == pytest.approx(press_reference(16), rel=1e-15)  # scores = q.k/sqrt(hd) + m j
    assert info.qk_scale == 1 / math.sqrt(64) and info.activation == "gelu_pytorch_tanh" and not info.parallel
    assert from_config({**BLOOM_560M, "n_head": None, "num_attention_heads": 16}).n_heads == 16  # either key


def test_a_post_layernorm_residual_is_refused():
    with pytest.raises(ValueError, match="apply_residual_connection_post_layernorm"):
        from_config({**BLOOM_560M, "apply_residual_connection_post_layernorm": True})
