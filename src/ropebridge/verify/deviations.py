"""Where transformers' ALiBi models depart from their family's definition, and how ``verify`` runs them as
defined. Each departure is a ``Deviation`` (``DEVIATIONS``, per family): when it applies to a
source config, what it is in words, and a context manager that makes a loaded transformers model compute the
definition:

- Falcon rounds its bias m*j to bfloat16 even in float32 models;
- MPT ignores ``attn_config.alibi_bias_max`` (its slopes always use 8);
- MPT builds no bias at all: with ``no_bias: false`` the checkpoint's bias tensors are ignored;
- BLOOM with ``pretraining_tp > 1`` and ``slow_but_exact`` sums ``dense`` and ``dense_4h_to_h`` slice by slice
  and drops their biases (the definition, Megatron's row-parallel linear, adds them).

``verify`` checks in float32 that a source run as defined agrees with the exact reference to float32's rounding,
so the named deviations are the only difference between transformers' reading and ropebridge's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from .. import alibi


@contextmanager
def falcon_exact_bias(model: torch.nn.Module, source) -> Iterator[None]:
    """transformers' Falcon with its ALiBi bias computed exactly: ``bf16(m) * j`` in float32, cast once."""
    from transformers.models.falcon import modeling_falcon as mf

    original = mf.build_alibi_tensor

    def exact(attention_mask: torch.Tensor, num_heads: int, dtype: torch.dtype) -> torch.Tensor:
        b, s = attention_mask.shape
        m = alibi.slopes(num_heads).to(torch.bfloat16).to(torch.float64)
        pos = ((attention_mask.cumsum(-1) - 1) * attention_mask)[:, None, :].to(torch.float64)  # (b, 1, s)
        return (m[None, :, None] * pos).reshape(b * num_heads, 1, s).to(dtype)

    mf.build_alibi_tensor = exact
    try:
        yield
    finally:
        mf.build_alibi_tensor = original


@contextmanager
def mpt_configured_bias(model: torch.nn.Module, source) -> Iterator[None]:
    """transformers' MPT with its ALiBi slopes from the config's ``attn_config.alibi_bias_max``: its
    ``build_mpt_alibi_tensor`` is always called with the default 8."""
    from transformers.models.mpt import modeling_mpt as mm

    original = mm.MptModel.build_mpt_alibi_tensor

    def configured(self, num_heads, sequence_length, alibi_bias_max=8, device=None):
        return mm.build_mpt_alibi_tensor(num_heads, sequence_length, _mpt_bias_max(self.config), device)

    mm.MptModel.build_mpt_alibi_tensor = configured
    try:
        yield
    finally:
        mm.MptModel.build_mpt_alibi_tensor = original


@contextmanager
def attached_biases(model: torch.nn.Module, source) -> Iterator[None]:
    """``model`` with every bias tensor ``source`` reads (``SourceModel.expected_shapes``) attached where
    transformers built its module without one (a ``Linear`` or ``LayerNorm`` whose ``bias`` is None), in the
    module's dtype."""
    attached = []
    for name in source.expected_shapes():
        if not name.endswith(".bias") or name not in source.reader:
            continue
        try:
            module = model.get_submodule(name[: -len(".bias")])
        except AttributeError:
            continue
        if getattr(module, "bias", False) is None:
            bias = source.reader.read(name, dtype=module.weight.dtype).to(module.weight.device)
            module.bias = torch.nn.Parameter(bias, requires_grad=False)
            attached.append(module)
    try:
        yield
    finally:
        for module in attached:
            module.bias = None


@contextmanager
def bloom_dense_with_bias(model: torch.nn.Module, source) -> Iterator[None]:
    """transformers' BLOOM with ``slow_but_exact`` off, so ``dense`` and ``dense_4h_to_h`` run as one ``Linear``
    with their bias (as defined; the slice-by-slice path computes the same product without it)."""
    split = [m for m in model.modules() if getattr(m, "slow_but_exact", False)]
    for module in split:
        module.slow_but_exact = False
    try:
        yield
    finally:
        for module in split:
            module.slow_but_exact = True


def _tp(config: Mapping[str, Any]) -> int:
    tp = config.get("pretraining_tp", 1)
    return tp if isinstance(tp, int) else 1


def _mpt_bias_max(config) -> float:
    attn = config.get("attn_config") if isinstance(config, dict) else getattr(config, "attn_config", None)
    value = attn.get("alibi_bias_max") if isinstance(attn, dict) else getattr(attn, "alibi_bias_max", None)
    return 8.0 if value is None else float(value)


@dataclass(frozen=True)
class Deviation:
    """Where transformers' implementation of a family departs from the family's own definition: ``applies``
    to a source config, ``patch(model, source)`` (a context manager) makes the loaded transformers ``model``
    compute the definition of ``source`` (a ``SourceModel``), and ``what`` names the departure in the report."""

    applies: Callable[[Mapping[str, Any]], bool]
    patch: Callable[[torch.nn.Module, Any], AbstractContextManager]
    what: str


DEVIATIONS: dict[str, tuple[Deviation, ...]] = {
    "bloom": (Deviation(lambda c: _tp(c) > 1 and bool(c.get("slow_but_exact")),
                              bloom_dense_with_bias, "dense biases dropped (pretraining_tp > 1, slow_but_exact)"),),
    "falcon": (Deviation(lambda c: True, falcon_exact_bias, "bias rounded to bfloat16"),),
    "mpt": (Deviation(lambda c: _mpt_bias_max(c) != 8.0, mpt_configured_bias,
                            "alibi_bias_max ignored (always 8)"),
            Deviation(lambda c: not c.get("no_bias", True), attached_biases,
                            "bias tensors ignored (no_bias false)")),
}


def deviations_of(family: str, config: Mapping[str, Any]) -> tuple[Deviation, ...]:
    """The deviations of transformers' ``family`` that apply to this source config (``DEVIATIONS``)."""
    return tuple(d for d in DEVIATIONS.get(family, ()) if d.applies(config))


@contextmanager
def as_defined(model: torch.nn.Module, source) -> Iterator[None]:
    """Every deviation of ``source``'s family that applies to its config, patched into ``model`` at once."""
    with ExitStack() as stack:
        for deviation in deviations_of(source.info.family, source.config):
            stack.enter_context(deviation.patch(model, source))
        yield
