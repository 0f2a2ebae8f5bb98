"""Refact-1.6B: read from its published config."""

from ropebridge.checkpoint.config import from_config

def test_refact_1_6b_is_read_from_its_published_config():
    import math

    from ropebridge.alibi import slopes as press_slopes

    info = from_config(REFACT_1_6B)
    assert (info.family, info.n_heads, info.head_dim, info.n_layers, info.kv_heads) == ("refact", 32, 64, 32, 1)
    assert info.intermediate_size == 5632  # 256 * ceil(int(2 * 8192 / 3) / 256), its MLP's width
    assert (info.norm, info.norm_bias, info.gated, info.block) == ("layernorm", False, True, "unbiased-layernorm-gated")
    assert info.qk_scale == 1 / math.sqrt(64) and info.eps == 1e-5 and info.family_row.default_target == "llama"
    # its _get_slopes: torch.pow(2^(-1/4), k) in float32, up to 6 float32 ulps (5e-7) from Press et al.'s
    exact = press_slopes(32).tolist()
    assert all(abs(a - b) <= 6 * 2**-23 * b for a, b in zip(info.slopes, exact))
    assert any(a != float(__import__("numpy").float32(b)) for a, b in zip(info.slopes, exact))
    assert from_config({**REFACT_1_6B, "n_inner": 4096}).intermediate_size == 2816  # int(8192 / 3) = 2730 -> 2816
    assert from_config({**REFACT_1_6B, "n_head": 24, "n_embd": 1536}).n_heads == 24  # the non-power-of-two path


REFACT_1_6B = {"architectures": ["GPTRefactForCausalLM"], "model_type": "gpt_refact", "n_embd": 2048, "n_head": 32,
               "n_layer": 32, "n_inner": None, "n_positions": 4096, "multi_query": True, "layer_norm_epsilon": 1e-5,
               "vocab_size": 49216, "attention_softmax_in_fp32": True, "scale_attention_softmax_in_fp32": True,
               "attention_bias_in_fp32": True, "torch_dtype": "bfloat16"}


# replit/replit-code-v1-3b's config.json as first published (replit_lm, MosaicGPT's keys), as ggml's converter read it


def test_the_block_as_published_is_the_one_its_config_gives():
    info = from_config(REFACT_1_6B)
    assert info.block == info.family_row.block == "unbiased-layernorm-gated"  # plan --heads --family refact's
