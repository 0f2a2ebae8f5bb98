"""targets.serving_facts: every setting said to hold is held by the stored measurements, in the versions named."""

import json
from pathlib import Path

import pytest

from ropebridge.convert.card import CACHE_FLAG
from ropebridge.targets.serving_facts import MEASURED
from ropebridge.targets.support import RUN

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "serving_options.json"


@pytest.fixture(scope="module")
def stored():
    return json.loads(RESULTS.read_text())


def test_the_versions_named_are_the_ones_run(stored):
    # a card says "measured with" RUN's build for every engine whose cache it plans for or whose settings it names
    named = set(CACHE_FLAG) | {m.engine for m in MEASURED}
    assert all(RUN[e] == stored["engines"][e] for e in named), {e: (RUN[e], stored["engines"].get(e)) for e in named}


@pytest.mark.parametrize("fact", MEASURED, ids=lambda m: f"{m.engine}: {m.setting}")
def test_every_fact_is_what_every_family_measured(stored, fact):
    rows = [r for r in stored["rows"] if r["engine"] == fact.engine and r["setting"] in fact.results
            and r["kind"] == "converted"]
    families = {r["model"] for r in rows}
    assert len(families) == 5, families  # every real-text family ran it
    natives = {(r["model"], r["setting"]): r for r in stored["rows"] if r["engine"] == fact.engine
               and r["kind"] == "native" and not r.get("refused")}
    for r in rows:
        if "GGUF" in fact.setting:  # weights changed: beside the engine's own model under the same setting
            native = natives.get((r["model"], r["setting"]))
            if native is not None:
                said = float(fact.words.split("within ")[1].split(" times")[0])
                assert r["mean_abs_dlogp"] <= said * native["mean_abs_dlogp"], r["model"]
            continue
        assert r["holds"], (r["model"], r["setting"], r.get("failures"))
    if "within" in fact.words and "%" in fact.words:  # the bound said is the largest measured
        said = float(fact.words.split("within ")[1].split("%")[0])
        worst = max(abs(100 * r["ppl_rel"]) for r in rows)
        assert worst <= said < worst + 0.01, (worst, said)  # the largest measured, rounded up
