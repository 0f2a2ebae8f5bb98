"""Malformed and ambiguous input, each case one line and exit 2 with nothing written: configs of the wrong type,
safetensors headers and indexes that break their schema, sources transformers and ropebridge could read two ways,
head dims the planner cannot use, and DSTs whose own files are malformed."""

import json
import shutil
import struct

import pytest
import torch
from pico import build, shard, write_index

from ropebridge.cli import main


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("malformed")
    bloom = build(root / "bloom", "bloom-4heads")
    build(root / "mpt", "mpt", max_seq_len=512)
    build(root / "falcon", "falcon-parallel-mq")  # bias=False: no linear biases
    build(root / "falcon-b", "falcon-rw")  # bias=True
    build(root / "mpt-b", "mpt-biases", max_seq_len=512)  # no_bias=False: every linear and LayerNorm has one
    assert main(["convert", str(bloom), str(root / "bloom-rope"), "--window", "256"]) == 0
    return root


def _config(d, fn):
    data = json.loads((d / "config.json").read_text())
    out = fn(data)
    (d / "config.json").write_text(json.dumps(data if out is None else out))


def _header(d, fn):
    """Rewrite model.safetensors' JSON header by ``fn(header) -> new header`` (data bytes kept)."""
    path = d / "model.safetensors"
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    new = json.dumps(fn(json.loads(raw[8:8 + n]))).encode()
    path.write_bytes(struct.pack("<Q", len(new)) + new + raw[8 + n:])


def _tensors(d, fn):
    """Rewrite model.safetensors with ``fn(tensors)`` (a dict edited in place)."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(d / "model.safetensors")
    fn(tensors)
    save_file(tensors, d / "model.safetensors", metadata={"format": "pt"})


def _only_norm_biases(d):
    _config(d, lambda c: c.update(no_bias=True))
    _tensors(d, lambda t: [t.pop(k) for k in list(t) if k.endswith(".bias") and "norm" not in k])


def _entry(name, fn):
    def edit(h):
        fn(h[name])
        return h
    return edit


W = "transformer.h.0.mlp.dense_4h_to_h.weight"
CASES = {
    "config-list": ("bloom", lambda d: (d / "config.json").write_text("[1, 2]"), "is not a JSON object"),
    "config-string": ("bloom", lambda d: (d / "config.json").write_text('"bloom"'), "is not a JSON object"),
    "eps-null": ("bloom", lambda d: _config(d, lambda c: c.update(layer_norm_epsilon=None)), "layer_norm_epsilon"),
    "eps-string": ("bloom", lambda d: _config(d, lambda c: c.update(layer_norm_epsilon="1e-5")), "layer_norm_epsilon"),
    "attn-config-list": ("mpt", lambda d: _config(d, lambda c: c.update(attn_config=[1])), "attn_config"),
    "expansion-null": ("mpt", lambda d: _config(d, lambda c: c.update(expansion_ratio=None)), "expansion_ratio"),
    "vocab-string": ("bloom", lambda d: _config(d, lambda c: c.update(vocab_size="320")), "vocab_size"),
    "heads-disagree": ("bloom", lambda d: _config(d, lambda c: c.update(n_head=4, num_attention_heads=8)),
                       "disagree"),
    "header-list": ("bloom", lambda d: _header(d, lambda h: [1, 2]), "header is a list"),
    "entry-number": ("bloom", lambda d: _header(d, lambda h: {**h, W: 7}), "header entry"),
    "no-offsets": ("bloom", lambda d: _header(d, _entry(W, lambda e: e.pop("data_offsets"))), "data offsets"),
    "string-shape": ("bloom", lambda d: _header(d, _entry(W, lambda e: e.update(shape="128,512"))), "has shape"),
    "index-list": ("bloom", lambda d: (d / "model.safetensors.index.json").write_text("[]"),
                   "not a valid checkpoint index"),
    "weight-map-list": ("bloom", lambda d: (d / "model.safetensors.index.json").write_text('{"weight_map": []}'),
                        "not a valid checkpoint index"),
    "index-beside-single": ("bloom", lambda d: (
        shutil.copy(d / "model.safetensors", d / "model-00001-of-00001.safetensors"),
        (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
            k: "model-00001-of-00001.safetensors" for k in _names(d)}}))), "holds both"),
    "shard-unnamed": ("bloom", lambda d: _sharded(d, lambda wm: _save(d / "model-00003-of-00003.safetensors", {W: 1})),
                      "a shard model.safetensors.index.json does not name"),
    "tensor-in-two-shards": ("bloom", lambda d: _sharded(d, lambda wm: _add(d / _other(wm), W, d / wm[W])),
                             "is stored in both"),
    "index-names-another-shard": ("bloom", lambda d: _sharded(d, lambda wm: write_index(d, {**wm, W: _other(wm)})),
                                  "but model.safetensors.index.json names model-"),
    "falcon-undeclared-bias": ("falcon-b", lambda d: _config(d, lambda c: c.update(bias=False)), "declares none"),
    "falcon-missing-bias": ("falcon", lambda d: _config(d, lambda c: c.update(bias=True)), "declares linear biases"),
    "mpt-missing-bias": ("mpt", lambda d: _config(d, lambda c: c.update(no_bias=False)), "declares linear biases"),
    "mpt-undeclared-norm-bias": ("mpt-b", _only_norm_biases, "norm_f.bias' is a bias, but config no_bias = True"),
}


def _sharded(d, edit):
    """Shard model.safetensors in two with an index, then ``edit(weight_map)``."""
    edit(shard(d))


def _other(weight_map):
    return next(f for f in sorted(set(weight_map.values())) if f != weight_map[W])


def _save(path, tensors):
    from safetensors.torch import save_file

    save_file({k: torch.full((2,), float(v)) for k, v in tensors.items()}, path, metadata={"format": "pt"})


def _add(path, name, source):
    """Store tensor ``name`` of the shard ``source`` in the shard ``path`` too."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(path)
    tensors[name] = load_file(source)[name]
    save_file(tensors, path, metadata={"format": "pt"})


def _names(d):
    raw = (d / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return [k for k in json.loads(raw[8:8 + n]) if k != "__metadata__"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_or_ambiguous_source_is_one_line_and_2(sources, tmp_path, capsys, case):
    family, edit, needle = CASES[case]
    src = shutil.copytree(sources / family, tmp_path / "src")
    edit(src)
    for argv in (["convert", str(src), str(tmp_path / "out"), "--window", "256"],
                 ["plan", "--model", str(src), "--window", "256"]):
        assert main(argv) == 2, (case, argv)
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], (case, err)
    assert not (tmp_path / "out").exists() and [p.name for p in tmp_path.iterdir()] == ["src"]


def test_an_odd_head_dim_in_half_precision_is_one_line(capsys):
    assert main(["plan", "--heads", "8", "--head-dim", "7", "--dtype", "bfloat16"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "head dim 7" in err[0], err


@pytest.mark.parametrize("case, edit, needle", [
    ("config-empty-list", lambda d: (d / "config.json").write_text("[]"), "is not a JSON object"),
    ("record-heads-string", lambda d: _record(d, lambda r: r["plan"].update(heads="many")), "heads are malformed"),
    ("record-head-slope-string", lambda d: _record(d, lambda r: r["plan"]["heads"][0].update(slope="0.5")),
     "heads are malformed"),
    ("record-request-list", lambda d: _record(d, lambda r: r.update(asked=[1])), "request is not an object"),
    ("record-request-window", lambda d: _record(d, lambda r: r["asked"].update(window=-1)), "window"),
])
def test_a_malformed_destination_is_one_line_and_2(sources, tmp_path, capsys, case, edit, needle):
    dst = shutil.copytree(sources / "bloom-rope", tmp_path / "dst")
    edit(dst)
    assert main(["verify", str(sources / "bloom"), str(dst), "--context", "32"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], (case, err)


def _record(d, fn):
    record = json.loads((d / "ropebridge.json").read_text())
    fn(record)
    (d / "ropebridge.json").write_text(json.dumps(record))


def test_a_baichuan_13b_config_over_a_rope_baichuans_tensors_is_one_line(tmp_path, capsys):
    from pico import build_remote
    from safetensors.torch import load_file, save_file

    src = build_remote(tmp_path / "src", "baichuan")
    tensors = load_file(src / "model.safetensors")
    for i in range(2):  # what a RoPE Baichuan-7B stores in every layer
        tensors[f"model.layers.{i}.self_attn.rotary_emb.inv_freq"] = torch.ones(8)
    save_file(tensors, src / "model.safetensors", metadata={"format": "pt"})
    assert main(["convert", str(src), str(tmp_path / "out"), "--window", "256"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "rotary_emb.inv_freq" in err[0] and "hidden_size = 96" in err[0], err
    assert not (tmp_path / "out").exists()
