"""The verdict: a measured report judged against its limit, the numbers set by hand so each rule is seen to
pass and to fail."""

import math

import pytest

from ropebridge.verify.verdict import (
    BASELINE_FACTOR,
    LOGIT_FACTOR,
    READING_TOKENS,
    VerifyReport,
    judge,
    limit_of,
    rows,
)


def _report(dtype="float32", **measured) -> VerifyReport:
    numbers = dict(max_abs_logit_diff=1e-5, mean_kl=0.0, top1_agreement=1.0, padded_max_abs_logit_diff=1e-5,
                   greedy_identical=True, reference_source_max_err=1e-5, reference_converted_max_err=1e-5,
                   source_reading_max_err=1e-5)
    report = VerifyReport("src", "dst", "bloom", dtype, 512, "eager", **{**numbers, **measured})
    report.thresholds = {"max_abs_logit_diff": 1e-3, "greedy_identical": dtype == "float32"}
    report.thresholds["limit"] = limit_of(report)
    return report


def test_the_limit_is_the_tolerance_or_the_factor_times_the_prediction():
    assert limit_of(_report()) == 1e-3
    report = _report()
    report.predicted_error = 1e-3
    assert limit_of(report) == LOGIT_FACTOR * 1e-3


def test_an_untouched_report_passes_and_each_number_above_the_limit_fails():
    assert judge(_report()) == []
    assert "converted vs exact ALiBi" in judge(_report(reference_converted_max_err=2e-3))[0]
    assert "left-padded batch" in judge(_report(padded_max_abs_logit_diff=1.0))[0]
    assert "greedy generations differ" in judge(_report(greedy_identical=False))[0]


def test_the_source_error_is_never_an_allowance():
    # the source 10 logits from exact does not excuse a converted model 2e-3 from it
    failures = judge(_report(reference_source_max_err=10.0, reference_converted_max_err=2e-3))
    assert len(failures) == 1 and "converted vs exact ALiBi" in failures[0]


def test_the_reading_of_the_source_is_judged_in_float32_only():
    failures = judge(_report(source_reading_max_err=2e-3))
    assert len(failures) == 1 and f"first {READING_TOKENS} tokens" in failures[0]
    assert "SRC is read as two models" in failures[0]
    assert judge(_report("bfloat16", source_reading_max_err=2e-3)) == []  # half precision: reported


@pytest.mark.parametrize("name", ["source_reading_max_err", "reference_converted_max_err", "mean_kl"])
def test_a_non_finite_number_fails(name):
    failures = judge(_report(**{name: math.nan}))
    assert any(f"{name} is nan" in f for f in failures), failures


def test_the_rows_name_the_source_only_where_it_ran():
    ran = [what for what, _, _ in rows(_report())]
    assert "source vs exact" in ran and "converted vs source" in ran
    remote = _report(reference_source_max_err=None, max_abs_logit_diff=None, source_reading_max_err=None)
    remote.source_ran = False
    remote.greedy_source = remote.greedy_converted = [1, 2]
    lines = rows(remote)
    assert not any("vs source" in what or "source vs" in what or "against source" in how or "native" in what + how
                   for what, _, how in lines), lines
    assert any(how.endswith("against exact") for _, _, how in lines)


def test_zero_greedy_tokens_is_no_failure():
    assert judge(_report(greedy_identical=None)) == []


def test_in_half_precision_the_baseline_times_its_factor_is_allowed_and_a_non_finite_baseline_is_not():
    report = _report("bfloat16", baseline_max_err=0.5)
    assert limit_of(report) == BASELINE_FACTOR * 0.5 and "3 x baseline 0.5" in report.limit_why
    assert judge(_report("bfloat16", baseline_max_err=0.5, reference_converted_max_err=1.4)) == []
    assert judge(_report("bfloat16", baseline_max_err=0.5, reference_converted_max_err=1.6))
    assert limit_of(_report("bfloat16", baseline_max_err=math.inf)) == 1e-3
    assert limit_of(_report("bfloat16", baseline_max_err=1e-5)) == 1e-3  # a small baseline changes nothing
    assert any(what == "baseline" for what, _, _ in rows(_report("bfloat16", baseline_max_err=0.5)))


def test_a_failing_ladder_names_the_head_whose_content_advantage_its_floor_does_not_cover():
    covered = _report("bfloat16", reference_converted_max_err=2.0, content_advantage=[10.0, 40.0],
                      advantage_allowed=[45.0, 45.0])
    assert "content advantage" not in judge(covered)[0]
    assert ("content advantage", "max 40 logits (head 1)", "reported: every head within its ladder floor") in rows(
        covered)
    beyond = _report("bfloat16", reference_converted_max_err=2.0, content_advantage=[10.0, 135.0],
                     advantage_allowed=[45.0, 45.0])
    assert "head 1's content advantage on these tokens is 135 logits, beyond the 45" in judge(beyond)[0]
    assert "--calibration-text" in judge(beyond)[0]
    assert judge(_report("bfloat16", content_advantage=[10.0, 135.0], advantage_allowed=[45.0, 45.0])) == []
    assert "content advantage" not in judge(_report(reference_converted_max_err=2.0, content_advantage=[135.0]))[0]
