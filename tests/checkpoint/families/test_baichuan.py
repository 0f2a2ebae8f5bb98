"""Baichuan-13B and Baichuan2-13B: read from their published configs; the 7B (RoPE) and other variants refused."""

import pytest

from ropebridge.checkpoint.config import from_config

BAICHUAN_13B = {"architectures": ["BaichuanForCausalLM"], "model_type": "baichuan", "hidden_size": 5120,
                "num_attention_heads": 40, "num_hidden_layers": 40, "intermediate_size": 13696, "hidden_act": "silu",
                "rms_norm_eps": 1e-6, "vocab_size": 64000, "model_max_length": 4096, "tie_word_embeddings": False}


def test_baichuan_13b_and_baichuan2_13b_are_read_from_their_published_configs():
    import math

    from ropebridge.alibi import slopes as press_slopes

    info = from_config(BAICHUAN_13B)
    assert (info.family, info.n_heads, info.head_dim, info.n_layers) == ("baichuan", 40, 128, 40)
    assert (info.norm, info.gated, info.activation, info.block) == ("rmsnorm", True, "silu", "rmsnorm-gated")
    assert info.intermediate_size == 13696 and info.eps == 1e-6 and info.qk_scale == 1 / math.sqrt(128)
    assert not info.head_norm and info.family_row.default_target == "llama" and info.family_row.attention is None
    # the slopes as its code builds them: Press et al.'s (40 heads: 32, then every other of 64), float32 values
    exact = press_slopes(40).tolist()
    assert list(info.slopes) == [float(__import__("numpy").float32(m)) for m in exact]
    assert max(abs(a / b - 1) for a, b in zip(info.slopes, exact)) < 2**-24
    assert any(a != b for a, b in zip(info.slopes, exact))  # rounded: not the float64 values
    baichuan2 = from_config({**BAICHUAN_13B, "vocab_size": 125696})
    assert baichuan2.head_norm and baichuan2.slopes == info.slopes


def test_baichuan_7b_and_other_variants_are_refused_in_one_line():
    for bad, match in [
        ({**BAICHUAN_13B, "hidden_size": 4096, "num_attention_heads": 32}, "RoPE already"),
        ({**BAICHUAN_13B, "hidden_act": "gelu"}, "hidden_act 'gelu'"),
        ({**BAICHUAN_13B, "rms_norm_eps": "1e-6"}, "rms_norm_eps"),
    ]:
        with pytest.raises(ValueError, match=match) as exc:
            from_config(bad)
        assert "\n" not in str(exc.value)


def test_the_block_as_published_is_the_one_its_config_gives():
    info = from_config(BAICHUAN_13B)
    assert info.block == info.family_row.block == "rmsnorm-gated"
