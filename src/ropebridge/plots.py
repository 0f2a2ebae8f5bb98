"""Figures. Every function returns a ``matplotlib.figure.Figure`` (no pyplot state, no display needed)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from .analysis import RopeAnalysis


def _figure(width: float = 7.0, height: float = 4.0) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def wavelength_figure(analysis: RopeAnalysis) -> Figure:
    """Wavelength per pair (log scale), default against the chosen scaling, with the context as a line."""
    fig = _figure()
    ax = fig.add_subplot()
    idx = [p.index for p in analysis.pairs]
    rope_type = analysis.rope_parameters.get("rope_type", analysis.rope_parameters.get("type", "default"))
    ax.semilogy(idx, [p.wavelength for p in analysis.pairs], "o-", ms=3, label="default")
    scaled = [p.scaled_wavelength if math.isfinite(p.scaled_wavelength) else float("nan") for p in analysis.pairs]
    if rope_type != "default":
        ax.semilogy(idx, scaled, "s-", ms=3, label=rope_type)
    ax.axhline(analysis.context, color="k", ls="--", lw=1, label=f"context {analysis.context}")
    ax.set_xlabel("pair index i")
    ax.set_ylabel("wavelength 2π/θᵢ (tokens)")
    ax.set_title(f"RoPE wavelengths, head_dim {analysis.head_dim}, base {analysis.rope_parameters.get('rope_theta')}")
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    return fig
