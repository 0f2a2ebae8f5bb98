"""The verify commands the scale benchmarks run (benchmarks/convert_560m.py, benchmarks/default_shapes.py), run
here on picos: every flag they pass exists, the report they read has the keys they read, and an untouched
conversion passes. A benchmark that runs once an hour must not be the first to find that a flag was removed."""

import json
import subprocess
from pathlib import Path

from pico import build, build_remote

from ropebridge.convert import convert
from ropebridge.emulation import PlanRequest

from benchmarks import convert_560m, default_shapes

ROOT = Path(__file__).resolve().parents[2]


def test_convert_560m_s_verify_runs_and_reads_its_byte_check(tmp_path):
    src = build(tmp_path / "src", "bloom-4heads")
    dst = convert(src, tmp_path / "dst", PlanRequest(window=256, dtype="float32")).destination
    wall, rss, checked = convert_560m.verify_bytes(src, dst)
    assert wall > 0 and rss > 0 and checked["mode"] == "exact" and checked["tensors"] > 0 and "seconds" in checked


def test_default_shapes_verify_command_gives_the_numbers_it_records(tmp_path):
    for family, builder in (("falcon-rw", build), ("refact", build_remote)):  # transformers' and remote code
        src = builder(tmp_path / family, family)
        dst = convert(src, tmp_path / f"{family}-rope", PlanRequest()).destination
        out = subprocess.run(default_shapes.verify_command(src, dst, 64), capture_output=True, text=True)
        assert out.returncode == 0, out.stderr[-500:]
        report = json.loads(out.stdout)
        assert report["passed"] and report["reference_converted_max_err"] <= report["thresholds"]["limit"]
        assert report["source_ran"] == (family == "falcon-rw")
