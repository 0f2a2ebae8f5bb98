"""Writer of the ``starcoder2`` target: ``Starcoder2ForCausalLM`` with one emulation pair per head (``compact``):
``rope_type: proportional`` with ``partial_rotary_factor`` 2/hd' rotates only pair 0, dims (0, hd'/2), at
1/factor = theta; every other pair has frequency exactly 0."""

from __future__ import annotations

import functools

from ..checkpoint.model import SourceModel
from ..emulation import EmulationPlan
from . import compact
from .protocol import Writer


def config(src: SourceModel, lay: compact.CompactLayout, plan: EmulationPlan) -> dict:
    """config.json: the compact keys, Starcoder2's own, and the single pair as a proportional rope."""
    return {**compact.common_config(src, lay, plan), "architectures": [lay.target.architecture],
            "model_type": lay.target.model_type, "norm_epsilon": src.info.eps, "use_bias": True,
            "sliding_window": None, "residual_dropout": 0.0, "embedding_dropout": 0.0,
            "rope_parameters": {"rope_type": "proportional", "rope_theta": 10000.0, "factor": 1.0 / lay.theta,
                                "partial_rotary_factor": compact.partial_rotary_factor(lay)}}


# Starcoder2MLP's c_fc and c_proj; plain LayerNorms
TENSORS = functools.partial(compact.add_tensors, mlp=("c_fc", "c_proj"), one_p=False)
WRITER = Writer("starcoder2", compact.layout, TENSORS, config, compact.geometry,
                compact.shapes)
