"""``verify --report DIR``: report.md holds verify's rows and failures, report.json the whole report, and both
figures are drawn."""

import json

from pico import build

from ropebridge.cli import main
from ropebridge.convert import convert
from ropebridge.verify import verify
from ropebridge.verify.verdict import rows
from ropebridge.emulation import PlanRequest


def test_the_report_holds_the_rows_the_json_and_both_figures(tmp_path):
    src = build(tmp_path / "src", "bloom-4heads")
    dst = convert(src, tmp_path / "dst", PlanRequest(window=256, dtype="bfloat16")).destination
    report = verify(src, dst, context=64, greedy_tokens=0, report_dir=tmp_path / "report")
    out = tmp_path / "report"
    assert {p.name for p in out.iterdir()} == {"report.md", "report.json", "error_by_position.png",
                                               "attention_by_layer.png"}
    text = (out / "report.md").read_text()
    assert text.startswith("# ropebridge verify: PASSED")
    assert all(f"| {what} |" in text for what, _, _ in rows(report) if "|" not in what) and "| baseline |" in text
    assert json.loads((out / "report.json").read_text())["baseline_max_err"] == report.baseline_max_err


def test_verify_records_its_result_in_the_card_once(bloom, tmp_path, capsys):
    dst = tmp_path / "rope"
    assert main(["convert", str(bloom), str(dst), "--window", "256"]) == 0
    for _ in range(2):  # a second run replaces the section
        assert main(["verify", str(bloom), str(dst), "--context", "64", "--greedy-tokens", "4", "--card"]) == 0
    card = (dst / "README.md").read_text()
    assert card.count("## Verification") == 1 and "| verdict | PASSED |" in card
    assert "| tokens, dtype | 64, float32 | |" in card and "| converted vs exact | " in card and "| judged: <= " in card
    assert card.index("## How to serve it") < card.index("## Verification")
    (dst / "README.md").unlink()
    capsys.readouterr()
    assert main(["verify", str(bloom), str(dst), "--context", "64", "--card"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no model card" in err[0]


def test_an_interrupted_card_write_leaves_the_old_card_and_no_temporary(bloom, tmp_path, monkeypatch):
    import pytest

    import ropebridge.verify.report as card_module
    from ropebridge.verify import verify

    dst = tmp_path / "rope"
    assert main(["convert", str(bloom), str(dst), "--window", "256"]) == 0
    before = (dst / "README.md").read_text()
    report = verify(bloom, dst, context=64, greedy_tokens=4)

    def replace_interrupted(a, b):
        raise KeyboardInterrupt

    monkeypatch.setattr(card_module.os, "replace", replace_interrupted)
    with pytest.raises(KeyboardInterrupt):
        card_module.record_verification(dst / "README.md", report)
    assert (dst / "README.md").read_text() == before and not list(dst.glob(".README.md*"))


def test_the_terminal_the_report_and_the_card_show_the_same_rows(bloom, tmp_path, capsys):
    # one report, three renderings: every row of verdict.rows is in each, in the same order
    from ropebridge.cli.verify_cmd import format_report
    from ropebridge.verify import verify
    from ropebridge.verify.verdict import rows

    dst = tmp_path / "rope"
    assert main(["convert", str(bloom), str(dst), "--window", "256"]) == 0
    report = verify(bloom, dst, context=64, greedy_tokens=4, card=True, report_dir=tmp_path / "report")
    terminal = "\n".join(format_report(report))
    markdown = (tmp_path / "report" / "report.md").read_text()
    card = (dst / "README.md").read_text()
    for what, value, how in rows(report):
        cell = what.replace("||", "\\|\\|")
        assert f"  {what:<23} {value}" in terminal
        assert f"| {cell} | {value} | {how} |" in markdown and f"| {cell} | {value} | {how} |" in card
