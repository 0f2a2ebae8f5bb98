"""The persimmon target: BLOOM, MPT, Falcon-RW and Replit picos converted, run by transformers' own Persimmon
against the exact float64 reference; its tensors are the gpt-neox target's under Persimmon's names."""

import json

import pytest
import torch
import transformers as T
from pico import build, build_remote

from ropebridge.checkpoint.model import SourceModel
from ropebridge.checkpoint.reference import reference_logits
from ropebridge.checkpoint.tensor_io import CheckpointReader
from ropebridge.convert import convert
from ropebridge.verify import verify
from ropebridge.verify.verdict import LOGIT_FACTOR
from ropebridge.emulation import PlanRequest
from ropebridge.numerics import DTYPES, TOLERANCE
from ropebridge.writers import gpt_neox, persimmon


def source(tmp_path, family):
    return build_remote(tmp_path / family, family) if family == "replit" else build(tmp_path / family, family)


def run(directory, ids: torch.Tensor, dtype: str) -> torch.Tensor:
    model = T.AutoModelForCausalLM.from_pretrained(directory, dtype=DTYPES[dtype]).eval()
    assert type(model).__name__ == "PersimmonForCausalLM" and not model.config.qk_layernorm
    with torch.no_grad():
        return model(ids).logits.double()


@pytest.mark.parametrize("family", ["bloom-4heads", "mpt", "falcon-rw", "replit"])
def test_sequential_layernorm_families_are_exact_in_float32_and_verify(tmp_path, family):
    src = source(tmp_path, family)
    res = convert(src, tmp_path / "persimmon", PlanRequest(window=512, dtype="float32", target="persimmon"))
    config = json.loads((res.destination / "config.json").read_text())
    assert config["architectures"] == ["PersimmonForCausalLM"] and config["qk_layernorm"] is False
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    # the rotary dims as transformers 4.x/5.x and SGLang read them: int(head dim * partial_rotary_factor)
    for factor in (config["partial_rotary_factor"], config["rope_parameters"]["partial_rotary_factor"]):
        assert int(head_dim * factor) == res.plan.rotary_dim
    assert config["rope_theta"] == config["rope_parameters"]["rope_theta"] == res.plan.base
    ids = torch.randint(0, 320, (1, 512), generator=torch.Generator().manual_seed(0))
    err = float((run(res.destination, ids, "float32") - reference_logits(SourceModel(src), ids)).abs().max())
    assert err <= TOLERANCE["float32"] / 4, err
    report = verify(src, res.destination, context=128, greedy_tokens=8)
    assert report.passed and report.byte_check["mode"] == "exact" and report.greedy_identical, report.failures


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_is_within_the_plan(tmp_path, dtype):
    src = build(tmp_path / "bloom", "bloom-4heads")
    res = convert(src, tmp_path / "persimmon", PlanRequest(window=1024, dtype=dtype, target="persimmon"))
    assert res.plan.strategy == "ladder"
    ids = torch.randint(0, 320, (1, 1024), generator=torch.Generator().manual_seed(1))
    err = float((run(res.destination, ids, dtype) - reference_logits(SourceModel(src), ids)).abs().max())
    assert err <= LOGIT_FACTOR * max(res.plan.worst_head.predicted_error, res.plan.tolerance), err


@pytest.mark.parametrize("request_", [dict(window=512, dtype="bfloat16"),  # the ladder
                                      dict(window=512, dtype="float32", strategy="fixed-base", rope_base=10000.0,
                                           rotary_dim=16)])
def test_its_tensors_are_the_gpt_neox_targets_under_persimmons_names(tmp_path, request_):
    src = build(tmp_path / "mpt", "mpt")
    request = request_
    neox = convert(src, tmp_path / "neox", PlanRequest(**request, target="gpt-neox"), accept_error=True).destination
    pers = convert(src, tmp_path / "pers", PlanRequest(**request, target="persimmon"), accept_error=True).destination
    a, b = CheckpointReader(neox), CheckpointReader(pers)
    names = {}
    for i in range(2):
        for key in ("ln1", "ln2", "qkv", "o", "up", "down"):
            for suffix in (".weight", ".bias"):
                old = gpt_neox.NAMES["block"].format(i=i) + gpt_neox.NAMES[key] + suffix
                names[old] = persimmon.NAMES["block"].format(i=i) + persimmon.NAMES[key] + suffix
    for key in ("embed", "head"):
        names[gpt_neox.NAMES[key]] = persimmon.NAMES[key]
    for suffix in (".weight", ".bias"):
        names[gpt_neox.NAMES["final"] + suffix] = persimmon.NAMES["final"] + suffix
    assert sorted(names.values()) == sorted(b.names())
    for old, new in names.items():
        assert torch.equal(a.read(old), b.read(new)), old
    neox_config = json.loads((neox / "config.json").read_text())
    pers_config = json.loads((pers / "config.json").read_text())
    for key in ("hidden_size", "intermediate_size", "layer_norm_eps", "hidden_act", "rope_parameters"):
        assert pers_config[key] == neox_config[key], key


def test_a_parallel_source_is_refused_naming_the_target_that_carries_it(tmp_path):
    src = build(tmp_path / "falcon", "falcon-parallel-mq")
    with pytest.raises(ValueError, match="sequential residual only.*--target gpt-neox") as exc:
        convert(src, tmp_path / "out", PlanRequest(window=256, dtype="float32", target="persimmon"))
    assert "\n" not in str(exc.value) and not (tmp_path / "out").exists()
