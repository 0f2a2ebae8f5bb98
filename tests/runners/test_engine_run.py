"""runners.engine_run: what a user asks of an engine run, validated on construction."""

import sys

import pytest

from ropebridge.runners import EngineRun


@pytest.mark.parametrize("engine, options, message", [
    ("trtllm", {}, "--engine must be one of transformers, vllm, sglang, llama.cpp"),
    ("vllm", {"cache_type_k": "q8_0"}, "cache_type_k is not an option of --engine vllm"),
    ("vllm", {"kv_cache_dtype": "fp4"}, "--engine vllm: --kv-cache-dtype must be one of auto"),
    ("sglang", {"kv_cache_dtype": "fp8"}, "--engine sglang: --kv-cache-dtype must be one of auto, bf16"),
    ("vllm", {"kv_cache_dtype": "bf16"}, "--engine vllm: --kv-cache-dtype must be one of auto, bfloat16"),
    ("sglang", {"chunked_prefill_size": 8}, "--chunked-prefill-size must be >= 16"),
    ("vllm", {"tensor_parallel_size": 0}, "--tensor-parallel-size must be > 0"),
    ("vllm", {"max_num_batched_tokens": 8}, "--max-num-batched-tokens must be >= 16"),
    ("vllm", {"enforce_eager": "yes"}, "--enforce-eager is on or off"),
    ("llama.cpp", {}, "--engine llama.cpp runs a GGUF file: give it with --gguf FILE"),
])
def test_a_run_is_refused_naming_the_bad_value(engine, options, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        EngineRun(engine, options)


def test_a_gguf_is_for_llama_cpp_only_and_must_exist(tmp_path):
    with pytest.raises(ValueError, match="--gguf is for --engine llama.cpp"):
        EngineRun("vllm", gguf=str(tmp_path / "x.gguf"))
    with pytest.raises(ValueError, match="no such file"):
        EngineRun("llama.cpp", gguf=str(tmp_path / "x.gguf"))
    (tmp_path / "x.gguf").write_bytes(b"GGUF")
    run = EngineRun("llama.cpp", {"cache_type_k": "q8_0"}, gguf=str(tmp_path / "x.gguf"))
    assert run.describe() == "llama.cpp --cache-type-k q8_0 (x.gguf)"


def test_options_are_written_as_the_engine_writes_them():
    run = EngineRun("vllm", {"tensor_parallel_size": 2, "kv_cache_dtype": "fp8", "enable_prefix_caching": False})
    assert run.flags() == [
        "--no-enable-prefix-caching", "--kv-cache-dtype", "fp8", "--tensor-parallel-size", "2"]
    assert run.interpreter == sys.executable
    assert run.to_dict()["options"] == {"enable_prefix_caching": False, "kv_cache_dtype": "fp8",
                                        "tensor_parallel_size": 2}
