"""The engine studies' one judgement of a served model against the exact float64 ALiBi model, on the embedded
real-text models (``ropebridge.demo.data_dir``): the scored sequence and the prompts from a model's held-out text
(``token_ids``), the exact model's log-probabilities and greedy continuations over them, computed once per text and
model and cached (``exact``), and a run's perplexity, |Δ log p| and greedy partings against them (``judge``,
``greedy_words``). ``vllm_run.py``, ``sglang_run.py`` and ``llamacpp_families.py`` use it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

MODELS = ("demo", "demo-mpt", "demo-falcon", "demo-baichuan", "demo-jais")  # the embedded real-text models
PROMPTS, PROMPT_LEN, GREEDY = 4, 32, 32
PPL_LIMIT = 0.005  # the bar: within 0.5% of the exact perplexity
LABELS = {"demo": "BLOOM", "demo-mpt": "MPT", "demo-falcon": "Falcon-RW", "demo-baichuan": "Baichuan-13B arch.",
          "demo-jais": "Jais arch."}


def token_ids(name: str, context: int) -> tuple[list[int], list[list[int]]]:
    """The first CONTEXT - 1 ids of model NAME's held-out text (the prompt and the one token an engine generates fill
    the window, CONTEXT) and PROMPTS prompts of PROMPT_LEN from the text after."""
    import transformers as T

    from ropebridge.demo import data_dir

    ids = T.AutoTokenizer.from_pretrained(data_dir(name))((data_dir(name) / "heldout.txt").read_text())["input_ids"]
    step = (len(ids) - context - PROMPT_LEN) // PROMPTS
    if step < PROMPT_LEN:
        raise SystemExit(f"--context {context}: {name}'s held-out text has {len(ids)} tokens")
    return ids[:context - 1], [ids[context + i * step: context + i * step + PROMPT_LEN] for i in range(PROMPTS)]


def exact(name: str, ids: list[int], prompts: list[list[int]], work: Path) -> dict:
    """The exact float64 ALiBi model's log p of each next token of IDS, and each prompt's greedy continuation by
    GREEDY tokens with its top-2 margin at every step (cached in WORK)."""
    import torch

    from ropebridge.checkpoint.model import SourceModel
    from ropebridge.checkpoint.reference import reference_hidden
    from ropebridge.demo import data_dir

    cached = work / f"exact-{name}-{len(ids)}.json"
    if cached.exists():
        ref = json.loads(cached.read_text())
        if ref["ids"] == ids and ref["prompts"] == prompts and len(ref["greedy"][0]) == GREEDY:
            return ref
    model = SourceModel(data_dir(name))
    head = model.head_rows(0, model.info.vocab_size)  # (V, D) float64
    hidden = reference_hidden(model, torch.tensor(ids))  # (s, D) float64
    logprobs = []
    for lo in range(0, len(ids) - 1, 256):
        logp = torch.log_softmax(hidden[lo:lo + 256] @ head.T, dim=-1)  # (block, V)
        nxt = torch.tensor(ids[lo + 1: lo + 257])
        logprobs += logp[torch.arange(len(nxt)), nxt].tolist()
    greedy, margins = [], []
    for prompt in prompts:
        seq, new, gaps = list(prompt), [], []
        for _ in range(GREEDY):
            logits = reference_hidden(model, torch.tensor(seq))[-1] @ head.T  # (V,)
            top = torch.topk(logits, 2)
            new.append(int(top.indices[0]))
            gaps.append(float(top.values[0] - top.values[1]))
            seq.append(new[-1])
        greedy.append(new)
        margins.append(gaps)
    ref = {"ids": ids, "prompts": prompts, "logprobs": logprobs, "greedy": greedy, "margins": margins}
    cached.write_text(json.dumps(ref))
    return ref


def judge(result: dict, ref: dict) -> dict:
    """A run against the exact model: perplexities, |Δ log p|, greedy partings and the verdict."""
    if "refused" in result:
        return {"refused": result["refused"], "passes": None}
    got, want = result["logprobs"], ref["logprobs"]
    diffs = [abs(a - b) for a, b in zip(got, want)]
    ppl_exact = math.exp(-sum(want) / len(want))
    ppl = math.exp(-sum(got) / len(got))
    worst = max(diffs) if all(math.isfinite(d) for d in diffs) else math.inf
    partings, unexplained = [], 0
    for p, (a, b, gaps) in enumerate(zip(result["greedy"], ref["greedy"], ref["margins"])):
        step = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), None)
        if step is not None:
            near = gaps[step] <= 2 * worst
            partings.append({"prompt": p, "step": step, "exact_margin": gaps[step], "near_tie": near})
            unexplained += not near
    rel = ppl / ppl_exact - 1
    return {"ppl_exact": ppl_exact, "ppl": ppl, "ppl_rel": rel, "max_abs_dlogp": worst,
            "mean_abs_dlogp": sum(diffs) / len(diffs), "greedy_partings": partings,
            "passes": bool(math.isfinite(rel) and abs(rel) <= PPL_LIMIT and unexplained == 0)}


def greedy_words(row: dict) -> str:
    parts = row.get("greedy_partings")
    if parts is None:
        return ""
    if not parts:
        return "identical"
    near = [p for p in parts if p["near_tie"]]
    words = f"{len(parts)} of {PROMPTS} part"
    if len(near) == len(parts):
        return words + f", each at a near-tie (margin ≤ {max(p['exact_margin'] for p in parts):.2g})"
    return words + f", {len(parts) - len(near)} not at a near-tie"


def convert(engine: str, name: str, dtype: str, context: int, work: Path, fresh: bool) -> Path:
    """``ropebridge convert SRC DST --engine ENGINE --dtype DTYPE --window CONTEXT``, as a user runs it (reused from
    WORK unless FRESH)."""
    from ropebridge.demo import data_dir

    dst = work / f"{name}-{engine}-{dtype}"
    if (dst / "ropebridge.json").exists() and not fresh:
        return dst
    subprocess.run([sys.executable, "-m", "ropebridge", "convert", str(data_dir(name)), str(dst), "--engine", engine,
                    "--dtype", dtype, "--window", str(context), "--force"], check=True, capture_output=True)
    return dst


def conversion(dst: Path) -> dict:
    """What a row says of the conversion DST: its target, strategy, rotary dims, largest predicted error and the head
    size it is served at (from its ``ropebridge.json`` and ``config.json``)."""
    record = json.loads((dst / "ropebridge.json").read_text())
    config = json.loads((dst / "config.json").read_text())
    plan = record["plan"]
    return {"target": record.get("target") or config["model_type"], "strategy": plan["strategy"],
            "rotary_dim": plan.get("rotary_dim"), "predicted": max(h["predicted_error"] for h in plan["heads"]),
            "served_head_dim": config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]}


def run_worker(env, args: list, job: dict, work: Path, label: str, variables: dict[str, str] | None = None) -> dict:
    """JOB run by ``ENV``'s Python as ``ARGS JOB.json`` (a worker script and its mode), its output kept in
    WORK/logs/<model>-LABEL.log; the worker's result with the seconds it took, or, when the engine's process failed
    (a crash is a result, not a bug here), ``refused``: why, from its logs (WORK/logs/<model>-LABEL.*log) by
    ``runners.jobs.reason``'s rule (their last error, or the first where that only points up the log), else the
    failure's first line."""
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    stem = f"{Path(job['model']).name}-{label}"
    path, out = logs / f"{stem}.job.json", logs / f"{stem}.result.json"
    path.write_text(json.dumps({**job, "out": str(out)}))
    t0 = time.perf_counter()
    try:
        env.run([*args, path], log_file=logs / f"{stem}.log", env=variables)
    except RuntimeError as exc:  # the worker died: its logs say why, as ``runners.launch`` reads a worker's
        from ropebridge.runners.jobs import reason

        text = "\n".join(log.read_text(errors="replace") for log in sorted(logs.glob(f"{stem}.*log")))
        return {"refused": (reason(text) if text.strip() else str(exc).splitlines()[0])[:400],
                "seconds": time.perf_counter() - t0}
    return {**json.loads(out.read_text()), "seconds": time.perf_counter() - t0}


def run_engine(python: Path, worker: str, job, work: Path, label: str) -> dict:
    """``job`` (a ``ropebridge.runners.Job`` of one sequence) run by the package's runner ``worker`` (the one
    ``verify --engine`` runs) in ``python``, its output kept in WORK/logs/<model>-LABEL.log: the result as
    ``run_worker`` gives it (the sequence's ``logprobs``, ``greedy``, the engine's facts and the seconds), or
    ``refused``: what the engine said, as ``runners.launch`` reads it."""
    from ropebridge.runners import launch
    from ropebridge.runners.jobs import WorkerDied

    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    log_file = logs / f"{Path(job.model).name}-{label}.log"
    try:
        result = launch(python, worker, job, keep_log=log_file)
    except WorkerDied as exc:  # a crash in the engine is a result: what it said
        return {"refused": exc.said[:400]}
    except ValueError as exc:  # the interpreter cannot run or import the engine
        return {"refused": str(exc)[:400]}
    if result.refused is not None:
        return {"refused": result.refused[:400], "seconds": result.seconds}
    return {**result.facts, "logprobs": list(result.logprobs[0]), "greedy": [list(g) for g in result.greedy],
            "seconds": result.seconds, "log": log_file.read_text(errors="replace")}


# ----------------------------------------------------------------------------- the studies' rows, table and flags

DTYPES = ("bfloat16", "float16", "float32")


def row(name: str, kind: str, dtype: str, api: str, result: dict, ref: dict, dst: Path | None, facts: dict) -> dict:
    """One stored row: the run (model NAME, ``native`` or ``converted`` DST, DTYPE, API), the engine's FACTS, the
    judgement and what it says of the conversion."""
    out = {"model": name, "kind": kind, "dtype": dtype, "api": api, **facts, "seconds": result.get("seconds"),
           "start_seconds": result.get("start_seconds"), **judge(result, ref)}
    if dst is not None:
        out.update(conversion(dst))
    out["greedy"] = greedy_words(out)
    return out


def table(payload: dict, engine: str) -> str:
    """The stored rows as markdown, a refusal once with the runs it ended (``benchmarks/tables.py`` writes it into
    benchmarks/engines/README.md)."""
    out = [f"| model | run in {engine} | dtype | API | head size | perplexity: exact → {engine} | max \\|Δ log p\\| | "
           "greedy, 4 × 32 tokens, vs exact | passes |", "|---|---|---|---|---:|---|---:|---|---|"]
    refusals: dict[tuple[str, str, str], list[str]] = {}
    for r in payload["rows"]:
        if r.get("refused"):
            refusals.setdefault((r["model"], r["kind"], r["refused"]), []).append(f"{r['dtype']} {r['api']}")
    for r in payload["rows"]:
        label = LABELS.get(r["model"], r["model"])
        what = ("the source" if r["kind"] == "native" else
                f"{r.get('target')}, {r.get('strategy')} R = {r.get('rotary_dim')}")
        if r.get("refused"):
            runs = refusals.pop((r["model"], r["kind"], r["refused"]), None)
            if runs:
                out.append(f"| {label} | {what} | {', '.join(runs)} | | | refused: {r['refused'][:240]} | | | |")
            continue
        out.append(f"| {label} | {what} (`{r['architecture']}`) | {r['dtype']} | {r['api']} | "
                   f"{r.get('served_head_dim') or r.get('head_size') or ''} | {r['ppl_exact']:.3f} → {r['ppl']:.3f} "
                   f"({100 * r['ppl_rel']:+.2f}%) | {r['max_abs_dlogp']:.3g} | {r['greedy']} | "
                   f"{'yes' if r['passes'] else 'no'} |")
    return "\n".join(out)


def save(out: Path, rows: list[dict], columns: list[str], models: tuple[str, ...], facts: dict) -> None:
    """ROWS printed as text (COLUMNS), then written to OUT (benchmarks/results/NAME.json) merged with the rows stored
    there (``merge``), in the one schema (``_common.save``: the machine, the command) with the study's FACTS (its
    engine build, its settings) and the load after."""
    from benchmarks import _common

    print(_common.table(rows, columns))
    _common.save(out.stem, {**facts, "load_after": os.getloadavg()[0], "rows": merge(out, rows, models)})
    print(f"wrote {out}")


def merge(out: Path, rows: list[dict], models: tuple[str, ...]) -> list[dict]:
    """ROWS and those stored in OUT not run this time (keyed by model, kind, dtype and API), in MODELS' order."""
    key = lambda r: (r["model"], r["kind"], r["dtype"], r["api"])  # noqa: E731
    ran = {key(r) for r in rows}
    stored = json.loads(out.read_text())["rows"] if out.exists() else []
    order = {m: i for i, m in enumerate(models)}
    merged = [r for r in stored if key(r) not in ran] + rows
    return sorted(merged, key=lambda r: (order.get(r["model"], 9), r["kind"] != "native", DTYPES.index(r["dtype"]),
                                         r["api"]))


def arguments(doc: str, models: tuple[str, ...], apis: tuple[str, ...], argv: list[str] | None):
    """The studies' flags parsed (``--models``, ``--dtypes``, ``--apis``, ``--kinds``, ``--context``, ``--env-dir``,
    ``--work-dir``, ``--fresh``), each list checked against what it may hold; the lists split."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--models", default=",".join(models))
    p.add_argument("--dtypes", default=",".join(DTYPES))
    p.add_argument("--apis", default=",".join(apis))
    p.add_argument("--kinds", default="native,converted")
    p.add_argument("--context", type=int, default=2048)
    p.add_argument("--env-dir", type=Path, default=None)
    p.add_argument("--work-dir", type=Path, default=None)
    p.add_argument("--fresh", action="store_true", help="convert again (default: reuse the work directory's)")
    args = p.parse_args(argv)
    for flag, known in (("models", models), ("dtypes", DTYPES), ("apis", apis), ("kinds", ("native", "converted"))):
        setattr(args, flag, getattr(args, flag).split(","))
        bad = [g for g in getattr(args, flag) if g not in known]
        if bad:
            p.error(f"unknown {flag[:-1]} {bad[0]!r}; known: {', '.join(known)}")
    return args
