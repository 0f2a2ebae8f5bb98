"""How an engine runs a target: a cell refuses an unknown kind and says itself in words, and a row says in one line
the engines that run it natively and those whose Transformers backend runs it."""

import pytest

from ropebridge.targets.support import COLUMNS, ENGINES, Support, runs_in


def test_a_cell_refuses_an_unknown_kind_and_says_how_it_was_established():
    with pytest.raises(ValueError, match="support kind must be one of"):
        Support("maybe", "read")
    assert Support("backend", "read").cell() == "Transformers backend (read)" and Support("none", "").cell() == "no"


def test_a_row_in_one_line_names_natives_then_backends():
    row = {c: Support("none", "") for c in COLUMNS}
    assert runs_in(row) == "no engine natively"
    row |= {"llama.cpp": Support("native", "run"), "vllm": Support("backend", "read")}
    assert runs_in(row) == "llama.cpp; through its Transformers backend: vLLM 0.34.0"
    row |= {"sglang": Support("backend", "read")}
    assert runs_in(row).endswith("through their Transformers backends: vLLM 0.34.0, SGLang 0.5.23")


def test_every_engine_is_a_column():
    assert set(ENGINES) <= set(COLUMNS)
