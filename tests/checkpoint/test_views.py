"""checkpoint.views: canonical tensors made of row ranges of stored ones, read without copying the rest."""

import pytest
import torch
from safetensors.torch import save_file

from ropebridge.checkpoint.tensor_io import CheckpointReader
from ropebridge.checkpoint.views import Segment, ViewReader, stored_rows


@pytest.fixture
def reader(tmp_path):
    g = torch.Generator().manual_seed(0)
    tensors = {"q": torch.randn(6, 4, generator=g), "kv": torch.randn(4, 4, generator=g),
               "gate_up": torch.randn(10, 4, generator=g)}
    save_file(tensors, tmp_path / "model.safetensors")
    views = {"qkv": (Segment("q", 0, 6), Segment("kv", 0, 4)), "gate": (Segment("gate_up", 0, 5),),
             "up": (Segment("gate_up", 5, 10),)}
    return ViewReader(CheckpointReader(tmp_path), views), {k: v.double() for k, v in tensors.items()}


def test_a_view_reads_as_the_concatenation_of_its_segments(reader):
    view, t = reader
    assert view.shape("qkv") == (10, 4) and view.dtype("qkv") == torch.float32 and "qkv" in view
    assert torch.equal(view.read("qkv"), torch.cat([t["q"], t["kv"]]))
    for a, b in [(0, 10), (2, 8), (5, 7), (6, 6), (7, 10)]:  # row ranges within one segment and across both
        assert torch.equal(view.read("qkv", (a, b)), torch.cat([t["q"], t["kv"]])[a:b]), (a, b)
    assert torch.equal(view.read("up", (1, 3)), t["gate_up"][6:8]) and torch.equal(view.read("gate"), t["gate_up"][:5])
    assert torch.equal(view.read("q"), t["q"]) and view.names() == ["gate_up", "kv", "q"]  # stored names pass through


def test_stored_rows_are_the_largest_stop_and_a_range_outside_is_refused(reader):
    view, _ = reader
    assert stored_rows(view.views) == {"q": 6, "kv": 4, "gate_up": 10}
    with pytest.raises(ValueError, match="rows 3:11 of tensor 'qkv'"):
        view.read("qkv", (3, 11))
    short = ViewReader(view.reader, {"x": (Segment("kv", 0, 8),)})
    with pytest.raises(ValueError, match="'kv' has 4 rows; its rows 0:8 are read"):
        short.shape("x")
    assert "y" not in ViewReader(view.reader, {"y": (Segment("missing", 0, 1),)})


def test_a_transposed_tensor_reads_its_rows_as_the_stored_columns(tmp_path):
    from ropebridge.checkpoint.views import TransposedReader

    g = torch.Generator().manual_seed(1)
    stored = {"conv": torch.randn(5, 7, generator=g), "plain": torch.randn(3, 2, generator=g), "bias": torch.randn(7)}
    save_file(stored, tmp_path / "model.safetensors")
    reader = TransposedReader(CheckpointReader(tmp_path), ["conv", "bias"])
    assert reader.shape("conv") == (7, 5) and reader.shape("plain") == (3, 2) and reader.shape("bias") == (7,)
    assert torch.equal(reader.read("conv"), stored["conv"].double().T)
    for a, b in [(0, 7), (2, 5), (6, 7), (3, 3)]:
        assert torch.equal(reader.read("conv", (a, b), torch.float32), stored["conv"][:, a:b].T), (a, b)
    assert torch.equal(reader.read("plain", (1, 3)), stored["plain"][1:3].double())  # not transposed: as stored
    assert torch.equal(reader.read("bias"), stored["bias"].double())  # one dim: as stored
    with pytest.raises(ValueError, match="rows 5:8 of tensor 'conv'"):
        reader.read("conv", (5, 8))
