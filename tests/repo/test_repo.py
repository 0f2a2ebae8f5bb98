"""The repository's promises about itself: CI runs the README's test command."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def readme_commands():
    text = (ROOT / "README.md").read_text()
    block = re.search(r"## Quick start.*?```(?:bash|sh)\n(.*?)```", text, re.S).group(1)
    return [line for line in block.splitlines() if line.strip() and not line.startswith("#")]


def test_readme_has_exactly_two_setup_commands():
    commands = readme_commands()
    assert len(commands) == 2, commands
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    assert readme_commands()[1] in ci.splitlines()


def test_generated_tables_match_their_results():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "benchmarks.tables", "--check"], capture_output=True, text=True,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_table_check_can_fail(tmp_path):
    from benchmarks import tables

    stale = "<!-- table: window-guide -->\n| an old table |\n<!-- /table -->\n"
    assert tables.render(stale) != stale and "| an old table |" not in tables.render(stale)


def test_the_one_generator_checks_the_samples_when_asked(monkeypatch):
    from benchmarks import tables
    from scripts import readme_samples

    asked = []
    monkeypatch.setattr(readme_samples, "main", lambda argv: asked.append(argv) or 1)  # a stale sample
    assert tables.main(["--check"]) == 0 and asked == []  # the tables alone: current
    assert tables.main(["--check", "--samples"]) == 1 and asked == [["--check"]]


def test_the_lists_of_families_and_targets_come_from_their_tables(monkeypatch):
    # the README's default targets and docs/targets.md's table are rendered from FAMILIES and TARGETS: a family
    # added as a row shows up in both
    import dataclasses

    from benchmarks import tables
    from ropebridge.checkpoint import families

    assert tables.default_targets() == ("Without it: gpt-neox (llama for Baichuan-13B, Refact; stablelm for Jais, "
                                        "BTLM).\n")
    added = dataclasses.replace(families.FAMILIES["baichuan"], name="newfam", label="NewFam")
    monkeypatch.setitem(families.FAMILIES, "newfam", added)
    assert "llama for Baichuan-13B, Refact, NewFam;" in tables.default_targets()
    assert "| Baichuan-13B, Refact, NewFam |" in tables.targets()


def test_the_readme_is_short_and_links_only_to_what_exists():
    text = (ROOT / "README.md").read_text()
    assert len(text) <= 12_000, len(text)
    for doc in [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "benchmarks").glob("**/README.md")]:
        for link in re.findall(r"\]\(((?!https?:)[^)#\s]+)\)", doc.read_text()):
            assert (doc.parent / link).exists(), (doc.name, link)


PACKAGE = ROOT / "src" / "ropebridge"


def mirror(module: Path) -> Path:
    """The test file of a source module: ``tests/<its folder>/test_<name>.py``, underscores around it dropped."""
    rel = module.relative_to(PACKAGE)
    return ROOT / "tests" / rel.parent / f"test_{rel.stem.strip('_')}.py"


def test_the_files_and_modules_the_docs_name_exist():
    # a path in backticks (`tests/x.py`, `benchmarks/y.py`, `src/...`) and every module of the levels table
    docs = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "benchmarks").glob("**/README.md")]
    missing = [(doc.name, path) for doc in docs if doc.name != "decisions.md"
               for path in re.findall(r"`((?:tests|benchmarks|src|scripts|docs)/[\w/.-]+\.(?:py|md|json))`",
                                      doc.read_text()) if not (ROOT / path).exists()]
    # a result not yet produced, named as what its script writes (the GPU runs)
    def written(path: str) -> bool:
        return path.startswith("benchmarks/results/") and bool(list(ROOT.glob(f"benchmarks/**/{Path(path).stem}.py")))

    missing = [(doc, path) for doc, path in missing if not written(path)]
    assert not missing, missing
    # a study printed as it runs (`python -m benchmarks.engines.vllm_run`) names a module that exists, and no doc
    # prints a study run by its path (it imports its package, so it runs only as a module)
    commands = [(doc.name, m) for doc in docs if doc.name != "decisions.md"
                for m in re.findall(r"python -m ((?:benchmarks|scripts)(?:\.\w+)+)", doc.read_text())]
    assert commands and not [(d, m) for d, m in commands if not m.endswith(".NAME")  # NAME: any study
                             and not (ROOT / (m.replace(".", "/") + ".py")).is_file()]
    study = r"python3? (benchmarks/(?!engines/workers/)[\w/]+\.py|scripts/checkpoint_digests\.py)"
    by_path = [(doc.name, m) for doc in docs if doc.name != "decisions.md" for m in re.findall(study, doc.read_text())]
    assert not by_path, by_path
    from test_levels import LEVELS

    names = {n for level in LEVELS for n in level}
    assert names and not [n for n in sorted(names) if not (PACKAGE / f"{n}.py").exists() and not (PACKAGE / n).is_dir()]


def test_every_module_has_its_test_file_at_the_mirrored_path():
    missing = [str(mirror(p).relative_to(ROOT)) for p in sorted(PACKAGE.rglob("*.py")) if p.name != "__init__.py"
               and not mirror(p).exists()]
    assert missing == []
    assert mirror(PACKAGE / "convert" / "verify.py") == ROOT / "tests" / "convert" / "test_verify.py"
    assert mirror(PACKAGE / "__main__.py") == ROOT / "tests" / "test_main.py"


def parameters(fn) -> int:
    a = fn.args
    names = [*a.posonlyargs, *a.args, *a.kwonlyargs] + [x for x in (a.vararg, a.kwarg) if x]
    return len([n for n in names if n.arg not in ("self", "cls")])


def test_no_function_takes_more_than_eight_parameters_and_no_module_is_long():
    import ast

    wide, long = [], []
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        if len(text.splitlines()) > 400:
            long.append(path.name)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and parameters(node) > 8:
                wide.append(f"{path.relative_to(PACKAGE)}:{node.name}")
    assert wide == [] and long == []
    nine = ast.parse("def f(a, b, c, d, e, f, g, h, *, i): pass").body[0]
    assert parameters(nine) == 9  # the count can exceed the bar


OWN_TARGET_FACTS = ("pair_dims", "rope_form", "rotary_block")  # how a target's rope turns: its row's to answer


def target_fact_tests(text: str) -> list[str]:
    """The attribute reads of ``OWN_TARGET_FACTS`` in a module's source."""
    import ast

    return [node.attr for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.Attribute) and node.attr in OWN_TARGET_FACTS]


def test_only_the_targets_and_writers_read_how_a_target_s_rope_turns():
    # elsewhere the row is asked (Target.single_pair, Target.ladder_frequencies, served_head_dim), never tested
    found = [f"{p.relative_to(PACKAGE)}: {', '.join(target_fact_tests(p.read_text()))}"
             for p in sorted(PACKAGE.rglob("*.py")) if p.relative_to(PACKAGE).parts[0] not in ("targets", "writers")
             and target_fact_tests(p.read_text())]
    assert found == []
    assert target_fact_tests("if request.target_row.rope_form == 'llama3': pass") == ["rope_form"]  # it can fail


def test_the_wheel_ships_the_demo_model_only():
    # the demo's BLOOM is the one embedded model a user runs (``ropebridge demo``); the others are the tests'
    import tomllib

    from ropebridge.demo import DATA_FILES

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["ropebridge"]
    assert data == ["data/demo/*"]
    assert all((PACKAGE / "data" / "demo" / f).is_file() for f in DATA_FILES)
