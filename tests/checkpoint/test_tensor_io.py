"""Checkpoint bytes: the reader against safetensors' own loader, rows read alone, and the streaming writer's
shards and index read back by safetensors."""

import json

import pytest
import torch
from pico import build
from safetensors.torch import load_file

from ropebridge.checkpoint.tensor_io import CheckpointReader, ShardWriter, row_blocks, single


def test_the_reader_equals_safetensors_own_loader(tmp_path):
    src = build(tmp_path / "src", "mpt")
    theirs = load_file(src / "model.safetensors")
    reader = CheckpointReader(src)
    assert set(reader.names()) == set(theirs)
    for name, tensor in theirs.items():
        assert tuple(reader.shape(name)) == tuple(tensor.shape) and reader.dtype(name) == tensor.dtype
        torch.testing.assert_close(reader.read(name), tensor.double(), rtol=0, atol=0)
        if tensor.dim() == 2 and tensor.shape[0] > 3:  # a row range is exactly those rows
            torch.testing.assert_close(reader.read(name, (1, 3)), tensor[1:3].double(), rtol=0, atol=0)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("stored", [torch.bfloat16, torch.float16, torch.float32])
def test_a_non_finite_value_is_refused_in_any_dtype_and_row_it_is_read_in(tmp_path, stored, bad):
    from safetensors.torch import save_file

    t = torch.randn(6, 5, generator=torch.Generator().manual_seed(1)).to(stored)
    t[4, 3] = bad
    save_file({"w": t}, tmp_path / "model.safetensors")
    reader = CheckpointReader(tmp_path)
    for dtype in (torch.float64, torch.float32, torch.bfloat16):
        with pytest.raises(ValueError, match="'w' holds 1 non-finite"):
            reader.read("w", dtype=dtype)
        with pytest.raises(ValueError, match="'w' holds 1 non-finite"):
            reader.read("w", (3, 6), dtype=dtype)
        assert torch.equal(reader.read("w", (0, 4), dtype=dtype), t[:4].to(dtype))  # the rows without it
    assert bool(reader.read("w", dtype=torch.float64, finite=False).isnan().any()) == (bad != bad)


def test_a_cast_that_overflows_is_refused_where_the_stored_values_are_finite(tmp_path):
    # float32's 1e10 is finite, float16's is inf: the check is on the cast where it can overflow
    from safetensors.torch import save_file

    save_file({"w": torch.tensor([[1.0, 1e10]])}, tmp_path / "model.safetensors")
    reader = CheckpointReader(tmp_path)
    assert float(reader.read("w")[0, 1]) == 1e10
    with pytest.raises(ValueError, match="'w' holds 1 non-finite"):
        reader.read("w", dtype=torch.float16)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_the_writer_streams_shards_safetensors_reads_back(tmp_path, dtype):
    rng = torch.Generator().manual_seed(0)
    big = torch.randn(300, 64, generator=rng, dtype=torch.float64)
    small = torch.randn(64, generator=rng, dtype=torch.float64)
    writer = ShardWriter(dtype, 40_000)  # several shards
    writer.add("big", tuple(big.shape), row_blocks(lambda a, b: big[a:b], 300, 8 * 64))
    writer.add("small", tuple(small.shape), single(lambda: small))
    writer.write(tmp_path)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    loaded = {}
    for shard in set(index["weight_map"].values()):
        loaded.update(load_file(tmp_path / shard))
    assert loaded["big"].dtype == dtype and torch.equal(loaded["big"], big.to(dtype))  # rounded once, as a cast
    assert torch.equal(loaded["small"], small.to(dtype))
    assert writer.total_bytes() == sum(t.numel() * t.element_size() for t in loaded.values())



def test_a_mapped_tensor_is_the_stored_one_without_a_copy(tmp_path):
    from safetensors.torch import save_file

    tensors = {"a": torch.randn(4, 6, dtype=torch.bfloat16), "b": torch.arange(7, dtype=torch.float32)}
    save_file(tensors, tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text("{}")
    reader = CheckpointReader(tmp_path)
    for name, t in tensors.items():
        m = reader.mapped(name)
        assert m.dtype == t.dtype and torch.equal(m, t)
        assert torch.equal(m, reader.read(name, dtype=t.dtype))
    # the same pages for every call: the file's map, no copy of its own
    assert reader.mapped("a").data_ptr() == reader.mapped("a").data_ptr()
    with pytest.raises(ValueError, match="missing"):
        reader.mapped("c")
