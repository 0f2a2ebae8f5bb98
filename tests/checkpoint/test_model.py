"""The source model: the canonical view of every family against transformers' own numbers, the config taken as
given (read once), and shapes checked before bytes."""

import json
import math

import pytest
import torch
import transformers as T
from pico import FAMILIES, build

from ropebridge.checkpoint.model import SourceModel
from ropebridge.checkpoint.reference import reference_logits


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_canonical_model_computes_what_transformers_computes(tmp_path, family):
    # every family's layout read into one canonical block (fused QKV per head, [Q|K|V], multi-query, parallel
    # residual, folded embedding LayerNorm), run exactly in float64, against transformers' model in float64
    # (Falcon's bias computed as the family defines it: transformers rounds it to bfloat16). transformers builds
    # the ALiBi bias in float32, so the logits agree to float32's rounding of a bias of size m L, not float64's;
    # a layout read wrong moves them by O(1).
    from ropebridge.verify.deviations import as_defined

    src = build(tmp_path / family, family)
    ids = torch.randint(0, 320, (1, 64), generator=torch.Generator().manual_seed(1))
    model = SourceModel(src)
    theirs = T.AutoModelForCausalLM.from_pretrained(src, dtype=torch.float64).eval()
    with torch.no_grad(), as_defined(theirs, model):
        theirs = theirs(ids).logits
    ours = reference_logits(model, ids)
    bias = max(model.info.slopes) * ids.shape[1]  # the largest bias, logits
    assert float((ours - theirs).abs().max()) < 64 * 2.0**-24 * max(bias, float(theirs.abs().max()))


def test_the_config_is_taken_as_given(tmp_path):
    src = build(tmp_path / "bloom", "bloom-4heads")
    config = json.loads((src / "config.json").read_text())
    config["layer_norm_epsilon"] = 1e-3  # not what the file says: the model uses the config it was given
    (src / "config.json").write_text("not json")  # and never reads the file again
    assert SourceModel(src, config).info.eps == 1e-3


def test_a_shape_the_config_does_not_imply_is_refused_before_reading(tmp_path):
    src = build(tmp_path / "bloom", "bloom-4heads")
    config = json.loads((src / "config.json").read_text())
    config["vocab_size"] = 330
    with pytest.raises(ValueError, match="transformer.word_embeddings.weight.*330"):
        SourceModel(src, config)


def test_a_baichuan_checkpoint_is_checked_against_its_layout(tmp_path):
    # no Baichuan tensor carries a bias (its code builds none): one in the file is refused, naming it; a missing
    # gate and a W_pack of the wrong size likewise, before any byte is read
    from safetensors.torch import load_file

    from pico import build_remote

    src = build_remote(tmp_path / "b", "baichuan")
    model = SourceModel(src)
    assert model.linears() == ("qkv", "o", "up", "down", "gate") and model.info.block == "rmsnorm-gated"
    tensors = load_file(src / "model.safetensors")
    cases = [("bias", {**tensors, "model.layers.0.mlp.up_proj.bias": torch.zeros(160)}, "the baichuan family has none"),
             ("gate", {k: v for k, v in tensors.items() if "layers.1.mlp.gate_proj" not in k},
              "gate_proj.weight' is missing"),
             ("qkv", {**tensors, "model.layers.0.self_attn.W_pack.weight": torch.zeros(2 * 96, 96)}, "shape [192, 96]")]
    _each_refused_in_one_line(src, cases, tmp_path)


def test_a_refact_checkpoint_is_read_through_its_fused_tensors_and_checked_by_their_names(tmp_path):
    # q alone, k and v fused in attn.kv, gate and up fused in gate_up_proj: read as the canonical multi-query QKV
    # and the gate and up; a stored tensor of the wrong size, a missing one or a bias are refused naming it
    from safetensors.torch import load_file

    from pico import build_remote

    src = build_remote(tmp_path / "r", "refact")
    model = SourceModel(src)
    tensors = load_file(src / "model.safetensors")
    p = "transformer.h.1."
    q, kv, gate_up = (tensors[p + n].double() for n in ("attn.q.weight", "attn.kv.weight", "mlp.gate_up_proj.weight"))
    assert torch.equal(model.qkv_part(1, 0), q.view(6, 16, 96))
    assert torch.equal(model.qkv_part(1, 1), kv[:16].expand(6, 16, 96))  # one k head, replicated per query head
    assert torch.equal(model.qkv_part(1, 2, (2, 4)), kv[16:].expand(2, 16, 96))
    assert torch.equal(model.weight(1, "gate"), gate_up[:256]) and torch.equal(model.weight(1, "up"), gate_up[256:])
    assert torch.equal(model.weight(1, "up", rows=(10, 20)), gate_up[266:276])
    read = sum(math.prod(model.reader.shape(n)) for n in model.reader.names())
    assert read == sum(t.numel() for t in tensors.values())
    cases = [("kv", {**tensors, p + "attn.kv.weight": torch.zeros(48, 96)},
              "'transformer.h.1.attn.kv.weight' has shape [48, 96]"),
             ("gate_up", {k: v for k, v in tensors.items() if "gate_up" not in k}, "gate_up_proj.weight' is missing"),
             ("bias", {**tensors, p + "attn.q.bias": torch.zeros(96)}, "attn.q.bias' is a bias")]
    _each_refused_in_one_line(src, cases, tmp_path)


def _each_refused_in_one_line(src, cases, tmp_path):
    """Each (name, tensors, needle) of ``cases`` saved beside ``src``'s config is refused, one line naming it."""
    from safetensors.torch import save_file

    for name, bad, needle in cases:
        directory = tmp_path / name
        directory.mkdir()
        (directory / "config.json").write_text((src / "config.json").read_text())
        save_file(bad, directory / "model.safetensors")
        with pytest.raises(ValueError, match=needle.replace("[", r"\[").replace("]", r"\]")) as exc:
            SourceModel(directory)
        assert "\n" not in str(exc.value)


def test_an_mpt_with_a_learned_position_table_is_refused_by_its_tensor_not_its_config(tmp_path):
    # transformers' MptConfig writes learned_pos_emb = true by default (the embedded demo's config says so) and its
    # MPT builds no wpe: the key alone is no evidence; a stored transformer.wpe.weight is, and is refused
    from safetensors.torch import load_file, save_file

    src = build(tmp_path / "mpt", "mpt")
    config = json.loads((src / "config.json").read_text())
    assert config.get("learned_pos_emb") is True and SourceModel(src).info.family == "mpt"
    tensors = load_file(src / "model.safetensors")
    tensors["transformer.wpe.weight"] = torch.zeros(config["max_seq_len"], config["d_model"])
    save_file(tensors, src / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match="transformer.wpe.weight' is a learned position embedding") as exc:
        SourceModel(src)
    assert "\n" not in str(exc.value)


def test_a_jais_checkpoint_is_read_through_its_conv1d_tensors_and_stored_slopes(tmp_path):
    # GPT-2's Conv1D: every block weight stored input x output, read transposed; the stored slopes taken as stored,
    # after the check against the formula; muP's scales folded into the embedding and head rows
    from safetensors.torch import load_file

    from pico import build_remote

    src = build_remote(tmp_path / "j", "jais")
    model = SourceModel(src)
    tensors = {k: v.double() for k, v in load_file(src / "model.safetensors").items()}
    p = "transformer.h.1."
    c_attn = tensors[p + "attn.c_attn.weight"]  # (D, 3D)
    assert torch.equal(model.qkv_part(1, 1), c_attn[:, 96:192].T.reshape(6, 16, 96))  # [Q | K | V], K's block
    assert torch.equal(model.weight(1, "gate", rows=(5, 9)), tensors[p + "mlp.c_fc2.weight"][:, 5:9].T)
    assert torch.equal(model.weight(1, "down"), tensors[p + "mlp.c_proj.weight"].T)
    assert model.info.slopes == tuple(tensors["transformer.relative_pe.slopes"].reshape(-1).tolist())
    assert torch.equal(model.embedding_rows(3, 5), tensors["transformer.wte.weight"][3:5] * 14.6)
    assert torch.equal(model.head_rows(3, 5), tensors["transformer.wte.weight"][3:5] * 0.111)  # tied, times width_scale
    cases = [("slope", {**tensors, "transformer.relative_pe.slopes": tensors["transformer.relative_pe.slopes"] * 1.01},
              "holds slope .* for head 0, where ALiBi's formula gives"),
             ("c_fc", {**tensors, p + "mlp.c_fc.weight": torch.zeros(160, 96)},
              "shape [96, 160] .read transposed, as GPT-2.s Conv1D")]
    _each_refused_in_one_line(src, cases, tmp_path)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_slopes_stored_in_half_precision_are_taken_as_stored(tmp_path, dtype):
    # a half-precision checkpoint stores the slopes rounded to its dtype, and its code applies those
    from safetensors.torch import load_file, save_file

    from pico import build_remote

    src = build_remote(tmp_path / "b", "btlm", alibi_scaling={"type": "linear", "factor": 2.0})
    tensors = load_file(src / "model.safetensors")
    tensors["transformer.relative_pe.slopes"] = tensors["transformer.relative_pe.slopes"].to(dtype)
    save_file(tensors, src / "model.safetensors")
    stored = tensors["transformer.relative_pe.slopes"].double().reshape(-1)
    assert SourceModel(src).info.slopes == tuple((stored / 2).tolist())


# each family's other variants: the tensor a RoPE (or learned-position) model of it stores, and the config key
# that says this one is ALiBi
VARIANT_TENSORS = {
    "bloom-4heads": ("transformer.h.0.self_attention.rotary_emb.inv_freq", "model_type = 'bloom'"),
    "mpt": ("transformer.blocks.0.attn.rotary_emb.inv_freq", "attn_config.alibi = True"),
    "falcon-rw": ("transformer.h.0.self_attention.maybe_rotary.inv_freq", "alibi = True"),
    "baichuan": ("model.layers.0.self_attn.rotary_emb.inv_freq", "hidden_size = 96"),
    "refact": ("transformer.wpe.weight", "model_type = 'gpt_refact'"),
    "replit": ("transformer.wpe.weight", "alibi = True"),
    "jais": ("transformer.wpe.weight", "position_embedding_type = 'alibi'"),
    "btlm": ("transformer.h.0.attn.rotary_emb.inv_freq", "position_embedding_type = 'alibi'"),
}


@pytest.mark.parametrize("family", sorted(VARIANT_TENSORS))
def test_a_tensor_of_another_variant_beside_an_alibi_config_is_refused_naming_both(tmp_path, family):
    from pico import build_remote
    from safetensors.torch import load_file, save_file

    src = (build(tmp_path / family, family) if family in FAMILIES else build_remote(tmp_path / family, family))
    SourceModel(src)  # the untouched source reads
    tensors = load_file(src / "model.safetensors")
    name, key = VARIANT_TENSORS[family]
    tensors[name] = torch.ones(8, 4) if name.endswith("wpe.weight") else torch.ones(4)
    save_file(tensors, src / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError) as exc:
        SourceModel(src)
    assert name in str(exc.value) and f"config {key}" in str(exc.value) and "\n" not in str(exc.value), exc.value
