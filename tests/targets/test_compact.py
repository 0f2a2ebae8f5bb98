"""Compact targets (starcoder2, nemotron): the single pair on both, the ladder on nemotron with the residual
stream at its width, loaded by stock transformers and verified; what they cannot express is refused."""

import json

import pytest
import transformers as T
from pico import build

from ropebridge.cli import main
from ropebridge.convert import convert, verify
from ropebridge.emulation import PlanRequest
from ropebridge.emulation.fixed_base import engine_frequencies


@pytest.mark.parametrize("target", ["starcoder2", "nemotron"])
@pytest.mark.parametrize("family", ["bloom-12heads", "bloom-hd96", "mpt", "falcon-rw"])
def test_compact_targets(tmp_path, family, target):
    src = build(tmp_path / family, family)
    res = convert(src, tmp_path / "dst", PlanRequest(window=1024, target=target))
    model = T.AutoModelForCausalLM.from_pretrained(res.destination)
    assert type(model).__name__ == {"starcoder2": "Starcoder2ForCausalLM", "nemotron": "NemotronForCausalLM"}[target]
    assert model.config.hidden_size == T.AutoConfig.from_pretrained(src).hidden_size  # no padding
    assert model.config.head_dim == res.plan.head_dim + 2
    report = verify(src, res.destination, context=256, greedy_tokens=16)
    assert report.passed, report.failures
    assert report.reference_converted_max_err <= max(2 * report.reference_native_max_err, 1e-4)


def test_compact_targets_refuse_what_they_cannot_express(tmp_path):
    src = build(tmp_path / "par", "falcon-parallel-mq")
    with pytest.raises(ValueError, match="parallel"):
        convert(src, tmp_path / "dst", PlanRequest(target="starcoder2"))
    src = build(tmp_path / "bloom", "bloom-4heads")
    with pytest.raises(ValueError, match="gpt-neox"):
        convert(src, tmp_path / "dst", PlanRequest(target="nemotron", rope_base=10000.0, rotary_dim=16))
    assert not (tmp_path / "dst").exists()


def _params(directory) -> int:
    model = T.AutoModelForCausalLM.from_pretrained(directory)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("family", ["bloom-12heads", "mpt", "falcon-rw"])
def test_the_ladder_on_nemotron_keeps_the_residual_width(tmp_path, family, dtype):
    src = build(tmp_path / family, family)
    res = convert(src, tmp_path / "nemotron", PlanRequest(window=512, dtype=dtype, target="nemotron"))
    assert res.plan.strategy == "ladder"  # the half-precision default where the target carries it
    r, hd = res.plan.rotary_dim, res.plan.head_dim
    config = json.loads((res.destination / "config.json").read_text())
    assert config["hidden_size"] == T.AutoConfig.from_pretrained(src).hidden_size  # no padding
    assert config["head_dim"] == hd + r and int(config["head_dim"] * config["partial_rotary_factor"]) == r
    assert config["rope_parameters"]["rope_type"] == "default" and config["rope_theta"] == res.plan.base
    model = T.AutoModelForCausalLM.from_pretrained(res.destination)
    assert type(model).__name__ == "NemotronForCausalLM"
    rope = model.model.rotary_emb.inv_freq.double().numpy()  # the frequencies the plan was fitted on, bit for bit
    assert (rope == engine_frequencies(res.plan.base, r)).all()
    report = verify(src, res.destination, context=256, greedy_tokens=8)
    assert report.passed, report.failures
    # the same plan as the gpt-neox ladder (same head dim hd + R), fewer parameters, no larger error
    neox = convert(src, tmp_path / "neox", PlanRequest(window=512, dtype=dtype))
    assert neox.plan.to_dict()["heads"] == res.plan.to_dict()["heads"]
    assert _params(res.destination) < _params(neox.destination)
    other = verify(src, neox.destination, context=256, greedy_tokens=8)
    assert report.reference_converted_max_err <= 1.5 * other.reference_converted_max_err + 1e-3


def test_what_nemotron_cannot_express_is_one_line_and_nothing_written(tmp_path, capsys):
    src = build(tmp_path / "par", "falcon-parallel-mq")
    for argv, needle in [
        (["convert", str(src), str(tmp_path / "x"), "--target", "nemotron", "--dtype", "bfloat16"], "parallel"),
        (["convert", str(src), str(tmp_path / "x"), "--target", "starcoder2", "--emulation", "ladder"], "ladder"),
    ]:
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], err
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_nemotron_layernorm_weights_are_the_sources_rounded_once(tmp_path, dtype):
    # LayerNorm1P computes stored + 1 in the dtype: that sum must be the source weight rounded once to the
    # dtype, as the source model in that dtype has it (storing dtype(w - 1) rounds twice)
    import torch

    from ropebridge.checkpoint.model import SourceModel
    from ropebridge.checkpoint.tensor_io import CheckpointReader

    src = build(tmp_path / "src", "bloom-12heads")
    model = T.AutoModelForCausalLM.from_pretrained(src)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # weights spread over [0.5, 2], where the sum is exact
        for name, t in model.named_parameters():
            if name.endswith("layernorm.weight") or name.endswith("ln_f.weight"):
                t.copy_(0.5 + 1.5 * torch.rand(t.shape, generator=g))
    model.save_pretrained(src)
    res = convert(src, tmp_path / "dst", PlanRequest(window=256, dtype=dtype, target="nemotron"))
    stored, source, dt = CheckpointReader(res.destination), SourceModel(src), getattr(torch, dtype)
    pairs = [("model.norm.weight", source.final_norm()[0])]
    for i in range(source.info.n_layers):
        pairs += [(f"model.layers.{i}.input_layernorm.weight", source.norm(i, "ln1")[0]),
                  (f"model.layers.{i}.post_attention_layernorm.weight", source.norm(i, "ln2")[0])]
    for name, w in pairs:
        assert torch.equal(stored.read(name, dtype=dt) + 1.0, w.to(dt)), name
