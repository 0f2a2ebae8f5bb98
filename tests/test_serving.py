"""Serving arithmetic: parameter counts against real checkpoints, tensor-parallel splits on stored shapes, the README table."""

import json
import sys
from pathlib import Path

import pytest
import transformers as T
from pico import build

from ropebridge.checkpoint.tensor_io import CheckpointReader
from ropebridge.convert import convert
from ropebridge.emulation import PlanRequest
from ropebridge.serving import Geometry, checkpoint_tp_problems

ROOT = Path(__file__).resolve().parents[1]


def stored_params(directory: Path) -> int:
    reader = CheckpointReader(directory)
    total = 0
    for name in reader.names():
        n = 1
        for s in reader.shape(name):
            n *= s
        total += n
    return total


def test_bloom_176b_has_its_published_parameter_count():
    config = {"model_type": "bloom", "n_layer": 70, "hidden_size": 14336, "n_head": 112, "vocab_size": 250880}
    assert Geometry.from_config(config).params == 176_247_271_424  # BLOOM paper, table of model sizes


@pytest.fixture(scope="module")
def converted_112(tmp_path_factory):
    root = tmp_path_factory.mktemp("serving")
    src = build(root / "src", "bloom-4heads", n_head=112, hidden_size=112 * 8, n_layer=1)
    res = convert(src, root / "dst", PlanRequest(window=128, dtype="float32"))
    return src, res.destination


def test_geometry_counts_what_is_stored(converted_112):
    src, dst = converted_112
    native = Geometry.from_config(json.loads((src / "config.json").read_text()))
    assert native.params == T.AutoModelForCausalLM.from_pretrained(src).num_parameters()
    target = Geometry.from_config(json.loads((dst / "config.json").read_text()))
    layout = json.loads((dst / "ropebridge.json").read_text())["layout"]
    assert target == native.converted(layout["rotary_dim"])
    assert target.params == stored_params(dst)
    assert target.kv_bytes_per_token(2) == 2 * 1 * 112 * layout["head_dim"] * 2


def test_converted_checkpoint_splits_evenly(converted_112, tmp_path):
    _, dst = converted_112
    for tp in (1, 2, 4, 8):
        assert checkpoint_tp_problems(dst, tp) == [], tp
    assert any("112 heads" in p for p in checkpoint_tp_problems(dst, 3))
    other = convert(build(tmp_path / "src", "bloom-12heads", n_layer=1), tmp_path / "dst", PlanRequest(window=128, dtype="float32"))
    assert any("12 heads" in p for p in checkpoint_tp_problems(other.destination, 8))


def test_geometry_validates():
    with pytest.raises(ValueError, match="heads"):
        Geometry("bloom", 1, 0, 8, 8, 32, 10)
    with pytest.raises(ValueError, match="falcon"):
        Geometry.from_config({"model_type": "falcon"})


def test_the_docs_hold_the_serving_table():
    sys.path.insert(0, str(ROOT / "scripts"))
    import serving_table

    assert serving_table.table() in (ROOT / "docs" / "targets.md").read_text()
