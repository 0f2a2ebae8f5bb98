"""The functional check's bounds: the memory it needs, known from the shapes before anything is read, and greedy
generation bounded where streaming makes it the dominant cost, never silently."""

import dataclasses
import json
import math

import pytest
import torch
from pico import build

from ropebridge.checkpoint.model import SourceModel
from ropebridge.convert import convert
from ropebridge.verify import verify
from ropebridge.verify import measure
from ropebridge.emulation import PlanRequest


def test_the_reference_layer_is_counted_from_the_shapes(tmp_path):
    source = SourceModel(build(tmp_path / "bloom", "bloom-4heads"))
    layer = source.layer(0)
    held = sum(t.numel() * t.element_size() for f in dataclasses.fields(layer)
               for t in ((getattr(layer, f.name),) if isinstance(getattr(layer, f.name), torch.Tensor)
                         else getattr(layer, f.name) or ()))
    assert measure.reference_layer_bytes(source.info) == held


def test_the_largest_weight_is_counted_from_the_config_as_the_read_on_use_model_holds_it(tmp_path):
    from ropebridge.verify.read_on_use import ReadOnUseModel, largest_weight_bytes

    src = build(tmp_path / "bloom", "bloom-4heads")
    dst = convert(src, tmp_path / "rope", PlanRequest(window=256, dtype="bfloat16")).destination
    for path in (src, dst):
        config = json.loads((path / "config.json").read_text())
        for dtype in (torch.float32, torch.bfloat16):
            model = ReadOnUseModel(path, dtype)
            assert largest_weight_bytes(config, dtype) == model.tensor_bytes
            with torch.no_grad():
                model.hidden(torch.tensor([[1, 2, 3]]))
            assert model.largest_read_bytes == model.tensor_bytes  # what is read is what was counted
    # the embedding (320 x 128) is read by rows, not counted; the largest is the MLP (512 x 128)
    assert largest_weight_bytes(json.loads((src / "config.json").read_text()), torch.float32) == 512 * 128 * 4


BLOOM_176B = dict(n_layer=70, hidden_size=14336, n_head=112, vocab_size=250880)


def test_a_layer_wider_than_the_budget_verifies_within_it():
    # counted, not timed: BLOOM-176B's layer is 2.5B parameters, 18.4 GiB in float64, more than twice the default
    # budget; the reference reads it by blocks of rows and the models a matrix at a time, so at 256 tokens in
    # bfloat16 the need is within 8 GiB and held by its largest matrix (dense_h_to_4h, 1.5 GiB in bfloat16)
    import transformers as T

    from ropebridge.checkpoint.config import from_config
    from ropebridge.verify.read_on_use import largest_weight_bytes

    config = T.BloomConfig(**BLOOM_176B).to_dict()
    info = from_config(config)
    assert measure.reference_layer_bytes(info) > 2 * (8 << 30)
    matrix = largest_weight_bytes(config, torch.bfloat16)
    assert matrix == 4 * 14336 * 14336 * 2
    need = measure.check_memory(info, 256, 8 << 30, matrix)
    assert need.weights == 2 * matrix and need.total < 8 << 30


def test_the_need_grows_with_the_context_and_is_refused_above_the_budget(tmp_path):
    import transformers as T

    src = build(tmp_path / "bloom", "bloom-4heads")
    info = SourceModel(src).info
    weight = 512 * 128 * 4
    small, large = measure.memory_need(info, 256, weight), measure.memory_need(info, 4096, weight)
    assert small.total < large.total and small.attention < large.attention
    # the attention term holds what eager attention allocates per layer: its float32 scores and probabilities of
    # the padded batch of 2, as transformers returns them (a measurement, not the formula again), within 2x
    model = T.AutoModelForCausalLM.from_pretrained(src, attn_implementation="eager", dtype=torch.float32).eval()
    with torch.no_grad():
        probs = model(torch.zeros(2, 256, dtype=torch.long), output_attentions=True).attentions[0]
    allocated = 2 * probs.numel() * probs.element_size()  # scores and probabilities
    assert allocated <= small.attention <= 2 * allocated
    assert measure.check_memory(info, 256, small.total, weight) == small
    needed = math.ceil(small.total / 2**30 * 10) / 10  # GiB, rounded up to a tenth: the budget that passes
    assert measure.check_memory(info, 256, int(needed * 2**30), weight) == small
    with pytest.raises(ValueError, match=rf"needs --max-memory {needed:g} GiB or more .* the budget is 0.5 GiB"):
        measure.check_memory(info, 256, 1 << 29, weight)


def test_verify_refuses_a_budget_below_the_need_before_measuring(tmp_path):
    src = build(tmp_path / "bloom", "bloom-4heads")
    dst = convert(src, tmp_path / "rope", PlanRequest(window=256)).destination
    with pytest.raises(ValueError, match="needs --max-memory"):
        verify(src, dst, context=64, max_memory=1 << 20)


def test_greedy_is_bounded_and_the_report_says_so(tmp_path, monkeypatch):
    src = build(tmp_path / "bloom", "bloom-4heads")
    dst = convert(src, tmp_path / "rope", PlanRequest(window=256)).destination
    full = verify(src, dst, context=64, greedy_tokens=6)
    assert full.greedy_bound is None and len(full.greedy_source) == len(full.greedy_converted) == 6
    monkeypatch.setattr(measure, "GREEDY_STREAM_BYTES", 1)
    bounded = verify(src, dst, context=64, greedy_tokens=6)
    assert len(bounded.greedy_source) == len(bounded.greedy_converted) == 1
    assert bounded.greedy_bound.startswith("1 of 6 tokens: each streams") and bounded.passed
    assert bounded.greedy_source == full.greedy_source[:1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here: the path runs instead")
def test_cuda_without_a_device_is_refused_in_one_line(tmp_path, capsys):
    from ropebridge.cli import main

    src = build(tmp_path / "bloom", "bloom-4heads")
    dst = convert(src, tmp_path / "rope", PlanRequest(window=256)).destination
    with pytest.raises(ValueError, match="--device cuda: no CUDA device"):
        verify(src, dst, context=64, device="cuda")
    assert main(["verify", str(src), str(dst), "--context", "64", "--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no CUDA device" in err[0]
    with pytest.raises(ValueError, match="device must be one of cpu, cuda"):
        verify(src, dst, context=64, device="tpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_cuda_path_gives_the_cpu_verdict(tmp_path):
    src = build(tmp_path / "bloom", "bloom-4heads")
    dst = convert(src, tmp_path / "rope", PlanRequest(window=256)).destination
    cpu, cuda = (verify(src, dst, context=64, greedy_tokens=4, device=d) for d in ("cpu", "cuda"))
    assert cpu.passed and cuda.passed, cuda.failures
    assert cuda.reference_converted_max_err <= cuda.thresholds["limit"]
    assert cuda.greedy_source == cpu.greedy_source


def test_the_baseline_and_the_content_advantage_are_what_the_reference_gives_on_the_tokens(tmp_path):
    # recomputed independently on the whole logits: the source in bfloat16 (attention and bias exact) from exact,
    # and each head's content advantage (calibration); float32 has no baseline
    from ropebridge.checkpoint.calibration import content_advantage
    from ropebridge.checkpoint.reference import reference_hidden

    src = build(tmp_path / "bloom", "bloom-4heads")
    dst = convert(src, tmp_path / "rope", PlanRequest(window=256, dtype="bfloat16")).destination
    report = verify(src, dst, context=64, greedy_tokens=0)
    source = SourceModel(src)
    ids = torch.randint(0, source.info.vocab_size, (1, 64), generator=torch.Generator().manual_seed(0))[0]
    head = source.head_rows(0, source.info.vocab_size)  # (V, D)
    exact = reference_hidden(source, ids) @ head.T  # (s, V)
    baseline = reference_hidden(source, ids, round_to=torch.bfloat16) @ head.to(torch.bfloat16).double().T
    assert report.baseline_max_err == pytest.approx(float((baseline - exact).abs().max()), rel=1e-9)
    assert report.content_advantage == pytest.approx(content_advantage(source, ids).tolist(), rel=1e-12)
    assert len(report.advantage_allowed) == source.info.n_heads
    in_float32 = verify(src, convert(src, tmp_path / "f32", PlanRequest(window=256, dtype="float32")).destination,
                        context=64, greedy_tokens=0)
    assert in_float32.baseline_max_err is None and in_float32.advantage_allowed is None


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_vocabulary_block_counts_the_heads_rows_each_side_reads(tmp_path, monkeypatch, dtype):
    # at a short context the logits are small and the block large: the heads' rows (the exact head in float64,
    # the baseline's in half precision, each model's as read and as cast) must be in the budget, or a 560M shape
    # at 16 tokens holds 4.2 GB against a need of 1.3 (measured before this rule; 0.6 GB with it)
    from ropebridge.verify import logit_stats

    src = build(tmp_path / "bloom", "bloom-4heads")
    dst = convert(src, tmp_path / "dst", PlanRequest(window=256, dtype=dtype)).destination
    seen = {}
    original = logit_stats.vocab_block

    def spy(positions, largest, budget, row_bytes=0):
        seen["row_bytes"] = row_bytes
        return original(positions, largest, budget, row_bytes)

    monkeypatch.setattr(logit_stats, "vocab_block", spy)
    report = verify(src, dst, context=16, greedy_tokens=0, quick=True)
    d = SourceModel(src).info.hidden_size
    d_conv = json.loads((dst / "config.json").read_text())["hidden_size"]  # gpt-neox: the padded stream
    baseline = dtype != "float32"
    assert report.passed and seen["row_bytes"] == 8 * (d * (1 + baseline) + 2 * d_conv + 2 * d)


@pytest.mark.parametrize("family", ["bloom-4heads", "baichuan"])
def test_a_long_greedy_check_says_its_remaining_time_and_counts_every_token(tmp_path, monkeypatch, caplog, family):
    # a transformers model with its KV cache, and the exact reference token by token (a remote-code family): each
    # token generated is counted, and the rest's time is said once its pace is known
    import logging

    from pico import build_remote

    src = build(tmp_path / "src", family) if family.startswith("bloom") else build_remote(tmp_path / "src", family)
    dst = convert(src, tmp_path / "rope", PlanRequest(window=256)).destination
    ticks = []
    real = measure.Pace.tick
    monkeypatch.setattr(measure.Pace, "tick", lambda self: (ticks.append(self.done), real(self)))
    monkeypatch.setattr(measure, "PACE_AFTER", 0.0)
    monkeypatch.setattr(measure, "LONG_SECONDS", 0.0)
    with caplog.at_level(logging.WARNING, logger="ropebridge.verify.measure"):
        report = verify(src, dst, context=32, greedy_tokens=5)
    assert report.passed and len(ticks) == 10  # 5 tokens, two models (or the exact reference)
    said = [r.message for r in caplog.records if "greedy check" in r.message]
    assert len(said) == 1 and said[0].startswith("greedy check: 1 of 10 tokens in "), said


def test_a_text_without_a_tokenizer_says_why_in_words(tmp_path):
    src = build(tmp_path / "bloom", "bloom-4heads")  # a pico: no tokenizer files
    with pytest.raises(ValueError) as caught:
        measure.tokens(src, "some text", 16, 320, 0)
    message = str(caught.value)
    assert "has none that loads: it has no tokenizer files" in message and "Error" not in message
