"""The llama target: Baichuan 13B, Baichuan2 13B and Refact picos converted, run by transformers' own Llama,
against independent readings of their published code (``tests/remote_models.py``)."""

import json

import pytest
import torch
import transformers as T
from pico import build, build_remote
from remote_models import baichuan_logits, embedded_conversion, greedy_continuation, refact_logits

from ropebridge.convert import convert
from ropebridge.emulation import PlanRequest
from ropebridge.numerics import DTYPES
from ropebridge.verify.verdict import LOGIT_FACTOR


def run(directory, ids: torch.Tensor, dtype: str) -> torch.Tensor:
    model = T.AutoModelForCausalLM.from_pretrained(directory, dtype={**DTYPES, "float64": torch.float64}[dtype]).eval()
    assert type(model).__name__ == "LlamaForCausalLM"
    with torch.no_grad():
        return model(ids).logits.double()


@pytest.mark.parametrize("family", ["baichuan", "baichuan2"])
def test_baichuan_converts_by_default_to_llama_exact_in_float32(tmp_path, family):
    src = build_remote(tmp_path / family, family)
    res = convert(src, tmp_path / "llama", PlanRequest(window=512, dtype="float32"))
    config = json.loads((res.destination / "config.json").read_text())
    assert res.target == "llama" and config["architectures"] == ["LlamaForCausalLM"]
    assert config["head_dim"] == (96 // 6 if family == "baichuan" else 32 // 4) + 4  # the two opposed pairs
    assert config["hidden_size"] == json.loads((src / "config.json").read_text())["hidden_size"]  # residual as is
    assert config["rope_parameters"]["rope_type"] == "llama3"
    # the legacy keys transformers 4.x, TensorRT-LLM and llama.cpp's converter read: the same rope
    assert {**config["rope_scaling"], "rope_theta": config["rope_theta"]} == config["rope_parameters"]
    assert T.AutoConfig.from_pretrained(res.destination).rope_parameters == config["rope_parameters"]
    ids = torch.randint(0, 320, (1, 512), generator=torch.Generator().manual_seed(0))
    ref = baichuan_logits(src, ids)
    err = float((run(res.destination, ids, "float32") - ref).abs().max())
    # float32's own rounding of O(10) logits (1.3e-4 measured), well inside the dtype's tolerance (1e-3)
    assert err <= res.plan.tolerance / 4, err
    greedy = T.AutoModelForCausalLM.from_pretrained(res.destination).generate(
        ids[:, :8], max_new_tokens=16, do_sample=False, attention_mask=torch.ones(1, 8, dtype=torch.long))[0, 8:]
    assert greedy.tolist() == greedy_continuation(baichuan_logits, src, ids[:, :8], 16)  # the reading's own


def test_the_written_first_amplitude_is_short_so_the_keys_product_is_exact(tmp_path):
    # pair 0's q constant times its theta, as the checkpoint holds it: 24 - ceil(log2 L) significant bits at most
    # (pairs.opposed_amplitudes); pair 1 carries the rest, so the two add to m sqrt(hd') for every head
    import numpy as np
    from safetensors.torch import load_file

    from ropebridge.numerics import significant_bits

    src = build_remote(tmp_path / "b", "baichuan")
    res = convert(src, tmp_path / "llama", PlanRequest(window=512, dtype="float32"))
    config = json.loads((res.destination / "config.json").read_text())
    hd, h = config["head_dim"], config["num_attention_heads"]
    tensors = {}
    for f in res.destination.glob("*.safetensors"):
        tensors.update(load_file(f))
    q = tensors["model.layers.0.self_attn.q_proj.bias"].view(h, hd).double()  # (h, hd')
    t0, t1 = (res.plan.heads[0].pairs[k].theta for k in (0, 1))
    k0, k1 = -q[:, 0] * t0, q[:, hd // 2 + 1] * t1  # pair 0: q = (-N'_0, 0); pair 1 opposed: q = (0, N'_1)
    assert (significant_bits(k0.numpy()) <= 24 - (512 - 1).bit_length()).all()
    m = torch.tensor([hp.slope for hp in res.plan.heads], dtype=torch.float64)  # (h,)
    np.testing.assert_allclose((k0 + k1).numpy(), (m * hd**0.5).numpy(), rtol=2**-23)  # N'_1 rounds to float32


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_baichuan_in_half_precision_is_within_the_plan(tmp_path, dtype):
    src = build_remote(tmp_path / "b", "baichuan")
    res = convert(src, tmp_path / "llama", PlanRequest(window=1024, dtype=dtype))
    assert res.plan.strategy == "ladder" and res.plan.rope_parameters["rope_type"] == "llama3"
    ids = torch.randint(0, 320, (1, 1024), generator=torch.Generator().manual_seed(1))
    err = float((run(res.destination, ids, dtype) - baichuan_logits(src, ids)).abs().max())
    assert err <= LOGIT_FACTOR * max(res.plan.worst_head.predicted_error, res.plan.tolerance), err


def test_a_target_that_cannot_carry_the_block_is_refused_in_one_line(tmp_path):
    baichuan, bloom = build_remote(tmp_path / "b", "baichuan"), build(tmp_path / "bloom", "bloom-4heads")
    for src, target, fits in ((baichuan, "gpt-neox", "llama"), (baichuan, "nemotron", "llama"),
                              (bloom, "llama", "gpt-neox or starcoder2 or nemotron")):
        with pytest.raises(ValueError, match=f"use --target {fits}") as exc:
            convert(src, tmp_path / f"out-{target}", PlanRequest(window=256, dtype="float32", target=target))
        assert "\n" not in str(exc.value) and not (tmp_path / f"out-{target}").exists()



def test_refact_converts_by_default_to_llama_with_one_kv_head_exact_in_float32(tmp_path):
    # LayerNorm without bias carried by Llama's RMSNorm through the centred residual; multi-query kept
    src = build_remote(tmp_path / "refact", "refact")
    res = convert(src, tmp_path / "llama", PlanRequest(window=512, dtype="float32"))
    config = json.loads((res.destination / "config.json").read_text())
    assert res.target == "llama" and config["num_key_value_heads"] == 1 and config["num_attention_heads"] == 6
    assert (config["hidden_size"], config["intermediate_size"], config["head_dim"]) == (96, 256, 16 + 4)
    from safetensors.torch import load_file

    tensors = load_file(next(res.destination.glob("model-*.safetensors")))
    assert tensors["model.layers.0.self_attn.k_proj.weight"].shape == (20, 96)
    for name in ("model.embed_tokens.weight", "model.layers.1.self_attn.o_proj.weight",
                 "model.layers.0.mlp.down_proj.weight"):
        mean = tensors[name].double().mean(dim=-1 if "embed" in name else 0)  # over the D channels it writes into
        assert float(mean.abs().max()) <= 1e-7, name
    ids = torch.randint(0, 320, (1, 512), generator=torch.Generator().manual_seed(0))
    err = float((run(res.destination, ids, "float32") - refact_logits(src, ids)).abs().max())
    assert err <= res.plan.tolerance / 4, err  # 5.6e-5 measured on O(10) logits
    greedy = T.AutoModelForCausalLM.from_pretrained(res.destination).generate(
        ids[:, :8], max_new_tokens=16, do_sample=False, attention_mask=torch.ones(1, 8, dtype=torch.long))[0, 8:]
    assert greedy.tolist() == greedy_continuation(refact_logits, src, ids[:, :8], 16)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_refact_in_half_precision_is_within_the_plan(tmp_path, dtype):
    src = build_remote(tmp_path / "r", "refact")
    res = convert(src, tmp_path / "llama", PlanRequest(window=1024, dtype=dtype))
    assert res.plan.strategy == "ladder"
    ids = torch.randint(0, 320, (1, 1024), generator=torch.Generator().manual_seed(1))
    err = float((run(res.destination, ids, dtype) - refact_logits(src, ids)).abs().max())
    assert err <= LOGIT_FACTOR * max(res.plan.worst_head.predicted_error, res.plan.tolerance), err


def test_a_shared_k_with_a_split_per_head_is_refused_naming_the_flag(tmp_path):
    # one kv head serves every query head, so k's constant s must be one value: --split sqrt gives each head its own
    src = build_remote(tmp_path / "r", "refact")
    with pytest.raises(ValueError, match="shares k between 6 query heads.*--split") as exc:
        convert(src, tmp_path / "out", PlanRequest(window=512, dtype="float16", strategy="single", split="sqrt"))
    assert "\n" not in str(exc.value) and not (tmp_path / "out").exists()
    res = convert(src, tmp_path / "ok", PlanRequest(window=512, dtype="float32", strategy="single", split=4.0))
    assert {h.split for h in res.plan.heads} == {4.0}


def test_the_embedded_baichuan_is_its_training_module_and_converts_exactly(tmp_path):
    # the real-text Baichuan (data/demo-baichuan): the module it was trained as computes what the independent
    # reading of modeling_baichuan.py computes; its default conversion (llama, float32) is exact as a function
    # (run in float64: float32's rounding of the stored weights only) and within the plan's tolerance when run
    # in float32, greedy included
    got = embedded_conversion("demo-baichuan", "baichuan", baichuan_logits, tmp_path)
    assert got["trained"] <= 1e-9
    assert got["result"].target == "llama" and got["architecture"] == "LlamaForCausalLM"
    assert got["as_function"] <= 1e-5, got["as_function"]  # measured 2.3e-6
    # measured 3.5e-5; one pair on heads of hd + 2: 2.7e-4 (docs/decisions.md)
    assert got["float32"] <= 1e-4, got["float32"]
    assert got["greedy"]
