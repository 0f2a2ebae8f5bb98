"""``ropebridge convert``: what it writes, and its refusals (one line, exit 2, nothing written)."""

import json
from pathlib import Path

import pytest
import transformers as T
from pico import build, tree_hash

from ropebridge.cli import main


def test_cli_plan_ladder_and_convert_record_the_same_plan(bloom, tmp_path, capsys):
    from ropebridge.cli import main

    argv = ["--window", "512", "--dtype", "bfloat16"]
    assert main(["plan", "--model", str(bloom), *argv, "--json", "--plot", str(tmp_path / "l.png")]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert planned["strategy"] == "ladder" and (tmp_path / "l.png").stat().st_size > 0
    assert main(["convert", str(bloom), str(tmp_path / "dst"), *argv, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    recorded = json.loads((tmp_path / "dst" / "ropebridge.json").read_text())["plan"]
    assert summary["strategy"] == "ladder" and summary["theta_rule"] is None
    for key in ("base", "rotary_dim", "window", "dtype", "strategy", "theta_rule"):
        assert recorded[key] == planned[key], key
    assert [h["pairs"] for h in recorded["heads"]] == [h["pairs"] for h in planned["heads"]]


def test_the_strategy_flag_keeps_its_old_name(bloom, tmp_path, capsys):
    # --emulation, the flag's name before 0.2, still takes a strategy
    argv = ["plan", "--model", str(bloom), "--window", "256", "--dtype", "float32", "--json"]
    assert main([*argv, "--emulation", "fixed-base", "--rope-base", "10000"]) == 0
    assert json.loads(capsys.readouterr().out)["strategy"] == "fixed-base"
    assert main([*argv, "--strategy", "fixed-base", "--rope-base", "10000"]) == 0
    assert json.loads(capsys.readouterr().out)["strategy"] == "fixed-base"


def test_cli_refusals(bloom, tmp_path, capsys):
    from ropebridge.cli import main

    dst = tmp_path / "dst"
    assert main(["convert", str(bloom), str(dst), "--window", "256", "--dtype", "float16"]) == 0
    capsys.readouterr()
    cases = [
        (["convert", str(bloom), str(tmp_path / "x"), "--target", "starcoder2", "--strategy", "ladder"], "gpt-neox"),
        (["convert", str(bloom), str(tmp_path / "x"), "--strategy", "ladder", "--theta", "1e-5"], "single"),
        (["convert", str(bloom), str(tmp_path / "x"), "--dtype", "float16", "--floor", "5"], "floor"),
        (["convert", str(bloom), str(tmp_path / "x"), "--strategy", "single", "--floor", "60"], "ladder"),
        (["convert", str(bloom), str(tmp_path / "x"), "--calibration-text", str(tmp_path / "nope.txt")], "nope.txt"),
        (["verify", str(bloom), str(dst), "--context", "300"], "window 256"),
        (["plan", "--heads", "4", "--head-dim", "32", "--window", "64", "--ladder", "--theta", "1e-3"], "single"),
    ]
    for argv, needle in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert needle in err and len(err.strip().splitlines()) == 1, (argv, err)
    assert not (tmp_path / "x").exists()


def test_refusals_say_what_would_fit(bloom, tmp_path, capsys):
    from ropebridge.cli import main

    cases = [
        # too few pairs for the window: the prediction misses, and a larger R that fits is named
        (["--rotary-dim", "4", "--window", "8192"], "--rotary-dim 16 fits"),
        # a base whose slowest pair turns too fast for the window: the best fit misses by far, a larger R fits
        (["--rope-base", "10000", "--rotary-dim", "8", "--window", "4096"], "--rotary-dim 16 fits"),
    ]
    for flags, needle in cases:
        assert main(["convert", str(bloom), str(tmp_path / "x"), "--dtype", "float16", *flags]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], err
    assert not (tmp_path / "x").exists()


@pytest.fixture(scope="module")
def bloom12(tmp_path_factory):
    return build(tmp_path_factory.mktemp("cli") / "bloom", "bloom-12heads")


def test_convert_then_verify(bloom12, tmp_path, capsys):
    dst = tmp_path / "rope"
    assert main(["convert", str(bloom12), str(dst), "--window", "1024", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["rotary_dim"] == 4 and summary["destination"] == str(dst)
    record = json.loads((dst / "ropebridge.json").read_text())
    assert record["source"] == str(bloom12) and record["plan"]["heads"][0]["N"] > 0 and record["ropebridge_version"]
    assert main(["verify", str(bloom12), str(dst), "--context", "200", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] and report["max_abs_logit_diff"] < 1e-3
    assert main(["verify", str(bloom12), str(dst), "--context", "200", "--report", str(tmp_path / "rep")]) == 0
    assert "PASSED" in capsys.readouterr().out
    for name in ("report.md", "report.json", "error_by_position.png", "attention_by_layer.png"):
        assert (tmp_path / "rep" / name).is_file()


def test_verify_fails_with_exit_1(bloom12, tmp_path, capsys):
    from safetensors.torch import load_file, save_file

    dst = tmp_path / "rope"
    assert main(["convert", str(bloom12), str(dst), "--window", "512"]) == 0
    weights = next(dst.glob("*.safetensors"))
    tensors = load_file(weights)
    name = next(k for k in tensors if "dense_4h_to_h.weight" in k)
    tensors[name] = tensors[name] * 1.01  # a converted checkpoint damaged after the fact
    save_file(tensors, weights, metadata={"format": "pt"})
    capsys.readouterr()
    assert main(["verify", str(bloom12), str(dst), "--context", "64"]) == 1
    assert "FAILED" in capsys.readouterr().out


def test_verify_refuses_a_dst_from_another_source(bloom12, tmp_path, capsys):
    other = build(tmp_path / "other", "bloom-12heads", seed=1)  # same shape, other weights
    assert main(["convert", str(other), str(tmp_path / "other-rope"), "--window", "512"]) == 0
    capsys.readouterr()
    assert main(["verify", str(bloom12), str(tmp_path / "other-rope"), "--context", "64"]) == 2
    err = capsys.readouterr().err
    assert "was not converted from" in err and len(err.strip().splitlines()) == 1
    small = build(tmp_path / "small", "bloom-4heads")  # another shape
    assert main(["convert", str(small), str(tmp_path / "small-rope"), "--window", "512"]) == 0
    capsys.readouterr()
    assert main(["verify", str(bloom12), str(tmp_path / "small-rope"), "--context", "64"]) == 2
    assert "4 heads" in capsys.readouterr().err


def test_force_replaces(bloom12, tmp_path, capsys):
    dst = tmp_path / "rope"
    dst.mkdir()
    (dst / "stale.txt").write_text("old")
    assert main(["convert", str(bloom12), str(dst)]) == 2
    assert "exists" in capsys.readouterr().err and (dst / "stale.txt").exists()
    assert main(["convert", str(bloom12), str(dst), "--force", "--window", "512"]) == 0
    assert not (dst / "stale.txt").exists() and (dst / "config.json").exists()


def test_a_destination_claimed_meanwhile_is_not_replaced_without_force(bloom12, tmp_path, capsys, monkeypatch):
    # another convert finishes into DST while this one writes: without --force this one is refused (exit 2,
    # one line), the other's checkpoint stands untouched and nothing of this one is left; with --force the last
    # rename wins
    import ropebridge.convert.pipeline as pipeline

    dst = tmp_path / "rope"
    copy = pipeline.write_side_files

    def meanwhile(files, tmp):
        copy(files, tmp)
        if not dst.exists():
            dst.mkdir()
            (dst / "other.txt").write_text("the other convert's")

    monkeypatch.setattr(pipeline, "write_side_files", meanwhile)
    assert main(["convert", str(bloom12), str(dst), "--window", "256"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "appeared while converting" in err[0], err
    assert sorted(p.name for p in dst.iterdir()) == ["other.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rope"]  # no temporary directory left
    (dst / "other.txt").unlink()
    dst.rmdir()
    assert main(["convert", str(bloom12), str(dst), "--window", "256", "--force", "--json"]) == 0
    assert (dst / "config.json").exists() and not (dst / "other.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rope"]  # the moved-aside copy is gone too


def _bad_sources(tmp_path: Path) -> dict:
    out = {}
    T.LlamaConfig(num_attention_heads=4, hidden_size=64, num_hidden_layers=1, intermediate_size=64,
                  vocab_size=100).save_pretrained(tmp_path / "llama")
    out["llama"] = (tmp_path / "llama", "not an ALiBi model")
    T.AutoModelForCausalLM.from_config(T.GPT2Config(n_head=4, n_embd=64, n_layer=1, vocab_size=100)).save_pretrained(
        tmp_path / "gpt2")
    out["gpt2"] = (tmp_path / "gpt2", "not an ALiBi model")
    (tmp_path / "unknown").mkdir()
    (tmp_path / "unknown" / "config.json").write_text(json.dumps({"model_type": "wormhole"}))
    out["unknown"] = (tmp_path / "unknown", "wormhole")
    sharded = build(tmp_path / "sharded", "bloom-4heads")
    T.AutoModelForCausalLM.from_pretrained(sharded).save_pretrained(sharded, max_shard_size="100KB")
    (sharded / "model.safetensors").unlink(missing_ok=True)
    next(iter(sorted(sharded.glob("model-*.safetensors")))).unlink()
    out["missing shard"] = (sharded, "missing")
    corrupt = build(tmp_path / "corrupt", "bloom-4heads")
    data = (corrupt / "model.safetensors").read_bytes()
    (corrupt / "model.safetensors").write_bytes(data[: len(data) // 2])
    out["corrupt"] = (corrupt, "truncated")
    short = build(tmp_path / "short", "bloom-4heads")  # a header whose shape needs more bytes than it maps
    raw = (short / "model.safetensors").read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = raw[8:8 + n].replace(b'"shape":[320,128]', b'"shape":[330,128]', 1)
    assert header != raw[8:8 + n]
    (short / "model.safetensors").write_bytes(raw[:8] + header + raw[8 + n:])
    out["short tensor"] = (short, "need")
    garbage = build(tmp_path / "garbage", "bloom-4heads")
    (garbage / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!")
    out["garbage"] = (garbage, "not a safetensors file")
    post = build(tmp_path / "post", "bloom-4heads", apply_residual_connection_post_layernorm=True)
    out["post-layernorm residual"] = (post, "apply_residual_connection_post_layernorm")
    clip = build(tmp_path / "clip", "mpt")
    cfg = json.loads((clip / "config.json").read_text())
    cfg["attn_config"]["clip_qkv"] = 8.0
    (clip / "config.json").write_text(json.dumps(cfg))
    out["mpt clip_qkv"] = (clip, "clip_qkv")
    return out


def test_bad_input_exit_2_nothing_written(tmp_path, capsys):
    for what, (src, needle) in _bad_sources(tmp_path / "sources").items():
        before = tree_hash(src)
        out = tmp_path / "out"
        out.mkdir(exist_ok=True)
        assert main(["convert", str(src), str(out / "dst")]) == 2, what
        err = capsys.readouterr().err
        assert needle in err and len(err.strip().splitlines()) == 1, (what, err)
        assert list(out.iterdir()) == [], what  # no DST, no temporary directory left behind
        assert tree_hash(src) == before, what


def test_bad_destination_and_plan(bloom12, tmp_path, capsys):
    before = tree_hash(bloom12)
    cases = [
        (["convert", str(bloom12), str(bloom12 / "inside")], "inside"),
        (["convert", str(bloom12), str(tmp_path / "x"), "--dtype", "float16", "--theta", "1e-12"], "float16"),
        (["convert", str(bloom12), str(tmp_path / "x"), "--max-phase", "2"], "--max-phase must be in"),
        (["convert", str(bloom12), str(tmp_path / "x"), "--window", "0"], "window"),
        (["convert", str(tmp_path / "nowhere"), str(tmp_path / "x")], "nowhere"),
        (["convert", str(bloom12), str(tmp_path / "no" / "parent")], "parent"),
        (["verify", str(bloom12), str(tmp_path / "nowhere")], "nowhere is neither a directory nor a hub id"),
        (["verify", str(bloom12), str(bloom12), "--context", "0"], "context"),
    ]
    for argv, needle in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert needle in err and len(err.strip().splitlines()) == 1, (argv, err)
    assert not (tmp_path / "x").exists() and not (bloom12 / "inside").exists()
    assert tree_hash(bloom12) == before


def test_hub_id_path_reports_unreachable_hub(tmp_path, capsys, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # no network here: fail fast
    assert main(["convert", "bigscience/bloom-560m", str(tmp_path / "x")]) == 2
    assert "cannot reach the Hugging Face hub to download bigscience/bloom-560m" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_refuses_when_the_disk_lacks_room_for_the_output(bloom12, tmp_path, capsys, monkeypatch):
    import collections
    import shutil

    real = shutil.disk_usage
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**9, 10**9 - 10**6, 10**6))  # 1 MB free
    out = tmp_path / "out"
    out.mkdir()
    assert main(["convert", str(bloom12), str(out / "dst"), "--window", "512"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    # the numbers a user needs: what the output takes, the headroom on top, what is free
    assert len(err) == 1 and "needs" in err[0] and "plus 64 MiB of headroom, and 977 KiB are free" in err[0], err
    assert list(out.iterdir()) == []
    monkeypatch.setattr(shutil, "disk_usage", real)
    assert main(["convert", str(bloom12), str(out / "dst"), "--window", "512"]) == 0


def test_the_summary_names_the_pairs_it_wrote(tmp_path, capsys):
    # the llama target's single strategy is two opposed pairs: the one line names both thetas; starcoder2's one
    from pico import build_remote

    baichuan = build_remote(tmp_path / "baichuan", "baichuan")
    assert main(["convert", str(baichuan), str(tmp_path / "llama"), "--window", "512", "--dtype", "float32"]) == 0
    record = json.loads((tmp_path / "llama" / "ropebridge.json").read_text())["plan"]["heads"][0]["pairs"]
    line = capsys.readouterr().out.splitlines()[0]
    assert f"thetas {record[0]['theta']:.6g} and {record[1]['theta']:.6g} on two opposed pairs" in line, line
    bloom = build(tmp_path / "bloom", "bloom-4heads")
    assert main(["convert", str(bloom), str(tmp_path / "sc2"), "--window", "512", "--dtype", "float32",
                 "--target", "starcoder2"]) == 0
    assert "on one pair" in capsys.readouterr().out.splitlines()[0]
