"""Replit-code-v1-3b: read from its first config; its variants without a stock form refused."""

import pytest

from ropebridge.checkpoint.config import declared_biases, from_config

def test_replit_code_v1_3b_is_read_from_its_first_config():
    import math

    from ropebridge.alibi import slopes as press_slopes

    info = from_config(REPLIT_CODE_V1_3B)
    assert (info.family, info.n_heads, info.head_dim, info.n_layers, info.vocab_size) == ("replit", 32, 80, 32, 32768)
    assert (info.intermediate_size, info.activation, info.norm, info.qk_scale) == (10240, "gelu", "layernorm",
                                                                                   1 / math.sqrt(80))
    assert info.slopes == tuple(press_slopes(32).tolist()) and info.max_positions == 2048
    assert declared_biases("replit", REPLIT_CODE_V1_3B) == ("no_bias", False, True)
    assert declared_biases("replit",
                           {k: v for k, v in REPLIT_CODE_V1_3B.items() if k != "no_bias"})[1]  # MosaicGPT's default
    assert from_config({**REPLIT_CODE_V1_3B, "alibi_bias_max": 16}).slopes == tuple(press_slopes(32, 16).tolist())


REPLIT_CODE_V1_3B = {"architectures": ["ReplitLM"], "model_type": "replit_lm", "d_model": 2560, "n_heads": 32,
                     "n_layers": 32, "mlp_ratio": 4, "max_seq_len": 2048, "vocab_size": 32768, "alibi": True,
                     "alibi_bias_max": 8, "attn_impl": "triton", "attn_qk_ln": False, "attn_clip_qkv": None,
                     "softmax_scale": None, "prefix_lm": False, "logit_scale": None, "no_bias": True,
                     "low_precision_layernorm": True, "torch_dtype": "float32"}


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
