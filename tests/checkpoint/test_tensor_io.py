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

