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
    assert info.spec is FAMILIES["falcon"] and info.qk_scale == 1 / 8
    mpt = from_config({"model_type": "mpt", "n_heads": 4, "d_model": 256, "n_layers": 2, "vocab_size": 50,
                       "expansion_ratio": 2, "attn_config": {"alibi": True, "softmax_scale": 0.5}})
    assert (mpt.intermediate_size, mpt.qk_scale, mpt.activation) == (512, 0.5, "gelu")
    with pytest.raises(ValueError, match="clip_qkv"):
        from_config({"model_type": "mpt", "n_heads": 4, "d_model": 256, "attn_config": {"alibi": True, "clip_qkv": 6}})
    assert from_heads(4, 64, "mpt").slopes == family_slopes("mpt", 4, 64)


def test_a_family_is_one_row(monkeypatch):
    # every per-family fact the reader uses is a field of its FAMILIES row: a new row needs no name check elsewhere
    import dataclasses

    from ropebridge.checkpoint.config import declared_biases

    twice = dataclasses.replace(FAMILIES["bloom"], name="twice", model_types=("twice",),
                                per_logit=lambda m, hd: 2 * m, biases=lambda c: ("use_bias", bool(c["use_bias"]), False),
                                max_positions_key="n_positions")
    monkeypatch.setitem(FAMILIES, "twice", twice)
    assert family_slopes("twice", 8, 64) == tuple(2 * m for m in family_slopes("bloom", 8, 64))
    assert declared_biases("twice", {"use_bias": 0}) == ("use_bias", False, False)
    info = from_config({"model_type": "twice", "n_head": 4, "hidden_size": 64, "n_layer": 2, "vocab_size": 10,
                        "n_positions": 512})
    assert info.max_positions == 512 and info.slopes == family_slopes("twice", 4, 16)
    assert from_config({"model_type": "bloom", "n_head": 4, "hidden_size": 64, "n_layer": 2,
                        "n_positions": 512}).max_positions is None


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
    assert not info.head_norm and info.spec.default_target == "llama" and info.spec.attention is None
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


REFACT_1_6B = {"architectures": ["GPTRefactForCausalLM"], "model_type": "gpt_refact", "n_embd": 2048, "n_head": 32,
               "n_layer": 32, "n_inner": None, "n_positions": 4096, "multi_query": True, "layer_norm_epsilon": 1e-5,
               "vocab_size": 49216, "attention_softmax_in_fp32": True, "scale_attention_softmax_in_fp32": True,
               "attention_bias_in_fp32": True, "torch_dtype": "bfloat16"}


def test_refact_1_6b_is_read_from_its_published_config():
    import math

    from ropebridge.alibi import slopes as press_slopes

    info = from_config(REFACT_1_6B)
    assert (info.family, info.n_heads, info.head_dim, info.n_layers, info.kv_heads) == ("refact", 32, 64, 32, 1)
    assert info.intermediate_size == 5632  # 256 * ceil(int(2 * 8192 / 3) / 256), its MLP's width
    assert (info.norm, info.norm_bias, info.gated, info.block) == ("layernorm", False, True, "unbiased-layernorm-gated")
    assert info.qk_scale == 1 / math.sqrt(64) and info.eps == 1e-5 and info.spec.default_target == "llama"
    # its _get_slopes: torch.pow(2^(-1/4), k) in float32, up to 6 float32 ulps (5e-7) from Press et al.'s
    exact = press_slopes(32).tolist()
    assert all(abs(a - b) <= 6 * 2**-23 * b for a, b in zip(info.slopes, exact))
    assert any(a != float(__import__("numpy").float32(b)) for a, b in zip(info.slopes, exact))
    assert from_config({**REFACT_1_6B, "n_inner": 4096}).intermediate_size == 2816  # int(8192 / 3) = 2730 -> 2816
    assert from_config({**REFACT_1_6B, "n_head": 24, "n_embd": 1536}).n_heads == 24  # the non-power-of-two path


# replit/replit-code-v1-3b's config.json as first published (replit_lm, MosaicGPT's keys), as ggml's converter read it
REPLIT_CODE_V1_3B = {"architectures": ["ReplitLM"], "model_type": "replit_lm", "d_model": 2560, "n_heads": 32,
                     "n_layers": 32, "mlp_ratio": 4, "max_seq_len": 2048, "vocab_size": 32768, "alibi": True,
                     "alibi_bias_max": 8, "attn_impl": "triton", "attn_qk_ln": False, "attn_clip_qkv": None,
                     "softmax_scale": None, "prefix_lm": False, "logit_scale": None, "no_bias": True,
                     "low_precision_layernorm": True, "torch_dtype": "float32"}


def test_replit_code_v1_3b_is_read_from_its_first_config():
    import math

    from ropebridge.alibi import slopes as press_slopes

    info = from_config(REPLIT_CODE_V1_3B)
    assert (info.family, info.n_heads, info.head_dim, info.n_layers, info.vocab_size) == ("replit", 32, 80, 32, 32768)
    assert (info.intermediate_size, info.activation, info.norm, info.qk_scale) == (10240, "gelu", "layernorm",
                                                                                   1 / math.sqrt(80))
    assert info.slopes == tuple(press_slopes(32).tolist()) and info.max_positions == 2048
    assert declared_biases("replit", REPLIT_CODE_V1_3B) == ("no_bias", False, True)
    assert declared_biases("replit", {k: v for k, v in REPLIT_CODE_V1_3B.items() if k != "no_bias"})[1]  # MosaicGPT's default
    assert from_config({**REPLIT_CODE_V1_3B, "alibi_bias_max": 16}).slopes == tuple(press_slopes(32, 16).tolist())


def test_replit_variants_without_a_stock_form_are_refused_in_one_line():
    for bad, match in [
        ({**REPLIT_CODE_V1_3B, "alibi": False}, "alibi = false"),
        ({k: v for k, v in REPLIT_CODE_V1_3B.items() if k != "alibi"}, "alibi = false"),  # MosaicGPT's default
        ({**REPLIT_CODE_V1_3B, "attn_qk_ln": True}, "attn_qk_ln"),
        ({**REPLIT_CODE_V1_3B, "attn_clip_qkv": 6.0}, "attn_clip_qkv"),
        ({**REPLIT_CODE_V1_3B, "logit_scale": "inv_sqrt_d_model"}, "logit_scale"),
        ({**REPLIT_CODE_V1_3B, "mlp_ratio": 2.5001}, "mlp_ratio"),
    ]:
        with pytest.raises(ValueError, match=match) as exc:
            from_config(bad)
        assert "\n" not in str(exc.value)
