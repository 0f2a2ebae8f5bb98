"""benchmarks/engines: the recipes its README prints are the ones the benchmark runs, and the demo-only
tokenizer step (gpt2_vocab.py) keeps the model's own token ids' logits."""

import json
import re
from pathlib import Path

import torch

from benchmarks.engines import recipes, settings
from benchmarks.engines.workers import gpt2_vocab

ROOT = Path(__file__).resolve().parents[2]


MARKDOWN = [p for p in ROOT.rglob("*.md") if ".venv" not in p.parts and "demo-out" not in p.parts]


def test_every_named_recipe_is_run_by_the_engine_benchmark():
    named = [m for p in MARKDOWN for m in re.findall(r"<!-- recipe: ([^ ]+) -->", p.read_text())]
    readme = recipes.blocks((ROOT / "README.md").read_text())
    assert list(readme) == ["vllm-serve-cpu"]  # the README's serve recipe: run by engines/readme_serve.py
    assert sorted(named) == sorted([*recipes.blocks(), *readme])  # each once
    assert sorted(recipes.blocks()) == sorted(settings.RECIPES)  # the engines README's: run by run.py
    for name, rec in settings.RECIPES.items():
        block = recipes.blocks()[name]
        assert re.match(r"ropebridge (demo --out demo-out|convert demo-out/native)", block), name
        assert all(path in block for path in [*rec.checkpoints.values(), *rec.artefacts.values()]), name


def test_every_recipe_has_stored_runs_that_name_it():
    stored = json.loads((ROOT / "benchmarks" / "results" / "engines.json").read_text())["rows"]
    for name, rec in settings.RECIPES.items():
        runs = [r for r in stored if r["settings"].get("recipe") == name]
        assert runs and all((r["engine"], r["model"], r["context"]) == (rec.engine, *rec.model) for r in runs), name


def test_padding_the_vocabulary_keeps_every_row(tmp_path):
    from safetensors.torch import load_file, save_file

    emb, head, other = torch.randn(5, 3), torch.randn(5, 3), torch.randn(3, 3)
    save_file({"embed.weight": emb, "head.weight": head, "layer.weight": other}, tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 5, "hidden_size": 3}))
    gpt2_vocab.pad_vocabulary(tmp_path, 8)
    out = load_file(tmp_path / "model.safetensors")
    assert torch.equal(out["embed.weight"][:5], emb) and torch.equal(out["head.weight"][:5], head)
    assert not out["embed.weight"][5:].any() and out["embed.weight"].shape == (8, 3)
    assert torch.equal(out["layer.weight"], other)
    assert json.loads((tmp_path / "config.json").read_text())["vocab_size"] == 8


def test_an_unpadded_vocabulary_compares_as_the_padded_model(tmp_path):
    import numpy as np
    from benchmarks.engines.workers._compare import against_reference

    rng = np.random.default_rng(0)
    hidden, head = rng.standard_normal((6, 4)).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32)
    padded = np.concatenate([head, np.zeros((3, 4), np.float32)])  # (8, 4): the demo's rows padded with zeros
    np.save(tmp_path / "ref.npy", (hidden + 0.01) @ padded.T)  # (6, 8)
    unpadded, full = against_reference(hidden @ head.T, str(tmp_path / "ref.npy")), \
        against_reference(hidden @ padded.T, str(tmp_path / "ref.npy"))
    assert unpadded == full and len(unpadded["argmax"]) == 6
