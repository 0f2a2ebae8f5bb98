"""``ropebridge verify``'s text: the byte check, each number beside its limit, and the verdict last."""

from ropebridge.cli.verify_cmd import format_report
from ropebridge.verify.verdict import VerifyReport


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
                    top1_agreement=1.0, padded_max_abs_logit_diff=1e-5, reference_source_max_err=2e-5,
                    reference_converted_max_err=1e-5, source_reading_max_err=3e-6,
                    thresholds={"max_abs_logit_diff": 1e-3, "limit": 1e-3})
    lines = format_report(_report(**measured))
    assert any(line.startswith("  reading of SRC") and "3.000e-06" in line for line in lines)
    assert lines[-1] == "PASSED" and "identical to what convert writes from SRC: 3 tensors, 1.0 MiB" in lines[1]
    half = VerifyReport("src", "dst", "bloom", "bfloat16", 64, "eager", **measured)
    assert not any(line.startswith("  reading of SRC") for line in format_report(half))


def test_costly_or_meaningless_budgets_are_one_line_naming_the_option_and_what_it_takes(tmp_path, capsys):
    """Greedy tokens past DST's window (their cost grows with their square; nothing is planned there) and a memory
    budget below a byte: refused in one line naming the option and what the checkpoint takes, before any work."""
    from ropebridge.cli import main
    from ropebridge.demo import data_dir

    dst = tmp_path / "rope"
    assert main(["convert", str(data_dir()), str(dst), "--dtype", "float32", "--window", "256", "--json"]) == 0
    capsys.readouterr()
    assert main(["verify", str(data_dir()), str(dst), "--context", "64", "--greedy-tokens", "100000000"]) == 2
    assert capsys.readouterr().err.strip() == (f"ropebridge verify: error: --greedy-tokens 100000000 would generate "
                                               f"up to position 100000016, beyond the window 256 that {dst} was "
                                               "converted for; give at most 240")
    assert main(["verify", str(data_dir()), str(dst), "--context", "64", "--max-memory", "1e-12"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ropebridge verify: error: verify needs --max-memory ") and \
        "GiB or more for this checkpoint at 64 tokens" in err[0], err
