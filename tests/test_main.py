"""``python -m ropebridge`` is the CLI."""

import subprocess
import sys


def test_the_module_runs_the_cli():
    out = subprocess.run([sys.executable, "-m", "ropebridge", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "convert" in out.stdout and "verify" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "ropebridge", "plan", "--heads", "0", "--head-dim", "64"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
