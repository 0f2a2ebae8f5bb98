"""Blockwise conversion: memory bounded by a block, not a tensor, and the same bytes as whole-tensor conversion."""

import pytest
import torch
from pico import build

from ropebridge.checkpoint import tensor_io
from ropebridge.convert import convert
from ropebridge.emulation import PlanRequest
from ropebridge.planning import plan_checkpoint
from ropebridge.targets import TARGETS
from ropebridge.writers import writer_for

WHOLE = 1 << 62  # one block per tensor
TINY = 1  # one row (one head for the fused QKV) per block

CASES = [  # (family, target, dtype): every QKV layout (per head, [Q|K|V], multi-query), both targets, both strategies
    ("bloom-12heads", "gpt-neox", "float32"),
    ("bloom-12heads", "gpt-neox", "bfloat16"),
    ("mpt", "gpt-neox", "float16"),
    ("falcon-parallel-mq", "gpt-neox", "float32"),
    ("falcon-rw", "starcoder2", "float32"),
    ("mpt", "nemotron", "float32"),
]


def files(directory):
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


@pytest.mark.parametrize("family, target, dtype", CASES)
def test_blockwise_and_whole_tensor_conversion_write_the_same_bytes(tmp_path, monkeypatch, family, target, dtype):
    src = build(tmp_path / "src", family)
    out = {}
    for name, block in (("whole", WHOLE), ("tiny", TINY)):
        monkeypatch.setattr(tensor_io, "BLOCK_BYTES", block)
        (tmp_path / name).mkdir()
        convert(src, tmp_path / name / "dst", PlanRequest(window=128, dtype=dtype, target=target), max_shard_mb=0.05)
        out[name] = files(tmp_path / name / "dst")  # one name: the model card names its directory
    assert len([n for n in out["whole"] if n.endswith(".safetensors")]) > 1  # several shards, tensors across them
    assert out["tiny"].keys() == out["whole"].keys()
    for name in out["whole"]:
        assert out["tiny"][name] == out["whole"][name], name


def largest_block(src, target, block_bytes, monkeypatch, tmp_path):
    """Bytes of the largest block any producer yields when the converter writes ``src`` with ``block_bytes``."""
    monkeypatch.setattr(tensor_io, "BLOCK_BYTES", block_bytes)
    plan, _, model = plan_checkpoint(src, PlanRequest(window=128, dtype="float32", target=target))
    code = writer_for(TARGETS[target])
    layout = code.layout(model, plan, TARGETS[target])
    tmp_path.mkdir()
    writer = tensor_io.ShardWriter(torch.float32, 1 << 30)
    code.add_tensors(model, layout, writer)
    writer.write(tmp_path)
    return writer.largest_block, layout


@pytest.mark.parametrize("target", ["gpt-neox", "starcoder2"])
def test_no_block_exceeds_the_budget_or_one_unit(tmp_path, monkeypatch, target):
    src = build(tmp_path / "src", "bloom-12heads", n_layer=1)
    budget = 16 << 10
    blocked, lay = largest_block(src, target, budget, monkeypatch, tmp_path / "a")
    whole, _ = largest_block(src, target, WHOLE, monkeypatch, tmp_path / "b")
    d_out = lay.hidden_size if target == "gpt-neox" else 144
    head_rows = (3 if target == "gpt-neox" else 1) * lay.head_dim  # the indivisible unit: one head's rows
    assert blocked <= max(budget, 8 * head_rows * d_out)
    mlp_float32 = 4 * 576 * d_out  # the up projection written whole, in float32
    assert whole >= mlp_float32 > 4 * blocked  # the bound above is the blocking's doing
