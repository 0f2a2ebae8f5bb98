"""``ropebridge plan``: the table, JSON, plots, and its refusals."""

import json

import pytest
from transformers import BloomConfig, GPT2Config, LlamaConfig

from ropebridge.cli import main
from ropebridge.emulation import ladder_fit


def test_a_fit_the_solver_cannot_finish_is_one_line_and_exit_2(monkeypatch, tmp_path, capsys):
    from ropebridge.cli import main

    monkeypatch.setattr(ladder_fit, "_ATTEMPTS", ({"max_iter": 1},))
    argv = ["plan", "--heads", "2", "--head-dim", "32", "--window", "256", "--dtype", "bfloat16",
            "--plot", str(tmp_path / "p.png")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the ladder fit failed: the conic solver ended MaxIterations" in err[0], err
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_table(capsys):
    assert main(["plan", "--heads", "16", "--head-dim", "64", "--window", "65536", "--max-phase", "0.1"]) == 0
    out = capsys.readouterr().out
    assert "1.5259e-06" in out and "3.7073e+06" in out
    # float32 at 65536 tokens: 4 half-ulps of the largest bias, 0.5 * 65536 (half an ulp 2^-9), above 1e-3
    assert "worst head 0" in out and "tolerance 0.0078125" in out


def test_json_fields(capsys):
    assert main(["plan", "--heads", "8", "--head-dim", "64", "--window", "512", "--base", "10000",
                 "--rope-dim", "16", "--pairs", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"heads", "window", "dtype", "max_window"} <= set(data)
    assert {"head", "slope", "theta", "N", "predicted_error"} <= set(data["heads"][0])
    assert data["window"] == 512 and data["dtype"] == "float32"
    assert data["max_window_at_phase"]["window"] == 316  # 0.1 / 10^-3.5


def test_model_directory_and_plot(tmp_path, capsys):
    BloomConfig(n_head=4, hidden_size=128, n_layer=1).save_pretrained(tmp_path / "bloom")
    png = tmp_path / "plan.png"
    assert main(["plan", "--model", str(tmp_path / "bloom"), "--window", "1024", "--plot", str(png), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["heads"]) == 4 and data["family"] == "bloom"
    assert png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--heads", "8", "--head-dim", "64", "--window", "0"], "window"),
        (["--heads", "8", "--head-dim", "64", "--window", "100", "--theta", "0"], "theta"),
        (["--heads", "8", "--head-dim", "64", "--window", "100", "--max-phase", "1.6"], "--max-phase must be in"),
        (["--heads", "8", "--head-dim", "64", "--window", "100", "--family", "gpt"], "family"),
        (["--heads", "8", "--window", "100"], "--head-dim"),
        (["--heads", "16", "--head-dim", "64", "--window", "65536", "--max-phase", "0.1", "--dtype", "float16",
          "--split", "1"], "float16"),
        (["--heads", "8", "--head-dim", "64", "--window", "100", "--split", "abc"], "split"),
    ],
)
def test_bad_input(capsys, argv, needle):
    assert main(["plan", *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1


def test_not_an_alibi_model(tmp_path, capsys):
    LlamaConfig(num_attention_heads=4, hidden_size=128, num_hidden_layers=1).save_pretrained(tmp_path / "llama")
    GPT2Config(n_head=4, n_embd=128, n_layer=1).save_pretrained(tmp_path / "gpt2")
    for name in ("llama", "gpt2"):
        assert main(["plan", "--model", str(tmp_path / name), "--window", "100"]) == 2
        assert "not an ALiBi model" in capsys.readouterr().err
    assert main(["plan", "--model", str(tmp_path / "missing"), "--window", "100"]) == 2


def test_per_head_floors_from_a_file_reproduce_a_plan(bloom, tmp_path, capsys):
    # a plan's floors passed back with --floor FILE (its JSON, or a list) give the same ladder
    text = tmp_path / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog " * 40)
    flags = ["--window", "256", "--dtype", "bfloat16", "--json"]
    assert main(["plan", "--model", str(bloom), *flags, "--floor", "31.5"]) == 0
    uniform = json.loads(capsys.readouterr().out)
    (tmp_path / "plan.json").write_text(json.dumps(uniform))
    (tmp_path / "list.json").write_text(json.dumps([31.5, 32.5, 33.5, 34.5]))
    assert main(["plan", "--model", str(bloom), *flags, "--floor", str(tmp_path / "plan.json")]) == 0
    assert json.loads(capsys.readouterr().out)["heads"] == uniform["heads"]
    assert main(["plan", "--model", str(bloom), *flags, "--floor", str(tmp_path / "list.json")]) == 0
    assert [h["ladder"]["floor"] for h in json.loads(capsys.readouterr().out)["heads"]] == [31.5, 32.5, 33.5, 34.5]
    for bad, needle in ((tmp_path / "nope.json", "neither a number"), (text, "neither a number")):
        assert main(["plan", "--model", str(bloom), *flags, "--floor", str(bad)]) == 2
        assert needle in capsys.readouterr().err
    (tmp_path / "bad.json").write_text('{"heads": [{"slope": 1}]}')
    assert main(["plan", "--model", str(bloom), *flags, "--floor", str(tmp_path / "bad.json")]) == 2
    assert "a floor per head" in capsys.readouterr().err


@pytest.mark.parametrize("family, flags, target",
                         [("jais", [], "stablelm"), ("baichuan", ["--dtype", "bfloat16"], "llama"),
                          ("jais", ["--target", "stablelm", "--dtype", "float16"], "stablelm")])
def test_a_checkpoints_plan_names_the_target_convert_takes_and_its_engines(tmp_path, capsys, family, flags, target):
    from pico import build_remote

    from ropebridge.targets import TARGETS

    src = build_remote(tmp_path / family, family)
    assert main(["plan", "--model", str(src), "--window", "512", *flags]) == 0
    *_, named, kernels, cost = capsys.readouterr().out.strip().splitlines()
    assert named == f"target {target} ({TARGETS[target].architecture}): {TARGETS[target].engines}"
    assert kernels.startswith("head dim ") and " runs on: vLLM 0.34.0 " in kernels and "; TensorRT-LLM " in kernels
    served = int(kernels.split()[2])
    assert cost.startswith(f"serving cost: head dim 16 -> {served}: KV cache per token {served / 16:.2f}x")
    assert main(["plan", "--heads", "4", "--head-dim", "16", "--window", "512"]) == 0  # no checkpoint: no target line
    assert "target" not in capsys.readouterr().out


def test_a_thousand_heads_in_float32_is_valid_json(capsys):
    assert main(["plan", "--heads", "1000", "--head-dim", "64", "--dtype", "float32", "--window", "2048",
                 "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert len(plan["heads"]) == 1000 and plan["worst_predicted_error"] <= plan["tolerance"]


def test_a_config_file_plans_as_its_folder(capsys):
    from ropebridge.demo import data_dir

    folder = data_dir("demo")
    assert main(["plan", "--model", str(folder), "--window", "2048", "--json"]) == 0
    by_folder = json.loads(capsys.readouterr().out)
    assert main(["plan", "--model", str(folder / "config.json"), "--window", "2048", "--json"]) == 0
    by_file = json.loads(capsys.readouterr().out)
    assert by_file.pop("source") == str(folder / "config.json") and by_folder.pop("source") == str(folder)
    assert by_file == by_folder  # the same plan: the weights beside the file are read as the folder's


def test_a_ladder_too_wide_to_fit_is_refused_at_once(tmp_path, capsys):
    from ropebridge.demo import data_dir

    argv = ["convert", str(data_dir("demo")), str(tmp_path / "out"), "--strategy", "ladder", "--rotary-dim", "4096"]
    assert main(argv) == 2  # before: the fit of 2048 pairs ran past 5 minutes with no output
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "at most 128 rotary dims" in err[0] and not (tmp_path / "out").exists(), err


@pytest.mark.parametrize("name", ["demo", "demo-mpt", "demo-falcon", "demo-baichuan", "demo-jais"])
def test_a_plan_from_the_geometry_is_the_plan_of_a_checkpoint_with_it(capsys, name):
    """``plan --heads H --head-dim D --family F`` previews what ``plan --model SRC`` gives for a checkpoint of that
    geometry, for every engine and dtype: the same exit status, the same plan (the engine's target chosen for the
    family as published)."""
    from ropebridge.checkpoint.config import from_config
    from ropebridge.demo import data_dir

    src = data_dir(name)
    info = from_config(src)
    for engine in ("vllm", "sglang", "trtllm", "llama.cpp"):
        for dtype in ("float32", "bfloat16"):
            flags = ["--engine", engine, "--dtype", dtype, "--window", "1024", "--json"]
            code_model = main(["plan", "--model", str(src), *flags])
            model = capsys.readouterr()
            code_heads = main(["plan", "--heads", str(info.n_heads), "--head-dim", str(info.head_dim), "--family",
                               info.family, *flags])
            heads = capsys.readouterr()
            assert code_model == code_heads, (engine, dtype, model.err, heads.err)
            if code_model == 0:
                a, b = json.loads(model.out), json.loads(heads.out)
                a.pop("source"), b.pop("source")
                assert a == b, (engine, dtype)
            else:
                assert model.err.split(": ", 2)[-1] == heads.err.split(": ", 2)[-1], (model.err, heads.err)
