"""The stablelm target: Jais and BTLM picos in their published layout converted by default, run by transformers' own
StableLM, against the independent float64 reading of their code (``tests/remote_models.jais_logits``); the biases
StableLM lacks carried on the constant channel, the value that is 1 and the bias unit."""

import json

import pytest
import torch
import transformers as T
from pico import build, build_remote
from remote_models import embedded_conversion, greedy_continuation, jais_logits

from ropebridge.checkpoint.tensor_io import CheckpointReader
from ropebridge.convert import convert
from ropebridge.verify import verify
from ropebridge.verify.verdict import LOGIT_FACTOR
from ropebridge.emulation import PlanRequest
from ropebridge.numerics import DTYPES, TOLERANCE
from ropebridge.writers.stablelm import UNIT_GATE


def run(directory, ids: torch.Tensor, dtype: str) -> torch.Tensor:
    model = T.AutoModelForCausalLM.from_pretrained(directory, dtype=DTYPES[dtype]).eval()
    assert type(model).__name__ == "StableLmForCausalLM"
    with torch.no_grad():
        return model(ids).logits.double()


@pytest.mark.parametrize("family, overrides", [
    ("jais", {}), ("btlm", {}),
    ("jais", {"width_scale": 1.0}),  # logits of O(10): the demanding case
    ("btlm", {"alibi_scaling": {"type": "linear", "factor": 2.0}, "mup_scale_qk_dot_by_d": False}),
])
def test_jais_and_btlm_convert_by_default_to_stablelm_exact_in_float32_and_verify(tmp_path, family, overrides):
    src = build_remote(tmp_path / family, family, **overrides)
    res = convert(src, tmp_path / "stablelm", PlanRequest(window=512, dtype="float32"))
    config = json.loads((res.destination / "config.json").read_text())
    assert res.target == "stablelm" and config["architectures"] == ["StableLmForCausalLM"]
    assert (config["use_qkv_bias"], config["qk_layernorm"], config["use_parallel_residual"]) == (True, False, False)
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    # the rotary dims as transformers 4.x/5.x, vLLM and SGLang read them
    for factor in (config["partial_rotary_factor"], config["rope_parameters"]["partial_rotary_factor"]):
        assert int(head_dim * factor) == res.plan.rotary_dim
    ids = torch.randint(0, 320, (1, 512), generator=torch.Generator().manual_seed(0))
    ref = jais_logits(src, ids)
    err = float((run(res.destination, ids, "float32") - ref).abs().max())
    assert err <= TOLERANCE["float32"] / 4, err
    greedy = T.AutoModelForCausalLM.from_pretrained(res.destination).generate(
        ids[:, :8], max_new_tokens=12, do_sample=False, attention_mask=torch.ones(1, 8, dtype=torch.long))[0, 8:]
    assert greedy.tolist() == greedy_continuation(jais_logits, src, ids[:, :8], 12)
    report = verify(src, res.destination, context=128, greedy_tokens=8)
    assert report.passed and report.byte_check["mode"] == "exact", report.failures


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_is_within_the_plan(tmp_path, dtype):
    src = build_remote(tmp_path / "jais", "jais", width_scale=1.0)
    res = convert(src, tmp_path / "stablelm", PlanRequest(window=1024, dtype=dtype))
    assert res.plan.strategy == "ladder"
    ids = torch.randint(0, 320, (1, 1024), generator=torch.Generator().manual_seed(1))
    err = float((run(res.destination, ids, dtype) - jais_logits(src, ids)).abs().max())
    assert err <= LOGIT_FACTOR * max(res.plan.worst_head.predicted_error, res.plan.tolerance), err


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_the_bias_unit_is_exactly_one_in_every_dtype(dtype):
    gate = torch.tensor([UNIT_GATE], dtype=DTYPES[dtype])
    assert float(torch.nn.functional.silu(gate) * torch.tensor([1 / UNIT_GATE], dtype=DTYPES[dtype])) == 1.0


def test_the_missing_biases_ride_on_the_constant_channel(tmp_path):
    src = build_remote(tmp_path / "btlm", "btlm")
    res = convert(src, tmp_path / "stablelm", PlanRequest(window=256, dtype="float32"))
    geometry = json.loads((res.destination / "ropebridge.json").read_text())["geometry"]
    out, source = CheckpointReader(res.destination), CheckpointReader(src)
    c, f, rot = geometry["constant_dim"], 192, geometry["rotary_dim"]
    assert geometry["bias_unit"] and geometry["value_one"] and geometry["intermediate_size"] == 192 + 64
    assert c == geometry["hidden_size"] - 1
    p = "model.layers.1."
    assert float(out.read(p + "input_layernorm.bias")[c]) == 1 and float(out.read(p + "input_layernorm.weight")[c]) == 0
    gate, up = out.read(p + "mlp.gate_proj.weight"), out.read(p + "mlp.up_proj.weight")
    assert torch.equal(gate[:f, c], source.read("transformer.h.1.mlp.c_fc2.bias"))  # c_fc2 is the gate
    assert torch.equal(up[:f, c], source.read("transformer.h.1.mlp.c_fc.bias"))
    assert (float(gate[f, c]), float(up[f, c])) == (UNIT_GATE, 1 / UNIT_GATE) and not gate[f + 1:].any()
    down = out.read(p + "mlp.down_proj.weight")
    assert torch.equal(down[:96, f], source.read("transformer.h.1.mlp.c_proj.bias")) and not down[:, f + 1:].any()
    v_bias = out.read(p + "self_attn.v_proj.bias")
    assert float(v_bias[0]) == 1 and not v_bias[1:rot].any()
    o = out.read(p + "self_attn.o_proj.weight")
    assert torch.equal(o[:96, 0], source.read("transformer.h.1.attn.c_proj.bias"))


def test_what_stablelm_engines_cannot_run_is_refused_in_one_line(tmp_path):
    bloom = build(tmp_path / "bloom", "bloom-4heads")
    with pytest.raises(ValueError, match="use --target gpt-neox") as exc:  # a plain MLP: not this target's block
        convert(bloom, tmp_path / "a", PlanRequest(window=256, dtype="float32", target="stablelm"))
    assert "\n" not in str(exc.value) and not (tmp_path / "a").exists()
    baichuan = build_remote(tmp_path / "b", "baichuan")
    with pytest.raises(ValueError, match="use --target llama"):  # RMSNorm
        convert(baichuan, tmp_path / "b-out", PlanRequest(window=256, dtype="float32", target="stablelm"))


def test_the_embedded_jais_is_its_training_module_and_converts_exactly(tmp_path):
    # the real-text Jais (data/demo-jais, muP scales, float16 weights and slopes): the module it was trained as
    # computes what the independent reading of modeling_jais.py computes; its default conversion (stablelm, float32)
    # is exact as a function (run in float64) and within 1e-4 logits when run in float32, greedy included
    got = embedded_conversion("demo-jais", "jais", jais_logits, tmp_path)
    assert got["trained"] <= 1e-9
    assert got["result"].target == "stablelm" and got["architecture"] == "StableLmForCausalLM"
    assert got["as_function"] <= 1e-5, got["as_function"]
    assert got["float32"] <= 1e-4, got["float32"]
    assert got["greedy"]
