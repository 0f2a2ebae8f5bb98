"""The repository's promises about itself: CI runs the README's test command."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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

    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "tables.py"), "--check"], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_table_check_can_fail(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("tables", ROOT / "benchmarks" / "tables.py")
    tables = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tables)
    stale = "<!-- table: window-guide -->\n| an old table |\n<!-- /table -->\n"
    assert tables.render(stale) != stale and "| an old table |" not in tables.render(stale)


def test_the_readme_is_short_and_links_only_to_what_exists():
    text = (ROOT / "README.md").read_text()
    assert len(text) <= 12_000, len(text)
    for doc in [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "benchmarks").glob("**/README.md")]:
        for link in re.findall(r"\]\(((?!https?:)[^)#\s]+)\)", doc.read_text()):
            assert (doc.parent / link).exists(), (doc.name, link)
