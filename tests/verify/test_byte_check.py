"""verify's byte check: every tampering class fails (or is refused) naming what differs; an untouched conversion,
and one whose record names another version is compared exactly all the same."""

import json
import shutil

import pytest
import torch
from pico import build

from ropebridge.cli import main
from ropebridge.convert import convert
from ropebridge.verify import verify
from ropebridge.verify.byte_check import first_difference
from ropebridge.emulation import PlanRequest


def edit_tensor(directory, name, fn):
    """Replace tensor ``name`` in whichever safetensors file of ``directory`` holds it by ``fn(tensor)``."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    for path in directory.glob("*.safetensors"):
        with safe_open(str(path), "pt") as f:
            metadata = f.metadata()
        tensors = load_file(path)
        if name in tensors:
            tensors[name] = fn(tensors[name]).contiguous()
            save_file(tensors, path, metadata=metadata)
            return
    raise KeyError(name)


def edit_json(path, fn):
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data, indent=1))


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("bytes")
    src = build(root / "bloom", "bloom-4heads")
    f32 = convert(src, root / "f32", PlanRequest(window=256, dtype="float32")).destination
    bf16 = convert(src, root / "bf16", PlanRequest(window=256, dtype="bfloat16")).destination
    return src, f32, bf16


def tampered(pair, tmp_path, which="f32"):
    src, f32, bf16 = pair
    return src, shutil.copytree(f32 if which == "f32" else bf16, tmp_path / which)


def test_an_untouched_conversion_is_identical_byte_for_byte(pair):
    src, f32, bf16 = pair
    for dst in (f32, bf16):
        report = verify(src, dst, context=64, greedy_tokens=4)
        assert report.passed, report.failures
        # 2 layers x 12, the embedding, the head, the final norm
        assert report.byte_check["mode"] == "exact" and report.byte_check["tensors"] == 28


def test_one_embedding_row_no_sampled_token_reaches_fails(pair, tmp_path):
    # the reproduction: one row of the input embedding x -3; 64 random ids never draw it
    src, dst = tampered(pair, tmp_path)

    def scale_row(t):
        t = t.clone()
        t[317] *= -3
        return t

    edit_tensor(dst, "gpt_neox.embed_in.weight", scale_row)
    report = verify(src, dst, context=64, greedy_tokens=4)
    assert not report.passed and not report.measured
    assert "tensor gpt_neox.embed_in.weight differs" in report.failures[0], report.failures
    assert "max |difference|" in report.failures[0]


@pytest.mark.parametrize("which", ["f32", "bf16"])
@pytest.mark.parametrize("name",
                         ["gpt_neox.layers.1.mlp.dense_4h_to_h.weight", "gpt_neox.layers.0.attention.dense.weight",
                                  "gpt_neox.embed_in.weight"])
def test_a_damaged_mlp_attention_or_embedding_fails_by_bytes(pair, tmp_path, which, name):
    src, dst = tampered(pair, tmp_path, which)
    edit_tensor(dst, name, torch.zeros_like)
    report = verify(src, dst, context=128, greedy_tokens=4)
    assert not report.passed and f"tensor {name} differs" in report.failures[0], report.failures


def test_quick_still_fails_a_damaged_mlp_by_its_function(pair, tmp_path):
    # --quick reads no tensor value: the functional check, judged against the plan and never against source's
    # error, must catch the damage by itself (float32: 1.4 logits against a limit of 1e-3)
    src, dst = tampered(pair, tmp_path)
    edit_tensor(dst, "gpt_neox.layers.1.mlp.dense_4h_to_h.weight", torch.zeros_like)
    quick = verify(src, dst, context=128, greedy_tokens=4, quick=True)
    assert quick.byte_check["mode"] == "skipped" and quick.measured
    assert not quick.passed and any("converted vs exact ALiBi" in f for f in quick.failures), quick.failures


@pytest.mark.slow
@pytest.mark.parametrize("context", [256, 2048])
def test_half_precision_damage_fails_against_the_plan_not_the_source(tmp_path, context):
    # the reproduction: the demo in bfloat16 at window 2048, layer 2's MLP output zeroed, judged by its function
    # alone (--quick). Native bfloat16 BLOOM is itself several logits from exact: it is no allowance any more.
    from ropebridge.demo import data_dir

    src = data_dir("demo")
    dst = convert(src, tmp_path / "rope", PlanRequest(window=2048, dtype="bfloat16")).destination
    edit_tensor(dst, "gpt_neox.layers.2.mlp.dense_4h_to_h.weight", torch.zeros_like)
    report = verify(src, dst, context=context, text=(src / "heldout.txt").read_text()[:20_000], greedy_tokens=4,
                    quick=True)
    assert not report.passed, (report.reference_converted_max_err, report.thresholds)
    assert report.reference_converted_max_err > report.thresholds["limit"]


@pytest.mark.parametrize("key, value", [("rotary_pct", 0.5), ("rotary_emb_base", 10000.0),
                                         ("tie_word_embeddings", True), ("layer_norm_eps", 1e-6)])
def test_a_config_key_another_engine_reads_fails(pair, tmp_path, key, value):
    src, dst = tampered(pair, tmp_path)
    edit_json(dst / "config.json", lambda c: c.__setitem__(key, value))
    report = verify(src, dst, context=32, greedy_tokens=0)
    assert not report.passed and f"config.json.{key}" in report.failures[0], report.failures


def test_a_tokenizer_with_two_ids_swapped_fails(tmp_path):
    from ropebridge.demo import data_dir

    src = data_dir("demo")
    dst = convert(src, tmp_path / "rope", PlanRequest(window=256, dtype="float32")).destination

    def swap(tok):
        vocab = tok["model"]["vocab"]
        a, b = sorted(vocab)[100:102]
        vocab[a], vocab[b] = vocab[b], vocab[a]

    edit_json(dst / "tokenizer.json", swap)
    report = verify(src, dst, context=32, greedy_tokens=0, quick=True)
    assert not report.passed and "tokenizer.json differs" in report.failures[0], report.failures


def test_the_record_is_not_trusted(pair, tmp_path):
    src, dst = tampered(pair, tmp_path)
    # a raised tolerance: the plan SRC gives with it differs from the one recorded, and the threshold is SRC's
    edit_json(dst / "ropebridge.json", lambda r: r["plan"].__setitem__("tolerance", 10.0))
    report = verify(src, dst, context=32, greedy_tokens=0)
    assert not report.passed and "plan.tolerance" in report.failures[0], report.failures
    # a record claiming bfloat16 for float32 tensors
    shutil.rmtree(dst)
    src, dst = tampered(pair, tmp_path)
    edit_json(dst / "ropebridge.json", lambda r: (r.__setitem__("dtype", "bfloat16"),
                                                  r["asked"].__setitem__("dtype", "bfloat16"),
                                                  r["resolved"].__setitem__("dtype", "bfloat16")))
    report = verify(src, dst, context=32, greedy_tokens=0)
    assert not report.passed and report.dtype == "bfloat16"
    assert any("is float32" in f or "plan" in f for f in report.failures), report.failures


def test_the_resolved_request_a_record_claims_is_derived_again(pair, tmp_path):
    # the record's resolved request is DST's claim: what SRC and the asked request give is compared, key by key
    src, dst = tampered(pair, tmp_path)
    edit_json(dst / "ropebridge.json", lambda r: r["resolved"].__setitem__("kernel", "fa3"))
    report = verify(src, dst, context=32, greedy_tokens=0, quick=True)
    assert not report.passed and "resolved.kernel: DST has 'fa3'" in report.failures[0], report.failures


def test_the_geometry_a_record_claims_is_derived_again_under_either_key(pair, tmp_path):
    # 0.2 kept it under "layout" (convert.older.keys); either way it is compared with what SRC gives
    src, dst = tampered(pair, tmp_path)
    edit_json(dst / "ropebridge.json", lambda r: r.__setitem__("layout", r.pop("geometry")))
    assert verify(src, dst, context=32, greedy_tokens=0, quick=True).passed
    edit_json(dst / "ropebridge.json", lambda r: r["layout"].__setitem__("head_dim", r["layout"]["head_dim"] + 2))
    report = verify(src, dst, context=32, greedy_tokens=0, quick=True)
    assert not report.passed and "geometry.head_dim" in report.failures[0], report.failures


def test_quick_never_takes_its_limit_from_the_record(pair, tmp_path):
    # a record whose request (asked and resolved) and plan all say --tolerance 50 (consistent, so the comparison of
    # the record agrees) and a
    # zeroed MLP: with --quick only the functional check sees the damage, and its limit is the dtype's default
    # tolerance (or 3x the prediction), never the recorded 50
    src, dst = tampered(pair, tmp_path)
    edit_json(dst / "ropebridge.json", lambda r: (r["plan"].__setitem__("tolerance", 50.0),
                                                  r["asked"].__setitem__("tolerance", 50.0),
                                                  r["resolved"].__setitem__("tolerance", 50.0)))
    edit_tensor(dst, "gpt_neox.layers.1.mlp.dense_4h_to_h.weight", torch.zeros_like)
    report = verify(src, dst, context=64, greedy_tokens=0, quick=True)
    assert report.thresholds["max_abs_logit_diff"] == 1e-3 and report.thresholds["limit"] < 1e-2
    assert not report.passed and any("converted vs exact ALiBi" in f for f in report.failures), report.failures


def test_a_file_convert_does_not_write_fails(pair, tmp_path):
    src, dst = tampered(pair, tmp_path)
    shutil.copy(src / "model.safetensors", dst / "model.safetensors")  # which would an engine load?
    report = verify(src, dst, context=32, greedy_tokens=0, quick=True)
    assert not report.passed and "holds both model.safetensors.index.json and model.safetensors" in report.failures[0]
    (dst / "model.safetensors").unlink()
    shutil.copy(src / "model.safetensors", dst / "pytorch_model.bin.safetensors")  # a shard the index does not name
    report = verify(src, dst, context=32, greedy_tokens=0, quick=True)
    assert not report.passed and "pytorch_model.bin.safetensors, a shard model.safetensors.index.json does not " \
        "name" in report.failures[0], report.failures
    (dst / "pytorch_model.bin.safetensors").unlink()
    (dst / "vocab.json").write_text("{}")  # a tokenizer file SRC does not have
    report = verify(src, dst, context=32, greedy_tokens=0, quick=True)
    assert not report.passed and "vocab.json, a file convert does not write" in report.failures[0], report.failures


def test_a_source_changed_in_the_middle_of_its_file_is_refused(pair, tmp_path, capsys):
    src, f32, _ = pair
    other = shutil.copytree(src, tmp_path / "src")
    edit_tensor(other, "transformer.h.0.mlp.dense_4h_to_h.weight", lambda t: t * 1.001)
    assert main(["verify", str(other), str(f32), "--context", "32"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "fingerprint" in err[0], err


def _as_old(r):
    r.pop("asked")
    r.pop("resolved")
    r["ropebridge_version"] = "0.1.0"


def _one_ulp(t):
    t = t.clone()
    i = int(t.view(-1).float().abs().argmax())  # a value that is not zero (the widened heads hold zero columns)
    t.view(-1)[i] = (t.view(-1)[i].float() * (1 + 2**-7)).to(t.dtype)  # the next bfloat16 value
    return t


def test_a_record_that_claims_another_version_widens_nothing(pair, tmp_path, capsys):
    # a record of 0.1 (no request: the options are read from its plan) and a tensor one ulp off: the version is DST's
    # claim about itself, so the byte check stays exact and fails, naming the tensor
    src, dst = tampered(pair, tmp_path, "bf16")
    edit_json(dst / "ropebridge.json", _as_old)
    assert verify(src, dst, context=64, greedy_tokens=0).passed  # its bytes are this version's: identical
    edit_tensor(dst, "gpt_neox.layers.0.mlp.dense_h_to_4h.weight", _one_ulp)
    assert main(["verify", str(src), str(dst), "--context", "64", "--greedy-tokens", "4"]) == 1
    out = capsys.readouterr().out
    assert "tensor gpt_neox.layers.0.mlp.dense_h_to_4h.weight differs" in out and "1 of" in out, out


def test_accept_older_reports_each_differing_tensor_and_the_function_decides(pair, tmp_path, capsys):
    src, dst = tampered(pair, tmp_path, "bf16")
    edit_json(dst / "ropebridge.json", _as_old)
    edit_tensor(dst, "gpt_neox.layers.0.mlp.dense_h_to_4h.weight", _one_ulp)
    edit_tensor(dst, "gpt_neox.layers.1.attention.dense.weight", _one_ulp)
    cmd = ["verify", str(src), str(dst), "--context", "64", "--greedy-tokens", "4", "--accept-older"]
    assert main(cmd) == 0
    out = capsys.readouterr().out
    assert "not proven (--accept-older: the function decides)" in out and "2 differ" in out and "PASSED" in out, out
    assert "gpt_neox.layers.1.attention.dense.weight: 1 of" in out, out  # each tensor named, not the first only
    report = verify(src, dst, context=64, greedy_tokens=4, accept_older=True)
    assert report.byte_check["mode"] == "unproven" and len(report.byte_check["differences"]) == 2
    edit_tensor(dst, "embed_out.weight", lambda t: t * 4)  # the function sees this
    assert main(cmd) == 1
    assert "converted vs exact ALiBi" in capsys.readouterr().out


def test_accept_older_changes_nothing_for_a_record_of_this_version(pair, tmp_path, capsys):
    # a record naming the running version has nothing older to accept: every byte is compared, the damage fails by
    # its bytes, and the report says in one line that the flag was ignored
    src, dst = tampered(pair, tmp_path, "bf16")
    edit_tensor(dst, "gpt_neox.layers.0.mlp.dense_h_to_4h.weight", _one_ulp)
    assert main(["verify", str(src), str(dst), "--context", "64", "--greedy-tokens", "4", "--accept-older"]) == 1
    out = capsys.readouterr().out
    from ropebridge import __version__

    assert (f"--accept-older ignored: DST's record names ropebridge {__version__}, not older than this "
            f"{__version__}") in out, out
    assert "tensor gpt_neox.layers.0.mlp.dense_h_to_4h.weight differs" in out, out
    report = verify(src, dst, context=64, greedy_tokens=0, accept_older=True)
    assert report.byte_check["mode"] == "exact" and not report.passed


def test_only_a_release_before_this_one_is_older():
    from ropebridge.convert.record import written_by_older

    from ropebridge import __version__

    major, minor, _ = (int(x) for x in __version__.split("."))
    assert written_by_older(f"{major}.{minor - 1}.9") and not written_by_older(__version__)
    assert not written_by_older(f"{major}.{minor + 1}.0") and not written_by_older(None)
    assert not written_by_older("latest")


@pytest.mark.parametrize("family, target", [("bloom-4heads", "gpt-neox"), ("mpt", "nemotron"),
                                            ("bloom-4heads", "starcoder2"), ("falcon-rw", "persimmon"),
                                            ("jais", "stablelm"), ("baichuan", "llama")])
def test_on_every_target_an_older_record_and_one_ulp_fail(tmp_path, family, target):
    # every target's writer under the same exact rule: an attention output one ulp off, or every value of an MLP
    # matrix, in a DST whose record names 0.1.0, fails by its bytes
    from pico import build_remote

    maker = build_remote if family in ("jais", "baichuan") else build
    src = maker(tmp_path / family, family)
    strategy = {"strategy": "single"} if target == "starcoder2" else {}
    dst = convert(src, tmp_path / "rope", PlanRequest(window=256, dtype="bfloat16", target=target,
                                                      **strategy)).destination
    edit_json(dst / "ropebridge.json", lambda r: r.update(ropebridge_version="0.1.0"))
    index = json.loads((dst / "model.safetensors.index.json").read_text())["weight_map"] if (
        dst / "model.safetensors.index.json").exists() else None
    names = list(index) if index else _names(dst / "model.safetensors")
    attention = next(n for n in names if ".1." in n and n.endswith(("attention.dense.weight", "o_proj.weight",
                                                                   "self_attn.dense.weight")))
    mlp = next(n for n in names if ".0." in n and n.endswith(("dense_4h_to_h.weight", "down_proj.weight",
                                                             "mlp.c_proj.weight", "fc2.weight")))
    for name, damage in ((attention, _one_ulp), (mlp, lambda t: (t.float() * (1 + 2**-7)).to(t.dtype))):
        damaged = shutil.copytree(dst, tmp_path / f"damaged-{name}")
        edit_tensor(damaged, name, damage)
        report = verify(src, damaged, context=32, greedy_tokens=0)
        assert not report.passed and f"tensor {name} differs" in report.failures[0], (name, report.failures)


def _names(path):
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        return list(f.keys())


def test_a_record_in_early_0_2_names_is_read_and_compared_exactly(pair, tmp_path):
    # early 0.2 recorded one request (no asked and resolved), its strategy as "emulation", and the plan's "mode";
    # the values are the same
    src, dst = tampered(pair, tmp_path, "f32")

    def as_early(r):
        r.pop("resolved")
        r["request"] = r.pop("asked")
        r["request"]["emulation"] = r["request"].pop("strategy")
        r["plan"]["mode"] = r["plan"].pop("theta_rule") or r["plan"]["strategy"]
        r["plan"].pop("strategy")

    edit_json(dst / "ropebridge.json", as_early)
    report = verify(src, dst, context=64, greedy_tokens=4)
    assert report.passed and report.byte_check["mode"] == "exact", report.failures
    edit_json(dst / "ropebridge.json", lambda r: r["plan"].update(mode="max-phase"))  # another rule: not SRC's
    report = verify(src, dst, context=64, greedy_tokens=4)
    assert not report.passed and "plan.theta_rule" in report.failures[0], report.failures


def test_first_difference_names_the_path():
    assert first_difference({"a": [1, {"b": 2}]}, {"a": [1, {"b": 3}]}) == "a[1].b: DST has 2, SRC gives 3"
    assert first_difference({"a": 1}, {"a": 1, "c": 0}) == "c: DST lacks it"
    assert first_difference({"a": 1.0 + 1e-9}, {"a": 1.0}, rtol=1e-6) is None
    assert first_difference({"a": True}, {"a": 1}) is not None


@pytest.fixture(scope="module")
def sharded(pair, tmp_path_factory):
    src = pair[0]
    return src, convert(src, tmp_path_factory.mktemp("sharded") / "dst", PlanRequest(window=256),
                        max_shard_mb=0.05).destination


def _shard_edit(dst, how):
    """DST's index and shards made to disagree as ``how`` says, on a tensor whose shard holds others too (so
    that the shard stays named)."""
    from safetensors.torch import load_file, save_file

    index_path = dst / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    shards = list(index["weight_map"].values())
    name = next(n for n, f in sorted(index["weight_map"].items()) if shards.count(f) > 1)
    home = index["weight_map"][name]
    other = next(f for f in sorted(set(index["weight_map"].values())) if f != home)
    if how in ("copy", "unnamed"):
        target = dst / (other if how == "copy" else "model-99999-of-99999.safetensors")
        tensors = load_file(target) if target.exists() else {}
        tensors[name] = load_file(dst / home)[name] * 1.0001
        save_file(tensors, target, metadata={"format": "pt"})
    if how in ("copy", "pointer"):
        index["weight_map"][name] = other  # "pointer": at a shard that lacks it
        index_path.write_text(json.dumps(index))
    return name


@pytest.mark.parametrize("how, needle", [("copy", "is stored in both"), ("unnamed", "does not name"),
                                         ("pointer", "is stored in model-")])
def test_dst_is_read_through_its_index_as_engines_read_it(sharded, tmp_path, how, needle):
    src, dst = sharded
    assert len(list(dst.glob("model-*.safetensors"))) > 3
    dst = shutil.copytree(dst, tmp_path / "dst")
    name = _shard_edit(dst, how)
    report = verify(src, dst, context=32, greedy_tokens=0)
    named = "model-99999-of-99999.safetensors" if how == "unnamed" else name
    assert not report.passed and needle in report.failures[0] and named in report.failures[0], report.failures
