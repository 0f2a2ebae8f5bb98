"""benchmarks/engines: the one table of rows (settings.py) declares exactly the runs stored in results/engines.json."""

import json
from pathlib import Path

from benchmarks.engines import run, settings

ROOT = Path(__file__).resolve().parents[2]


def _settings(row: dict) -> dict:
    settings = dict(row["settings"])
    if "plan" in settings:  # stored before the planner named the base rope_base and the strategy so
        names = {"base": "rope_base", "emulation": "strategy"}
        settings["plan"] = {names.get(k, k): v for k, v in settings["plan"].items()}
    return settings


def test_the_rows_are_the_stored_runs():
    # every stored run is a row of the table, with its label and settings; the latest full run (the demo in
    # llama.cpp, ladders included) is the table's rows exactly, in order. (Older stored runs predate the ladders.)
    stored = json.loads((ROOT / "benchmarks" / "results" / "engines.json").read_text())["rows"]
    for (engine, model) in {(r["engine"], r["model"]) for r in stored}:
        want = [(r["label"], _settings(r)) for r in stored if (r["engine"], r["model"]) == (engine, model)]
        got = [(r.label, {**r.settings, **r.described}) for r in settings.rows(model, threads=2) if r.engine == engine]
        assert all(w in got for w in want), (engine, model, [w[0] for w in want if w not in got])
        if (engine, model) == ("llama.cpp", "demo"):
            assert got == want


def test_quick_is_one_selection():
    quick = settings.select("demo", list(run.ENGINES), quick=True, threads=2)
    assert {r.engine for r in quick} == set(run.ENGINES) and all(r.quick for r in quick)
    assert {r.checkpoint for r in quick} == {"converted"}  # no ladder is converted for a quick run
    full = settings.select("demo", ["llama.cpp"], quick=False, threads=2)
    assert {r.checkpoint for r in full} >= set(settings.LADDERS) and len(full) > len(quick)
