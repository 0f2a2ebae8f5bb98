"""The Python snippets of README.md and docs/ (blocks after ``<!-- api -->``) run as written."""

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TEXT = "".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
SNIPPETS = re.findall(r"<!-- api -->\n```python\n(.*?)```", TEXT, flags=re.S)


def test_snippets_are_found():
    assert len(SNIPPETS) >= 2


@pytest.mark.parametrize("code", SNIPPETS, ids=[f"snippet{i}" for i in range(len(SNIPPETS))])
def test_snippet_runs(code, tmp_path, capsys):
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    finally:
        os.chdir(here)
