"""An engine run by the benchmarks ends with everything it started: a session of its own, ended on an interrupt or a
SIGTERM, with its settings passed as its environment (never this process's)."""

import os
import signal
import sys
from pathlib import Path

import pytest

from benchmarks.engines import envs
from processes import gone

ROOT = Path(__file__).resolve().parents[2]


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


def test_the_sglang_stand_in_raises_if_it_is_ever_called():
    # the one stand-in the SGLang environment carries: importable, and never silently computing anything
    namespace: dict = {}
    exec(envs.STAND_INS["sglang"]["vllm/_custom_ops.py"], namespace)  # noqa: S102
    with pytest.raises(RuntimeError, match="stand-in"):
        namespace["rotary_embedding"](None, None, None, 64, None, True)
    assert envs.STAND_INS["sglang"]["vllm/__init__.py"] == ""


def test_the_sglang_environment_holds_sglangs_own_pins():
    # sglang is installed without its dependencies; those it pins that change numbers are pinned here alike
    import re

    from ropebridge.targets.support import RUN

    assert envs.NO_DEPS["sglang"] == [f"sglang=={RUN['sglang'].split()[-1]}"]
    def norm(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    text = envs.ENV_CONSTRAINTS["sglang"].read_text()
    pins = {norm(k): v for k, v in re.findall(r"^([\w.-]+)==(\S+)$", text, re.M)}
    sglang_pins = {"torch": "2.14.1", "transformers": "5.19.0", "tokenizers": "0.23.2", "sentencepiece": "0.2.1",
                   "compressed-tensors": "0.18.0", "xgrammar": "0.2.7", "openai": "2.8.0", "openai-harmony": "0.0.4",
                   "apache-tvm-ffi": "0.1.11"}  # as sglang 0.5.23's wheel requires them
    assert {k: pins[k] for k in sglang_pins} == sglang_pins
    assert all(norm(p) in pins for p in envs.PACKAGES["sglang"])
    assert "sglang" not in pins and "vllm" not in pins
    stamp = envs._stamp("sglang")
    assert stamp["no_deps"] == envs.NO_DEPS["sglang"] and stamp["stand_ins"] == envs.STAND_INS["sglang"]
