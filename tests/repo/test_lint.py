"""The lint settings in pyproject.toml hold for every Python file of the repository (ruff, as CI installs it)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ruff_finds_nothing_under_the_project_settings():
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "src", "tests", "benchmarks",
                           "scripts"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_the_lint_can_fail(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n" + "x = " + "1 + " * 40 + "1\n")
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--config",
                           str(ROOT / "pyproject.toml"), str(bad)], capture_output=True, text=True)
    assert proc.returncode == 1 and "F401" in proc.stdout and "E501" in proc.stdout, proc.stdout
