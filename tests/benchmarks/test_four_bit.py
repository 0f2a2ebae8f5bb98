"""A 4-bit copy of a checkpoint (``four_bit``): each tool's packing known bit for bit and undone exactly; rounding to
nearest as a float64 reference of each tool's quantizer rounds, within half a step of every weight; the linear
weights of the blocks replaced and nothing else."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks.engines import four_bit

ROOT = Path(__file__).resolve().parents[2]


def test_each_format_packs_eight_values_per_int32_as_its_tool_does():
    q = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 15]], dtype=torch.int32)  # gptq: (out 1, in 8), inputs in order
    assert int(four_bit.pack_rows(q)) & 0xFFFFFFFF == 0xF7654321
    x = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7]], dtype=torch.int32)  # awq: (in 1, out 8), AutoAWQ's order
    assert int(four_bit.pack_awq(x)) & 0xFFFFFFFF == 0x75316420
    g = torch.Generator().manual_seed(0)
    q = torch.randint(0, 16, (24, 64), generator=g, dtype=torch.int32)
    assert torch.equal(four_bit.unpack_rows(four_bit.pack_rows(q)), q)
    assert torch.equal(four_bit.unpack_awq(four_bit.pack_awq(q)), q)


def _reference(x: np.ndarray, fmt: str) -> tuple[np.ndarray, float, float]:
    """One group as AutoGPTQ's symmetric quantizer or AutoAWQ's zero-point one rounds it, float64."""
    if fmt == "gptq":
        s, z = 2 * np.abs(x).max() / 15, 8.0
    else:
        s = max(x.max() - x.min(), 1e-5) / 15
        z = float(np.clip(-np.round(x.min() / s), 0, 15))
    return np.clip(np.round(x / s) + z, 0, 15), s, z


@pytest.mark.parametrize("fmt", four_bit.FORMATS)
def test_rounding_to_nearest_matches_a_float64_reference_within_half_a_step(fmt):
    w = torch.randn(16, 128, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    q, scales, zeros = four_bit.quantize(w, 32, fmt)
    for o in range(16):
        for g in range(4):
            ref_q, s, z = _reference(w[o, 32 * g: 32 * (g + 1)].numpy(), fmt)
            assert np.array_equal(q[o, 32 * g: 32 * (g + 1)].numpy(), ref_q), (o, g)
            assert abs(scales[g, o].item() - s) <= 1e-12 * s and zeros[g, o].item() == z
    # half a step (the largest saturates at half a step too), plus the float16 scale's rounding over <= 15 steps
    step = scales.T.repeat_interleave(32, dim=1).double()  # (out, in)
    err = (four_bit.dequantize(q, scales, zeros, 32).double() - w).abs()
    assert bool((err <= step * (0.5 + 15 * 2.0**-11)).all())


@pytest.mark.parametrize("fmt", four_bit.FORMATS)
def test_a_checkpoint_keeps_all_but_its_blocks_linear_weights(tmp_path, fmt):
    from pico import build
    from safetensors.torch import load_file

    src = build(tmp_path / "src", "bloom-4heads", n_layer=2)
    dst = four_bit.write(src, tmp_path / "dst", fmt, group=32)
    before, after = load_file(src / "model.safetensors"), load_file(dst / "model.safetensors")
    linears = [n for n, t in before.items() if t.dim() == 2 and ".h." in n]
    assert linears and all(n not in after and n[:-6] + "qweight" in after for n in linears)
    assert all(torch.equal(after[n], t) for n, t in before.items() if n not in linears)
    stem, w = linears[0][: -len("weight")], before[linears[0]]
    q, _, zeros = four_bit.quantize(w, 32, fmt)
    if fmt == "gptq":
        assert torch.equal(four_bit.unpack_rows(after[stem + "qweight"]), q)
        assert after[stem + "g_idx"].tolist() == [i // 32 for i in range(w.shape[1])]
        assert bool((after[stem + "qzeros"] == 0x77777777).all())
    else:
        assert torch.equal(four_bit.unpack_awq(after[stem + "qweight"]), q.T)
        assert torch.equal(four_bit.unpack_awq(after[stem + "qzeros"]), zeros)
    assert json.loads((dst / "config.json").read_text())["quantization_config"] == four_bit.config_of(fmt, 32)
