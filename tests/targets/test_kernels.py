"""The kernels' head sizes, as their sources list them, and the refusal of a head dim a kernel does not run."""

import pytest

from ropebridge.targets.kernels import KERNELS, check_head_dim, rotary_dims


def test_the_head_sizes_each_kernel_runs_natively():
    native = {name: [d for d in range(8, 520, 8) if k.native(d)] for name, k in KERNELS.items()}
    assert native["fa3"] == [64, 96, 128, 192, 256]
    assert native["flashinfer"] == [64, 128, 256, 512]
    assert native["llama.cpp-cuda"] == [40, 64, 72, 80, 96, 112, 128, 256]
    assert native["fa2"] == list(range(8, 257, 8))
    assert KERNELS["fa3"].runs(160) and not KERNELS["fa3"].native(160)  # padded up to its 192 kernel
    assert not KERNELS["flashinfer"].runs(160) and not KERNELS["fa2"].runs(264)


def test_rotary_dims_are_the_kernels_sizes_smallest_first():
    assert list(rotary_dims("fa3", 128, 32, limit=200)) == [64, 128]
    assert list(rotary_dims("flashinfer", 64, 32, limit=200)) == [64, 192]
    assert next(rotary_dims("any", 100, 32)) == 44


def test_a_head_dim_the_kernel_does_not_run_is_refused_naming_it():
    check_head_dim("fa3", 160, "x")  # runs, padded
    with pytest.raises(ValueError,
                       match="head dim 160, which --kernel flashinfer does not run \\(64, 128, 256, 512\\)"):
        check_head_dim("flashinfer", 160, "--rotary-dim 32")


def test_trtllm_runs_its_mmha_sizes_and_aborts_otherwise():
    # decoderMaskedMultiheadAttention/instantiation/: 132 (the float32 llama target's hd + 4 for 128) and 176 are
    # not among them
    native = [d for d in range(8, 520, 4) if KERNELS["trtllm"].native(d)]
    assert native == [32, 48, 64, 80, 96, 104, 112, 128, 144, 160, 192, 224, 256]
    assert not KERNELS["trtllm"].runs(132) and not KERNELS["trtllm"].runs(176)
    with pytest.raises(ValueError, match="head dim 132, which --kernel trtllm does not run"):
        check_head_dim("trtllm", 132, "the single plan on --target llama")


def test_float32_on_a_half_precision_kernel_is_refused_in_one_line():
    from ropebridge.targets.kernels import check_dtype

    for kernel in ("fa2", "fa3", "flashinfer", "llama.cpp-cuda"):
        with pytest.raises(ValueError, match=f"--kernel {kernel} has no float32 path.*not possible"):
            check_dtype(kernel, "float32")
        check_dtype(kernel, "bfloat16")
    check_dtype("any", "float32")
    check_dtype("trtllm", "float32")


def test_each_engine_names_the_kernel_that_runs_a_head_dim():
    from ropebridge.targets.kernels import engine_kernels
    from ropebridge.targets.support import TITLES

    k = engine_kernels(160)
    assert k[TITLES["vllm"]] == "FLASH_ATTN (FA3 on Hopper: the 192 kernel, padded)" and k["TensorRT-LLM"] == "MMHA"
    vllm = TITLES["vllm"]
    assert engine_kernels(132)[vllm].startswith("TRITON_ATTN") and "aborts" in engine_kernels(132)["TensorRT-LLM"]
    assert engine_kernels(36)[vllm].startswith("TRITON_ATTN") and engine_kernels(512)[vllm] == "FLASHINFER"
    assert engine_kernels(96, "float32")[TITLES["vllm"]].startswith("TRITON_ATTN")
    assert engine_kernels(96)["llama.cpp"] == "CUDA flash attention"
