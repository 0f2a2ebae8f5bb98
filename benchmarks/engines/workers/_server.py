"""An engine's HTTP server, started as a user types it and stopped with everything it started (the standard library
only: it runs in the engine's environment, beside ``worker_vllm.py`` and ``worker_sglang.py``, and in ropebridge's
for ``readme_serve.py``, which starts the README's server line).

    with running(command, port, log_path, why) as start_seconds:
        post(port, "/v1/completions", {...})

``running`` raises ``Refused`` (its message the refusal a row records) when the server exits before it answers
``/health`` (``why`` reads the reason from its log) or does not answer within ``timeout`` seconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path


class Refused(RuntimeError):
    """The server would not start: what it said."""


def post(port: int, path: str, body: dict | None = None, timeout: float = 900) -> dict:
    """``body`` as JSON to 127.0.0.1:PORT/PATH (a GET without one); the answer's JSON."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


@contextlib.contextmanager
def running(command: list[str], port: int, log_path: Path, why: Callable[[str], str], *,
            env: dict[str, str] | None = None, cwd: str | None = None, timeout: float = 600) -> Iterator[float]:
    """COMMAND started in a session of its own (its output in LOG_PATH), waited on until ``/health`` answers; yields
    the seconds that took. On leaving, the session is ended with SIGINT, then SIGKILL after a minute."""
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        while True:
            if proc.poll() is not None:
                raise Refused(f"the server exited ({proc.returncode}): {why(log_path.read_text())}")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5)
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if time.perf_counter() - t0 > timeout:
                    raise Refused(f"the server did not answer /health in {timeout:.0f} s") from None
                time.sleep(2)
        yield time.perf_counter() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
