"""MPT's row: the bias after the softmax scale, slopes from ``alibi_bias_max``, the variants it refuses."""

import pytest
from oracles import press_reference

from ropebridge.checkpoint.config import from_config

MPT_7B = {"model_type": "mpt", "d_model": 4096, "n_heads": 32, "n_layers": 32, "vocab_size": 50432,
          "expansion_ratio": 4, "attn_config": {"alibi": True, "alibi_bias_max": 8}}


def test_mpt_7b_reads_its_slopes_and_sizes():
    info = from_config(MPT_7B)
    assert (info.family, info.head_dim, info.intermediate_size, info.max_bias) == ("mpt", 128, 16384, 8.0)
    assert list(info.slopes) == pytest.approx(press_reference(32), rel=1e-15)
    # alibi_bias_max b: 2^(-b k / h), an independent reading of the same rule
    four = from_config({**MPT_7B, "attn_config": {"alibi": True, "alibi_bias_max": 4}})
    assert list(four.slopes) == pytest.approx([2 ** (-4 * (k + 1) / 32) for k in range(32)], rel=1e-15)


@pytest.mark.parametrize("attn, needle", [({"alibi": False}, "not an ALiBi model"),
                                          ({"alibi": True, "qk_ln": True}, "qk_ln"),
                                          ({"alibi": True, "clip_qkv": 6}, "clip_qkv"),
                                          ("alibi", "expected an object")])
def test_what_has_no_stock_form_is_refused(attn, needle):
    with pytest.raises(ValueError, match=needle):
        from_config({**MPT_7B, "attn_config": attn})
