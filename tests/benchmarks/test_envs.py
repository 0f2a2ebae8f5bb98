"""An engine run by the benchmarks ends with everything it started: a session of its own, ended on an interrupt or a
SIGTERM, with its settings passed as its environment (never this process's)."""

import os
import signal
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "engines"))

import envs  # noqa: E402
from processes import gone  # noqa: E402

SCRIPT = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
open(sys.argv[1], "w").write(f"{child.pid} {os.environ.get('ENGINE_SETTING')}")
time.sleep(120)
"""


@pytest.mark.parametrize("how", [KeyboardInterrupt, SystemExit])
def test_an_interrupted_engine_ends_with_its_children(tmp_path, how):
    script, told = tmp_path / "engine.py", tmp_path / "pid"
    script.write_text(SCRIPT)
    env = envs.Env("fake", Path(sys.executable), None)

    def interrupt(*_):
        raise how()

    before = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 3.0)
    try:
        with pytest.raises(how):
            env.run([script, told], env={"ENGINE_SETTING": "given"})
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)
    pid, setting = told.read_text().split()
    assert setting == "given" and "ENGINE_SETTING" not in os.environ
    assert gone(int(pid)), "the engine's child outlived the interrupt"


def test_a_failing_engine_says_why(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text("raise SystemExit('no kernel for this size')")
    with pytest.raises(RuntimeError, match="no kernel for this size"):
        envs.Env("fake", Path(sys.executable), None).run([script], log_file=tmp_path / "log")
    assert "no kernel for this size" in (tmp_path / "log").read_text()
