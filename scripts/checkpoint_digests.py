"""Digests of converted checkpoints, to prove a refactor leaves every written byte unchanged.

Converts the pico models of every family (``tests/pico.py``, built here with fixed seeds; the remote-code
families onto their default target, llama) and the three
real-text demo models in float32, bfloat16 and float16, plus the other strategies and targets, through the
CLI exactly as a user runs it, and records the sha256 of every file each conversion writes. In
``ropebridge.json`` and the model card the paths that name this run's temporary directory are blanked first,
and the record is read in the current schema (``_plan_record``: ropebridge 0.1 named some of its plan's fields
otherwise; 0.2 kept the record's geometry under ``layout``), so every number in it is compared.

    python -m scripts.checkpoint_digests --write benchmarks/results/checkpoint_digests.json   # before
    python -m scripts.checkpoint_digests --compare benchmarks/results/checkpoint_digests.json # after

``--compare`` prints every case that differs and exits 1 if any does (a case the file does not record is
listed as new).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import sys
import tempfile
from pathlib import Path

from benchmarks._common import payload  # (the results' one schema)



PICO_WINDOW = 512
DEMO_WINDOW = 8192
DTYPES = ("float32", "bfloat16", "float16")
# (name, source, extra CLI flags): every dtype of every model, then the other strategies and targets
VARIANTS = (
    ("fixed-base", "pico:bloom-4heads", ["--dtype", "float32", "--rope-base", "10000", "--rotary-dim", "16",
                                          "--accept-error"]),
    ("fixed-base-2pairs", "pico:mpt", ["--dtype", "float32", "--rope-base", "10000", "--rotary-dim", "16",
                                       "--pairs", "2", "--accept-error"]),
    ("max-phase", "pico:bloom-12heads", ["--dtype", "float32", "--max-phase", "0.1", "--accept-error"]),
    ("theta-fp16", "pico:bloom-4heads", ["--dtype", "float16", "--strategy", "single"]),
    ("starcoder2", "pico:bloom-4heads", ["--dtype", "float32", "--target", "starcoder2"]),
    ("nemotron", "pico:mpt", ["--dtype", "float32", "--target", "nemotron"]),
    ("nemotron-bf16", "pico:falcon-rw", ["--dtype", "bfloat16", "--target", "nemotron", "--strategy", "single"]),
    ("nemotron-ladder-bf16", "pico:falcon-rw", ["--dtype", "bfloat16", "--target", "nemotron"]),
    ("ladder-r64", "demo:demo", ["--dtype", "bfloat16", "--rotary-dim", "64", "--floor", "40"]),
)
LATER_VARIANTS = (  # after the remote-code families (cases are indexed: new ones go last)
    ("persimmon", "pico:bloom-4heads", ["--dtype", "float32", "--target", "persimmon"]),
    ("persimmon-ladder-bf16", "pico:mpt", ["--dtype", "bfloat16", "--target", "persimmon"]),
    ("persimmon-ladder-f16", "pico:falcon-rw", ["--dtype", "float16", "--target", "persimmon"]),
)

NEWER_REMOTE = ("jais", "btlm")  # remote-code families added after LATER_VARIANTS, onto their default target (stablelm)


def _plan_record(plan: dict) -> dict:
    """The plan record in the current schema: 0.1's ``rope_dim``, the ``mode`` of 0.1 and early 0.2 (now
    ``strategy`` and ``theta_rule``), 0.1's ``approximation_error``, per-head ``phase`` (now derived) and per-head
    floor/exact_distance/shift (now the head's ``ladder`` part) read as today's fields."""
    plan = {("rotary_dim" if k == "rope_dim" else k): v for k, v in plan.items()}
    if "mode" in plan:  # written here, not imported, so that this script reads records of any version the same way
        mode = plan.pop("mode")
        plan["strategy"] = mode if mode in ("ladder", "fixed-base") else "single"
        plan["theta_rule"] = None if mode in ("ladder", "fixed-base") else mode
    heads = []
    for row in plan["heads"]:
        row = {("approximation_error" if k == "sine_error" else k): v for k, v in row.items() if k != "phase"}
        if "ladder" not in row:
            part = {k: row.pop(k) for k in ("floor", "exact_distance", "shift")}
            row["ladder"] = part if part["floor"] is not None else None
        heads.append(row)
    return {**plan, "heads": heads}


def _digest(directory: Path) -> dict[str, str]:
    out = {}
    source = json.loads((directory / "ropebridge.json").read_text())["source"]
    for path in sorted(directory.iterdir()):
        data = path.read_bytes()
        if path.name == "README.md":  # the model card names the source's path, this run's temporary directory
            data = data.replace(source.encode(), b"<src>")
        if path.name == "ropebridge.json":
            record = json.loads(data)
            if "layout" in record:  # 0.2 kept the geometry under "layout" (read here, as _plan_record is)
                record["geometry"] = record.pop("layout")
            record["plan"] = _plan_record(record["plan"])
            if "request" in record:  # early 0.2 recorded the strategy as ``emulation``
                record["request"] = {("strategy" if k == "emulation" else k): v for k, v in record["request"].items()}
            record["source"] = record["plan"]["source"] = "<src>"
            data = json.dumps(record, sort_keys=True).encode()
        out[path.name] = hashlib.sha256(data).hexdigest()
    return out


def _source(spec: str, work: Path) -> Path:
    kind, name = spec.split(":")
    if kind == "demo":
        from ropebridge.demo import data_dir

        return data_dir(name)
    from tests import pico

    directory = work / "src" / name
    if not directory.exists():
        (pico.build_remote if name in pico.REMOTE else pico.build)(directory, name)
    return directory


def cases() -> list[tuple[str, str, list[str]]]:
    from tests import pico

    out = []
    for family in pico.FAMILIES:
        for dtype in DTYPES:
            out.append((f"pico:{family}/{dtype}", f"pico:{family}", ["--dtype", dtype, "--window", str(PICO_WINDOW)]))
    for model in ("demo", "demo-mpt", "demo-falcon"):
        for dtype in DTYPES:
            out.append((f"demo:{model}/{dtype}", f"demo:{model}", ["--dtype", dtype, "--window", str(DEMO_WINDOW)]))
    for name, spec, flags in VARIANTS:
        window = PICO_WINDOW if spec.startswith("pico") else DEMO_WINDOW
        out.append((f"{spec}/{name}", spec, [*flags, "--window", str(window)]))
    remote = [f for f in pico.REMOTE if f not in NEWER_REMOTE]
    for family in remote:  # after the others: a case's output directory is named by its index
        for dtype in DTYPES:
            out.append((f"pico:{family}/{dtype}", f"pico:{family}", ["--dtype", dtype, "--window", str(PICO_WINDOW)]))
    for name, spec, flags in LATER_VARIANTS:
        out.append((f"{spec}/{name}", spec, [*flags, "--window", str(PICO_WINDOW)]))
    for family in NEWER_REMOTE:
        for dtype in DTYPES:
            out.append((f"pico:{family}/{dtype}", f"pico:{family}", ["--dtype", dtype, "--window", str(PICO_WINDOW)]))
    return out


def run() -> dict[str, dict[str, str] | str]:
    from ropebridge.cli import main

    results: dict[str, dict[str, str] | str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for i, (name, spec, flags) in enumerate(cases()):
            dst = work / f"out{i}"
            with contextlib.redirect_stdout(io.StringIO()):
                code = main(["convert", str(_source(spec, work)), str(dst), *flags, "--json"])
            results[name] = _digest(dst) if code == 0 else f"exit {code}"
            print(f"{name:40s} {'ok' if code == 0 else results[name]}", file=sys.stderr)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", metavar="FILE.json")
    group.add_argument("--compare", metavar="FILE.json")
    args = parser.parse_args()
    results = run()
    if args.write:
        rows = [{"case": k, "digest": results[k]} for k in sorted(results)]
        Path(args.write).write_text(json.dumps(payload(rows), indent=1, sort_keys=True) + "\n")
        return 0
    before = {r["case"]: r["digest"] for r in json.loads(Path(args.compare).read_text())["rows"]}
    new = sorted(results.keys() - before.keys())
    for k in new:
        print(f"NEW {k}: no recorded digest to compare with")
    differ = sorted(k for k in before.keys() | results.keys() if k not in new and before.get(k) != results.get(k))
    for k in differ:
        old, new = before.get(k), results.get(k)
        files = sorted(f for f in set(old) | set(new) if old.get(f) != new.get(f)) if isinstance(old, dict) and \
            isinstance(new, dict) else [f"{old} -> {new}"]
        print(f"DIFFERS {k}: {', '.join(files)}")
    print(f"{len(before) - len(differ)} of {len(before)} recorded conversions byte-identical")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
