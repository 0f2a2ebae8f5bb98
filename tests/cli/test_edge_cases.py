"""The smaller cases a new user meets: a legacy (non-zip) PyTorch file, a pickle that is not plain weights, a hub
id without a network, --force onto a symlink, --plot onto a directory: each has the outcome a user expects (it
works, or one line and exit 2 with nothing written)."""

import os
import subprocess
import sys

import pytest
import torch
from pico import build

from ropebridge.cli import main


def _one_line(capsys, needle):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


def test_a_legacy_non_zip_pytorch_file_converts_and_verifies(tmp_path):
    # transformers loads a file written with the pre-1.6 (non-zip) serialization; so does convert
    src = build(tmp_path / "src", "bloom-4heads", safe_serialization=False)
    state = torch.load(src / "pytorch_model.bin", weights_only=True)
    torch.save(state, src / "pytorch_model.bin", _use_new_zipfile_serialization=False)
    assert main(["convert", str(src), str(tmp_path / "rope"), "--window", "256"]) == 0
    assert main(["verify", str(src), str(tmp_path / "rope"), "--context", "32", "--greedy-tokens", "4"]) == 0


@pytest.mark.parametrize("zip_format", [True, False])
def test_a_pickle_that_is_not_plain_weights_is_one_line(tmp_path, zip_format):
    # in a process of its own, as a user runs it: stderr is the one line, no warning of torch's before it
    src = build(tmp_path / "src", "bloom-4heads", safe_serialization=False)
    state = torch.load(src / "pytorch_model.bin", weights_only=True)
    torch.save({**state, "hook": print}, src / "pytorch_model.bin",  # a global weights_only refuses
               _use_new_zipfile_serialization=zip_format)
    proc = subprocess.run([sys.executable, "-m", "ropebridge", "convert", str(src), str(tmp_path / "rope"),
                           "--window", "256"], capture_output=True, text=True)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "a pickle that asks for" in lines[0] and "print" in lines[0], proc.stderr
    assert "weights_only=True" in lines[0] and not (tmp_path / "rope").exists()


def test_a_hub_id_without_a_network_is_one_line(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    proc = subprocess.run([sys.executable, "-m", "ropebridge", "convert", "bigscience/bloom-560m", str(tmp_path / "x")],
                          capture_output=True, text=True, env=env)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].endswith("cannot reach the Hugging Face hub to download bigscience/bloom-560m, and it is not in "
                             "the "
                             "local cache: connect to the network (and unset HF_HUB_OFFLINE), or download it where the "
                             "hub is reachable (hf download bigscience/bloom-560m --local-dir DIR) and pass DIR"), lines


def test_force_onto_a_symlink_replaces_the_link_and_leaves_nothing_aside(tmp_path):
    src = build(tmp_path / "src", "bloom-4heads")
    real = tmp_path / "real"
    assert main(["convert", str(src), str(real), "--window", "256"]) == 0
    before = sorted(p.name for p in real.iterdir())
    link = tmp_path / "link"
    link.symlink_to(real)
    assert main(["convert", str(src), str(link), "--window", "256", "--force"]) == 0
    assert link.is_dir() and not link.is_symlink() and (link / "config.json").is_file()
    assert sorted(p.name for p in real.iterdir()) == before  # the link's target is not the link's to remove
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real", "src"]  # no .link.old-* left


@pytest.mark.parametrize("where", ["directory", "no-suffix"])
def test_plot_onto_a_directory_or_without_a_format_is_one_line(tmp_path, capsys, where):
    target = tmp_path / ("plots" if where == "directory" else "figure")
    if where == "directory":
        target.mkdir()
    argv = ["plan", "--heads", "4", "--head-dim", "64", "--window", "1024", "--plot", str(target)]
    assert main(argv) == 2
    _one_line(capsys, "--plot")
    assert sorted(p.name for p in tmp_path.iterdir()) == (["plots"] if where == "directory" else [])
    assert main(["rope", "--head-dim", "64", "--context", "1024", "--plot", str(target)]) == 2  # rope's --plot alike
    _one_line(capsys, "--plot")
    assert main([*argv[:-1], str(tmp_path / "plan.png")]) == 0 and (tmp_path / "plan.png").is_file()


@pytest.mark.parametrize("argv, said", [
    (["plan", "--heads", "4", "--head-dim", "32", "--dtyp", "bfloat16"],
     "ropebridge plan: error: unrecognized argument --dtyp; did you mean --dtype? ropebridge plan --help lists its "
     "options"),
    (["convert", "SRC", "DST", "--dtpye", "bfloat16"], "unrecognized argument --dtpye; did you mean --dtype?"),
    (["plan", "--heds", "4"], "ropebridge plan: error: unrecognized argument --heds; did you mean --heads?"),
    (["verify", "SRC", "DST", "--kv-cache-dtyp=fp8"], "did you mean --kv-cache-dtype?"),
    (["rope", "--head-dim", "64", "--context", "8", "--frobnicate"],
     "ropebridge rope: error: unrecognized argument --frobnicate; ropebridge rope --help lists its options"),
])
def test_an_option_is_taken_by_its_whole_name_and_a_typo_is_named_with_the_closest(tmp_path, capsys, argv, said):
    from ropebridge.demo import data_dir

    argv = [str(data_dir()) if a == "SRC" else str(tmp_path / "dst") if a == "DST" else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1, err
    assert not (tmp_path / "dst").exists()


def test_the_help_says_what_ropebridge_is_and_verify_the_limit_it_uses(capsys):
    from ropebridge.limit import BASELINE_FACTOR, LOGIT_FACTOR

    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "Positional encodings of transformer language models" in out and "Thin" not in out
    assert main(["verify", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"{LOGIT_FACTOR:g}x the plan's predicted error" in out and f"{BASELINE_FACTOR:g}x the baseline" in out


def test_a_source_that_names_nothing_is_said_before_an_existing_destination(tmp_path, capsys):
    (tmp_path / "dst").mkdir()
    assert main(["convert", str(tmp_path / "does-not-exist"), str(tmp_path / "dst")]) == 2
    err = capsys.readouterr().err
    assert "does-not-exist is neither a directory nor a hub id" in err and "exists; pass --force" not in err, err


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    work = tmp_path_factory.mktemp("flags")
    src = build(work / "bloom", "bloom-4heads")
    assert main(["convert", str(src), str(work / "rope"), "--window", "256"]) == 0
    return src, work / "rope"


@pytest.mark.parametrize("argv, said", [
    (["plan", "--heads", "6", "--head-dim", "32", "--window", "0"], "ropebridge plan: error: --window must be > 0"),
    (["verify", "SRC", "DST", "--greedy-tokens", "-3"], "ropebridge verify: error: --greedy-tokens must be >= 0"),
])
def test_a_refusal_names_the_flag_typed_not_the_parameter(converted, capsys, argv, said):
    src, dst = converted
    argv = [str(src) if a == "SRC" else str(dst) if a == "DST" else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(said) and err.count("\n") == 1, err
