"""Writer of the ``nemotron`` target: ``NemotronForCausalLM`` (``compact``): the single pair on dims (0, 1) with
``linear`` scaling factor 1/theta, or the ladder's block of R dims at the plan's base (also written as the top-level
``rope_theta`` that transformers 4.x's Nemotron reads)."""

from __future__ import annotations

import functools

from ..checkpoint.model import SourceModel
from ..emulation import EmulationPlan
from . import compact
from .protocol import Writer


def config(src: SourceModel, lay: compact.CompactLayout, plan: EmulationPlan) -> dict:
    """config.json: the compact keys, Nemotron's own, and the rope of the single pair or of the ladder."""
    prf = compact.partial_rotary_factor(lay)
    nemotron = {**compact.common_config(src, lay, plan), "architectures": [lay.target.architecture],
                "model_type": lay.target.model_type, "norm_eps": src.info.eps, "attention_bias": True,
                "mlp_bias": True, "partial_rotary_factor": prf}
    if lay.base is not None:  # the ladder: a plain block at the plan's base, also where transformers 4.x reads it
        return {**nemotron, "rope_theta": lay.base,
                "rope_parameters": {"rope_type": "default", "rope_theta": lay.base, "partial_rotary_factor": prf}}
    return {**nemotron, "rope_parameters": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 1.0 / lay.theta,
                                            "partial_rotary_factor": prf}}


# NemotronMLP's up_proj and down_proj; LayerNorm1P stores weight - 1
TENSORS = functools.partial(compact.add_tensors, mlp=("up_proj", "down_proj"), one_p=True)
WRITER = Writer("nemotron", compact.layout, TENSORS, config, compact.geometry,
                compact.shapes)
