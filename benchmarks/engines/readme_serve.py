"""The README's set-up command and its serve recipe, exactly as printed, from a fresh clone in a clean environment.

    python -m benchmarks.engines.readme_serve [--work-dir DIR] [--keep]

A clone of this checkout's HEAD (``git clone``), run with nothing of this session's environment (``clean_env``:
``PATH`` the system's, a new ``HOME``, no pip cache; the machine's pip configuration kept). In the clone, the README's
first set-up command (the install and the demo), then each line of its ``vllm-serve-cpu`` recipe with ``bash -e``; the
recipe's last line (the server) runs until ``/health`` answers, then the demo's held-out text is scored over HTTP as a
client would (``/v1/completions``: token ids in, ``prompt_logprobs`` and 4 greedy continuations out) and judged against
exact float64 ALiBi on the same ids as ``serving_options.py`` judges every row. Writes
benchmarks/results/readme_serve.json: each step's command, seconds and last line, the served numbers, the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._common import machine, started_as
from benchmarks.engines.workers import _server

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


OUT = ROOT / "benchmarks" / "results" / "readme_serve.json"
RECIPE = "vllm-serve-cpu"
PORT, START_TIMEOUT = 8000, 900


def readme_steps(readme: str) -> tuple[str, list[str]]:
    """The README's first set-up command and the serve recipe's lines."""
    setup = re.search(r"```bash\n(python3 -m venv .*?)\n", readme).group(1)
    block = re.search(rf"<!-- recipe: {RECIPE} -->\n```bash\n(.*?)```", readme, flags=re.S).group(1)
    return setup, [line for line in block.strip().splitlines() if line.strip()]


def clean_env(home: Path) -> dict[str, str]:
    """The system's PATH, a new HOME, no pip cache; the machine's own pip configuration (``PIP_*``: its registries,
    the wheels it keeps, as a user's machine has its own) is kept."""
    machine_pip = {k: v for k, v in os.environ.items() if k.startswith("PIP_") and k != "PIP_NO_CACHE_DIR"}
    return {**machine_pip, "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "PIP_NO_CACHE_DIR": "1",
            "LANG": "C.UTF-8"}


def step(command: str, cwd: Path, env: dict[str, str]) -> dict:
    """One command as printed: its seconds, status and last line of output."""
    t = time.perf_counter()
    proc = subprocess.run(["bash", "-e", "-c", command], cwd=cwd, env=env, capture_output=True, text=True)
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    out = {"command": command, "seconds": time.perf_counter() - t, "status": proc.returncode,
           "last_line": lines[-1] if lines else ""}
    if proc.returncode:
        raise SystemExit(f"{command!r} exited {proc.returncode}:\n" + "\n".join(lines[-20:]))
    return {**out, "output": proc.stdout[-4000:]}


def served(command: str, cwd: Path, env: dict[str, str], log: Path) -> dict:
    """The server line as printed (``_server.running``, as the engine workers start theirs), until /health answers;
    the held-out ids scored and continued over HTTP."""
    from benchmarks.engines import serving_options as so
    from ropebridge.checkpoint.model import SourceModel
    from ropebridge.convert.pipeline import source_fingerprint
    from ropebridge.demo import data_dir
    from ropebridge.runners import Result

    why = lambda text: text[-2000:]  # noqa: E731 - the server's last words, as printed
    try:
        with _server.running(["bash", "-e", "-c", command], PORT, log, why, env=env, cwd=str(cwd),
                             timeout=START_TIMEOUT) as start:
            texts = so.token_ids("demo")
            ids, prompts = texts["scored"], texts["prompts"]
            model = _server.post(PORT, "/v1/models")["data"][0]["id"]
            scored = _server.post(PORT, "/v1/completions", {"model": model, "prompt": ids, "max_tokens": 1,
                                                            "temperature": 0, "prompt_logprobs": 0})
            logprobs = [d[str(t)]["logprob"] for d, t in zip(scored["choices"][0]["prompt_logprobs"][1:], ids[1:])]
            outs = _server.post(PORT, "/v1/completions", {
                "model": model, "prompt": prompts, "max_tokens": so.GREEDY, "temperature": 0, "ignore_eos": True,
                "return_token_ids": True, "logprobs": 0})["choices"]
    except _server.Refused as exc:  # the recipe as printed did not serve: the benchmark fails, saying why
        raise SystemExit(str(exc)) from None
    outs = sorted(outs, key=lambda c: c["index"])
    greedy = [c["token_ids"] for c in outs]
    greedy_lp = [c["logprobs"]["token_logprobs"] for c in outs]
    result = Result(logprobs=(tuple(logprobs),), greedy=tuple(map(tuple, greedy)),
                    greedy_logprobs=tuple(map(tuple, greedy_lp)))
    src = data_dir("demo")
    dst = cwd / "demo-vllm"
    limit = json.loads(subprocess.run([str(cwd / ".venv/bin/ropebridge"), "plan", "--model", "demo-out/native",
                                       "--engine", "vllm", "--dtype", "bfloat16", "--window", "2048", "--json"],
                                      cwd=cwd, env=env, capture_output=True, text=True,
                                      check=True).stdout)["verify_limit"]
    judged = so.judged(result, SourceModel(src), source_fingerprint(src), [ids], prompts, limit, cwd / "work",
                       "bfloat16")
    return {"command": command, "start_seconds": start, "model": model, "limit": limit,
            "converted_from": str(dst.relative_to(cwd)), **judged}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work-dir", type=Path, default=None)
    p.add_argument("--keep", action="store_true", help="keep the clone")
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="readme-serve-", dir=args.work_dir))
    clone, home = work / "ropebridge", work / "home"
    home.mkdir()
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    setup, lines = readme_steps((clone / "README.md").read_text())
    env, load = clean_env(home), os.getloadavg()[0]
    steps = [step(setup, clone, env)]
    for line in lines[:-1]:
        steps.append(step(line, clone, env))
        print(f"{steps[-1]['seconds']:6.0f} s  {line}\n          {steps[-1]['last_line']}", flush=True)
    server = served(lines[-1], clone, env, work / "server.log")
    payload = {"machine": {**machine(), "load_before": load, "load_after": os.getloadavg()[0]},
               "command": started_as(), "commit": head.strip(), "rows": steps, "served": server}
    OUT.write_text(json.dumps(payload, indent=1))
    print(f"served: perplexity {100 * server['ppl_rel']:+.2f}% of exact's, max |Δ log p| "
          f"{server['max_abs_dlogp']:.3g}, "
          f"holds: {server['holds']}; wrote {OUT}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if server["holds"] else 1


if __name__ == "__main__":
    sys.exit(main())
