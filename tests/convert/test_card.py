"""The model card convert writes: YAML header, the command that made it, the plan, how to verify and serve."""

from ropebridge.cli import main
from ropebridge.convert.card import command_flags
from ropebridge.emulation import PlanRequest


def test_convert_writes_a_model_card(bloom, tmp_path, capsys):
    dst = tmp_path / "bloom-rope"
    assert main(["convert", str(bloom), str(dst), "--dtype", "bfloat16", "--window", "512", "--target", "nemotron",
                 "--kernel", "fa3", "--jobs", "2"]) == 0
    assert "nemotron runs in" in capsys.readouterr().out.strip().splitlines()[-1]
    card = (dst / "README.md").read_text()
    head, _, body = card.partition("---\n")[2].partition("---\n")
    assert "library_name: transformers" in head and "- nemotron" in head and "base_model" not in head  # a local source
    command = f"ropebridge convert {bloom} bloom-rope --window 512 --dtype bfloat16 --target nemotron --kernel fa3"
    assert command in body  # the options that made it, --jobs left out
    assert "| ladder | bfloat16 | 512 | 32 | 64 |" in body and "vllm serve bloom-rope" in body
    assert f"ropebridge verify {bloom} bloom-rope" in body


def test_command_flags_name_only_what_differs_from_the_defaults():
    assert command_flags(PlanRequest()) == []
    assert command_flags(PlanRequest(window=4096, floor=(30.0, 30.0), dtype="float16")) == [
        "--window", "4096", "--dtype", "float16", "--floor", "30"]
    assert command_flags(PlanRequest(dtype="bfloat16", calibration_text="some text")) == [
        "--dtype", "bfloat16", "--calibration-text FILE"]


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

    import ropebridge.convert.card as card_module
    from ropebridge.convert import verify

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
    from ropebridge.convert import verify
    from ropebridge.convert.verdict import rows

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
