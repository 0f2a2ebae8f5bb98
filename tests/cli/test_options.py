"""The planning options both ``plan`` and ``convert`` take: one ``PlanRequest`` from them, floors from a number
or a file."""

import argparse
import json

import pytest

from ropebridge.cli._options import add_planning_options, floors, plan_request


def _parse(*argv):
    p = argparse.ArgumentParser()
    add_planning_options(p)
    return p.parse_args(list(argv))


def test_the_options_become_one_request():
    request = plan_request(_parse("--window", "1024", "--strategy", "ladder", "--dtype", "float16",
                                  "--rotary-dim", "16", "--jobs", "2"), progress=False)
    assert (request.window, request.strategy, request.dtype, request.rotary_dim, request.jobs) == (
        1024, "ladder", "float16", 16, 2)
    assert _parse("--emulation", "single").strategy == "single"  # the flag's old name


def test_floors_from_a_number_a_list_or_a_plan(tmp_path):
    assert floors(None) is None and floors("30") == 30.0
    (tmp_path / "list.json").write_text("[30, 40]")
    (tmp_path / "plan.json").write_text(json.dumps({"plan": {"heads": [{"ladder": {"floor": 35}}]}}))
    assert floors(str(tmp_path / "list.json")) == (30.0, 40.0) and floors(str(tmp_path / "plan.json")) == (35.0,)
    with pytest.raises(ValueError, match="--floor"):
        floors(str(tmp_path / "missing.json"))


def test_the_help_names_every_family_and_each_default_target_from_the_tables(capsys):
    from ropebridge.checkpoint.config import FAMILIES
    from ropebridge.cli import main

    assert main(["convert", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for name, family in FAMILIES.items():
        assert name in text
    assert "llama for baichuan, refact" in text and "stablelm for jais, btlm" in text
