"""The llama target's rope: transformers' llama3 formula computed as the engine does, the bands a plan chooses."""

import math

import pytest
import torch
import transformers as T
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from ropebridge.frequencies import geometric
from ropebridge.targets import llama_rope

SINGLE = [(2.0**-24, 130, 4096), (2.0**-30, 258, 262144), (1.234567e-5, 130, 8192), (3e-7, 66, 65536),
          (2.0**-12, 18, 16)]
LADDER = [(32, 160, 4096), (32, 160, 65536), (32, 96, 8192), (64, 192, 131072), (16, 80, 2048)]


def transformers_inv_freq(head_dim: int, params: dict, window: int) -> torch.Tensor:
    config = T.LlamaConfig(hidden_size=64, num_attention_heads=4, head_dim=head_dim, max_position_embeddings=window,
                           rope_parameters=dict(params))
    return ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")[0]


@pytest.mark.parametrize("theta, head_dim, window", SINGLE)
def test_the_opposed_pairs_turn_at_theta_and_below_and_nothing_else_turns(theta, head_dim, window):
    params, (t0, t1) = llama_rope.opposed_rope(theta, head_dim, window)
    inv = llama_rope.inv_freq_float32(head_dim, params)
    assert torch.equal(inv, transformers_inv_freq(head_dim, params, window))  # the engine's own numbers, bit for bit
    assert (float(inv[0]), float(inv[1])) == (t0, t1)
    if math.log2(theta).is_integer():
        assert t0 == theta and (t1 == theta / 8 or head_dim > 254)  # powers of two: float32's exact rotation
    assert t0 == pytest.approx(theta, rel=2**-20) and 0 < t1 < t0 / 2
    if head_dim <= 254:
        assert t1 == pytest.approx(theta / 8, rel=2**-20)
    assert float(inv[2:].double().max()) * window < 1e-20
    assert params["original_max_position_embeddings"] < window or window == 1


def test_both_pairs_are_exact_powers_of_two_for_every_head_size_and_window():
    # pair 0 at theta and pair 1 at theta/8 exactly up to 254 dims (pair 1 at 1/2 before scaling needs a base of
    # 2^(hd/2)); beyond, base 10000, pair 0 still exact and pair 1 at what the band gives it
    from ropebridge.emulation.single import exact_rotation_theta

    for head_dim in range(8, 272, 4):
        for window in (16, 128, 2048, 32768, 2**20):
            theta = exact_rotation_theta(window)
            params, (t0, t1) = llama_rope.opposed_rope(theta, head_dim, window)
            assert t0 == theta, (head_dim, window)
            assert t1 == theta / 8 if head_dim <= 254 else 0 < t1 < theta / 2, (head_dim, window, t1 / theta)
            assert (llama_rope.halving_base(head_dim) is None) == (head_dim > 254)


@pytest.mark.parametrize("rotary_dim, head_dim, window", LADDER)
def test_the_ladder_keeps_its_pairs_and_silences_the_content(rotary_dim, head_dim, window):
    base = float(window) ** (rotary_dim / (rotary_dim - 2))  # the ladder's free base
    params = llama_rope.ladder_parameters(base, rotary_dim, head_dim, window)
    inv = llama_rope.inv_freq_float32(head_dim, params)
    assert torch.equal(inv, transformers_inv_freq(head_dim, params, window))
    kept = inv[: rotary_dim // 2].double()
    # the paper's ladder, base^(-2k/R), to float32 rounding
    exact = base ** (-2 * torch.arange(rotary_dim // 2, dtype=torch.float64) / rotary_dim)
    assert float((kept / exact - 1).abs().max()) < 2**-20
    unscaled = geometric(params["rope_theta"], head_dim, dtype=torch.float32)  # the ladder's pairs are kept as is
    assert torch.equal(inv[: rotary_dim // 2], unscaled[: rotary_dim // 2])
    assert float(inv[rotary_dim // 2:].double().max()) * window < 1e-20
    llama_rope.check_bands(inv, rotary_dim // 2, window)
    with pytest.raises(ValueError, match="content pairs"):  # the check can fail: a kept pair counted as content
        llama_rope.check_bands(inv, rotary_dim // 2 - 1, window)


def test_a_base_beyond_float32_is_refused_in_one_line():
    with pytest.raises(ValueError, match="beyond float32") as exc:
        llama_rope.ladder_parameters(1e6, 8, 128 + 8, 65536)
    assert "\n" not in str(exc.value)
