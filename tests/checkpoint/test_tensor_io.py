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
    writer = ShardWriter(tmp_path, dtype, 40_000)  # several shards
    writer.add("big", tuple(big.shape), row_blocks(lambda a, b: big[a:b], 300, 8 * 64))
    writer.add("small", tuple(small.shape), single(lambda: small))
    writer.write()
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    loaded = {}
    for shard in set(index["weight_map"].values()):
        loaded.update(load_file(tmp_path / shard))
    assert loaded["big"].dtype == dtype and torch.equal(loaded["big"], big.to(dtype))  # rounded once, as a cast
    assert torch.equal(loaded["small"], small.to(dtype))
    assert writer.total_bytes() == sum(t.numel() * t.element_size() for t in loaded.values())


def _resave(path, fn):
    """Rewrite the safetensors file ``path`` with ``fn(tensors)`` (a dict edited in place)."""
    from safetensors.torch import save_file

    tensors = load_file(path)
    fn(tensors)
    save_file(tensors, path, metadata={"format": "pt"})


W = "transformer.h.0.self_attention.dense.weight"
FIRST, SECOND = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"


def _index_cases(d, weight_map):
    """Each way an index and its shards can disagree, applied to the sharded checkpoint ``d``."""
    from pico import write_index

    other = SECOND if weight_map[W] == FIRST else FIRST
    original = load_file(d / weight_map[W])[W]
    return {
        "an unnamed shard": (lambda: _resave_new(d / "model-00003-of-00003.safetensors", {W: original * 1.0001}),
                             "a shard model.safetensors.index.json does not name"),
        "a copy in another shard, named": (
            lambda: (_resave(d / other, lambda t: t.update({W: original * 1.0001})),
                     write_index(d, {**weight_map, W: other})), "is stored in both"),
        "named in another shard": (lambda: write_index(d, {**weight_map, W: other}),
                                   f"but model.safetensors.index.json names {other} for it"),
        "not listed": (lambda: write_index(d, {k: v for k, v in weight_map.items() if k != W}),
                       "model.safetensors.index.json does not list it"),
        "an entry its shard lacks": (lambda: _resave(d / weight_map[W], lambda t: t.pop(W)),
                                     f"names {weight_map[W]} for tensor '{W}', which {weight_map[W]} lacks"),
    }


def _resave_new(path, tensors):
    from safetensors.torch import save_file

    save_file(tensors, path, metadata={"format": "pt"})


@pytest.mark.parametrize("case", ["an unnamed shard", "a copy in another shard, named", "named in another shard",
                                  "not listed", "an entry its shard lacks"])
def test_an_index_its_shards_disagree_with_is_refused(tmp_path, case):
    from pico import shard

    d = build(tmp_path / "src", "bloom-4heads")
    weight_map = shard(d)
    reader = CheckpointReader(d)  # the untouched shards read as one checkpoint
    assert set(reader.names()) == set(weight_map) and [f.name for f in reader.files] == [FIRST, SECOND]
    edit, needle = _index_cases(d, weight_map)[case]
    edit()
    with pytest.raises(ValueError) as err:
        CheckpointReader(d)
    assert needle in str(err.value), err.value
