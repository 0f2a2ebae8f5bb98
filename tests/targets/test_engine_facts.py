"""The engine facts table: a cell per target and column, each a fact with how it was established, and no
engine's current version typed into a sentence (``Engine.version`` says it once)."""

from ropebridge.targets import TARGETS
from ropebridge.targets.engine_facts import SUPPORT
from ropebridge.targets.support import COLUMNS, ENGINES, Support


def test_every_target_has_one_fact_per_column():
    assert set(SUPPORT) == set(TARGETS)
    for name, row in SUPPORT.items():
        assert set(row) == set(COLUMNS) and all(isinstance(c, Support) for c in row.values()), name
        assert TARGETS[name].support is row  # the row a target reads


def test_no_sentence_repeats_an_engine_s_version():
    versions = {e.version for e in ENGINES.values() if e.version and e.version != "5.x"}
    typed = [(t, c, v) for t, row in SUPPORT.items() for c, cell in row.items() for v in versions
             if v in cell.code + cell.note]
    assert typed == []


def test_what_the_engines_run_natively_is_said_with_evidence():
    for name, row in SUPPORT.items():
        for column, cell in row.items():
            assert cell.kind != "native" or cell.evidence in ("tested", "measured", "run", "read"), (name, column)
