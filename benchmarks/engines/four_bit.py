"""A checkpoint's copy with 4-bit weights in the formats vLLM loads pre-quantized, AutoGPTQ's (``gptq``: symmetric,
no activation order) and AutoAWQ's (``awq``, GEMM version: a zero point per group), the weights rounded to nearest
rather than by the tools' calibrated solvers: what a weight-only 4-bit checkpoint does to a model, made the same way
for a conversion and for its source.

Per linear weight ``W (out, in)`` of a numbered block (every 2-D ``*.weight`` under ``.h.N.``, ``.layers.N.`` or
``.blocks.N.``; the embedding, the norms, the biases and the output head are kept as stored), per group of ``group``
input columns:

- ``gptq`` (AutoGPTQ's ``Quantizer``, ``sym=True``): scale = 2 max|W_g| / 15, zero 8;
- ``awq`` (AutoAWQ's ``pseudo_quantize_tensor``, ``zero_point=True``): scale = (max W_g - min W_g) / 15,
  zero = clamp(round(-min W_g / scale), 0, 15);

q = clamp(round(W / scale) + zero, 0, 15), standing for scale (q - zero). Stored as each tool stores them:

- ``gptq``: ``qweight (in/8, out)`` int32, eight consecutive inputs per word, the first in the low bits;
  ``qzeros (in/group, out/8)`` (zero - 1, packed along outputs), ``scales (in/group, out)`` float16,
  ``g_idx (in,)`` int32 = i // group;
- ``awq``: ``qweight (in, out/8)`` and ``qzeros (in/group, out/8)`` int32, eight outputs per word in AutoAWQ's order
  (output ``8j + ORDER[k]`` in bits ``4k``), ``scales (in/group, out)`` float16;

and ``config.json`` gains the ``quantization_config`` that names them.

    python -m benchmarks.engines.four_bit SRC DST [--format gptq|awq] [--group 64]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

import torch

BITS, MAXQ = 4, 15
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # AutoAWQ's packing: word bits 4k hold output 8j + AWQ_ORDER[k]
BLOCK_WEIGHT = re.compile(r"\.(h|layers|blocks)\.\d+\..*\.weight$")
FORMATS = ("gptq", "awq")


def quantize(w: torch.Tensor, group: int, fmt: str = "gptq") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``W (out, in)`` -> q ``(out, in)`` int32 in [0, 15], scales and zeros ``(in/group, out)``, in float64."""
    out, inp = w.shape
    g = w.double().reshape(out, inp // group, group)  # (out, groups, group)
    if fmt == "gptq":
        scale = 2 * g.abs().amax(dim=2) / MAXQ  # (out, groups)
        scale = torch.where(scale == 0, torch.ones_like(scale), scale)
        zero = torch.full_like(scale, (MAXQ + 1) // 2)
    else:
        hi, lo = g.amax(dim=2), g.amin(dim=2)
        scale = (hi - lo).clamp(min=1e-5) / MAXQ
        zero = torch.clamp(torch.round(-lo / scale), 0, MAXQ)
    q = torch.clamp(torch.round(g / scale[..., None]) + zero[..., None], 0, MAXQ).to(torch.int32)
    return q.reshape(out, inp), scale.T.contiguous(), zero.T.to(torch.int32).contiguous()


def dequantize(q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, group: int) -> torch.Tensor:
    """What stored values stand for, ``(out, in)`` float32: scale (q - zero), the scales as stored (float16)."""
    s = scales.to(torch.float16).float().T.repeat_interleave(group, dim=1)  # (out, in)
    z = zeros.float().T.repeat_interleave(group, dim=1)
    return s * (q.float() - z)


def _words(t: torch.Tensor) -> torch.Tensor:
    """Eight 4-bit values along the last axis ``(..., n/8, 8)`` -> int32 words, value k in bits 4k."""
    packed = sum(t[..., k].to(torch.int64) << (BITS * k) for k in range(8))
    return (packed - ((packed >> 31) << 32)).to(torch.int32).contiguous()  # two's complement into int32


def _values(words: torch.Tensor) -> torch.Tensor:
    """int32 words ``(...)`` -> their eight 4-bit values ``(..., 8)``, value k from bits 4k."""
    w = words.to(torch.int64) & 0xFFFFFFFF
    return torch.stack([(w >> (BITS * k)) & MAXQ for k in range(8)], dim=-1).to(torch.int32)


def pack_rows(q: torch.Tensor) -> torch.Tensor:
    """GPTQ's ``qweight``: q ``(out, in)`` -> ``(in/8, out)``, eight consecutive inputs per word."""
    return _words(q.T.reshape(-1, 8, q.shape[0]).transpose(1, 2))  # (in/8, out, 8) -> (in/8, out)


def unpack_rows(packed: torch.Tensor) -> torch.Tensor:
    """``qweight (in/8, out)`` -> q ``(out, in)``."""
    return _values(packed).transpose(1, 2).reshape(-1, packed.shape[1]).T.contiguous()


def pack_awq(x: torch.Tensor) -> torch.Tensor:
    """AWQ's packing: ``(rows, out)`` -> ``(rows, out/8)``, output 8j + AWQ_ORDER[k] in bits 4k of word j."""
    return _words(x.reshape(x.shape[0], -1, 8)[..., list(AWQ_ORDER)])


def unpack_awq(words: torch.Tensor) -> torch.Tensor:
    """``(rows, out/8)`` -> ``(rows, out)``."""
    values = _values(words)  # (rows, out/8, 8): value k is output 8j + AWQ_ORDER[k]
    return values[..., [AWQ_ORDER.index(i) for i in range(8)]].reshape(words.shape[0], -1)


def tensors(name: str, w: torch.Tensor, group: int, fmt: str) -> dict[str, torch.Tensor]:
    """The tensors that stand for linear weight ``name`` (``…weight`` -> ``…qweight`` and the rest)."""
    out, inp = w.shape
    if inp % group or inp % 8 or out % 8:
        raise ValueError(f"{name} {tuple(w.shape)}: inputs must split into groups of {group}, both sides into eights")
    q, scales, zeros = quantize(w, group, fmt)
    stem = name[: -len("weight")]
    if fmt == "gptq":
        return {stem + "qweight": pack_rows(q), stem + "qzeros": pack_rows(zeros - 1).T.contiguous(),
                stem + "scales": scales.to(torch.float16),
                stem + "g_idx": torch.arange(inp, dtype=torch.int32) // group}
    return {stem + "qweight": pack_awq(q.T), stem + "qzeros": pack_awq(zeros),
            stem + "scales": scales.to(torch.float16)}


def config_of(fmt: str, group: int) -> dict:
    """The ``quantization_config`` each tool writes for these tensors."""
    if fmt == "gptq":
        return {"quant_method": "gptq", "bits": BITS, "group_size": group, "desc_act": False, "sym": True,
                "checkpoint_format": "gptq"}
    return {"quant_method": "awq", "bits": BITS, "group_size": group, "zero_point": True, "version": "gemm"}


def write(src: Path, dst: Path, fmt: str = "gptq", group: int = 64) -> Path:
    """DST: SRC with every block's linear weights in 4 bits (``fmt``, rounded to nearest), the config naming them."""
    from safetensors.torch import load_file, save_file

    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.suffix != ".safetensors" and f.name != "model.safetensors.index.json" and f.is_file():
            shutil.copy2(f, dst / f.name)
    stored = {}
    for f in sorted(src.glob("*.safetensors")):
        stored.update(load_file(f))
    out = {}
    for name, t in stored.items():
        out.update(tensors(name, t, group, fmt) if t.dim() == 2 and BLOCK_WEIGHT.search(name) else {name: t})
    save_file(out, dst / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((src / "config.json").read_text())
    config["quantization_config"] = config_of(fmt, group)
    (dst / "config.json").write_text(json.dumps(config, indent=2))
    return dst


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("src", type=Path)
    p.add_argument("dst", type=Path)
    p.add_argument("--format", choices=FORMATS, default="gptq")
    p.add_argument("--group", type=int, default=64)
    args = p.parse_args(argv)
    print(f"wrote {write(args.src, args.dst, args.format, args.group)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
