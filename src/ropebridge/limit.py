"""The limit a conversion is held to: the largest max |logit error| from exact ALiBi that ``verify`` accepts, and
that ``plan`` and ``convert`` state before anything is written (one function, ``limit``).

It is the largest of

- the dtype's default tolerance at the window (``numerics.plan_tolerance``);
- ``LOGIT_FACTOR`` times the plan's predicted worst *score* error over the positions compared
  (``emulation.cross_dtype.predicted_in``): how far a score error reaches into the logits;
- in half precision, ``BASELINE_FACTOR`` times the dtype's baseline, SRC itself in that dtype with attention and
  the ALiBi bias exact (measured by ``verify`` only: it is the dtype's error, not the conversion's).

``LOGIT_FACTOR`` is measured, not assumed (``benchmarks/propagation.py``, docs/decisions.md "One number"): over
every verified half-precision conversion of the five real-text models in the tables (windows 8K to 128K, 2K and 8K
tokens compared), the measured max |logit error| is 0.57 to 2.99 times the predicted worst score error over the
positions compared (3.03 for the Jais demo in float16 at 8K in an earlier run); with 16 or 32 rotary dims at 2K
to 8K, measured over the whole window, 0.66 to 3.58 (``rotary_width.py``; 3.58: Falcon-RW, float16, 4K, 16 dims).
4 bounds them all, and so every conversion convert accepts with the defaults there passes its own verify; at the
low end the limit is 7.0 times what was measured.
"""

from __future__ import annotations

import math

LOGIT_FACTOR = 4.0
# The converted model's error may reach this many times the baseline, since a conversion rounds its own ops once
# more and its attention in the dtype too. Measured converted / baseline where the emulation's share is small:
# 0.95 to 2.2 (benchmarks/fidelity.py, docs/verify.md).
BASELINE_FACTOR = 3.0


def limit(threshold: float, predicted: float | None, baseline: float | None = None) -> float:
    """The largest max |logit error| from exact a conversion may have (module doc): ``threshold`` (the dtype's
    default tolerance at the window), ``LOGIT_FACTOR`` times ``predicted`` (the plan's worst score error over the
    positions compared, None: not known) and ``BASELINE_FACTOR`` times ``baseline`` (None, or non-finite where SRC
    overflows in the dtype: no allowance)."""
    out = threshold
    if predicted is not None:
        out = max(out, LOGIT_FACTOR * predicted)
    if baseline is not None and math.isfinite(baseline):
        out = max(out, BASELINE_FACTOR * baseline)
    return out


def conversion_limit(plan) -> float:
    """The limit ``verify`` holds a conversion of ``plan`` (``EmulationPlan``) to over its whole window, in its
    dtype, before its baseline is measured: what ``plan`` and ``convert`` state."""
    from .numerics import plan_tolerance

    return limit(plan_tolerance(plan.dtype, [h.slope for h in plan.heads], plan.window),
                 plan.worst_head.predicted_error)
