"""Serving arithmetic: parameter counts from shapes against transformers and against what convert stores,
tensor-parallel splits on stored shapes, the docs' tables."""

import json
from pathlib import Path

import pytest
import transformers as T
from pico import build

from ropebridge.checkpoint.tensor_io import CheckpointReader
from ropebridge.convert import convert
from ropebridge.emulation import PlanRequest
from ropebridge.serving import Geometry, converted_checkpoint, shape_only_checkpoint

ROOT = Path(__file__).resolve().parents[1]


def stored_params(directory: Path) -> int:
    reader = CheckpointReader(directory)
    total = 0
    for name in reader.names():
        n = 1
        for s in reader.shape(name):
            n *= s
        total += n
    return total


def test_bloom_176b_has_its_published_parameter_count(tmp_path):
    config = {"model_type": "bloom", "n_layer": 70, "hidden_size": 14336, "n_head": 112, "vocab_size": 250880}
    assert shape_only_checkpoint(config, tmp_path) == 176_247_271_424  # BLOOM paper, table of model sizes
    assert (tmp_path / "model.safetensors").stat().st_blocks * 512 < 2**20  # a header and a hole


@pytest.fixture(scope="module")
def converted_112(tmp_path_factory):
    root = tmp_path_factory.mktemp("serving")
    src = build(root / "src", "bloom-4heads", n_head=112, hidden_size=112 * 8, n_layer=1)
    res = convert(src, root / "dst", PlanRequest(window=128, dtype="float32"))
    return src, res.destination


@pytest.mark.parametrize("family", ["bloom-4heads", "mpt", "falcon-rw"])
@pytest.mark.parametrize("target", ["gpt-neox", "nemotron", "starcoder2"])
def test_counts_from_shapes_are_what_convert_stores(family, target, tmp_path):
    src = build(tmp_path / "src", family)
    config = json.loads((src / "config.json").read_text())
    assert shape_only_checkpoint(config,
                                 tmp_path / "shapes") == T.AutoModelForCausalLM.from_pretrained(src).num_parameters()
    request = PlanRequest(window=128, dtype="bfloat16", target=target)
    params, predicted_config = converted_checkpoint(tmp_path / "shapes", request)
    dst = convert(src, tmp_path / "dst", request).destination
    assert params == stored_params(dst)
    assert predicted_config == json.loads((dst / "config.json").read_text())
    geo = Geometry.from_config(predicted_config)
    assert (geo.architecture, geo.layers) == (target, config_layers(config))
    reader = CheckpointReader(dst)  # the key rows convert stored: kv_heads * head_dim (GPT-NeoX: fused, 3 h hd)
    key = next(n for n in reader.names() if n.endswith(("k_proj.weight", "query_key_value.weight")))
    assert reader.shape(key)[0] == (3 * geo.heads if "query_key_value" in key else geo.kv_heads) * geo.head_dim
    assert geo.kv_bytes_per_token(2) == 2 * config_layers(config) * geo.heads * geo.head_dim * 2


@pytest.mark.parametrize("engine", [None, "vllm", "sglang", "trtllm", "llama.cpp"])
def test_what_serving_predicts_is_what_convert_writes_for_every_engine(engine, tmp_path):
    # the engine chooses the target (vLLM: nemotron, SGLang: persimmon, llama.cpp: gpt-neox for BLOOM's block); the
    # prediction takes the resolved one, as convert does. TensorRT-LLM runs no target for BLOOM: both refuse alike
    src = build(tmp_path / "src", "bloom-4heads")
    config = json.loads((src / "config.json").read_text())
    shape_only_checkpoint(config, tmp_path / "shapes")
    request = PlanRequest(window=128, dtype="bfloat16", engine=engine)
    if engine == "trtllm":
        for action in (lambda: converted_checkpoint(tmp_path / "shapes", request),
                       lambda: convert(src, tmp_path / "dst", request)):
            with pytest.raises(ValueError, match="runs no target that carries this bloom model"):
                action()
        return
    params, predicted_config = converted_checkpoint(tmp_path / "shapes", request)
    dst = convert(src, tmp_path / "dst", request).destination
    assert params == stored_params(dst) and predicted_config == json.loads((dst / "config.json").read_text())


def config_layers(config: dict) -> int:
    return next(config[k] for k in ("n_layer", "n_layers", "num_hidden_layers") if k in config)


def test_geometry_reads_every_family(converted_112):
    src, dst = converted_112
    native = Geometry.from_config(json.loads((src / "config.json").read_text()))
    layout = json.loads((dst / "ropebridge.json").read_text())["geometry"]
    target = Geometry.from_config(json.loads((dst / "config.json").read_text()))
    assert (native.architecture, native.heads, native.kv_heads, native.head_dim) == ("bloom", 112, 112, 8)
    assert (target.architecture, target.head_dim, target.hidden) == ("gpt-neox", layout["head_dim"],
                                                                     layout["hidden_size"])
    assert target.kv_bytes_per_token(2) == 2 * 1 * 112 * layout["head_dim"] * 2
    mq = {"model_type": "falcon", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 8,
          "vocab_size": 10, "alibi": True, "multi_query": True, "parallel_attn": False}
    assert Geometry.from_config(mq).kv_heads == 1  # multi-query: one key/value head in the native cache
    for flag in (True, False, None):  # None: no key, FalconConfig's default (multi-query)
        config = {k: v for k, v in {**mq, "multi_query": flag}.items() if v is not None}
        expected = 1 if T.FalconConfig(**config).multi_query else 8
        assert Geometry.from_config(config).kv_heads == expected, flag


def test_converted_checkpoint_splits_evenly(converted_112):
    _, dst = converted_112
    geo = Geometry.from_config(json.loads((dst / "config.json").read_text()))
    for tp in (1, 2, 4, 8):
        assert geo.tp_problems(tp) == [], tp
    assert any("112 heads" in p for p in geo.tp_problems(3))


def test_geometry_validates():
    with pytest.raises(ValueError, match="heads"):
        Geometry("bloom", 1, 0, 1, 8, 8, 32)
    with pytest.raises(ValueError, match="'gpt2' is not an ALiBi model"):
        Geometry.from_config({"model_type": "gpt2"})
    with pytest.raises(ValueError, match="llama config.json lacks the key"):  # a target's config, incomplete
        Geometry.from_config({"model_type": "llama"})


def _serving_table():
    from benchmarks import serving_table

    return serving_table


def test_the_docs_hold_the_stored_serving_tables():
    st = _serving_table()
    block = f"<!-- table: serving -->\n{st.tables(st.stored())}\n<!-- /table -->"  # tables.py writes it
    assert block in (ROOT / "docs" / "targets.md").read_text()


@pytest.mark.slow
def test_the_stored_serving_table_is_what_the_script_computes():
    st = _serving_table()
    assert json.loads(json.dumps(st.numbers(("Falcon-RW-7B",)))) == {"Falcon-RW-7B": st.stored()["Falcon-RW-7B"]}


def test_a_remote_code_family_is_shaped_by_its_published_layout(tmp_path):
    # Baichuan-13B-Base's pytorch_model.bin.index.json states total_size 26529802240 bytes (float16): the header
    # written from its config alone holds exactly as many parameters, under its own tensor names
    import struct

    config = {"model_type": "baichuan", "hidden_size": 5120, "num_attention_heads": 40, "num_hidden_layers": 40,
              "intermediate_size": 13696, "vocab_size": 64000, "hidden_act": "silu", "rms_norm_eps": 1e-6,
              "tie_word_embeddings": False}
    assert shape_only_checkpoint(config, tmp_path / "b13") == 26529802240 // 2
    with open(tmp_path / "b13" / "model.safetensors", "rb") as f:  # the header only: the data is a 26 GB hole
        names = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    assert "model.layers.39.self_attn.W_pack.weight" in names and "lm_head.weight" in names


def test_refact_is_shaped_by_its_stored_tensors(tmp_path):
    # the header holds Refact's own fused tensors (attn.q, attn.kv, gate_up_proj), each once
    import struct

    MODELS = _serving_table().MODELS
    d, f, v, layers = 2048, 5632, 49216, 32
    per_layer = d * d + 2 * 64 * d + d * d + 2 * f * d + d * f + 2 * d  # q, kv, c_proj, gate_up, down, ln_1/ln_2
    assert shape_only_checkpoint(MODELS["Refact-1.6B"], tmp_path / "r") == 2 * v * d + layers * per_layer + d
    with open(tmp_path / "r" / "model.safetensors", "rb") as f_:
        names = json.loads(f_.read(struct.unpack("<Q", f_.read(8))[0]))
    assert {"transformer.h.31.attn.kv.weight", "transformer.h.0.mlp.gate_up_proj.weight", "ln_f.weight"} <= set(names)
    assert not any("attn.qkv" in n or "mlp.gate." in n for n in names)


def test_jais_is_shaped_by_its_conv1d_tensors_and_its_biases(tmp_path):
    # GPT-2's Conv1D stores each block weight input x output; every linear has a bias; the head is tied: the
    # conversion's MLP grows by the bias unit to the next multiple of 128, which the header's biases ask for
    import struct

    config = _serving_table().MODELS["Jais-30B"]
    d, f, v, layers = 7168, 19114, 84992, 48
    per_layer = 4 * d + (3 * d * d + 3 * d) + (d * d + d) + 2 * (d * f + f) + (f * d + d)  # LNs, c_attn, c_proj, MLP
    assert shape_only_checkpoint(config, tmp_path / "j") == v * d + layers * per_layer + 2 * d
    with open(tmp_path / "j" / "model.safetensors", "rb") as f_:
        names = json.loads(f_.read(struct.unpack("<Q", f_.read(8))[0]))
    assert names["transformer.h.0.attn.c_attn.weight"]["shape"] == [d, 3 * d] and "lm_head.weight" not in names
    _, converted = converted_checkpoint(tmp_path / "j", PlanRequest(window=8192, dtype="bfloat16"))
    assert converted["architectures"] == ["StableLmForCausalLM"] and converted["intermediate_size"] == 19200


@pytest.mark.parametrize("family", ["jais", "btlm"])
def test_counts_from_shapes_are_what_convert_stores_for_a_remote_code_family(family, tmp_path):
    from pico import build_remote

    src = build_remote(tmp_path / "src", family)
    config = json.loads((src / "config.json").read_text())
    slopes = config["n_head"]  # the stored slopes are not parameters a shape-only checkpoint holds
    assert shape_only_checkpoint(config, tmp_path / "shapes") == stored_params(src) - slopes
    request = PlanRequest(window=128, dtype="bfloat16")
    params, predicted_config = converted_checkpoint(tmp_path / "shapes", request)
    dst = convert(src, tmp_path / "dst", request).destination
    assert params == stored_params(dst) and predicted_config == json.loads((dst / "config.json").read_text())


def test_the_kv_cost_of_a_served_head_dim_is_its_ratio_to_the_sources(capsys):
    from ropebridge.cli import main
    from ropebridge.demo import data_dir
    from ropebridge.serving import kv_cost

    assert kv_cost(64, 96) == ("head dim 64 -> 96: KV cache per token 1.50x the source's, a fixed KV budget holds "
                               "0.67x the sequences")
    assert kv_cost(64, 80).endswith("holds 0.80x the sequences")
    assert main(["plan", "--model", str(data_dir()), "--engine", "vllm", "--window", "2048", "--dtype",
                 "bfloat16"]) == 0
    out = capsys.readouterr().out
    assert "serving cost: head dim 32 -> 64: KV cache per token 2.00x the source's" in out
