"""Signals from the entry point's first instruction on: Ctrl-C at many instants is exit 130 and one line with
nothing written; SIGTERM and SIGHUP while a checkpoint is written remove it exactly as Ctrl-C does."""

import os
import signal
import subprocess
import sys
import time

import pytest
from pico import build

# ~28 s on 2 cores (imports, then the plan): alive well past the last instant tried, on a fast machine too
SLOW_CONVERT = ["--dtype", "bfloat16", "--window", "1048576", "--jobs", "1"]


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return build(tmp_path_factory.mktemp("signals") / "bloom", "bloom-4heads")


def _default_signals():  # as from a terminal: a suite started in the background inherits SIGINT ignored
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def _handles(pid: int, sig: int) -> bool:
    """The process has a handler of its own for ``sig`` (its SigCgt mask in /proc): Python catches SIGINT from its
    start, but SIGHUP only once ropebridge's entry point has run its first instruction."""
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    except OSError:
        pass
    return False


def _start(argv, code=None):
    cmd = [sys.executable, "-m", "ropebridge", *argv] if code is None else [sys.executable, "-c", code, *argv]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_default_signals)


def _wait(proc, ready, limit=60.0):
    deadline = time.monotonic() + limit
    while not ready() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    assert proc.poll() is None, proc.communicate()


@pytest.mark.parametrize("delay", [0.0, 0.01, 0.03, 0.06, 0.1, 0.15, 0.2, 0.3, 0.45, 0.6, 0.8, 1.0, 1.3, 1.6, 2.0,
                                   2.5, 3.0, 3.5, 4.0, 5.0])
def test_ctrl_c_at_any_instant_of_the_first_seconds(src, tmp_path, delay):
    _interrupted_at(src, tmp_path, delay, signal.SIGINT)


@pytest.mark.parametrize("delay, sig", [(0.3, signal.SIGINT), (1.5, signal.SIGTERM), (3.5, signal.SIGINT),
                                        (3.5, signal.SIGHUP), (5.0, signal.SIGTERM)])
def test_a_remote_code_source_stopped_in_its_first_seconds(baichuan, tmp_path, delay, sig):
    _interrupted_at(baichuan, tmp_path, delay, sig)


@pytest.fixture(scope="module")
def baichuan(tmp_path_factory):
    from pico import build_remote

    return build_remote(tmp_path_factory.mktemp("signals") / "baichuan", "baichuan")


def _interrupted_at(source, tmp_path, delay, sig):
    """A slow convert of ``source`` sent ``sig`` ``delay`` seconds after its handlers are in place: 128 + sig,
    one line, nothing written."""
    dst = tmp_path / "rope"
    proc = _start(["convert", str(source), str(dst), *SLOW_CONVERT])
    _wait(proc, lambda: _handles(proc.pid, signal.SIGHUP))
    time.sleep(delay)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    lines = err.strip().splitlines()
    word = "interrupted" if sig == signal.SIGINT else f"stopped by {signal.Signals(sig).name}"
    assert proc.returncode == 128 + sig, (delay, proc.returncode, err)
    assert len(lines) == 1 and lines[0].endswith(f"{word}; nothing written"), (delay, err)
    assert out == "" and list(tmp_path.iterdir()) == [], (delay, list(tmp_path.iterdir()))


# convert with every block of every tensor slowed down, so that a signal lands while the shards are written
SLOW_WRITE = """
import sys, time
import ropebridge.checkpoint.tensor_io as io
blocks = io.ShardWriter.blocks
def slow(self, p):
    for block in blocks(self, p):
        time.sleep(0.05)
        yield block
io.ShardWriter.blocks = slow
sys.argv = ["ropebridge", *sys.argv[1:]]
from ropebridge.cli import console_main
console_main()
"""


@pytest.mark.parametrize("sig, code, what", [(signal.SIGTERM, 143, "stopped by SIGTERM"),
                                              (signal.SIGHUP, 129, "stopped by SIGHUP"),
                                              (signal.SIGINT, 130, "interrupted")])
def test_a_signal_while_writing_removes_what_was_written(src, tmp_path, sig, code, what):
    dst = tmp_path / "rope"
    proc = _start(["convert", str(src), str(dst), "--window", "256"], code=SLOW_WRITE)

    def writing():
        return any(p.name.startswith(".rope.tmp-") and any(p.glob("*.safetensors")) for p in tmp_path.iterdir())

    _wait(proc, writing)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code and err.strip().splitlines() == [f"ropebridge convert: {what}; nothing written"], \
        (proc.returncode, err)
    assert list(tmp_path.iterdir()) == []  # no .rope.tmp-* left, no DST


def test_the_library_alone_installs_no_handler():
    code = ("import signal, ropebridge.cli, ropebridge.convert; "
            "print(signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "True"


def test_a_second_signal_while_cleaning_up_does_not_cut_it(src, tmp_path):
    dst = tmp_path / "rope"
    proc = _start(["convert", str(src), str(dst), "--window", "256"], code=SLOW_WRITE)
    _wait(proc, lambda: any(p.name.startswith(".rope.tmp-") for p in tmp_path.iterdir()))
    proc.send_signal(signal.SIGTERM)
    try:
        os.kill(proc.pid, signal.SIGINT)
    except ProcessLookupError:
        pass
    out, err = proc.communicate(timeout=60)
    left = list(tmp_path.iterdir())
    assert proc.returncode in (130, 143) and left == [], (proc.returncode, err, left, [list(p.iterdir()) for p in left])


# a convert whose exit lasts three seconds (an exit handler that sleeps): a signal lands after its work is done
SLOW_EXIT = """
import atexit, sys, time
atexit.register(time.sleep, 3)
sys.argv = ["ropebridge", *sys.argv[1:]]
from ropebridge.cli import console_main
console_main()
"""


# a convert whose interpreter's teardown lasts three seconds (an object of __main__ that sleeps as it is collected,
# after the interpreter has put its Python signal handlers back to the default action): a signal lands there
SLOW_TEARDOWN = """
import sys, time
class Slow:
    def __del__(self):
        time.sleep(3)
slow = Slow()
sys.argv = ["ropebridge", *sys.argv[1:]]
from ropebridge.cli import console_main
console_main()
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
@pytest.mark.parametrize("when", ["exit", "teardown"])
def test_a_signal_after_the_work_is_done_changes_nothing(src, tmp_path, sig, when):
    # the conversion is complete and reported: the process ends with its own status, DST kept, no line, whether
    # the signal lands in an exit handler or in the interpreter's teardown
    dst = tmp_path / "rope"
    proc = _start(["convert", str(src), str(dst), "--window", "256"], SLOW_EXIT if when == "exit" else SLOW_TEARDOWN)
    _wait(proc, lambda: (dst / "ropebridge.json").is_file())
    time.sleep(0.5 if when == "exit" else 1.0)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and err.strip() == "", (proc.returncode, err)
    assert out.startswith("wrote") and (dst / "ropebridge.json").is_file() and list(dst.glob("*.safetensors"))


@pytest.mark.parametrize("delay", [0.0, 0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.07, 0.1, 0.15, 0.2])
def test_ctrl_c_during_ropebridges_own_imports_is_one_line_and_130(src, tmp_path, delay):
    """The console command, interrupted from its start on (no waiting for any handler): once its entry point
    (``_ropebridge_console``, outside the package) has run its first instruction, before any of ropebridge's
    imports, a Ctrl-C is exit 130 and one line; earlier, it lands in the interpreter's own start or the console
    script's ``import re``, and no frame of ropebridge's package is in what Python prints."""
    command = os.path.join(os.path.dirname(sys.executable), "ropebridge")
    proc = subprocess.Popen([command, "convert", str(src), str(tmp_path / "rope"), *SLOW_CONVERT],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_default_signals)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    if proc.returncode == 130:
        assert err.strip().splitlines() == [err.strip()] and err.strip().endswith("interrupted; nothing written"), err
    else:  # before the entry point's first instruction: the interpreter's start, the script's import line
        import ropebridge

        package = os.path.dirname(ropebridge.__file__)
        assert package not in err and "_ropebridge_console.py" not in err, (delay, proc.returncode, err)
    assert out == "" and list(tmp_path.iterdir()) == [], (delay, list(tmp_path.iterdir()))


def test_a_ladder_fitted_in_a_process_pool_ends_without_a_word_of_a_signal(tmp_path):
    # the pool's workers import the command's entry point again; the pool ends them with SIGTERM when the work is
    # done, which is not the command being stopped: nothing on stderr, exit 0 (before: one "stopped by SIGTERM"
    # line per worker)
    command = os.path.join(os.path.dirname(sys.executable), "ropebridge")
    proc = subprocess.run([command, "plan", "--heads", "32", "--head-dim", "32", "--dtype", "bfloat16", "--window",
                           "256", "--jobs", "2"], capture_output=True, text=True, timeout=300,
                          preexec_fn=_default_signals)
    assert proc.returncode == 0 and proc.stderr == "", (proc.returncode, proc.stderr)
    assert "worst head" in proc.stdout
