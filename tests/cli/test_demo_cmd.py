"""``ropebridge demo``'s text: every number of the report on its line (the README's sample is checked against it
in tests/repo/test_readme_samples.py)."""

from ropebridge.cli.demo_cmd import format_report


def test_the_report_says_each_measurement_once(demo_run):
    report, out = demo_run
    lines = format_report(report)
    text = "\n".join(lines)
    assert f"perplexity @ {report.train_context} (trained)" in text and "(extrapolated)" in text
    assert f"max |logit diff| {report.max_abs_logit_diff:.2e}" in text
    assert lines[-2] == "greedy continuations identical" and str(out.name) in lines[-1]
