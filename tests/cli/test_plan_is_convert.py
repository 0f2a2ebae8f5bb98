"""plan is convert's preview for every flag set: flag sets generated over the option space (dtype x target x
engine x kernel x strategy x theta/phase/base x tolerance, on four families), each run through ``plan --json`` and
``convert``: the same exit status and the same one-line refusal, or the same plan and resolved request, or, where
convert refuses a plan above its tolerance, a plan that says ``meets_tolerance: false`` and, with
``--accept-error``, is the one convert writes."""

import json
import random

import pytest
from pico import build, build_remote

from ropebridge.cli import main

FAMILIES = ("bloom-4heads", "mpt", "baichuan", "jais")  # gpt-neox, gpt-neox (max_seq_len), llama, stablelm
AXES = {
    "--dtype": (None, "float32", "bfloat16", "float16"),
    "--target": (None, "gpt-neox", "starcoder2", "nemotron", "llama", "persimmon", "stablelm"),
    "--engine": (None, "vllm", "sglang", "trtllm", "llama.cpp"),
    "--kernel": (None, "fa2", "fa3", "vllm-cpu", "trtllm"),
    "--strategy": (None, "ladder", "single", "fixed-base"),
    "rope": ((), ("--theta", "0.001"), ("--max-phase", "0.1"), ("--rope-base", "10000", "--rotary-dim", "16"),
             ("--rope-base", "10000", "--max-phase", "0.1"), ("--rotary-dim", "64"), ("--floor", "40")),
    "--tolerance": (None, "1e-9", "10"),
}
CASES = 120
LEFT_OUT = 0.6  # the chance that a flag set leaves an axis at its default (else most sets are refused)


def flag_sets(n: int, seed: int = 0) -> list[tuple[str, list[str]]]:
    """``n`` flag sets drawn from ``AXES``, each with a family: each axis left at its default with probability
    ``LEFT_OUT``, else one of its other values."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        flags = ["--window", "128", "--jobs", "1"]
        for axis, values in AXES.items():
            value = values[0] if rng.random() < LEFT_OUT else rng.choice(values[1:])
            if axis == "rope":
                flags += list(value)
            elif value is not None:
                flags += [axis, value]
        out.append((FAMILIES[i % len(FAMILIES)], flags))
    return out


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("space")
    return {f: (build_remote if f in ("baichuan", "jais") else build)(root / f, f) for f in FAMILIES}


def _run(argv, capsys) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err.strip()


def _refusal(err: str) -> str:
    """The one line, without the subcommand's prefix (``ropebridge plan: error: ``)."""
    lines = err.splitlines()
    assert len(lines) == 1, lines
    return lines[0].split(": error: ", 1)[1]


@pytest.mark.parametrize("family, flags", flag_sets(CASES), ids=lambda v: v if isinstance(v, str) else " ".join(v))
def test_plan_previews_exactly_what_convert_does(sources, tmp_path, capsys, family, flags):
    src, dst = sources[family], tmp_path / "dst"
    planned_code, out, err = _run(["plan", "--model", str(src), *flags, "--json"], capsys)
    code, converted, convert_err = _run(["convert", str(src), str(dst), *flags, "--json"], capsys)
    if planned_code != 0:
        assert code == planned_code == 2 and _refusal(err) == _refusal(convert_err), (err, convert_err)
        assert not dst.exists()
        return
    planned = json.loads(out)
    if code != 0:  # refused on the tolerance only, as the plan says
        assert code == 2 and planned["meets_tolerance"] is False and "--accept-error" in convert_err, convert_err
        code, converted, _ = _run(["convert", str(src), str(dst), *flags, "--accept-error", "--json"], capsys)
    assert code == 0
    record = json.loads((dst / "ropebridge.json").read_text())
    assert planned.pop("resolved") == record["resolved"]
    assert planned.pop("verify_limit") == json.loads(converted)["verify_limit"], "plan states the limit convert does"
    planned.pop("max_window_at_phase", None)  # plan's one annotation beside the plan (fixed base)
    recorded = record["plan"]
    assert {**planned, "source": None} == {**recorded, "source": None}
    assert record["target"] == record["resolved"]["target"] and record["dtype"] == record["resolved"]["dtype"]


def test_the_space_reaches_every_outcome(sources, capsys):
    """The generated flag sets plan, are refused and miss their tolerance, each more than once: the comparison
    above is not vacuous."""
    outcomes = {"planned": 0, "refused": 0, "missed": 0}
    for family, flags in flag_sets(CASES):
        code, out, _ = _run(["plan", "--model", str(sources[family]), *flags, "--json"], capsys)
        outcomes["refused" if code else "missed" if not json.loads(out)["meets_tolerance"] else "planned"] += 1
    assert min(outcomes.values()) >= 10, outcomes
    for axis, values in AXES.items():  # every value of every axis is drawn
        drawn = {tuple(f[f.index(axis) + 1:f.index(axis) + 2]) if axis in f else None for _, f in flag_sets(CASES)}
        assert axis == "rope" or drawn >= {None} | {(v,) for v in values[1:]}, (axis, drawn)
