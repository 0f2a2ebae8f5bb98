"""The studies' registry (``benchmarks/studies.py``): every committed result is one study's, every study's script
exists and says in its first sentence what it measures, every script that writes a result is a study, and every
study is a module its command can run: imported by its package name, with no edit of ``sys.path`` anywhere."""

import importlib
import re
from collections import Counter
from pathlib import Path

from benchmarks import studies

ROOT = Path(__file__).resolve().parents[2]


def test_every_committed_result_belongs_to_exactly_one_study():
    kept = Counter(name for s in studies.STUDIES for name in s.results)
    assert all(n == 1 for n in kept.values()), kept
    stored = {p.stem for p in (ROOT / "benchmarks" / "results").glob("*.json")}
    assert stored <= set(kept), sorted(stored - set(kept))
    assert set(kept) <= stored, sorted(set(kept) - stored)  # a study that names a result keeps it


# _common.save, a RESULTS or OUT path written, or a payload written as JSON
WRITES = re.compile(r"(?<!def )(?<![\w.])save\(|(RESULTS|OUT)\.write_text|\.write_text\(json\.dumps\(_?payload")


def test_every_script_that_writes_a_result_is_a_study():
    registered = {s.script for s in studies.STUDIES}
    scripts = [p for folder in ("benchmarks", "benchmarks/engines", "scripts") for p in (ROOT / folder).glob("*.py")]
    writers = {str(p.relative_to(ROOT)) for p in scripts if p.name != "_common.py" and WRITES.search(p.read_text())}
    assert writers <= registered, sorted(writers - registered)
    assert all((ROOT / s).is_file() for s in registered)


def test_the_index_names_each_study_by_its_own_first_sentence():
    index = studies.index()
    assert index.count("\n") == len(studies.STUDIES) + 1
    row = next(line for line in index.splitlines() if "`python -m benchmarks.engines.vllm_cost`" in line)
    assert "What serving a conversion costs in vLLM" in row and "`vllm_cost.json`" in row
    assert all(line.count(" | ") == 3 for line in index.splitlines()[2:])  # no stray | inside a cell


def test_every_study_is_a_module_its_command_runs():
    for s in studies.STUDIES:
        name = s.command.removeprefix("python -m ")
        importlib.import_module(name)  # by its package name, as `python -m` finds it
        assert 'if __name__ == "__main__":' in (ROOT / s.script).read_text(), name


def test_no_code_edits_sys_path():
    # the studies import each other and the tests' models by package (``python -m`` from the root; pytest's
    # ``pythonpath``); engine workers import their siblings because they run by path
    code = [p for folder in ("benchmarks", "scripts", "src") for p in (ROOT / folder).rglob("*.py")]
    edits = [str(p.relative_to(ROOT)) for p in code if re.search(r"sys\.path\.(insert|append)", p.read_text())]
    assert code and not edits, edits
