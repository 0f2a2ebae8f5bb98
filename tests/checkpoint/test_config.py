"""Source configs: every family read through one table, per-logit slopes, refusals that name the value."""

import pytest

from ropebridge.checkpoint.config import FAMILIES, declared_biases, family_slopes, from_config, from_heads


def test_sources_from_configs():
    bloom = from_config({"model_type": "bloom", "n_head": 12, "hidden_size": 1152})
    assert (bloom.family, bloom.n_heads, bloom.head_dim) == ("bloom", 12, 96)
    mpt = from_config({"model_type": "mpt", "n_heads": 8, "d_model": 512, "attn_config": {"alibi": True,
                                                                                          "alibi_bias_max": 16}})
    assert mpt.slopes[0] == pytest.approx(2**-2)
    falcon = from_config({"model_type": "falcon", "alibi": True, "num_attention_heads": 16, "hidden_size": 1024})
    # Falcon: bfloat16-rounded slope, divided by sqrt(head_dim) like its scores
    assert falcon.slopes[0] == pytest.approx(0.70703125 / 8, rel=1e-12)
    assert family_slopes("falcon", 16, 64)[1] == 0.5 / 8
    for bad, match in [
        ({"model_type": "llama", "num_attention_heads": 8, "hidden_size": 512}, "llama"),
        ({"model_type": "gpt2", "n_head": 8, "n_embd": 512}, "gpt2"),
        ({"model_type": "mpt", "n_heads": 8, "d_model": 512, "attn_config": {"alibi": False}}, "alibi"),
        ({"model_type": "falcon", "alibi": False, "num_attention_heads": 8, "hidden_size": 512}, "alibi"),
        ({"model_type": "bloom", "n_head": 7, "hidden_size": 512}, "multiple"),
    ]:
        with pytest.raises(ValueError, match=match):
            from_config(bad)


def test_a_config_gives_the_whole_geometry_once():
    info = from_config({"model_type": "falcon", "alibi": True, "num_attention_heads": 12, "hidden_size": 768,
                        "num_hidden_layers": 3, "vocab_size": 100, "parallel_attn": False})
    assert (info.n_layers, info.vocab_size, info.intermediate_size, info.parallel) == (3, 100, 3072, False)
    assert info.family_row is FAMILIES["falcon"] and info.qk_scale == 1 / 8
    mpt = from_config({"model_type": "mpt", "n_heads": 4, "d_model": 256, "n_layers": 2, "vocab_size": 50,
                       "expansion_ratio": 2, "attn_config": {"alibi": True, "softmax_scale": 0.5}})
    assert (mpt.intermediate_size, mpt.qk_scale, mpt.activation) == (512, 0.5, "gelu")
    with pytest.raises(ValueError, match="clip_qkv"):
        from_config({"model_type": "mpt", "n_heads": 4, "d_model": 256, "attn_config": {"alibi": True, "clip_qkv": 6}})
    assert from_heads(4, 64, "mpt").slopes == family_slopes("mpt", 4, 64)


def test_a_family_is_one_row(monkeypatch):
    # every per-family fact the reader uses is a field of its FAMILIES row: a new row needs no name check elsewhere
    import dataclasses


    twice = dataclasses.replace(FAMILIES["bloom"], name="twice", model_types=("twice",),
                                per_logit=lambda m, hd: 2 * m,
                                biases=lambda c: ("use_bias", bool(c["use_bias"]), False),
                                max_positions_key="n_positions")
    monkeypatch.setitem(FAMILIES, "twice", twice)
    assert family_slopes("twice", 8, 64) == tuple(2 * m for m in family_slopes("bloom", 8, 64))
    assert declared_biases("twice", {"use_bias": 0}) == ("use_bias", False, False)
    info = from_config({"model_type": "twice", "n_head": 4, "hidden_size": 64, "n_layer": 2, "vocab_size": 10,
                        "n_positions": 512})
    assert info.max_positions == 512 and info.slopes == family_slopes("twice", 4, 16)
    assert from_config({"model_type": "bloom", "n_head": 4, "hidden_size": 64, "n_layer": 2,
                        "n_positions": 512}).max_positions is None
