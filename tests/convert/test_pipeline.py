"""convert end to end on pico models of every family: verify passes, stock transformers loads the result, the
exact reference agrees (left padding included), shards and .bin sources, every emulation and dtype."""

import inspect
import json
import math

import pytest
import torch
import transformers as T
from pico import FAMILIES, build

from ropebridge.checkpoint.config import load_config
from ropebridge.checkpoint.model import SourceModel
from ropebridge.checkpoint.reference import reference_logits
from ropebridge.convert import convert
from ropebridge.verify import verify
from ropebridge.emulation import PlanRequest
from ropebridge.numerics import TOLERANCE
from ropebridge.emulation.single import exact_rotation_theta

FLOAT32_BAR = TOLERANCE["float32"]


def test_ladder_checkpoint_reproduces_the_exact_bias(bloom, tmp_path):
    # a float32 checkpoint with the ladder: what is left is the fit error, which the plan predicts
    res = convert(bloom, tmp_path / "rope", PlanRequest(window=512, dtype="float32", strategy="ladder"))
    assert res.plan.strategy == "ladder"
    model = T.AutoModelForCausalLM.from_pretrained(res.destination).eval()
    cfg = model.config
    assert cfg.hidden_size // cfg.num_attention_heads == 32 + 32  # the head-dim rule: 64
    ids = torch.randint(0, 320, (1, 512), generator=torch.Generator().manual_seed(2))
    ref = reference_logits(SourceModel(bloom), ids)
    with torch.no_grad():
        got = model(ids).logits.double()
    worst = max(h.approximation_error for h in res.plan.heads)  # fit error of the bias, logits
    # a bias error e moves each attention output by at most ~e (softmax is 1-Lipschitz in its logits, scaled
    # by |v|); through two layers of this pico model a few-fold amplification, hence 10x the bias error
    assert float((got - ref).abs().max()) <= 10 * worst + 1e-3


def test_ladder_in_bfloat16_beats_native_bfloat16(bloom, tmp_path):
    res = convert(bloom, tmp_path / "rope16", PlanRequest(window=1024, dtype="bfloat16"))
    assert res.plan.strategy == "ladder"  # the half-precision default
    ids = torch.randint(0, 320, (1, 1024), generator=torch.Generator().manual_seed(3))
    ref = reference_logits(SourceModel(bloom), ids)
    errs = {}
    for name, path in (("native", bloom), ("converted", res.destination)):
        model = T.AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval()
        with torch.no_grad():
            errs[name] = float((model(ids).logits.double() - ref).abs().max())
    assert errs["converted"] <= errs["native"], errs


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("pico")
    out = {}
    for family in FAMILIES:
        src = build(root / family, family)
        res = convert(src, root / f"{family}-rope", PlanRequest(window=1024))
        out[family] = (src, res)
    return out


@pytest.mark.parametrize("family", list(FAMILIES))
def test_verify_passes_in_float32(converted, family):
    src, res = converted[family]
    report = verify(src, res.destination, context=384, greedy_tokens=24)
    assert report.passed, report.failures
    assert report.max_abs_logit_diff <= FLOAT32_BAR
    assert report.padded_max_abs_logit_diff <= FLOAT32_BAR
    assert report.greedy_identical and report.top1_agreement == 1.0
    # against the exact float64 ALiBi reference the converted model is as close as the native one
    assert report.reference_converted_max_err <= max(2 * report.reference_source_max_err, 1e-4)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_stock_architecture_without_ropebridge(converted, family):
    _, res = converted[family]
    model = T.AutoModelForCausalLM.from_pretrained(res.destination)  # no trust_remote_code
    assert type(model).__name__ == "GPTNeoXForCausalLM"
    cfg = model.config
    assert cfg.hidden_size == cfg.num_attention_heads * (res.plan.head_dim + res.plan.rotary_dim)
    assert int(cfg.hidden_size // cfg.num_attention_heads * cfg.rope_parameters["partial_rotary_factor"]) == 4
    raw = load_config(res.destination)
    assert raw["rotary_pct"] == cfg.rope_parameters["partial_rotary_factor"] and raw["rotary_emb_base"] == res.plan.base


def test_save_reload_and_kv_cache_decode(converted, tmp_path):
    src, res = converted["bloom-12heads"]
    native = T.AutoModelForCausalLM.from_pretrained(src).eval()
    model = T.AutoModelForCausalLM.from_pretrained(res.destination).eval()
    model.save_pretrained(tmp_path / "again")
    again = T.AutoModelForCausalLM.from_pretrained(tmp_path / "again").eval()
    ids = torch.randint(0, 320, (1, 200), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        full = model(ids).logits
        torch.testing.assert_close(again(ids).logits, full, rtol=0, atol=0)  # a byte-identical reload
        # one cached decode step equals the last row of the full forward (same float32 arithmetic, reordered)
        out = model(ids[:, :-1], use_cache=True)
        cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        step = model(ids[:, -1:], **{cache_kw: out.past_key_values}).logits[:, -1]
        torch.testing.assert_close(step, full[:, -1], rtol=0, atol=1e-5)
        torch.testing.assert_close(native(ids).logits, full, rtol=0, atol=FLOAT32_BAR)


def test_matches_the_exact_reference_with_left_padding(converted):
    src, res = converted["bloom-4heads"]
    model = T.AutoModelForCausalLM.from_pretrained(res.destination).eval()
    ids = torch.randint(0, 320, (2, 64), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, :20] = 0
    ref = reference_logits(SourceModel(src), ids, mask)
    with torch.no_grad():
        got = model(ids, attention_mask=mask).logits.double()
    torch.testing.assert_close(got[0], ref[0], rtol=0, atol=FLOAT32_BAR)
    torch.testing.assert_close(got[1, 20:], ref[1, 20:], rtol=0, atol=FLOAT32_BAR)


def test_emulation_pair_sits_on_the_rotate_half_pairing(converted):
    # the q bias on dim k and the k bias on dim k + r/2 form one rotate_half pair; rotated by GPT-NeoX's own
    # rotary embedding they add -m d (not +m d: a sign slip would reward distance)
    _, res = converted["bloom-4heads"]
    model = T.AutoModelForCausalLM.from_pretrained(res.destination).eval()
    attn = model.gpt_neox.layers[0].attention
    hd, r, h = attn.head_size, attn.rotary_ndims, model.config.num_attention_heads
    bias = attn.query_key_value.bias.detach().view(h, 3, hd)
    q, k = bias[:, 0, :r], bias[:, 1, :r]  # (h, r)
    pos = torch.arange(600)[None]
    cos, sin = model.gpt_neox.rotary_emb(torch.zeros(1, dtype=torch.float32), pos)
    from transformers.models.gpt_neox.modeling_gpt_neox import rotate_half

    qr = q[:, None] * cos[0] + rotate_half(q[:, None]) * sin[0]  # (h, s, r)
    kr = k[:, None] * cos[0] + rotate_half(k[:, None]) * sin[0]
    d = 599 - torch.arange(600, dtype=torch.float64)
    got = (qr[:, -1:] @ kr.transpose(1, 2))[:, 0].double() / math.sqrt(hd)  # query at 599, every key
    for head in range(h):
        slope = res.plan.heads[head].slope
        torch.testing.assert_close(got[head], -slope * d, rtol=0, atol=1e-3)


def test_small_shards_and_bin_source(tmp_path):
    src = build(tmp_path / "src", "bloom-4heads", safe_serialization=False)
    assert (src / "pytorch_model.bin").exists()
    res = convert(src, tmp_path / "dst", PlanRequest(window=512), max_shard_mb=0.05)
    shards = sorted(res.destination.glob("model-*.safetensors"))
    assert len(shards) > 3 and (res.destination / "model.safetensors.index.json").exists()
    assert (res.destination / "ropebridge.json").exists()
    assert verify(src, res.destination, context=128, greedy_tokens=8).passed


def test_tokenizer_config_is_written_for_transformers_4(tmp_path):
    src = build(tmp_path / "src", "bloom-4heads")
    (src / "tokenizer_config.json").write_text('{"tokenizer_class": "TokenizersBackend", "pad_token": "<pad>"}')
    (src / "generation_config.json").write_text('{"max_new_tokens": 7}')
    res = convert(src, tmp_path / "dst", PlanRequest(window=256))
    config = json.loads((res.destination / "tokenizer_config.json").read_text())
    assert config == {"tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "<pad>"}
    assert (res.destination / "generation_config.json").read_text() == '{"max_new_tokens": 7}'


def test_a_source_that_turns_the_cache_off_does_not_turn_it_off_in_the_conversion(tmp_path):
    # MPT's configs say use_cache false; copied into generation_config.json it overrides the target's true
    src = build(tmp_path / "src", "bloom-4heads")
    (src / "generation_config.json").write_text('{"bos_token_id": 1, "use_cache": false}')
    res = convert(src, tmp_path / "dst", PlanRequest(window=256))
    assert json.loads((res.destination / "generation_config.json").read_text()) == {"bos_token_id": 1}
    model = T.AutoModelForCausalLM.from_pretrained(res.destination)
    out = model.generate(torch.tensor([[3, 4, 5]]), max_new_tokens=2, do_sample=False,
                         return_dict_in_generate=True)
    assert out.past_key_values is not None and out.past_key_values.get_seq_length() == 4, "generate kept its cache"
    assert verify(src, res.destination, context=64, greedy_tokens=4, quick=True).passed


def test_float32_default_theta_rotates_exactly(converted):
    for window in (1, 2, 3, 1000, 1024, 1025, 8192, 2**20):
        theta = exact_rotation_theta(window)
        assert math.frexp(theta)[0] == 0.5, "a power of two"
        assert theta * window <= 2**-12 < 2 * theta * window, "the largest with theta * L <= 2^-12"
        p = torch.arange(window + 1, dtype=torch.float32)
        x = p * torch.tensor(theta, dtype=torch.float32)
        assert torch.equal(x.double(), p.double() * theta), "float32 angles are exact"
        assert torch.equal(torch.cos(x), torch.ones_like(x)) and torch.equal(torch.sin(x), x), "and so are cos, sin"
    _, res = converted["bloom-4heads"]  # float32, window 1024
    assert {h.theta for h in res.plan.heads} == {exact_rotation_theta(1024)} == {2.0**-22}


def test_fixed_base_multi_pair_conversion(tmp_path):
    # llama.cpp drops the base: base 10000, 16 rotary dims, the two slowest pairs per head
    src = build(tmp_path / "src", "bloom-4heads")
    # its prediction (1.8e-3) misses the float32 tolerance: refused, nothing written, unless accepted
    with pytest.raises(ValueError, match="--window 452 fits"):
        convert(src, tmp_path / "dst", PlanRequest(window=512, rope_base=10000.0, rotary_dim=16, pairs=2))
    assert not (tmp_path / "dst").exists()
    res = convert(src, tmp_path / "dst", PlanRequest(window=512, rope_base=10000.0, rotary_dim=16, pairs=2),
                  accept_error=True)
    assert json.loads((res.destination / "ropebridge.json").read_text())["accepted_error"] is True
    cfg = T.AutoConfig.from_pretrained(res.destination)
    assert cfg.rope_parameters["rope_theta"] == 10000.0
    assert all([p.index for p in h.pairs] == [6, 7] for h in res.plan.heads)
    report = verify(src, res.destination, context=512, greedy_tokens=16)
    assert report.passed, report.failures


@pytest.mark.slow
def test_112_heads_end_to_end_in_float32_and_the_half_precision_default(tmp_path):
    # BLOOM-176B's head count (non-power-of-two slopes), with small heads so the model stays a pico
    src = build(tmp_path / "src", "bloom-4heads", n_head=112, hidden_size=112 * 8, n_layer=1)
    for dtype, window in (("float32", 256), ("bfloat16", 256)):
        res = convert(src, tmp_path / dtype, PlanRequest(window=window, dtype=dtype))
        assert len(res.plan.heads) == 112
        assert res.plan.strategy_label == ("single (exact-rotation)" if dtype == "float32" else "ladder")
        report = verify(src, res.destination, context=256, greedy_tokens=8)
        assert report.passed, (dtype, report.failures)  # bfloat16: within 1.0 of exact ALiBi (or of native's error)


@pytest.mark.slow
def test_128_dim_heads_end_to_end_in_float32_and_the_half_precision_default(tmp_path):
    # BLOOM-176B's head dim, 12 heads: not a power of two, so slopes follow the same interleaving rule as 112
    # (2^-8/8 ... for the closest power of two, the rest from the next one); one layer keeps it a pico
    # weights drawn at 0.2 * sqrt(144 / 1536), the other picos' std scaled to this width, keep logits O(1-10)
    # (at std 0.2 they reach hundreds, and bfloat16's relative rounding alone exceeds verify's absolute bar)
    src = build(tmp_path / "src", "bloom-12heads", hidden_size=12 * 128, n_layer=1, std=0.2 * math.sqrt(144 / 1536))
    for dtype, head_dim in (("float32", 132), ("bfloat16", 160)):  # r = 4 (one pair), then the ladder's r = 32
        res = convert(src, tmp_path / dtype, PlanRequest(window=256, dtype=dtype))
        cfg = T.AutoConfig.from_pretrained(res.destination)
        assert cfg.hidden_size // cfg.num_attention_heads == head_dim, dtype  # vLLM's and TensorRT-LLM's head size
        raw = json.loads((res.destination / "config.json").read_text())  # what vLLM/TensorRT-LLM read, as written
        assert int(head_dim * raw["rotary_pct"]) == res.plan.rotary_dim == head_dim - 128, dtype
        assert raw["rotary_emb_base"] == raw["rope_parameters"]["rope_theta"] == res.plan.base
        report = verify(src, res.destination, context=256, greedy_tokens=8)
        assert report.passed, (dtype, report.failures)


@pytest.mark.parametrize("family, config", [
    ("bloom-4heads", dict(n_layer=1, hidden_size=1024, n_head=16)),  # BLOOM-560M's attention
    ("falcon-rw", dict(num_hidden_layers=1, hidden_size=2048, num_attention_heads=32,  # Falcon-RW-1B's
                       num_kv_heads=32)),
])
def test_default_float32_conversion_of_a_real_attention_shape_passes_verify(tmp_path, family, config):
    # one layer, a small vocabulary: the default window (8192) and dtype (float32) are accepted as planned,
    # and verify passes against the exact float64 reference
    from ropebridge.verify import verify

    src = build(tmp_path / "src", family, std=0.02, **config)
    res = convert(src, tmp_path / "rope")
    assert res.plan.window == 8192 and res.plan.theta_rule == "exact-rotation" and res.plan.meets_tolerance
    report = verify(src, res.destination, context=256, greedy_tokens=8)
    assert report.passed and report.reference_converted_max_err <= report.thresholds["limit"], report.failures


class _Stop(KeyboardInterrupt):
    pass


def _raise(signum):  # the armed CLI's action for a signal kept by an uninterrupted block
    raise _Stop(signum)


def test_an_interrupt_as_the_temporary_directory_is_set_up_leaves_nothing(bloom, tmp_path, monkeypatch):
    import ropebridge.convert.pipeline as pipeline

    def chmod_interrupted(*args):
        raise _Stop(15)

    monkeypatch.setattr(pipeline.os, "chmod", chmod_interrupted)
    with pytest.raises(_Stop):
        convert(bloom, tmp_path / "dst", PlanRequest(window=256))
    assert list(tmp_path.iterdir()) == []


def test_a_signal_as_dst_is_published_leaves_it_complete_and_reported(bloom, tmp_path, monkeypatch):
    import ropebridge.convert.pipeline as pipeline
    from ropebridge import _interrupt

    monkeypatch.setattr(_interrupt, "_action", [_raise])
    publish = pipeline._publish

    def publish_then_a_signal(tmp, dst, force):
        publish(tmp, dst, force)
        assert _interrupt.defer(2)  # kept until the rename's block ends, when the conversion is complete

    monkeypatch.setattr(pipeline, "_publish", publish_then_a_signal)
    res = convert(bloom, tmp_path / "dst", PlanRequest(window=256))
    assert [p.name for p in tmp_path.iterdir()] == ["dst"] and (res.destination / "ropebridge.json").exists()

    def a_signal_then_refused(tmp, dst, force):  # the rename fails: the signal stops the convert, nothing is left
        assert _interrupt.defer(2)
        raise FileExistsError(dst)

    monkeypatch.setattr(pipeline, "_publish", a_signal_then_refused)
    with pytest.raises(_Stop):
        convert(bloom, tmp_path / "dst2", PlanRequest(window=256))
    assert [p.name for p in tmp_path.iterdir()] == ["dst"]


# bigscience/bloomz-7b1's config.json beyond the sizes: Megatron-DeepSpeed's keys (offset_alibi, the fusions,
# seq_length), which transformers' BLOOM and ropebridge both ignore
BLOOMZ_KEYS = dict(offset_alibi=100, seq_length=2048, masked_softmax_fusion=True, bias_dropout_fusion=True,
                   skip_bias_add=True, skip_bias_add_qkv=False, attention_softmax_in_fp32=True, n_inner=None,
                   unk_token_id=0, pad_token_id=3)


@pytest.mark.parametrize("name, config", [
    ("poro-34b-heads", dict(n_head=56, hidden_size=56 * 8)),  # Poro-34B's 56 heads (of 128 there, of 8 here)
    ("bloomz", dict(n_head=4, hidden_size=128, **BLOOMZ_KEYS)),
])
def test_new_shapes_of_bloom_convert_and_verify_exactly(tmp_path, name, config):
    from ropebridge.checkpoint.config import from_config
    from ropebridge.verify import verify

    src = build(tmp_path / "src", "bloom-4heads", **config)
    raw = json.loads((src / "config.json").read_text())
    assert all(raw[k] == v for k, v in config.items())  # the keys as written reach the checkpoint's config
    assert from_config(src).n_heads == config["n_head"]
    res = convert(src, tmp_path / "rope", PlanRequest(window=512, dtype="float32"))
    report = verify(src, res.destination, context=256, greedy_tokens=8)
    assert report.passed and report.reference_converted_max_err < 1e-4, report.failures


def test_a_directory_without_weights_is_refused_before_anything_is_planned(tmp_path, monkeypatch):
    import json

    import pytest

    from ropebridge.convert import convert

    src = tmp_path / "config-only"
    src.mkdir()
    (src / "config.json").write_text(json.dumps({"model_type": "bloom", "n_layer": 2, "hidden_size": 64,
                                                 "n_head": 4, "vocab_size": 320}))
    monkeypatch.setattr("ropebridge.planning.emulation.plan", lambda *a: pytest.fail("planned"))
    with pytest.raises(FileNotFoundError, match="no weights"):
        convert(src, tmp_path / "dst")
