"""Target ``nemotron``: ``NemotronForCausalLM`` with one emulation pair per head (``compact``)."""

from __future__ import annotations

from functools import partial

from . import compact

layout = partial(compact.layout, target="nemotron")
add_tensors, config, geometry, shapes = compact.add_tensors, compact.config, compact.geometry, compact.shapes
