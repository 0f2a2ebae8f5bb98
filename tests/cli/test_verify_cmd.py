"""``ropebridge verify``'s text: the byte check, each number beside its limit, and the verdict last."""

from ropebridge.cli.verify_cmd import format_report
from ropebridge.convert.verdict import VerifyReport


def _report(**kw):
    return VerifyReport("src", "dst", "bloom", "float32", 64, "eager", **kw)


def test_a_byte_difference_skips_the_models_and_says_so():
    r = _report(byte_check={"mode": "exact", "failures": ["x"]}, functional_skipped="DST is not what convert writes",
                failures=["tensor a differs"])
    lines = format_report(r)
    assert lines[1].endswith("differ from what convert writes from SRC")
    assert "  functional check        skipped: DST is not what convert writes" in lines
    assert lines[-1] == "FAILED: tensor a differs"


def test_a_measured_report_shows_the_reading_in_float32_only():
    measured = dict(byte_check={"mode": "exact", "tensors": 3, "bytes": 2**20}, max_abs_logit_diff=1e-5, mean_kl=0.0,
                    top1_agreement=1.0, padded_max_abs_logit_diff=1e-5, reference_native_max_err=2e-5,
                    reference_converted_max_err=1e-5, native_reading_max_err=3e-6,
                    thresholds={"max_abs_logit_diff": 1e-3, "limit": 1e-3})
    lines = format_report(_report(**measured))
    assert any(line.startswith("  reading of SRC") and "3.000e-06" in line for line in lines)
    assert lines[-1] == "PASSED" and "identical to what convert writes from SRC: 3 tensors, 1.0 MiB" in lines[1]
    half = VerifyReport("src", "dst", "bloom", "bfloat16", 64, "eager", **measured)
    assert not any(line.startswith("  reading of SRC") for line in format_report(half))
