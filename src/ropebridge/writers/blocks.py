"""What the writers share: the working dtype, the rotary block's constants, and the padded residual stream that
the ``gpt-neox``, ``persimmon`` and ``stablelm`` targets are built on.

**The rotary block** (``block_constants``): a block of R dims, half layout (pair k is dims (k, k + R/2),
theta_k = base^(-2k/R)), each planned pair carrying q = (-N'/s, M'/s), k = (0, s) (M = 0 but in the frequency
ladder, which plans every pair), with N' = N sqrt(hd'/hd) (likewise M): the plan states N and M for 1/sqrt(hd),
the target applies 1/sqrt(hd').

**The padded residual stream** (``PaddedLayout``): an architecture that ties its head dim to
``hidden_size / heads`` and rotates the *first* R dims of each head gives each head ``hd' = R + hd`` dims, the R
rotary dims carrying the emulation (zero weights, the constants above as biases), then the hd content dims,
unrotated. The residual stream grows by ``P = h R`` pad dims, D' = D + P. Every residual writer (embedding,
attention output, MLP output) writes the mean of its real rows into each pad dim (``mean_padded_rows``,
``pad_rows_with_mean``), so each pad dim carries the mean mu of the real dims. LayerNorm over D' then keeps the
mean mu and sees the variance ``var D/D'``; ``eps' = eps D/D'`` and ``gamma' = gamma sqrt(D/D')`` undo that
exactly (``padded_norm``), and gamma, beta are zero on the pad dims, so every LayerNorm output equals the
source's on the real dims and is zero on the pads; readers (QKV, MLP input, output head) have zero columns there.
The content q is multiplied by ``qk_scale sqrt(hd')``: the source applies ``qk_scale`` to q.k (1/sqrt(hd) for
BLOOM and Falcon, ``softmax_scale`` for MPT), the target 1/sqrt(hd').

Tensors that are only copied or zero-padded are cast once from the source into the output dtype; those whose
rows are also averaged (the residual writers' pad rows) are read in ``WORK`` (float32, which holds any
float32/bfloat16/float16 source exactly), and their means summed in float64; q (scaled) and LayerNorms (folded)
are computed in float64. Either way every output value is rounded once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from ..checkpoint.model import SourceModel
from ..checkpoint.tensor_io import Producer, rows_per_block
from ..emulation import EmulationPlan
from ..targets import Target

WORK = torch.float32


def robust_fraction(numerator: int, denominator: int) -> float:
    """A float f with ``int(denominator * f) == numerator`` and ``round(...) == numerator`` (readers truncate)."""
    f = numerator / denominator
    while int(denominator * f) != numerator:
        f = math.nextafter(f, math.inf)
    assert round(denominator * f) == numerator
    return f


def check_plan(src: SourceModel, plan: EmulationPlan) -> None:
    """``ValueError`` when the plan is for another head count or head dim than the source has."""
    info = src.info
    if plan.head_dim != info.head_dim or len(plan.heads) != info.n_heads:
        raise ValueError(f"the plan is for {len(plan.heads)} heads of dim {plan.head_dim}, "
                         f"the model has {info.n_heads} of dim {info.head_dim}")


def block_constants(plan: EmulationPlan, n_scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """q's and k's constants on a rotary block of R dims, ``(h, R)`` each (module doc), N' = N ``n_scale``."""
    r = plan.rotary_dim
    q_rot = torch.zeros(len(plan.heads), r, dtype=torch.float64)
    k_rot = torch.zeros(len(plan.heads), r, dtype=torch.float64)
    for hp in plan.heads:
        for pair in hp.pairs:
            q_rot[hp.head, pair.index] = -pair.N * n_scale / hp.split  # x of the pair
            q_rot[hp.head, pair.index + r // 2] = pair.M * n_scale / hp.split  # y (nonzero in the ladder)
            k_rot[hp.head, pair.index + r // 2] = hp.split  # y of the pair
    return q_rot, k_rot


@dataclass(frozen=True)
class PaddedLayout:
    """The padded residual stream's geometry (module doc) on ``target``, and the emulation's constants ``q_rot``,
    ``k_rot`` ``(h, R)``."""

    target: Target
    rotary_dim: int
    head_dim: int  # hd' = R + hd
    hidden_size: int  # D' = D + h R
    base: float
    q_rot: torch.Tensor
    k_rot: torch.Tensor
    content_scale: float

    @property
    def rotary_pct(self) -> float:
        return robust_fraction(self.rotary_dim, self.head_dim)


def padded_layout(src: SourceModel, plan: EmulationPlan, target: Target) -> PaddedLayout:
    """Place each head's planned pairs on the first R dims of hd' = R + hd, on a stream padded by h R dims."""
    info = src.info
    if plan.base is None or plan.rotary_dim is None:
        raise ValueError(f"--target {target.name} needs a plan on a fixed frequency set (base and rotary_dim)")
    check_plan(src, plan)
    r, h = plan.rotary_dim, info.n_heads
    hd_out = r + info.head_dim
    q_rot, k_rot = block_constants(plan, math.sqrt(hd_out / info.head_dim))
    return PaddedLayout(target, r, hd_out, info.hidden_size + h * r, plan.base, q_rot, k_rot,
                        info.qk_scale * math.sqrt(hd_out))


def pad_rows_with_mean(w: torch.Tensor, pads: int) -> torch.Tensor:
    """Small residual writer ``(D, …)`` -> ``(D + P, …)`` float64: each pad row is the mean of the real rows."""
    w = w.to(torch.float64)
    return torch.cat([w, w.mean(0, keepdim=True).expand(pads, *w.shape[1:])], 0)


def mean_padded_rows(read: Callable[[int, int], torch.Tensor], n_real: int, pads: int, width: int) -> Producer:
    """Residual writer ``(D + P, width)`` in row blocks: the real rows ``read(a, b)``, then ``P`` rows each the
    mean of the real rows. The sum runs row by row in float64, so its bytes do not depend on the block size."""

    def gen() -> Iterator[torch.Tensor]:
        total = torch.zeros(width, dtype=torch.float64)
        block = rows_per_block(8 * width)
        for a in range(0, n_real, block):
            rows = read(a, min(n_real, a + block))  # (rows, width)
            for row in rows:
                total.add_(row)
            yield rows
        mean = total / n_real  # float64: rounded once, by the writer
        for a in range(0, pads, block):
            yield mean.expand(min(pads, a + block) - a, width)

    return gen


def padded_norm(w: torch.Tensor, b: torch.Tensor, d: int, pads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A LayerNorm's weight and bias ``(D,)`` on the padded stream ``(D + P,)``: gamma sqrt(D / D') on the real
    dims (module doc), zero on the pads."""
    g = math.sqrt(d / (d + pads))
    return torch.cat([w * g, w.new_zeros(pads)]), torch.cat([b, b.new_zeros(pads)])


def embedding_rows(src: SourceModel, a: int, b: int, pads: int) -> torch.Tensor:
    """Embedding rows ``[a, b)`` on the padded stream ``(rows, D + P)``, float64: each pad column the row's mean."""
    x = src.embedding_rows(a, b)  # (rows, D), float64
    return torch.cat([x, x.mean(1, keepdim=True).expand(b - a, pads)], 1)


def head_rows(src: SourceModel, a: int, b: int, pads: int, dtype: torch.dtype) -> torch.Tensor:
    """Output head rows ``[a, b)`` ``(rows, D + P)`` in ``dtype``: moved, one cast from the source; zero on the
    pads."""
    x = src.head_rows(a, b, dtype)  # (rows, D)
    return torch.cat([x, x.new_zeros(b - a, pads)], 1)


def padded_shapes(config: Mapping[str, Any]) -> dict:
    """What a padded target's ``config.json`` serves: head dim hidden / heads (the residual padded to h hd'), one
    key/value head per head."""
    d, h = config["hidden_size"], config["num_attention_heads"]
    return {"layers": config["num_hidden_layers"], "heads": h, "kv_heads": h, "head_dim": d // h, "hidden": d,
            "intermediate": config["intermediate_size"]}


def padded_geometry(src: SourceModel, lay: PaddedLayout) -> dict:
    """The layout's numbers, as ``ropebridge.json`` records them."""
    return {"rotary_dim": lay.rotary_dim, "head_dim": lay.head_dim, "hidden_size": lay.hidden_size,
            "pad_dims": lay.hidden_size - src.info.hidden_size, "rope_base": lay.base,
            "content_q_scale": lay.content_scale}


def proj_rows(src: SourceModel, i: int, lay: PaddedLayout, part: int, a: int, b: int, dtype: torch.dtype,
              out: torch.Tensor | None = None) -> torch.Tensor:
    """Rows of block i's q (part 0), k (1) or v (2) ``((b - a) hd', D')`` for heads ``[a, b)`` in ``dtype``: the
    content rows after the R rotary dims (q scaled by ``content_scale`` in float64 and rounded once, k and v cast
    once), zero on the rotary dims and the pad columns. ``out``: a zeroed ``(b - a, hd', D')`` view to fill
    instead (a fused QKV's part), returned as given."""
    d = src.info.hidden_size
    weight = torch.zeros(b - a, lay.head_dim, lay.hidden_size, dtype=dtype) if out is None else out
    if part == 0:
        weight[:, lay.rotary_dim:, :d] = src.qkv_part(i, 0, (a, b)) * lay.content_scale  # (heads, hd, D)
    else:
        weight[:, lay.rotary_dim:, :d] = src.qkv_part(i, part, (a, b), dtype=dtype)
    return weight.view((b - a) * lay.head_dim, lay.hidden_size) if out is None else out  # (heads hd', D')


def proj_bias(src: SourceModel, i: int, lay: PaddedLayout, part: int) -> torch.Tensor:
    """Block i's q, k or v bias ``(h, hd')`` float64: the emulation's constants on q's and k's rotary dims (zero on
    v's), the content biases after them (q's scaled)."""
    bias = torch.zeros(src.info.n_heads, lay.head_dim, dtype=torch.float64)
    content = src.qkv_part(i, part, suffix=".bias")  # (h, hd)
    bias[:, lay.rotary_dim:] = content * lay.content_scale if part == 0 else content
    if part < 2:
        bias[:, :lay.rotary_dim] = lay.q_rot if part == 0 else lay.k_rot
    return bias


def attention_out_rows(src: SourceModel, i: int, lay: PaddedLayout, a: int, b: int) -> torch.Tensor:
    """Rows ``[a, b)`` of block i's attention output ``(rows, h hd')`` in ``WORK``: the source's columns on each
    head's content dims, zero on its rotary dims (a residual writer: its pad rows are ``mean_padded_rows``')."""
    h = src.info.n_heads
    out = torch.zeros(b - a, h, lay.head_dim, dtype=WORK)
    out[:, :, lay.rotary_dim:] = src.weight(i, "o", WORK, (a, b)).view(b - a, h, src.info.head_dim)  # (rows, h, hd')
    return out.view(b - a, h * lay.head_dim)


def reader_rows(src: SourceModel, i: int, which: str, lay: PaddedLayout, a: int, b: int,
                dtype: torch.dtype) -> torch.Tensor:
    """Rows ``[a, b)`` of a matrix that reads the stream (an MLP's ``up`` or ``gate``) ``(rows, D')`` in ``dtype``:
    the source's, one cast, zero columns on the pads."""
    x = src.weight(i, which, dtype, (a, b))  # (rows, D)
    return torch.cat([x, x.new_zeros(b - a, lay.hidden_size - src.info.hidden_size)], 1)
