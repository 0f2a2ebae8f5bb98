"""Jais and BTLM read from either spelling of their keys, their attention scale, muP scales and fixed ALiBi
scaling; the variants without a stock RoPE form refused in one line."""

import pytest
from oracles import press_reference

from ropebridge.checkpoint.config import FAMILIES, from_config

JAIS_13B = {"model_type": "jais", "n_embd": 5120, "n_head": 40, "n_layer": 40, "n_inner": 13653, "vocab_size": 84992,
            "position_embedding_type": "alibi", "activation_function": "swiglu", "embeddings_scale": 14.6,
            "width_scale": 0.11100000000000002, "scale_qk_dot_by_d": True, "layer_norm_epsilon": 1e-5}
BTLM_3B = {"model_type": "btlm", "n_embd": 2560, "n_head": 32, "n_layer": 32, "n_inner": 6826, "vocab_size": 50257,
           "position_embedding_type": "alibi", "activation_function": "swiglu", "mup_embeddings_scale": 14.6,
           "mup_output_alpha": 2.22, "mup_width_scale": 0.1, "mup_scale_qk_dot_by_d": True, "alibi_scaling": None}


def test_jais_13b_reads_its_own_spelling():
    info = from_config(JAIS_13B)
    assert (info.family, info.n_heads, info.head_dim, info.intermediate_size) == ("jais", 40, 128, 13653)
    assert info.qk_scale == 1 / 128 and info.embedding_scale == 14.6 and info.logit_scale == 0.11100000000000002
    assert (info.block, info.activation, info.family_row.default_target) == ("layernorm-gated", "silu", "stablelm")
    assert info.family_row.transposed and info.family_row.slopes_tensor == "transformer.relative_pe.slopes"
    # without weights, the slopes are the formula's as its torch.tensor builds them: float32 values
    import torch

    assert info.slopes == tuple(torch.tensor(press_reference(40)).double().tolist())


def test_btlm_and_jais_30b_read_the_mup_spelling():
    info = from_config(BTLM_3B)
    assert info.family == "btlm" and info.qk_scale == 1 / 80 and info.embedding_scale == 14.6
    assert info.logit_scale == pytest.approx(0.222, rel=1e-15) and info.intermediate_size == 6826
    plain = from_config({**BTLM_3B, "mup_scale_qk_dot_by_d": False, "n_inner": None})
    assert plain.qk_scale == 80 ** -0.5 and plain.intermediate_size == 4 * 2560
    assert from_config({**BTLM_3B, "scale_attn_weights": False}).qk_scale == 1.0


def test_a_fixed_alibi_scaling_divides_the_slopes():
    base = from_config(BTLM_3B)
    scaled = from_config({**BTLM_3B, "alibi_scaling": {"type": "linear", "factor": 4.0}})
    assert scaled.alibi_factor == 4.0 and scaled.slopes == tuple(m / 4 for m in base.slopes)


@pytest.mark.parametrize("change, match", [
    ({"alibi_scaling": {"type": "linear", "train_seq_len": 8192}}, "depends on the input's length"),
    ({"alibi_scaling": {"type": "ntk", "factor": 2.0}}, "alibi_scaling.type"),
    ({"alibi_scaling": 2.0}, "alibi_scaling is 2.0"),
    ({"position_embedding_type": "learned"}, "not an ALiBi model"),
    ({"position_embedding_type": None}, "not an ALiBi model"),
    ({"activation_function": "gelu_new"}, "only swiglu"),
    ({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx"),
    ({"scale_qk_dot_by_d": False, "mup_scale_qk_dot_by_d": True}, "disagree"),
    ({"embeddings_scale": 14.6, "mup_embeddings_scale": 10.0}, "disagree"),
    ({"width_scale": 0.5}, "disagree"),
    ({"mup_embeddings_scale": -1.0}, "embeddings_scale"),
])
def test_what_has_no_stock_form_is_refused_in_one_line(change, match):
    config = {**BTLM_3B, **change}
    if "position_embedding_type" in change and change["position_embedding_type"] is None:
        del config["position_embedding_type"]  # absent: the configs' default, learned
    with pytest.raises(ValueError, match=match) as exc:
        from_config(config)
    assert "\n" not in str(exc.value)


def test_both_rows_are_one_reading():
    jais, btlm = FAMILIES["jais"], FAMILIES["btlm"]
    assert jais.details is btlm.details and jais.tensor_names(3) == btlm.tensor_names(3)
    assert jais.tensor_names(3)["gate"] == "transformer.h.3.mlp.c_fc2"  # c_proj(c_fc(x) * silu(c_fc2(x)))


def test_the_block_as_published_is_the_one_its_config_gives():
    for config in (JAIS_13B, BTLM_3B):
        info = from_config(config)
        assert info.block == info.family_row.block == "layernorm-gated"
