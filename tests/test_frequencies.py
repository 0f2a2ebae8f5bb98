"""inv_freq for every rope_type: float64 references from the papers, properties, and transformers itself."""

import math
import random
import zlib

import pytest
import torch
import transformers as T
from hf_reference import hf_inv_freq

from ropebridge.frequencies import ROPE_TYPES, engine_frequencies, inv_freq, ntk_base, rotary_dim, yarn_mscale

HF_TYPES = ["default", "linear", "dynamic", "yarn", "longrope", "llama3", "proportional"]


def random_params(rope_type: str, rng: random.Random, *, max_factor: float = 64.0, max_base: float = 1e7):
    """A random valid configuration of ``rope_type``: (head_dim, params, seq_len)."""
    head_dim = rng.choice([16, 32, 64, 80, 96, 128, 256])
    prf = rng.choice([1.0, 1.0, 0.5, 0.25])
    dim = int(head_dim * prf)
    params = {
        "rope_type": rope_type,
        "rope_theta": math.exp(rng.uniform(math.log(50.0), math.log(max_base))),
        "partial_rotary_factor": prf,
        "max_position_embeddings": rng.choice([1024, 2048, 4096, 32768]),
    }
    factor = rng.uniform(1.0, max_factor)
    if rope_type in ("linear", "ntk", "dynamic", "yarn", "llama3"):
        params["factor"] = factor
    if rope_type in ("yarn", "llama3", "longrope"):
        params["original_max_position_embeddings"] = rng.choice([256, 512, 1024, 2048, 4096])
    if rope_type == "yarn":
        if rng.random() < 0.5:
            params["beta_fast"], params["beta_slow"] = rng.uniform(4, 64), rng.uniform(0.25, 3.9)
        if rng.random() < 0.3:
            params["truncate"] = False
        if rng.random() < 0.3:
            params["mscale"], params["mscale_all_dim"] = rng.uniform(0.5, 2), rng.uniform(0.5, 2)
        if rng.random() < 0.2:
            params["attention_factor"] = rng.uniform(0.5, 2)
    if rope_type == "llama3":
        params["low_freq_factor"] = rng.uniform(0.5, 2)
        params["high_freq_factor"] = params["low_freq_factor"] + rng.uniform(0.5, 8)
    if rope_type == "longrope":
        params["short_factor"] = [rng.uniform(1, 2) for _ in range(dim // 2)]
        params["long_factor"] = [rng.uniform(1, 40) for _ in range(dim // 2)]
        if rng.random() < 0.5:
            params["factor"] = factor
    if rope_type == "proportional":
        params["partial_rotary_factor"] = rng.choice([0.0, 0.25, 0.5, 0.75, 1.0, 2 / head_dim])
        params["factor"] = math.exp(rng.uniform(math.log(0.5), math.log(1e7)))
    seq_len = rng.choice([None, 1, 100, params["max_position_embeddings"] * 3])
    return head_dim, params, seq_len


def relative_close(actual, expected, rtol, msg):
    torch.testing.assert_close(actual, expected.to(actual.dtype), rtol=rtol, atol=0.0, msg=msg)


@pytest.mark.parametrize("rope_type", HF_TYPES)
def test_equals_transformers_formulas_in_float64(rope_type):
    # transformers' own code, run in float64: any valid parameters agree to float64 rounding.
    rng = random.Random(zlib.crc32(rope_type.encode()))
    for _ in range(120):
        head_dim, params, seq_len = random_params(rope_type, rng)
        ours, ours_af = inv_freq(head_dim, params, seq_len=seq_len)
        theirs, their_af = hf_inv_freq(head_dim, params, seq_len, float64=True)
        relative_close(ours, theirs, 1e-12, lambda m: f"float64 mismatch {params}: {m}")
        assert ours_af == pytest.approx(their_af, rel=1e-12)


@pytest.mark.parametrize("rope_type", HF_TYPES)
def test_equals_transformers_float32_to_1e6(rope_type):
    # transformers computes in float32, so its numbers carry float32 rounding: ~ln(base)*2^-24 from the
    # exponent (<= 1e-6 for base <= 1e6). yarn and llama3 then blend theta/s and theta with a weight g
    # computed in float32: d(out)/out = dg * (1 - 1/s) / ((1 - g)/s + g) <= s * dg, so their rounding is
    # amplified up to s; the bound becomes 4 * s * 2^-24 (1e-6 up to s = 4). The float64 test above
    # compares transformers' formulas without that rounding, for any valid parameters.
    rng = random.Random(7 + zlib.crc32(rope_type.encode()))
    for _ in range(120):
        head_dim, params, seq_len = random_params(rope_type, rng, max_factor=16.0, max_base=1e6)
        ours, ours_af = inv_freq(head_dim, params, seq_len=seq_len)
        theirs, their_af = hf_inv_freq(head_dim, params, seq_len)
        rtol = 1e-6
        if rope_type in ("yarn", "llama3"):
            rtol = max(rtol, 4 * params["factor"] * 2.0**-24)
        relative_close(ours.float(), theirs, rtol, lambda m: f"float32 mismatch {params}: {m}")
        assert ours_af == pytest.approx(their_af, rel=1e-6)


# ---- float64 references written from the papers, independent of the implementation -----------------


def ref_default(dim, base):
    return [base ** (-2 * i / dim) for i in range(dim // 2)]


def test_default_reference_roformer():
    # RoFormer eq. 15: theta_i = 10000^(-2i/d)
    got, af = inv_freq(128, {"rope_theta": 10000.0})
    relative_close(got, torch.tensor(ref_default(128, 10000.0), dtype=torch.float64), 1e-15, None)
    assert af == 1.0


def test_linear_is_default_over_s():
    # Chen et al. 2023 eq. 4: f'(x, m) = f(x, m L / L'); PI equals default / s exactly.
    for s in (1.0, 2.0, 4.0, 8.0, 3.7):
        lin, _ = inv_freq(64, {"rope_type": "linear", "rope_theta": 10000.0, "factor": s})
        default, _ = inv_freq(64, {"rope_theta": 10000.0})
        torch.testing.assert_close(lin, default / s, rtol=0, atol=0)


def test_ntk_seed_example_and_reference():
    # "NTK-aware with s = 4 turns base 10000 into ~40890"
    assert ntk_base(10000.0, 4.0, 128) == pytest.approx(40890, abs=1)
    got, _ = inv_freq(128, {"rope_type": "ntk", "rope_theta": 10000.0, "factor": 4.0})
    new_base = 10000.0 * 4.0 ** (128 / 126)
    relative_close(got, torch.tensor(ref_default(128, new_base), dtype=torch.float64), 1e-14, None)
    # the fastest pair is unchanged, the slowest is exactly interpolated by s
    default = ref_default(128, 10000.0)
    assert got[0].item() == 1.0
    assert got[-1].item() == pytest.approx(default[-1] / 4, rel=1e-14)


def test_dynamic_is_ntk_at_the_dynamic_factor():
    base, s, L = 10000.0, 4.0, 2048
    p = {"rope_type": "dynamic", "rope_theta": base, "factor": s, "max_position_embeddings": L}
    default, _ = inv_freq(64, {"rope_theta": base})
    for seq_len in (None, 10, L):  # within the trained length: default frequencies
        torch.testing.assert_close(inv_freq(64, p, seq_len=seq_len)[0], default, rtol=1e-15, atol=0)
    long = 3 * L
    s_dyn = s * long / L - (s - 1)
    ntk, _ = inv_freq(64, {"rope_type": "ntk", "rope_theta": base, "factor": s_dyn})
    torch.testing.assert_close(inv_freq(64, p, seq_len=long)[0], ntk, rtol=1e-14, atol=0)


def ref_yarn(dim, base, s, L, beta_fast=32.0, beta_slow=1.0):
    # YaRN §3.2 eq. 17-18: r(i) = L / lambda_i; gamma = 0 if r < alpha, 1 if r > beta, ramp between;
    # h(theta_i) = (1 - gamma) theta_i / s + gamma theta_i. With truncate=False transformers' pair-index
    # ramp is the same ramp expressed in i (r(i) is exponential in i, the index ramp linear).
    out = []
    low = dim * math.log(L / (beta_fast * 2 * math.pi)) / (2 * math.log(base))
    high = dim * math.log(L / (beta_slow * 2 * math.pi)) / (2 * math.log(base))
    low, high = max(low, 0.0), min(high, dim - 1)
    for i in range(dim // 2):
        theta = base ** (-2 * i / dim)
        ramp = min(max((i - low) / (high - low), 0.0), 1.0)
        gamma = 1 - ramp
        out.append((1 - gamma) * theta / s + gamma * theta)
    return out


def test_yarn_reference_and_temperature():
    p = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 8.0, "original_max_position_embeddings": 4096,
         "truncate": False}
    got, af = inv_freq(128, p)
    relative_close(got, torch.tensor(ref_yarn(128, 10000.0, 8.0, 4096), dtype=torch.float64), 1e-14, None)
    # "YaRN's temperature sqrt(1/t) = 0.1 ln s + 1"
    assert af == pytest.approx(0.1 * math.log(8.0) + 1, rel=1e-15)
    assert yarn_mscale(1.0) == 1.0
    # fast pairs keep their frequency, slow pairs are interpolated by s
    default = ref_default(128, 10000.0)
    assert got[0].item() == default[0]
    assert got[-1].item() == pytest.approx(default[-1] / 8, rel=1e-14)


def test_llama3_reference():
    # Llama 3.1 scaling with Meta's values: factor 8, low 1, high 4, original 8192, base 500000.
    p = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    got, _ = inv_freq(128, p)
    expected = []
    for theta in ref_default(128, 500000.0):
        wavelen = 2 * math.pi / theta
        if wavelen < 8192 / 4:
            expected.append(theta)
        elif wavelen > 8192 / 1:
            expected.append(theta / 8)
        else:
            a = (8192 / wavelen - 1) / (4 - 1)
            expected.append((1 - a) * theta / 8 + a * theta)
    relative_close(got, torch.tensor(expected, dtype=torch.float64), 1e-14, None)


def test_longrope_short_and_long():
    short, long = [1.0, 1.5, 2.0, 3.0], [2.0, 4.0, 8.0, 16.0]
    p = {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": short, "long_factor": long,
         "original_max_position_embeddings": 4096, "max_position_embeddings": 131072}
    base = ref_default(8, 10000.0)
    got_short, af = inv_freq(8, p, seq_len=4096)
    got_long, _ = inv_freq(8, p, seq_len=4097)
    relative_close(got_short, torch.tensor([t / f for t, f in zip(base, short)], dtype=torch.float64), 1e-15, None)
    relative_close(got_long, torch.tensor([t / f for t, f in zip(base, long)], dtype=torch.float64), 1e-15, None)
    assert af == pytest.approx(math.sqrt(1 + math.log(32) / math.log(4096)), rel=1e-15)


def test_proportional_and_partial_rotary():
    got, _ = inv_freq(66, {"rope_type": "proportional", "rope_theta": 10000.0, "factor": 5.0,
                           "partial_rotary_factor": 2 / 66})
    assert got.shape == (33,)
    assert got[0].item() == 1 / 5.0 and (got[1:] == 0).all()
    assert rotary_dim(64, 0.25) == 16
    assert inv_freq(64, {"rope_theta": 10000.0, "partial_rotary_factor": 0.25})[0].shape == (8,)


def test_registry_lists_every_type():
    assert set(ROPE_TYPES) == {"default", "linear", "ntk", "dynamic", "yarn", "longrope", "llama3", "proportional"}


@pytest.mark.parametrize(
    "head_dim, params, match",
    [
        (64, {"rope_type": "nope", "rope_theta": 1e4}, "rope_type"),
        (64, {"rope_type": "linear", "rope_theta": 1e4}, "'factor'"),
        (64, {"rope_type": "yarn", "rope_theta": 1e4, "factor": 2.0}, "original_max_position_embeddings"),
        (64, {"rope_type": "llama3", "rope_theta": 1e4, "factor": 8.0, "original_max_position_embeddings": 8192,
              "low_freq_factor": 4.0, "high_freq_factor": 1.0}, "high_freq_factor"),
        (64, {"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0}, "max_position_embeddings"),
        (64, {"rope_type": "longrope", "rope_theta": 1e4, "original_max_position_embeddings": 4096,
              "short_factor": [1.0], "long_factor": [1.0], "factor": 2.0}, "short_factor"),
        (63, {"rope_theta": 1e4}, "head_dim"),
        (0, {"rope_theta": 1e4}, "head_dim"),
        (-64, {"rope_theta": 1e4}, "head_dim"),
        (64, {"rope_theta": 1.0}, "rope_theta"),
        (64, {"rope_theta": 0.5}, "rope_theta"),
        (64, {}, "rope_theta"),
        (64, {"rope_type": "linear", "rope_theta": 1e4, "factor": 0.5}, "factor"),
        (64, {"rope_type": "ntk", "rope_theta": 1e4, "factor": 0.9}, "factor"),
        (64, {"rope_type": "yarn", "rope_theta": 1e4, "factor": 0.9, "original_max_position_embeddings": 8}, "factor"),
        (64, {"rope_theta": 1e4, "bogus": 1}, "bogus"),
        (96, {"rope_theta": 1e4, "partial_rotary_factor": 2 / 98}, "partial_rotary_factor"),  # int(1.959) = 1
        (64, {"rope_theta": 1e4, "partial_rotary_factor": 1.5}, "partial_rotary_factor"),
        (64, {"rope_type": "yarn", "rope_theta": 1e4, "factor": 2.0, "original_max_position_embeddings": 8,
              "beta_fast": 1.0, "beta_slow": 2.0}, "beta_fast"),
    ],
)
def test_bad_input_names_the_key(head_dim, params, match):
    with pytest.raises(ValueError, match=match):
        inv_freq(head_dim, params)


def test_negative_seq_len_refused():
    with pytest.raises(ValueError, match="seq_len"):
        inv_freq(64, {"rope_theta": 1e4}, seq_len=-1)


def test_a_rotary_block_s_float32_frequencies_are_transformers_own_and_a_subnormal_one_refused():
    cfg = T.GPTNeoXConfig(hidden_size=80, num_attention_heads=1, rotary_pct=0.2,
                          rope_parameters={"rope_type": "default", "rope_theta": 29678.75,
                                           "partial_rotary_factor": 0.2})
    rope = T.models.gpt_neox.modeling_gpt_neox.GPTNeoXRotaryEmbedding(cfg)
    ours = engine_frequencies(29678.75, 16)
    assert torch.equal(rope.inv_freq.double(), torch.tensor(ours))  # bit for bit: the fit uses these values
    assert ours[0] == 1.0
    with pytest.raises(ValueError, match="below float32's normal range"):
        engine_frequencies(1e300, 64)
