"""Every sample in README.md and docs/ matches what its command prints now (scripts/readme_samples.py
regenerates them): the demo's from the session's demo run, the samples that use its output in its directory."""

from pathlib import Path

import pytest

from scripts import readme_samples as samples

ROOT = Path(__file__).resolve().parents[2]


BLOCKS = [(path, first, end, command) for path in samples.FILES
          for first, end, command in samples.blocks(path.read_text())]
DEMO = [b for b in BLOCKS if b[3].startswith("ropebridge demo")]
AFTER_DEMO = [b for b in BLOCKS if "demo-out" in b[3] and b not in DEMO]
FAST = [b for b in BLOCKS if b not in DEMO and b not in AFTER_DEMO]


def _expected(path: Path, first: int, end: int) -> list[str]:
    return path.read_text().splitlines()[first:end]


def test_every_subcommand_has_a_sample_in_the_readme():
    readme = {c.split()[1] for p, _, _, c in BLOCKS if p.name == "README.md"}
    assert readme >= {"demo", "rope", "plan", "convert", "verify"}, readme


@pytest.mark.parametrize("path, first, end, command", FAST, ids=[f"{b[0].name}: {b[3]}" for b in FAST])
def test_fast_samples_match(path, first, end, command):
    assert samples.mismatches(_expected(path, first, end), samples.run(command)) == []


def test_the_checker_can_fail():
    expected = ["worst head 7: predicted max |error| 1.294e+00 logits", " ...", "last 1.0"]
    assert samples.mismatches(expected, ["worst head 7: predicted max |error| 1.294e+00 logits", "x", "last 1.0"]) == []
    assert samples.mismatches(expected, ["worst head 7: predicted max |error| 1.5e+00 logits", "last 1.0"])
    assert samples.mismatches(["took 12.0ms, 3 pairs"], ["took 99.1ms, 3 pairs"]) == []  # times: form only
    assert samples.mismatches(["3 pairs"], ["4 pairs"])


def test_a_half_precision_measurement_is_compared_at_its_dtype():
    head = "bloom (eager) vs converted, {}, 1024 tokens"
    sample = [head.format("bfloat16"), "  vs exact float64 ALiBi  native 4.841e+00, converted 5.224e-01"]
    other_machine = [head.format("bfloat16"), "  vs exact float64 ALiBi  native 4.841e+00, converted 5.050e-01"]
    assert samples.tolerance(sample) == 2**-4 and samples.tolerance(["wrote x (gpt-neox, bfloat16)"]) == samples.REL
    assert samples.mismatches(sample, other_machine) == []  # 3.4%: another CPU's bfloat16 kernels
    assert samples.mismatches(sample, [sample[0], "  vs exact float64 ALiBi  native 4.841e+00, converted 5.6e-01"])
    assert samples.mismatches([head.format("bfloat16"), "threshold 2"], [head.format("bfloat16"), "threshold 3"])
    assert samples.mismatches([head.format("bfloat16"), "1024"], [head.format("bfloat16"), "1025"])
    f16 = [head.format("float16"), "max 1.000e-01"]
    assert samples.mismatches(f16, [f16[0], "max 1.020e-01"]) == []
    assert samples.mismatches(f16, [f16[0], "max 1.050e-01"])  # beyond 2^-5.5
    f32 = [head.format("float32"), "max 1.000e-01"]
    assert samples.mismatches(f32, [f32[0], "max 1.020e-01"])  # float32 keeps REL


def test_demo_sample_matches_the_demo(demo_report_lines):
    (path, first, end, _), = DEMO
    assert samples.mismatches(_expected(path, first, end), demo_report_lines) == []


def test_the_samples_after_the_demo_run_on_its_output_in_order(demo_run):
    work = demo_run[1].parent  # where `ropebridge demo --out demo-out` ran
    assert AFTER_DEMO, "README converts and verifies the demo's model"
    for path, first, end, command in AFTER_DEMO:
        assert samples.mismatches(_expected(path, first, end), samples.run(command, work)) == [], command
