"""Falcon-RW's row: (q.k + m j)/sqrt(hd) with m rounded to bfloat16, multi-query by default, what it refuses."""

import math

import pytest
import torch
from oracles import press_reference

from ropebridge.checkpoint.config import from_config

FALCON_RW_1B = {"model_type": "falcon", "hidden_size": 2048, "num_attention_heads": 32, "num_hidden_layers": 24,
                "vocab_size": 50304, "alibi": True, "multi_query": False, "parallel_attn": False, "bias": True}


def test_falcon_rw_1b_reads_bfloat16_slopes_over_sqrt_hd():
    info = from_config(FALCON_RW_1B)
    rounded = [float(torch.tensor(m, dtype=torch.bfloat16)) / math.sqrt(64) for m in press_reference(32)]
    assert list(info.slopes) == rounded and (info.kv_heads, info.parallel) == (32, False)
    assert from_config({**FALCON_RW_1B, "multi_query": None}).kv_heads == 32  # null is not multi-query's default
    assert from_config({k: v for k, v in FALCON_RW_1B.items() if k != "multi_query"}).kv_heads == 1


@pytest.mark.parametrize("change, needle", [({"alibi": False}, "uses RoPE already"),
                                            ({"new_decoder_architecture": True}, "new_decoder_architecture"),
                                            ({"activation": "relu"}, "activation")])
def test_what_has_no_stock_form_is_refused(change, needle):
    with pytest.raises(ValueError, match=needle):
        from_config({**FALCON_RW_1B, **change})
