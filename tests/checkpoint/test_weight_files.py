"""Which files a checkpoint's tensors come from: an index and its shards read as one checkpoint, every way
they can disagree refused naming the tensor or the shard, and a pickle that is not plain weights one line."""

import pytest
import torch
from pico import build
from safetensors.torch import load_file

from ropebridge.checkpoint.tensor_io import CheckpointReader
from ropebridge.checkpoint.weight_files import load_bin


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


def test_a_pickle_that_asks_for_a_global_is_one_line_naming_it(tmp_path):
    path = tmp_path / "pytorch_model.bin"
    torch.save({"w": torch.ones(2), "hook": print}, path)
    with pytest.raises(ValueError) as err:
        load_bin(path)
    assert "asks for" in str(err.value) and "print" in str(err.value) and "\n" not in str(err.value), err.value
    torch.save({"w": torch.ones(2)}, path)
    assert torch.equal(load_bin(path)["w"], torch.ones(2))
