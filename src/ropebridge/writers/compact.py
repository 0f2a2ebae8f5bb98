"""The compact targets' shared writing: ``Starcoder2ForCausalLM``, ``NemotronForCausalLM`` and (with its own
tensors, ``writers.llama``) ``LlamaForCausalLM``, no padding.

Each takes a ``head_dim`` free of ``hidden_size / heads``, so each head simply grows by its emulation dims
(hd' = hd + r) and the residual stream keeps its width: only q, k, v and the attention output widen. Llama turns
the whole head: its pairs sit on dims (k, k + hd'/2) (``Target.pair_dims`` ``whole-head``; the ladder's R/2 pairs,
or the single strategy's two opposed pairs, hd' = hd + 4; ``targets.llama_rope``). The single pair (r = 2, one
theta for all heads) on the other two:

- Starcoder2 (LayerNorm, GELU MLP with biases, sequential residual): ``rope_type: proportional`` with
  ``partial_rotary_factor`` 2/hd' rotates only pair 0, which ``rotate_half`` forms from dims (0, hd'/2),
  at ``1/factor``: factor = 1/theta; every other pair has frequency exactly 0. The content dims are the
  remaining hd' - 2, in order.
- Nemotron (LayerNorm storing weight - 1, non-gated MLP): rotates the first ``int(hd' * prf)`` = 2 dims,
  pair (0, 1), with ``linear`` scaling factor 1/theta; content dims 2 .. hd' - 1. ``num_key_value_heads``
  must be given. Its default activation (relu^2) is replaced by the source's.

The frequency ladder (r = R) on Nemotron: its first R dims rotate with ``rope_type: default`` at the plan's
base, half layout within them (pair k is dims (k, k + R/2), theta_k = base^(-2k/R), as GPT-NeoX), each pair
carrying q = (-N'/s, M'/s), k = (0, s) (``blocks`` module doc); content dims R .. hd' - 1. The base is also
written as the top-level ``rope_theta`` that transformers 4.x's Nemotron reads (with ``partial_rotary_factor``).

Starcoder2 and Nemotron reach neither llama.cpp nor CTranslate2 (docs/targets.md). transformers 4.x ignores
``rope_parameters``, so it loads the single-pair forms silently wrong (its linear or proportional scaling is lost).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from ..checkpoint.model import SourceModel
from ..checkpoint.tensor_io import ShardWriter, row_blocks, single
from ..emulation import EmulationPlan
from ..targets import Target
from .blocks import WORK, block_constants, check_plan, robust_fraction

@dataclass(frozen=True)
class CompactLayout:
    """Geometry of a compact target: head dim hd' = hd + r, the emulation dims ``emulation`` ``(r,)`` and the
    content dims ``content`` ``(hd,)`` within a head, q's and k's constants ``q_rot``, ``k_rot`` ``(h, hd')`` (zero
    off the emulation dims), and the RoPE the config states: one pair at ``theta`` (single) or a block of R dims
    at ``base`` (ladder)."""

    target: Target
    head_dim: int
    emulation: torch.Tensor
    content: torch.Tensor
    q_rot: torch.Tensor
    k_rot: torch.Tensor
    content_scale: float
    theta: float | None = None
    base: float | None = None

    @property
    def rotary_dim(self) -> int:
        return len(self.emulation)


def layout(src: SourceModel, plan: EmulationPlan, target: Target) -> CompactLayout:
    """Place each head's planned pairs: the single pair on the target's ``pair_dims``, (0, hd'/2) or (0, 1), the
    ladder's R/2 pairs on dims (k, k + R/2) of the first R, or (k, k + hd'/2) where the whole head turns
    (``whole-head``, the llama target), which also takes the single strategy's two opposed pairs so."""
    info = src.info
    check_plan(src, plan)
    r = plan.rotary_dim if plan.strategy == "ladder" or target.pair_dims == "whole-head" else 2
    hd, hd_out = info.head_dim, info.head_dim + r
    n_scale = math.sqrt(hd_out / hd)
    q_rot = torch.zeros(info.n_heads, hd_out, dtype=torch.float64)
    k_rot = torch.zeros(info.n_heads, hd_out, dtype=torch.float64)
    if plan.strategy == "ladder":  # pair k on dims (k, k + R/2), or (k, k + hd'/2) where the whole head turns
        half = hd_out // 2 if target.pair_dims == "whole-head" else r // 2
        emulation = torch.cat([torch.arange(r // 2), half + torch.arange(r // 2)])
        q_rot[:, emulation], k_rot[:, emulation] = block_constants(plan, n_scale)
        extra = {"base": plan.base}
    elif target.pair_dims == "whole-head":  # the opposed pairs (emulation.single): pair k on dims (k, k + hd'/2)
        half = hd_out // 2
        if len({tuple((p.theta, p.opposed) for p in hp.pairs) for hp in plan.heads}) != 1 or any(
                len(hp.pairs) != r // 2 for hp in plan.heads):
            raise ValueError(f"--target {target.name} rotates {r // 2} opposed pairs at one theta each for all heads")
        emulation = torch.cat([torch.arange(r // 2), half + torch.arange(r // 2)])
        s = torch.tensor([hp.split for hp in plan.heads], dtype=torch.float64)
        for k, pair in enumerate(plan.heads[0].pairs):
            n = torch.tensor([hp.pairs[k].N for hp in plan.heads], dtype=torch.float64) * n_scale / s
            if pair.opposed:  # q = (0, N/s), k = (s, 0)
                q_rot[:, half + k], k_rot[:, k] = n, s
            else:  # q = (-N/s, 0), k = (0, s)
                q_rot[:, k], k_rot[:, half + k] = -n, s
        extra = {"theta": plan.heads[0].pairs[0].theta}
    else:
        thetas = {hp.theta for hp in plan.heads}
        if len(thetas) != 1 or any(len(hp.pairs) != 1 for hp in plan.heads):
            raise ValueError(f"--target {target.name} rotates one pair at one theta for all heads")
        px, py = (0, hd_out // 2) if target.pair_dims == "first-and-middle" else (0, 1)
        emulation = torch.tensor([px, py])
        q_rot[:, px] = torch.tensor([-hp.N * n_scale / hp.split for hp in plan.heads], dtype=torch.float64)
        k_rot[:, py] = torch.tensor([hp.split for hp in plan.heads], dtype=torch.float64)
        extra = {"theta": thetas.pop()}
    content = torch.tensor([d for d in range(hd_out) if d not in set(emulation.tolist())])
    return CompactLayout(target, hd_out, emulation, content, q_rot, k_rot, info.qk_scale * math.sqrt(hd_out),
                         **extra)


def proj_heads(src: SourceModel, i: int, lay: CompactLayout, part: int, a: int, b: int, dtype: torch.dtype,
                columns: torch.Tensor) -> torch.Tensor:
    """Rows of the q (part 0), k (1) or v (2) projection ``(h hd', D)`` for heads ``[a, b)`` in the output
    ``dtype``, content dims placed (q scaled in float64 and rounded once), input columns times ``columns``
    ``(D,)`` (powers of two: exact; ``ln1p_scales``)."""
    weight = torch.zeros(b - a, lay.head_dim, src.info.hidden_size, dtype=dtype)
    scale = lay.content_scale if part == 0 else 1.0
    weight[:, lay.content] = (src.qkv_part(i, part, (a, b)) * scale * columns).to(dtype)  # (n, hd, D)
    return weight.view((b - a) * lay.head_dim, -1)  # (n hd', D)


def ln1p_scales(w: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Per-channel scales ``c`` ``(D,)`` that let Nemotron's LayerNorm1P carry LayerNorm weights ``w`` ``(D,)``
    exactly in ``dtype``. LayerNorm1P computes (stored + 1) in the dtype, and stored = dtype(w) - 1 gives back
    dtype(w) only for w in [0.5, 2] (Sterbenz); elsewhere (|w| < 0.5, w > 2, w < 0) the channel is rescaled:
    the LayerNorm keeps dtype(w)/c in [1, 2) and its bias beta/c, the layers reading it take column j times c.
    c = sign(w) 2^k is a power of two, so every product is the source's, bit for bit, except where c times a
    reader's weight falls below the dtype's normal range (float16: 6.1e-5), which rounds it by at most half a
    subnormal step (3e-8). 1 where no rescale is needed (and for w = 0)."""
    wd = w.to(dtype).double()  # (D,)
    exact = ((wd - 1).to(dtype).double() + 1).to(dtype).double() == wd
    c = torch.ones_like(wd)
    move = ~exact & (wd != 0)
    c[move] = torch.sign(wd[move]) * torch.exp2(torch.floor(torch.log2(wd[move].abs())))
    return c


def proj_bias(src: SourceModel, i: int, lay: CompactLayout, part: int) -> torch.Tensor:
    """Bias ``(h hd',)`` of projection ``part``: content biases, and the emulation pair's constant on q and k."""
    bias = torch.zeros(src.info.n_heads, lay.head_dim, dtype=torch.float64)
    b = src.qkv_part(i, part, suffix=".bias")  # (h, hd)
    bias[:, lay.content] = b * lay.content_scale if part == 0 else b
    if part < 2:
        bias[:, lay.emulation] = (lay.q_rot if part == 0 else lay.k_rot)[:, lay.emulation]
    return bias.reshape(-1)  # (h hd',)


def o_rows(src: SourceModel, i: int, lay: CompactLayout, a: int, b: int, dtype: torch.dtype,
           rows: Callable[[int, int], torch.Tensor] | None = None) -> torch.Tensor:
    """Rows ``[a, b)`` of the attention output ``(D, h hd')`` in ``dtype``: zero columns on the pair dims. The
    source's rows ``(b - a, h hd)`` come from ``rows(a, b)`` (default: as stored, one cast)."""
    info = src.info
    source = src.weight(i, "o", dtype, (a, b)) if rows is None else rows(a, b)
    per_head = torch.zeros(b - a, info.n_heads, lay.head_dim, dtype=dtype)
    per_head[:, :, lay.content] = source.view(b - a, info.n_heads, info.head_dim)
    return per_head.view(b - a, -1)  # (rows, h hd')


def add_tensors(src: SourceModel, lay: CompactLayout, shards: ShardWriter, *, mlp: tuple[str, str],
                one_p: bool) -> None:
    """Describe every target tensor to ``shards``, large ones in row (or head) blocks (at most
    ``checkpoint.tensor_io.BLOCK_BYTES`` of float64 each): the MLP's up and down projections under the target's
    names ``mlp`` (``model.layers.{i}.mlp.{up}``), its LayerNorms storing weight - 1 where ``one_p``
    (LayerNorm1P)."""
    info = src.info
    d, v, f, h = info.hidden_size, info.vocab_size, info.intermediate_size, info.n_heads
    up, down = mlp

    ones = torch.ones(d, dtype=torch.float64)

    @functools.cache
    def source_norm(i: int | None, which: str) -> tuple[torch.Tensor, torch.Tensor]:  # (D,), (D,), read once
        return src.final_norm() if i is None else src.norm(i, which)

    @functools.cache
    def scales(i: int | None, which: str) -> torch.Tensor:  # (D,): LayerNorm (i, which)'s readers' columns, once
        return ln1p_scales(source_norm(i, which)[0], shards.dtype) if one_p else ones

    def norm(i: int | None, which: str):  # LayerNorm (i, which) as stored; i None: the final one
        # LayerNorm1P adds 1 in the model's dtype: storing dtype(w)/c - 1 makes that sum exactly dtype(w)/c
        # (ln1p_scales); dtype(w - 1) would round twice (a tenth of the demo models' weights in bfloat16)
        wb = source_norm(i, which)
        if not one_p:
            return wb
        c = scales(i, which)
        return wb[0].to(shards.dtype).double() / c - 1, wb[1].to(shards.dtype).double() / c

    def rows_of(i: int, which: str,
                columns: Callable[[], torch.Tensor] | None = None) -> Callable[[int, int], torch.Tensor]:
        if columns is None:  # moved: one cast from the source
            return lambda a, b: src.weight(i, which, shards.dtype, (a, b))
        return lambda a, b: (src.weight(i, which, WORK, (a, b)) * columns()).to(shards.dtype)  # exact rescale

    shards.add("model.embed_tokens.weight", (v, d), row_blocks(src.embedding_rows, v, 8 * d))
    for i in range(info.n_layers):
        p = f"model.layers.{i}."
        for name, which in (("input_layernorm", "ln1"), ("post_attention_layernorm", "ln2")):
            shards.add(p + name + ".weight", (d,), single(lambda i=i, w=which: norm(i, w)[0]))
            shards.add(p + name + ".bias", (d,), single(lambda i=i, w=which: norm(i, w)[1]))
        for part, x in enumerate("qkv"):
            shards.add(p + f"self_attn.{x}_proj.weight", (h * lay.head_dim, d),
                       row_blocks(lambda a, b, i=i, part=part: proj_heads(src, i, lay, part, a, b, shards.dtype,
                                                                           scales(i, "ln1")),
                                  h, 8 * lay.head_dim * d))
            shards.add(p + f"self_attn.{x}_proj.bias", (h * lay.head_dim,),
                       single(lambda i=i, part=part: proj_bias(src, i, lay, part)))
        shards.add(p + "self_attn.o_proj.weight", (d, h * lay.head_dim),
                   row_blocks(lambda a, b, i=i: o_rows(src, i, lay, a, b, shards.dtype), d, 8 * h * lay.head_dim))
        shards.add(p + "self_attn.o_proj.bias", (d,), single(lambda i=i: src.bias(i, "o", WORK)))
        shards.add(p + f"mlp.{up}.weight", (f, d),
                   row_blocks(rows_of(i, "up", lambda i=i: scales(i, "ln2")), f, 8 * d))
        shards.add(p + f"mlp.{up}.bias", (f,), single(lambda i=i: src.bias(i, "up", WORK)))
        shards.add(p + f"mlp.{down}.weight", (d, f), row_blocks(rows_of(i, "down"), d, 8 * f))
        shards.add(p + f"mlp.{down}.bias", (d,), single(lambda i=i: src.bias(i, "down", WORK)))
    shards.add("model.norm.weight", (d,), single(lambda: norm(None, "ln_f")[0]))
    shards.add("model.norm.bias", (d,), single(lambda: norm(None, "ln_f")[1]))
    shards.add("lm_head.weight", (v, d),
               row_blocks(lambda a, b: (src.head_rows(a, b) * scales(None, "ln_f")).to(shards.dtype), v, 8 * d))


def common_config(src: SourceModel, lay: CompactLayout, plan: EmulationPlan) -> dict[str, Any]:
    """The config.json keys both compact targets share, in ``plan.dtype``: the target's writer adds its own
    (``architectures`` and ``model_type`` first among them)."""
    info, c, dtype = src.info, src.config, plan.dtype
    return {
        "vocab_size": info.vocab_size, "hidden_size": info.hidden_size, "intermediate_size": info.intermediate_size,
        "num_hidden_layers": info.n_layers, "num_attention_heads": info.n_heads,
        "num_key_value_heads": info.n_heads, "head_dim": lay.head_dim, "hidden_act": info.activation,
        "max_position_embeddings": plan.window, "tie_word_embeddings": False, "attention_dropout": 0.0,
        "bos_token_id": c.get("bos_token_id"), "eos_token_id": c.get("eos_token_id"),
        "pad_token_id": c.get("pad_token_id"), "torch_dtype": dtype, "dtype": dtype, "use_cache": True,
    }


def partial_rotary_factor(lay: CompactLayout) -> float:
    """The fraction of the head the target rotates: R / hd' (exact when multiplied back, ``robust_fraction``)."""
    return robust_fraction(lay.rotary_dim, lay.head_dim)


def shapes(config: Mapping[str, Any]) -> dict:
    """What a compact target's ``config.json`` serves: its own ``head_dim``, the residual at ``hidden_size``."""
    h = config["num_attention_heads"]
    return {"layers": config["num_hidden_layers"], "heads": h, "kv_heads": config.get("num_key_value_heads") or h,
            "head_dim": config["head_dim"], "hidden": config["hidden_size"],
            "intermediate": config["intermediate_size"]}


def geometry(src: SourceModel, lay: CompactLayout) -> dict:
    """The layout's numbers, as ``ropebridge.json`` records them."""
    if lay.base is not None:
        return {"head_dim": lay.head_dim, "rotary_dim": lay.rotary_dim, "rope_base": lay.base,
                "content_q_scale": lay.content_scale}
    return {"head_dim": lay.head_dim, "pair_dims": lay.emulation.tolist(), "theta": lay.theta,
            "rope_factor": 1.0 / lay.theta, "content_q_scale": lay.content_scale}
