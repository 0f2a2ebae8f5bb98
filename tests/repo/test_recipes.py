"""Every recipe in the docs (a ``bash`` block after ``<!-- recipe -->``) runs as printed: hub ids resolve to pico
models of their family placed in a local hub cache (the hub is unreachable here), each line in one directory."""

import re
import shlex
from pathlib import Path

import pytest
from pico import build

from ropebridge.cli import main

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RECIPES = [(p.name, block) for p in DOCS for block in re.findall(r"<!-- recipe -->\n```bash\n(.*?)```", p.read_text(),
                                                                   flags=re.S)]
HUB = {"bigscience/bloom": "bloom-4heads"}  # hub id -> the pico family standing in for it


@pytest.fixture
def hub(tmp_path, monkeypatch):
    import huggingface_hub.constants as constants

    cache = tmp_path / "hub"
    for repo, family in HUB.items():
        entry = cache / f"models--{repo.replace('/', '--')}"
        build(entry / "snapshots" / ("0" * 40), family)
        (entry / "refs").mkdir()
        (entry / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return cache


def test_recipes_are_found():
    assert RECIPES and all(b.strip() for _, b in RECIPES)


@pytest.mark.parametrize("name, block", RECIPES, ids=[f"{n}#{i}" for i, (n, _) in enumerate(RECIPES)])
def test_recipe_runs_as_printed(name, block, hub, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for line in block.strip().splitlines():
        argv = shlex.split(line, comments=True)
        assert argv[0] == "ropebridge", line  # a recipe of another program belongs to its engine's benchmark
        assert main(argv[1:]) == 0, (line, capsys.readouterr().err)


def test_a_hub_source_is_the_cards_base_model(hub, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["convert", "bigscience/bloom", "bloom-rope", "--window", "256"]) == 0
    assert "base_model: bigscience/bloom" in (tmp_path / "bloom-rope" / "README.md").read_text()
