"""Plan time against window and head count, on one core and on all: ``ropebridge plan`` as a user runs it.

    python -m benchmarks.plan_time [--quick] [--windows 2048,8192,...] [--heads 6,16,32,112] [--jobs 1,2]
                                   [--dtype bfloat16] [--name plan_time]

Each row runs ``ropebridge plan --heads H --head-dim D --window L --dtype DT --jobs J --json`` in a child process
(the process pool's start included) and records its wall time, peak memory (the child and its workers), the
rotary dim chosen, the worst predicted error and whether the plan meets the tolerance, with the load average
before the run (the machines are shared: compare ratios within one run). Head dims are those of the models
with that many heads: 6 (the demo model, 32), 16 (BLOOM-560M, 64), 32 (BLOOM-7b1, 128), 112 (BLOOM-176B, 128).
Windows above 131072 run for at most 16 heads. Prints a table and writes benchmarks/results/<name>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

from benchmarks._common import save, started_as, table

HEAD_DIM = {6: 32, 16: 64, 32: 128, 112: 128}
LONG = 131072  # beyond this window only up to 16 heads run (112 heads at 1M would take most of an hour)


def run(heads: int, window: int, jobs: int, dtype: str) -> dict:
    argv = [sys.executable, "-m", "ropebridge", "plan", "--heads", str(heads), "--head-dim", str(HEAD_DIM[heads]),
            "--window", str(window), "--dtype", dtype, "--jobs", str(jobs), "--json"]
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    row = {"heads": heads, "head_dim": HEAD_DIM[heads], "window": window, "dtype": dtype, "jobs": jobs,
           "seconds": seconds, "load_before": load, "exit": out.returncode}
    if out.returncode == 0:
        plan = json.loads(out.stdout)
        worst = max(h["predicted_error"] for h in plan["heads"])
        row.update(rotary_dim=plan["rotary_dim"], worst_predicted=worst, meets=worst <= plan["tolerance"])
    else:
        row["error"] = out.stderr.strip().splitlines()[-1] if out.stderr.strip() else ""
    # ru_maxrss of the children is the largest of any child so far (kB), not this one's alone
    row["peak_rss_gb_max_so_far"] = max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 2**20
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="6 and 16 heads at 2K and 8K")
    p.add_argument("--windows", default="2048,8192,32768,131072,1048576")
    p.add_argument("--heads", default="6,16,32,112")
    p.add_argument("--jobs", default=f"1,{os.cpu_count()}")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--name", default=None, help="result file name (default plan_time, plan_time_quick)")
    args = p.parse_args()
    windows = [2048, 8192] if args.quick else [int(w) for w in args.windows.split(",")]
    heads = [6, 16] if args.quick else [int(h) for h in args.heads.split(",")]
    jobs = sorted({int(j) for j in args.jobs.split(",")})
    rows = []
    for h in heads:
        for window in windows:
            if window > LONG and h > 16:
                continue
            for j in jobs:
                rows.append(run(h, window, j, args.dtype))
                print(table(rows[-1:], list(rows[-1])), flush=True)
    columns = ["heads", "head_dim", "window", "jobs", "seconds", "load_before", "rotary_dim", "worst_predicted",
               "meets", "exit"]
    print(table(rows, columns))
    name = args.name or ("plan_time_quick" if args.quick else "plan_time")
    print(f"wrote {save(name, {'command': started_as(), 'rows': rows})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
