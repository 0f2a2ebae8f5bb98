"""Every subcommand against bad input: exit 2, exactly one line on stderr, no traceback, nothing written, the
source untouched. Plus process hygiene: Ctrl-C, closed pipes, permissions, -v anywhere, documented flags."""

import argparse
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from pico import build, tree_hash

from ropebridge.cli import build_parser, main


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("matrix")
    bloom = build(root / "bloom", "bloom-4heads")
    mpt = build(root / "mpt", "mpt", max_seq_len=512)
    other = build(root / "other", "bloom-4heads", seed=1)
    for src, dst, window in ((bloom, "bloom-rope", "256"), (mpt, "mpt-rope", "1024"), (other, "other-rope", "256")):
        assert main(["convert", str(src), str(root / dst), "--window", window]) == 0
    # a source with one NaN weight; a conversion with one NaN weight; a conversion without ropebridge.json
    poison(shutil.copytree(bloom, root / "nan"), "transformer.h.1.mlp.dense_h_to_4h.weight")
    poison(shutil.copytree(root / "bloom-rope", root / "nan-rope"), "gpt_neox.layers.1.mlp.dense_h_to_4h.weight")
    (shutil.copytree(root / "bloom-rope", root / "plain") / "ropebridge.json").unlink()
    variant(root / "bloom-rope", root / "unloadable", config={"num_attention_heads": 7})  # 128 / 7: not a model
    # configs and tensors that disagree: each is refused from the shapes alone, before a byte is read
    variant(bloom, root / "vocab322", config={"vocab_size": 322})
    variant(bloom, root / "vocab300", config={"vocab_size": 300})
    variant(bloom, root / "hidden", config={"hidden_size": 64})
    variant(bloom, root / "qkv3d", tensors={"transformer.h.0.self_attention.query_key_value.weight":
                                            lambda t: t.reshape(12, 32, 128)})
    variant(bloom, root / "ln2d", tensors={"transformer.h.1.input_layernorm.weight": lambda t: t[None]})
    variant(bloom, root / "int", tensors={"transformer.h.0.mlp.dense_h_to_4h.bias": lambda t: t.to(torch.int32)})
    variant(bloom, root / "offsets", header=lambda h: h["transformer.h.0.mlp.dense_4h_to_h.weight"].update(
        data_offsets=[h["transformer.h.0.mlp.dense_4h_to_h.weight"]["data_offsets"][0] - 4,
                      h["transformer.h.0.mlp.dense_4h_to_h.weight"]["data_offsets"][1] - 4]))
    return root


def variant(src, dst, *, config=None, tensors=None, header=None):
    """A copy of ``src`` with config keys replaced, tensors transformed, or the safetensors header edited."""
    import struct

    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    if config:
        data = json.loads((dst / "config.json").read_text())
        (dst / "config.json").write_text(json.dumps({**data, **config}))
    path = dst / "model.safetensors"
    if tensors:
        loaded = load_file(path)
        save_file({k: tensors[k](v).contiguous() if k in tensors else v for k, v in loaded.items()}, path,
                  metadata={"format": "pt"})
    if header:
        raw = path.read_bytes()
        (n,) = struct.unpack("<Q", raw[:8])
        meta = json.loads(raw[8: 8 + n])
        header(meta)
        text = json.dumps(meta, separators=(",", ":")).encode()
        text += b" " * (n - len(text))  # the same length: only the offsets are wrong
        assert len(text) == n
        path.write_bytes(raw[:8] + text + raw[8 + n:])


def poison(directory, name):
    """Set one value of tensor ``name`` to NaN in the checkpoint at ``directory`` (any of its shards)."""
    from safetensors.torch import load_file, save_file

    for path in directory.glob("*.safetensors"):
        tensors = load_file(path)
        if name in tensors:
            tensors[name].view(-1)[7] = float("nan")
            save_file(tensors, path, metadata={"format": "pt"})
            return
    raise KeyError(name)


# (argv with {root}, {out} placeholders, needle in the one stderr line)
CASES = [
    ("convert {root}/bloom {root}/bloom/inside", "inside"),
    ("convert {root}/bloom {root}/bloom", "is the source"),
    ("convert {root}/bloom {out}/no/parent", "parent"),
    ("convert {root}/nowhere {out}/x", "nowhere"),
    ("convert {root}/bloom {root}/bloom-rope", "exists; pass --force"),
    ("convert {root}/bloom {out}/x --window 0", "window"),
    ("convert {root}/bloom {out}/x --max-phase 2", "--max-phase must be in (0, pi/2)"),
    ("convert {root}/bloom {out}/x --dtype float16 --theta 1e-12", "float16"),
    ("convert {root}/bloom {out}/x --rotary-dim 32", "--rope-base"),
    ("convert {root}/bloom {out}/x --pairs 2", "fixed base"),
    ("convert {root}/bloom {out}/x --target starcoder2 --rope-base 10000", "gpt-neox"),
    ("convert {root}/bloom {out}/x --target starcoder2 --strategy ladder", "gpt-neox or nemotron"),
    ("convert {root}/bloom {out}/x --kernel tpu", "invalid choice"),
    ("convert {root}/bloom {out}/x --dtype bfloat16 --kernel flashinfer --rotary-dim 40", "does not run"),
    ("convert {root}/bloom {out}/x --dtype bfloat16 --target nemotron --strategy single --kernel fa2", "head dim 34"),
    ("convert {root}/bloom {out}/x --dtype bfloat16 --floor 5", "floor"),
    ("convert {root}/bloom {out}/x --calibration-text {root}/missing.txt", "missing.txt"),
    ("convert {root}/bloom {out}/x --tolerance -1", "tolerance"),
    ("convert {root}/bloom {out}/x --window 1000000000", "2^24"),
    ("convert {root}/bloom {out}/x --jobs 0", "--jobs"),
    ("convert {root}/bloom {out}/x --rope-base 1e300", "--rope-base 1e+300: transformers computes"),
    ("plan --heads 4 --head-dim 32 --window 64 --dtype bfloat16 --rope-base 1e300", "give a smaller base"),
    ("convert {root}/bloom {out}/x --dtype bfloat16 --jobs -2", "--jobs"),
    ("plan --heads 4 --head-dim 32 --window 16777217 --dtype bfloat16", "2^24"),
    ("convert {root}/bloom {out}/x --rope-base 10000 --rotary-dim 32 --pairs 3", "--accept-error"),
    ("convert {root}/bloom {out}/x --dtype float64", "invalid choice"),
    ("convert {root}/nan {out}/x", "'transformer.h.1.mlp.dense_h_to_4h.weight' holds 1 non-finite"),
    ("convert {root}/nan {out}/x --dtype bfloat16 --window 256", "non-finite"),
    ("convert {root}/vocab322 {out}/x",
     "'transformer.word_embeddings.weight' has shape [320, 128], the bloom config implies [322, 128]"),
    ("convert {root}/vocab300 {out}/x", "implies [300, 128]"),
    ("convert {root}/hidden {out}/x", "has shape [320, 128]"),
    ("convert {root}/qkv3d {out}/x", "'transformer.h.0.self_attention.query_key_value.weight' has shape [12, 32, 128]"),
    ("convert {root}/ln2d {out}/x",
     "'transformer.h.1.input_layernorm.weight' has shape [1, 128], the bloom config implies [128]"),
    ("convert {root}/offsets {out}/x", "overlap"),
    ("convert {root}/int {out}/x", "'transformer.h.0.mlp.dense_h_to_4h.bias' has dtype int32"),
    ("plan --model {root}/vocab322 --window 64", "implies [322, 128]"),
    ("verify {root}/vocab322 {root}/bloom-rope", "implies [322, 128]"),
    ("verify {root}/bloom {root}/nowhere", "nowhere"),
    ("verify {root}/bloom {root}/bloom", "is the source itself"),
    ("verify {root}/bloom {root}/bloom/", "is the source itself"),
    ("verify {root}/bloom {root}/plain", "not a ropebridge conversion"),
    ("verify {root}/bloom {root}/bloom-rope --context 0", "context"),
    ("verify {root}/bloom {root}/bloom-rope --context 300", "window 256"),
    ("verify {root}/mpt {root}/mpt-rope --context 600", "own limit of 512"),
    ("verify {root}/bloom {root}/bloom-rope --text {root}/missing.txt", "missing.txt"),
    ("verify {root}/bloom {root}/other-rope --context 64", "was not converted from"),
    ("plan --heads 4 --head-dim 32 --window 64 --cutoff -1", "cutoff"),
    ("plan --heads 4 --window 64", "--head-dim"),
    ("plan --heads 4 --head-dim 32 --window 64 --family gpt", "invalid choice"),
    ("plan --heads 4 --head-dim 32 --window 64 --ladder --theta 1e-3", "single"),
    ("plan --heads 4 --head-dim 32 --window 64 --calibration-text {root}/missing.txt", "--model"),
    ("plan --model {root}/nowhere --window 64", "nowhere is neither a directory nor a hub id"),
    ("rope --head-dim 64 --context 10 --factor 8", "--factor is not used"),
    ("rope --head-dim 64 --context 10 --rope-type yarn --factor 2", "--original-max-position"),
    ("demo --context 0", "context"),
]


@pytest.mark.parametrize("template, needle", CASES,
                         ids=[c[0].split(" --")[0][:40] + f"#{i}" for i, c in enumerate(CASES)])
def test_bad_input(models, tmp_path, capsys, template, needle):
    sources = {name: tree_hash(models / name) for name in ("bloom", "mpt")}
    out = tmp_path / "out"
    out.mkdir()
    argv = template.format(root=models, out=out).split()
    assert main(argv) == 2, argv
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and needle in err[0] and "Traceback" not in captured.err, captured.err
    assert list(out.iterdir()) == []  # nothing written, no temporary directory left
    assert not list(models.glob(".*tmp-*"))
    assert {name: tree_hash(models / name) for name in sources} == sources


def test_verify_fails_on_what_is_not_finite(models, capsys):
    # a NaN weight in the converted model: its bytes differ from convert's; and with --quick (no byte check) it
    # makes every logit NaN, which no comparison with a threshold may pass
    argv = ["verify", str(models / "bloom"), str(models / "nan-rope"), "--context", "64", "--greedy-tokens", "4"]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "FAILED: tensor gpt_neox.layers.1.mlp.dense_h_to_4h.weight differs" in out, out
    assert main([*argv, "--quick"]) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out and "PASSED" not in out and "not a finite number" in out, out


def test_verify_fails_a_config_transformers_cannot_build(models, capsys):
    # 7 heads of a 128-wide stream: not a model transformers builds, and not the config convert writes
    argv = ["verify", str(models / "bloom"), str(models / "unloadable"), "--context", "64"]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "FAILED: its config differs from what convert writes: config.json.num_attention_heads: DST has 7" in out


def test_verify_text_without_tokenizer(models, tmp_path, capsys):
    (tmp_path / "t.txt").write_text("some text " * 50)
    assert main(["verify", str(models / "bloom"), str(models / "bloom-rope"), "--text", str(tmp_path / "t.txt")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "tokenizer" in err[0]


def test_verify_keeps_its_result_when_the_report_cannot_be_written(models, tmp_path, capsys):
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the report directory should be
    argv = ["verify", str(models / "bloom"), str(models / "bloom-rope"), "--context", "64", "--greedy-tokens", "4"]
    assert main([*argv, "--report", str(blocked / "rep")]) == 2
    captured = capsys.readouterr()
    assert "PASSED" in captured.out  # the result is printed
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "cannot write the report" in err[0]


@pytest.mark.parametrize("target", ["gpt-neox", "starcoder2", "nemotron"])
def test_every_target_through_the_cli_without_json(models, tmp_path, capsys, target):
    dst = tmp_path / target
    assert main(["convert", str(models / "bloom"), str(dst), "--target", target, "--window", "256"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"wrote {dst} ({target}, float32") and "predicted max |error|" in line
    assert json.loads((dst / "ropebridge.json").read_text())["target"] == target


def test_plan_json_is_what_convert_records(models, tmp_path, capsys):
    for flags in ([], ["--dtype", "float16"], ["--rope-base", "10000", "--rotary-dim", "16", "--pairs", "2",
                                               "--window", "64"]):
        flags = ["--window", "256", *flags] if "--window" not in flags else flags
        assert main(["plan", "--model", str(models / "bloom"), *flags, "--json"]) == 0
        planned = json.loads(capsys.readouterr().out)
        dst = tmp_path / f"d{len(flags)}"
        assert main(["convert", str(models / "bloom"), str(dst), *flags, "--json"]) == 0
        assert planned.pop("verify_limit") == json.loads(capsys.readouterr().out)["verify_limit"], flags
        record = json.loads((dst / "ropebridge.json").read_text())
        recorded = record["plan"]
        planned.pop("source"), recorded.pop("source")  # as given on each command line
        planned.pop("max_window_at_phase", None)  # plan's one annotation beside the plan (fixed base)
        assert planned.pop("resolved") == record["resolved"], flags
        assert planned == recorded, flags
    assert recorded["strategy"] == "fixed-base" and recorded["theta_rule"] is None


def test_ctrl_c_is_one_line_and_130(models, tmp_path, capsys, monkeypatch):
    import dataclasses

    from ropebridge.writers import WRITERS

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setitem(WRITERS, "gpt-neox", dataclasses.replace(WRITERS["gpt-neox"], add_tensors=interrupted))
    assert main(["convert", str(models / "bloom"), str(tmp_path / "x"), "--window", "256"]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["ropebridge convert: interrupted; nothing written"]
    assert list(tmp_path.iterdir()) == []


def _interrupt(argv, ready, *, group=False):
    """Start ``ropebridge argv``, wait until ``ready(pid)``, send SIGINT (to its whole process group, as a
    terminal's Ctrl-C does, when ``group``) and return (exit status, stdout, stderr)."""
    import signal
    import time

    def default_sigint():  # as from a terminal: a suite started in the background inherits SIGINT ignored
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    proc = subprocess.Popen([sys.executable, "-m", "ropebridge", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=group, preexec_fn=default_sigint)
    deadline = time.monotonic() + 60
    while not ready(proc.pid) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.01)
    if group:
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


def _cmdline(pid) -> str:
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _maps_torch(pid, program: str = "ropebridge"):
    """torch's import has begun in ``program``: its shared library is mapped in a process that has exec'd it (a
    child between fork and exec still maps its parent's libraries, and a signal sent then is lost)."""
    try:
        return program in _cmdline(pid) and "libtorch" in open(f"/proc/{pid}/maps").read()
    except OSError:
        return False


LONG_PLAN = ["plan", "--heads", "16", "--head-dim", "64", "--window", "1048576", "--dtype", "bfloat16"]


def test_ctrl_c_while_torch_is_imported_is_one_line_and_130():
    # the first second of a command is the import of torch; the plan after it takes minutes: a Ctrl-C at
    # either is answered with one line and 130
    code, out, err = _interrupt([*LONG_PLAN, "--jobs", "1"], _maps_torch)
    lines = err.strip().splitlines()
    assert code == 130 and len(lines) == 1 and "interrupted" in lines[0], (code, err)
    assert out == ""


def test_ctrl_c_during_a_parallel_plan_ends_its_workers_quietly():
    def workers_busy(pid):  # the pool's workers exist and have imported torch
        try:
            children = open(f"/proc/{pid}/task/{pid}/children").read().split()
        except OSError:
            return False
        return sum(_maps_torch(int(c), "spawn_main") for c in children) >= 2  # (the resource tracker never does)

    code, out, err = _interrupt([*LONG_PLAN, "--jobs", "2"], workers_busy, group=True)
    *before, last = err.strip().splitlines()  # before: the fit's cost, said as it starts (a 16-head, 1M fit)
    assert code == 130 and last == "ropebridge plan: interrupted; nothing written", (code, err)
    assert all(line.startswith("WARNING ropebridge.emulation.ladder: fitting 16 heads") for line in before), err


def test_closed_pipe_ends_quietly():
    cmd = f"{sys.executable} -m ropebridge rope --head-dim 256 --context 4096 | head -n 1"
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stderr == "" and proc.stdout.startswith("pair")


@pytest.mark.parametrize("argv", [["plan", "--heads", "6", "--head-dim", "32", "--json"],
                                  ["plan", "--heads", "6", "--head-dim", "32"], ["convert", "{bloom}", "{out}"],
                                  ["verify", "{bloom}", "{rope}", "--context", "32"]])
def test_a_closed_stdout_is_refused_before_anything_runs(models, tmp_path, argv):
    """``>&-``: the result could not be written, so nothing runs (exit 2, one line, no DST written)."""
    names = {"bloom": models / "bloom", "rope": models / "bloom-rope", "out": tmp_path / "out"}
    args = " ".join(a.format(**names) for a in argv)
    proc = subprocess.run(["bash", "-c", f"{sys.executable} -m ropebridge {args} >&-"], capture_output=True,
                          text=True)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "ropebridge: error: standard output is closed: the result could not be written; nothing was run"], proc.stderr
    assert not (tmp_path / "out").exists()


def test_a_failed_verify_into_a_closed_pipe_still_exits_1(models, tmp_path):
    """The reader stopped reading before the report (`| head -c 0`): the output ends quietly, the verdict stands."""
    bad = shutil.copytree(models / "bloom-rope", tmp_path / "bad")
    config = json.loads((bad / "config.json").read_text())
    config["rotary_emb_base"] *= 1.001
    (bad / "config.json").write_text(json.dumps(config))
    for dst, status in ((bad, 1), (models / "bloom-rope", 0)):
        proc = subprocess.Popen([sys.executable, "-m", "ropebridge", "verify", str(models / "bloom"), str(dst),
                                 "--context", "32"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        proc.stdout.close()  # closed before verify writes its report
        err = proc.stderr.read().decode()
        assert proc.wait() == status and "Traceback" not in err, (dst, err)


def test_destination_has_the_permissions_of_a_plain_mkdir(models, tmp_path):
    old = os.umask(0o022)
    try:
        assert main(["convert", str(models / "bloom"), str(tmp_path / "x"), "--window", "256", "--json"]) == 0
    finally:
        os.umask(old)
    assert (tmp_path / "x").stat().st_mode & 0o777 == 0o755


def test_verbose_anywhere(capsys):
    for argv in (["-v", "rope", "--head-dim", "8", "--context", "8"],
                 ["rope", "--head-dim", "8", "--context", "8", "-v"]):
        assert main(argv) == 0


def test_every_flag_is_documented():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, p in sub.choices.items():
        for action in p._actions:
            if action.help is None:
                pytest.fail(f"{name} {action.option_strings or action.dest} has no help")
            if action.choices is not None and action.dest != "command":  # argparse lists choices in the help
                assert set(action.choices) <= set(p.format_help().replace(",", " ").replace("{", " ")
                                                  .replace("}", " ").split()), (name, action.dest)


def test_verify_takes_hub_ids_like_convert(models, capsys, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # no network here: fail fast
    assert main(["verify", "bigscience/bloom-560m", str(models / "bloom-rope")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot reach the Hugging Face hub to download bigscience/bloom-560m" in err[0]


def test_force_into_the_current_directory(models, tmp_path, monkeypatch, capsys):
    target = tmp_path / "here"
    target.mkdir()
    monkeypatch.chdir(target)
    assert main(["convert", str(models / "bloom"), ".", "--force", "--window", "256", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["destination"] == str(target)
    assert (target / "config.json").is_file()
