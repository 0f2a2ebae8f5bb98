"""README sample outputs match what the commands print now (scripts/readme_samples.py regenerates them)."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import readme_samples as samples  # noqa: E402

README = (ROOT / "README.md").read_text()
BLOCKS = samples.blocks(README)
FAST = [b for b in BLOCKS if not b[2].startswith("ropebridge demo")]


def test_every_sample_block_is_found():
    commands = [c for _, _, c in BLOCKS]
    assert any(c.startswith("ropebridge demo") for c in commands) and len(FAST) >= 3, commands


@pytest.mark.parametrize("first, end, command", FAST, ids=[c for _, _, c in FAST])
def test_fast_samples_match(first, end, command):
    expected = README.splitlines()[first:end]
    assert samples.mismatches(expected, samples.run(command)) == []


def test_the_checker_can_fail():
    expected = ["worst head 7: predicted max |error| 1.294e+00 logits", " ...", "last 1.0"]
    assert samples.mismatches(expected, ["worst head 7: predicted max |error| 1.294e+00 logits", "x", "last 1.0"]) == []
    assert samples.mismatches(expected, ["worst head 7: predicted max |error| 1.5e+00 logits", "last 1.0"])
    assert samples.mismatches(["took 12.0ms, 3 pairs"], ["took 99.1ms, 3 pairs"]) == []  # times: form only
    assert samples.mismatches(["3 pairs"], ["4 pairs"])


def test_demo_sample_matches_the_demo(demo_report_lines):
    first, end, _ = next(b for b in BLOCKS if b[2].startswith("ropebridge demo"))
    assert samples.mismatches(README.splitlines()[first:end], demo_report_lines) == []
