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


def emulation_figure(plan, heads: list[int] | None = None) -> Figure:
    """For a few heads: the ALiBi line -m d against the emulated bias (left), and the predicted error
    against distance on a log scale (right: sine approximation, rounding bound at the last position, total)."""
    import numpy as np

    from .emulation.error_model import distance_grid, emulated_bias, matter_distance, rounding_bound, sine_error

    if heads is None:
        order = sorted(range(len(plan.heads)), key=lambda h: -plan.heads[h].slope)
        heads = sorted({order[0], order[len(order) // 2], order[-1]})
    fig = _figure(11.0, 4.2)
    left, right = fig.subplots(1, 2)
    d = distance_grid(plan.window, 1025)
    for h in heads:
        hp = plan.heads[h]
        (line,) = left.plot(d, -hp.slope * d, lw=1, label=f"head {h} ALiBi (m={hp.slope:.3g})")
        left.plot(d, emulated_bias(hp.specs(), plan.scale, d), "--", color=line.get_color(), lw=1.5,
                  label=f"head {h} emulated")
        dm = distance_grid(matter_distance(hp.slope, plan.window, plan.cutoff), 513)
        sine = sine_error(hp.slope, hp.specs(), plan.scale, dm)
        rnd = rounding_bound(hp.specs(), plan.scale, np.full_like(dm, plan.window), plan.window - dm, plan.dtype, hp.split)
        right.semilogy(dm[1:], sine[1:] + rnd[1:], color=line.get_color(), label=f"head {h} total")
        right.semilogy(dm[1:], np.maximum(sine[1:], 1e-300), ":", color=line.get_color(), label=f"head {h} sine")
    left.set_ylim(-3 * plan.cutoff, 1)
    left.set_xlabel("distance d (tokens)")
    left.set_ylabel("bias (logits)")
    left.set_title(f"ALiBi vs emulation, window {plan.window}")
    left.legend(fontsize=7)
    right.set_xlabel("distance d (tokens), up to where the bias matters")
    right.set_ylabel(f"predicted |error| (logits), {plan.dtype}")
    right.axhline(plan.tolerance, color="k", ls="--", lw=1, label="tolerance")
    right.set_title("error model: sine approximation + rounding")
    right.legend(fontsize=7)
    for ax in (left, right):
        ax.grid(True, which="both", alpha=0.3)
    return fig


def ladder_figure(plan, heads: list[int] | None = None) -> Figure:
    """For a few heads of a ladder plan: the fitted bias against -m d on a log-distance axis, with the floor
    -C and the exact distance W (left), and the fit error |f(d) - s + m d| up to W against the predicted
    rounding (right); s the fit's softmax-invariant shift, taken off the bias on the left."""
    import numpy as np

    from .emulation.ladder_fit import ladder_bias

    if heads is None:
        order = sorted(range(len(plan.heads)), key=lambda h: -plan.heads[h].slope)
        heads = sorted({order[0], order[len(order) // 2], order[-1]})
    fig = _figure(11.0, 4.2)
    left, right = fig.subplots(1, 2)
    d = np.unique(np.round(np.geomspace(1, plan.window, 2000)))
    for h in heads:
        hp = plan.heads[h]
        thetas = [p.theta for p in hp.pairs]
        a = [-p.N * plan.scale for p in hp.pairs]
        b = [p.M * plan.scale for p in hp.pairs]
        f = ladder_bias(a, b, thetas, d) - hp.ladder.shift  # its softmax-invariant shift taken off
        (line,) = left.semilogx(d, -hp.slope * d, lw=1, label=f"head {h} ALiBi (m={hp.slope:.3g})")
        left.semilogx(d, f, "--", color=line.get_color(), lw=1.5, label=f"head {h} ladder")
        left.axvline(hp.ladder.exact_distance, color=line.get_color(), ls=":", lw=1)
        near = d[d <= hp.ladder.exact_distance]
        right.loglog(near, np.maximum(np.abs(ladder_bias(a, b, thetas, near) - hp.ladder.shift + hp.slope * near), 1e-12),
                     color=line.get_color(), label=f"head {h} fit error")
        right.axhline(hp.rounding_error, color=line.get_color(), ls="--", lw=1, label=f"head {h} rounding")
    floor = max(hp.ladder.floor for hp in plan.heads)
    left.axhline(-floor, color="k", ls="--", lw=1, label=f"-C (C = {floor:.3g})")
    left.set_ylim(-2.5 * floor, 5)
    left.set_xlabel("distance d (tokens, log)")
    left.set_ylabel("bias (logits)")
    left.set_title(f"ALiBi vs ladder ({plan.pairs_per_head} pairs, base {plan.base:.3g}), window {plan.window}")
    left.legend(fontsize=7)
    right.set_xlabel("distance d <= W (tokens)")
    right.set_ylabel(f"|error| (logits), {plan.dtype}")
    right.set_title("fit error (exact arithmetic) and predicted rounding")
    right.legend(fontsize=7)
    for ax in (left, right):
        ax.grid(True, which="both", alpha=0.3)
    return fig
