"""Where transformers' ALiBi models depart from their family's definition, and how ``verify`` runs them as
defined: Falcon rounds its bias m*j to bfloat16 even in float32 models; MPT ignores ``alibi_bias_max`` (its
slopes always use 8). Each deviation is a ``NativeDeviation``: when it applies to a config, and a context
manager that patches transformers to compute the bias as the family defines it."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from .. import alibi


@contextmanager
def falcon_exact_bias():
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
def mpt_configured_bias():
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


def _mpt_bias_max(config) -> float:
    attn = config.get("attn_config") if isinstance(config, dict) else getattr(config, "attn_config", None)
    value = attn.get("alibi_bias_max") if isinstance(attn, dict) else getattr(attn, "alibi_bias_max", None)
    return 8.0 if value is None else float(value)


@dataclass(frozen=True)
class NativeDeviation:
    """Where transformers' implementation of a family departs from the family's own definition: ``applies``
    to a source config, ``patch`` (a context manager) makes transformers compute the definition, and
    ``what`` names the departure in the report."""

    applies: Any
    patch: Any
    what: str


NATIVE_DEVIATIONS = {
    "falcon": NativeDeviation(lambda config: True, falcon_exact_bias, "bias rounded to bfloat16"),
    "mpt": NativeDeviation(lambda config: _mpt_bias_max(config) != 8.0, mpt_configured_bias,
                           "alibi_bias_max ignored (always 8)"),
}


def native_deviation(family: str, config) -> NativeDeviation | None:
    """The deviation of transformers' ``family`` for this source config, if any (``NATIVE_DEVIATIONS``)."""
    deviation = NATIVE_DEVIATIONS.get(family)
    return deviation if deviation is not None and deviation.applies(config) else None
