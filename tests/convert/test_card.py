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
