"""Compact targets (starcoder2, nemotron): the single pair on both, the ladder on nemotron with the residual
stream at its width, loaded by stock transformers and verified; what they cannot express is refused."""

import json

import pytest
import transformers as T
from pico import build

from ropebridge.cli import main
from ropebridge.convert import convert
from ropebridge.verify import verify
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
    assert report.reference_converted_max_err <= max(2 * report.reference_source_max_err, 1e-4)


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
        (["convert", str(src), str(tmp_path / "x"), "--target", "starcoder2", "--strategy", "ladder"], "ladder"),
    ]:
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], err
    assert not (tmp_path / "x").exists()


def _spread_layernorms(src, low: float, high: float) -> None:
    """Rewrite SRC's LayerNorm weights uniform in [low, high) and their biases normal (seeded)."""
    import torch

    model = T.AutoModelForCausalLM.from_pretrained(src)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, t in model.named_parameters():
            if "layernorm" in name or "ln_f" in name:
                if name.endswith("weight"):
                    t.copy_(low + (high - low) * torch.rand(t.shape, generator=g))
                else:
                    t.copy_(torch.randn(t.shape, generator=g))
    model.save_pretrained(src)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_nemotron_layernorms_carry_the_sources_weights_exactly(tmp_path, dtype):
    # LayerNorm1P computes stored + 1 in the dtype. Whatever the weight (small, negative, above 2), the
    # LayerNorm's output times the layer reading it must be the source's in that dtype, bit for bit: stored
    # dtype(w)/c - 1 and beta/c, the reader's column times c, c a power of two (ln1p_scales)
    import torch

    from ropebridge.checkpoint.model import SourceModel
    from ropebridge.checkpoint.tensor_io import CheckpointReader

    src = build(tmp_path / "src", "bloom-12heads")
    _spread_layernorms(src, -3.0, 3.0)
    res = convert(src, tmp_path / "dst", PlanRequest(window=256, dtype=dtype, target="nemotron"))
    stored, source, dt = CheckpointReader(res.destination), SourceModel(src), getattr(torch, dtype)
    one = torch.tensor(1.0, dtype=dt)
    cases = [("model.norm", source.final_norm(), "lm_head.weight", source.head_rows(0, source.info.vocab_size))]
    for i in range(source.info.n_layers):
        cases.append((f"model.layers.{i}.post_attention_layernorm", source.norm(i, "ln2"),
                      f"model.layers.{i}.mlp.up_proj.weight", source.weight(i, "up")))
    for norm, (w, beta), reader, columns in cases:
        weight = (stored.read(norm + ".weight", dtype=dt) + one).double()  # what LayerNorm1P computes, (D,)
        bias = stored.read(norm + ".bias", dtype=dt).double()
        got = stored.read(reader, dtype=dt).double()  # (out, D)
        want = columns.to(dt).double()
        normal = got.abs() >= torch.finfo(dt).tiny  # a column scaled below the normal range rounds (float16)
        half_step = torch.finfo(dt).tiny * torch.finfo(dt).eps / 2  # half a subnormal step
        for stored_part, source_part in ((weight, w), (bias, beta)):
            diff = (got * stored_part - want * source_part.to(dt).double()).abs()
            assert (diff[normal] == 0).all(), norm
            assert (diff[~normal] <= half_step * stored_part.abs().expand_as(diff)[~normal]).all(), norm
    if dtype == "float32":  # and through every reader (q, k, v included): the model is the source's
        report = verify(src, res.destination, context=128, greedy_tokens=8)
        assert report.passed and report.reference_converted_max_err < 1e-4, report.failures
