"""Every committed result has the one schema (``benchmarks/_common.SCHEMA``): the machine it ran on (or that it
was not recorded), the command that made it, and its rows as a list; ``save`` writes no other shape."""

import json
import re
from pathlib import Path

import pytest

from benchmarks import _common

ROOT = Path(__file__).resolve().parents[2]


FILES = sorted((ROOT / "benchmarks" / "results").glob("*.json"))


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_a_committed_result_has_the_schema(path):
    data = json.loads(path.read_text())
    assert isinstance(data, dict) and set(_common.SCHEMA) <= set(data), path.name
    assert isinstance(data["rows"], list) and data["rows"], path.name
    assert isinstance(data["machine"], dict) or data["machine"].startswith("not recorded"), path.name
    # a study's module as it was run, its arguments after it (the form a reader can run from the root)
    assert re.match(r"python -m (benchmarks|scripts)\.[\w.]+( |$)|not recorded", data["command"]), path.name


def test_save_writes_the_schema_and_refuses_rows_that_are_not_a_list(tmp_path, monkeypatch):
    monkeypatch.setattr(_common, "RESULTS", tmp_path)
    path = _common.save("study", {"rows": [{"a": 1}], "window": 8})
    data = json.loads(path.read_text())
    assert list(data)[:3] == list(_common.SCHEMA) and data["rows"] == [{"a": 1}] and data["window"] == 8
    assert data["command"].startswith("python ")
    with pytest.raises(TypeError, match="rows are a list"):
        _common.save("study", {"rows": {"a": 1}})


def test_the_machine_names_its_cpu_and_the_extensions_kernels_dispatch_on():
    info = ("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n"
            "flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n")
    assert _common.cpu_model(info) == "Intel(R) Xeon(R) Platinum 8480+ +amx_bf16 +amx_tile +avx2 +avx512_bf16 +avx512f"
    assert _common.cpu_model("model name\t: AMD EPYC\nflags\t\t: fpu avx2\n") == "AMD EPYC +avx2"
    assert "cpu" in _common.machine()
