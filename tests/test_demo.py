"""The embedded model and ``ropebridge demo``: trained, converted, identical, reported."""

import json
import shutil

import pytest

from ropebridge.cli import main
from ropebridge.demo import data_dir


@pytest.fixture(scope="module")
def report(demo_run):
    return demo_run


def test_embedded_model_ships_with_its_record():
    record = json.loads((data_dir() / "training.json").read_text())
    assert record["train_context"] <= 512 and "command" in record and "final_val_loss" in record
    assert (data_dir() / "CORPUS_LICENSE.txt").read_text().startswith("The training text")
    assert sum(f.stat().st_size for f in data_dir().iterdir()) < 8 * 2**20  # a few MB


@pytest.mark.slow
def test_demo_converted_model_agrees(report):
    r, _ = report
    assert r.ppl_relative_diff <= 1e-4
    assert r.greedy_identical and r.continuation_native == r.continuation_converted
    assert r.max_abs_logit_diff < 1e-3


def test_demo_model_is_trained(report):
    r, _ = report
    assert r.ppl_native < r.ppl_random_model / 20  # an untrained model is near the vocabulary size
    assert r.ppl_native < 100


def test_demo_writes_report_and_plots(report):
    _, out = report
    for name in ("report.md", "report.json", "alibi_vs_emulated.png", "error_vs_distance.png",
                 "perplexity_vs_context.png", "converted/config.json"):
        assert (out / name).is_file(), name
    assert "perplexity" in (out / "report.md").read_text()


@pytest.mark.slow
def test_demo_json(capsys, tmp_path):
    assert main(["demo", "--json", "--context", "300", "--out", str(tmp_path / "o")]) == 0
    data = json.loads(capsys.readouterr().out)
    for key in ("ppl_native", "ppl_converted", "max_abs_logit_diff", "greedy_identical", "vocab_size", "train_context"):
        assert key in data


def test_demo_bad_input(capsys, tmp_path):
    (tmp_path / "file").write_text("")
    damaged = tmp_path / "damaged"
    shutil.copytree(data_dir(), damaged)
    data = (damaged / "model.safetensors").read_bytes()
    (damaged / "model.safetensors").write_bytes(data[: len(data) // 3])
    incomplete = tmp_path / "incomplete"
    shutil.copytree(data_dir(), incomplete)
    (incomplete / "heldout.txt").unlink()
    broken = tmp_path / "broken"
    shutil.copytree(data_dir(), broken)
    (broken / "training.json").write_text("{not json")
    cases = [
        (["demo", "--context", "0"], "context"),
        (["demo", "--out", str(tmp_path / "file" / "out")], "not writable"),
        (["demo", "--model", str(damaged)], "cannot load"),
        (["demo", "--model", str(incomplete)], "heldout.txt"),
        (["demo", "--model", str(broken)], "damaged"),
    ]
    for argv, needle in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert needle in err and len(err.strip().splitlines()) == 1, (argv, err)


@pytest.mark.parametrize("name, family", [("demo", "bloom"), ("demo-mpt", "mpt"), ("demo-falcon", "falcon"),
                                          ("demo-baichuan", "baichuan"), ("demo-jais", "jais")])
def test_every_real_text_model_ships_and_is_the_family_it_claims(name, family):

    from ropebridge.checkpoint.config import from_config

    directory = data_dir(name)
    record = json.loads((directory / "training.json").read_text())
    assert from_config(directory).family == family and record.get("family", "bloom") == family
    assert (directory / "tokenizer.json").read_bytes() == (data_dir() / "tokenizer.json").read_bytes()
    assert sum(f.stat().st_size for f in directory.iterdir()) < 8 * 2**20
    # the training script's config for the family is the shipped one's shape
    from scripts import train_demo_model
    import transformers as T

    if family in train_demo_model.REMOTE:  # remote code: the script's own module and its config keys
        config = {**train_demo_model.REMOTE[family][1], "vocab_size": 4096}
    else:
        config = train_demo_model.FAMILIES[family](T, 4096, {}).to_dict()
    assert from_config(config).n_heads == from_config(directory).n_heads == 6


def test_the_demo_refuses_a_family_transformers_cannot_run_in_one_line(capsys):
    # the demo runs the ALiBi model itself in transformers: Baichuan is remote code, so convert and verify it
    assert main(["demo", "--model", str(data_dir("demo-baichuan"))]) == 2
    err = capsys.readouterr().err
    assert "no baichuan class" in err and len(err.strip().splitlines()) == 1, err
