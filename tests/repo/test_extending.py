"""Adding a source family is one row of ``checkpoint.families.FAMILIES``; adding a target is one row of
``targets.TARGETS`` and one writer in ``writers.WRITERS`` (docs/architecture.md, "Adding a family", "Adding a
target"). Each is added here in a test, with nothing else touched, and converts and verifies end to end."""

import math

import pytest
import torch
import transformers as T
from pico import build
from safetensors.torch import load_file, save_file

from ropebridge.checkpoint import families
from ropebridge.checkpoint.families import Family, FamilyDetails
from ropebridge.checkpoint.model import SourceModel
from ropebridge.checkpoint.reference import reference_logits
from ropebridge.checkpoint.tensor_io import row_blocks, single
from ropebridge.convert import convert
from ropebridge.verify import verify
from ropebridge.emulation import PlanRequest
from ropebridge.numerics import TOLERANCE
from ropebridge.targets import TARGETS, Target
from ropebridge.targets.support import COLUMNS, Support
from ropebridge.writers import WRITERS, Writer
from ropebridge.writers.blocks import (WORK, attention_out_rows, embedding_rows, head_rows, mean_padded_rows,
                                       pad_rows_with_mean, padded_geometry, padded_layout, padded_norm, padded_shapes,
                                       proj_bias, proj_rows, reader_rows)

# --- a family as one row: BLOOM's block under other tensor names and another model_type ------------------------

TOY_NAMES = {"input_layernorm": "norm_a", "post_attention_layernorm": "norm_b", "self_attention.query_key_value": "mix",
             "self_attention.dense": "out", "mlp.dense_h_to_4h": "ff_in", "mlp.dense_4h_to_h": "ff_out"}


def _toy_block(i: int) -> dict[str, str]:
    p = f"toy.blocks.{i}."
    return {"ln1": p + "norm_a", "ln2": p + "norm_b", "qkv": p + "mix", "o": p + "out", "up": p + "ff_in",
            "down": p + "ff_out"}


TOY = Family(name="toy", model_types=("toy_alibi",), heads=("n_head",), hidden=("hidden_size",), layers=("n_layer",),
             details=lambda c, d, hd: FamilyDetails(max_bias=8.0, eps=c.get("layer_norm_epsilon", 1e-5),
                                                    activation="gelu_pytorch_tanh", intermediate_size=4 * d,
                                                    qk_scale=1 / math.sqrt(hd)),
             tensor_names=_toy_block,
             globals={"emb": "toy.embed.weight", "ln_f": "toy.norm_f", "head": "toy.head.weight"},
             qkv_layout="per-head", attention=None, embedding_norm="toy.embed_norm", label="Toy")


def _toy_checkpoint(bloom, directory):
    """The BLOOM pico's tensors renamed as ``TOY`` names them, its config under ``model_type: toy_alibi``."""
    import json
    import shutil

    tensors = {}
    for name, t in load_file(bloom / "model.safetensors").items():
        name = name.replace("transformer.word_embeddings_layernorm", "toy.embed_norm").replace(
            "transformer.word_embeddings", "toy.embed").replace("transformer.ln_f", "toy.norm_f").replace(
            "lm_head", "toy.head").replace("transformer.h.", "toy.blocks.")
        for old, new in TOY_NAMES.items():
            name = name.replace(old, new)
        tensors[name] = t
    if "toy.head.weight" not in tensors:  # BLOOM ties its head: the toy stores it
        tensors["toy.head.weight"] = tensors["toy.embed.weight"].clone()
    directory.mkdir()
    save_file(tensors, directory / "model.safetensors")
    config = json.loads((bloom / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, "model_type": "toy_alibi",
                                                       "architectures": ["ToyForCausalLM"]}))
    for side in ("tokenizer.json", "tokenizer_config.json"):
        if (bloom / side).exists():
            shutil.copy(bloom / side, directory / side)
    return directory


def _tensors(directory) -> dict[str, torch.Tensor]:
    return {k: v for shard in sorted(directory.glob("*.safetensors")) for k, v in load_file(shard).items()}


def test_a_family_is_one_row(tmp_path, monkeypatch):
    monkeypatch.setitem(families.FAMILIES, "toy", TOY)
    bloom = build(tmp_path / "bloom", "bloom-4heads")
    toy = _toy_checkpoint(bloom, tmp_path / "toy")
    assert SourceModel(toy).info.family == "toy"
    request = PlanRequest(window=256, dtype="float32")
    written = _tensors(convert(toy, tmp_path / "toy-rope", request).destination)
    expected = _tensors(convert(bloom, tmp_path / "bloom-rope", request).destination)
    # the same model read through another row: the same stock checkpoint, byte for byte
    assert written.keys() == expected.keys() and all(torch.equal(written[k], expected[k]) for k in expected)
    report = verify(toy, tmp_path / "toy-rope", context=128, greedy_tokens=4)
    assert report.passed and not report.source_ran, report.failures  # no transformers class: the reference stands


# --- a target as one row and one writer: Phi (one LayerNorm, attention and MLP in parallel) -----------------------


def _phi_layout(src, plan, target):
    if not src.info.parallel:
        raise ValueError(f"--target {target.name} runs attention and MLP in parallel; this {src.info.family} model "
                         "does not")
    return padded_layout(src, plan, target)


def _phi_tensors(src, lay, shards) -> None:
    info = src.info
    d, dp, v, h, f, hd = (info.hidden_size, lay.hidden_size, info.vocab_size, info.n_heads, info.intermediate_size,
                          lay.head_dim)
    pads = dp - d
    shards.add("model.embed_tokens.weight", (v, dp),
               row_blocks(lambda a, b: embedding_rows(src, a, b, pads), v, 8 * dp))
    for i in range(info.n_layers):
        p = f"model.layers.{i}."
        for k, part in enumerate(("weight", "bias")):
            shards.add(p + f"input_layernorm.{part}", (dp,),
                       single(lambda i=i, k=k: padded_norm(*src.norm(i, "ln1"), d, pads)[k]))
        for part, x in enumerate("qkv"):
            shards.add(p + f"self_attn.{x}_proj.weight", (h * hd, dp),
                       row_blocks(lambda a, b, i=i, part=part: proj_rows(src, i, lay, part, a, b, shards.dtype), h,
                                  8 * hd * dp))
            shards.add(p + f"self_attn.{x}_proj.bias", (h * hd,),
                       single(lambda i=i, part=part: proj_bias(src, i, lay, part).reshape(-1)))
        shards.add(p + "self_attn.dense.weight", (dp, h * hd),
                   mean_padded_rows(lambda a, b, i=i: attention_out_rows(src, i, lay, a, b), d, pads, h * hd))
        shards.add(p + "self_attn.dense.bias", (dp,),
                   single(lambda i=i: pad_rows_with_mean(src.bias(i, "o", WORK), pads)))
        shards.add(p + "mlp.fc1.weight", (f, dp),
                   row_blocks(lambda a, b, i=i: reader_rows(src, i, "up", lay, a, b, shards.dtype), f, 8 * dp))
        shards.add(p + "mlp.fc1.bias", (f,), single(lambda i=i: src.bias(i, "up", WORK)))
        shards.add(p + "mlp.fc2.weight", (dp, f),
                   mean_padded_rows(lambda a, b, i=i: src.weight(i, "down", WORK, (a, b)), d, pads, f))
        shards.add(p + "mlp.fc2.bias", (dp,), single(lambda i=i: pad_rows_with_mean(src.bias(i, "down", WORK), pads)))
    for k, part in enumerate(("weight", "bias")):
        shards.add(f"model.final_layernorm.{part}", (dp,),
                   single(lambda k=k: padded_norm(*src.final_norm(), d, pads)[k]))
    shards.add("lm_head.weight", (v, dp), row_blocks(lambda a, b: head_rows(src, a, b, pads, shards.dtype), v, 8 * dp))
    shards.add("lm_head.bias", (v,), single(lambda: torch.zeros(v)))


def _phi_config(src, lay, plan) -> dict:
    info = src.info
    d = info.hidden_size
    return {"architectures": [lay.target.architecture], "model_type": lay.target.model_type,
            "vocab_size": info.vocab_size, "hidden_size": lay.hidden_size, "intermediate_size": info.intermediate_size,
            "num_hidden_layers": info.n_layers, "num_attention_heads": info.n_heads,
            "num_key_value_heads": info.n_heads, "hidden_act": info.activation, "max_position_embeddings": plan.window,
            "layer_norm_eps": info.eps * d / lay.hidden_size, "tie_word_embeddings": False, "qk_layernorm": False,
            "rope_parameters": {"rope_type": "default", "rope_theta": lay.base,
                                "partial_rotary_factor": lay.rotary_pct},
            "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attention_dropout": 0.0, "dtype": plan.dtype}


PHI = Target(name="phi", architecture="PhiForCausalLM", model_type="phi", strategies=("ladder", "single", "fixed-base"),
             rotary_block=True, pair_dims="block",
             serving=("transformers: `AutoModelForCausalLM.from_pretrained(\"{dst}\")`",), parallel_residual=True,
             support={**{c: Support("none", "not read") for c in COLUMNS}, "transformers": Support("native", "tested")})
PHI_WRITER = Writer("phi", _phi_layout, _phi_tensors, _phi_config, padded_geometry, padded_shapes)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_target_is_one_row_and_one_writer(tmp_path, monkeypatch, dtype):
    monkeypatch.setitem(TARGETS, "phi", PHI)
    monkeypatch.setitem(WRITERS, "phi", PHI_WRITER)
    src = build(tmp_path / "src", "falcon-parallel-mq")
    dst = convert(src, tmp_path / "phi", PlanRequest(window=256, dtype=dtype, target="phi")).destination
    model = T.AutoModelForCausalLM.from_pretrained(dst, dtype=torch.float32).eval()
    assert type(model).__name__ == "PhiForCausalLM"
    ids = torch.randint(0, 320, (1, 256), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        err = float((model(ids).logits.double() - reference_logits(SourceModel(src), ids)).abs().max())
    assert err <= TOLERANCE[dtype], err  # the stored dtype's values run in float32: within that dtype's tolerance
    report = verify(src, dst, context=128, greedy_tokens=4)
    assert report.passed, report.failures
    with pytest.raises(ValueError, match="--target phi runs attention and MLP in parallel"):
        convert(build(tmp_path / "seq", "bloom-4heads"), tmp_path / "no", PlanRequest(window=256, target="phi"))
