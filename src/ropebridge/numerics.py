"""The number formats ropebridge plans for, on the package's bottom layer: the dtypes, their unit roundoff and
half-ulps, the one tolerance of a conversion per dtype, the default cutoff, and ``Numerics``, what an emulated
head's error depends on besides its pairs.

A format of precision p (bits, the implicit one included) and minimum normal exponent e_min rounds x to nearest
within half an ulp, ``hu(x) = 2^(max(floor(log2 |x|), e_min) - p)``: relative ``u = 2^-p`` (the unit roundoff)
for normal numbers, an absolute floor ``2^(e_min - p)`` for subnormals (IEEE 754; Higham, "Accuracy and
Stability of Numerical Algorithms", 2.1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from . import _checks

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# (precision p in bits incl. the implicit one, minimum normal exponent)
FORMATS = {"float32": (24, -126), "bfloat16": (8, -126), "float16": (11, -14)}

# Per dtype, the one tolerance of a conversion, in logits. ``plan`` predicts the worst error of the emulated
# bias (worst head, worst distance, as an eager attention computes the scores) and ``convert`` refuses a plan
# above it; ``verify`` bounds the converted model's output logits by it or by a factor of the plan's prediction
# (``verify.verdict``; docs/verify.md). float32 1e-3 (and ``plan_tolerance``'s bias resolution); half precision
# the same 2^9 units of roundoff in both dtypes (float16 u = 2^-11: 0.25; bfloat16 u = 2^-8: 2.0), about eight
# half-ulps of a 60-logit score.
TOLERANCE = {"float32": 1e-3, "bfloat16": 2.0, "float16": 0.25}
# float32 also allows this many half-ulps of the largest bias m L the window reaches (``plan_tolerance``)
FLOAT32_BIAS_HALF_ULPS = 4
# Logits below -DEFAULT_CUTOFF carry no softmax weight (e^-40 ~ 4e-18): the single pair's and the fixed base's
# cutoff, which the error model counts distances up to (d <= cutoff/m). The ladder's is ln(L/u)
# (``emulation.ladder.default_cutoff``).
DEFAULT_CUTOFF = 40.0


def unit_roundoff(dtype: str) -> float:
    """``u = 2^-p`` of ``dtype``: float32 2^-24, bfloat16 2^-8, float16 2^-11."""
    p, _ = FORMATS[_checks.choice("dtype", dtype, tuple(DTYPES))]
    return 2.0**-p


def half_ulp(x: np.ndarray | float, dtype: str) -> np.ndarray:
    """Largest rounding error of round-to-nearest at |x| in ``dtype`` (0 at 0, inf at inf or NaN), float64 array
    (module doc). floor(log2 |x|) is read from the float64 exponent bits and 2^k written into them, both exact."""
    p, e_min = FORMATS[dtype]
    a = np.abs(np.asarray(x, dtype=np.float64))
    e = (a.view(np.int64) >> 52) - 1023  # floor(log2 a) for normal a (below e_min for subnormal float64)
    k = np.maximum(e, e_min) - p  # >= -150: a normal float64 exponent
    out = np.where(a > 0, ((k + 1023) << 52).view(np.float64), 0.0)  # 2^k
    return np.where(np.isfinite(a), out, np.inf)


def significant_bits(x: np.ndarray) -> np.ndarray:
    """Bits from the highest to the lowest set bit of each |x| (float64 values; 0 for 0): a product of two numbers
    is exact in float32 where their counts add to at most 24."""
    m, _ = np.frexp(np.abs(np.asarray(x, np.float64)))  # m in [0.5, 1): m 2^53 an integer below 2^53
    ints = (m * 2.0**53).astype(np.int64)
    lowest = ints & -ints  # the lowest set bit
    return np.where(ints > 0, 53 - np.log2(np.maximum(lowest, 1)).astype(np.int64), 0)


def round_significand(x: float, bits: int) -> float:
    """``x`` rounded to nearest with ``bits`` significant bits (>= 1, ``significant_bits``): a number whose
    products with integers below 2^(24 - bits) are exact in float32."""
    bits = _checks.positive_int("bits", bits)
    if x == 0 or not math.isfinite(x):
        return x
    m, e = math.frexp(x)  # x = m 2^e, 0.5 <= |m| < 1
    return math.ldexp(round(math.ldexp(m, bits)), e - bits)


def largest(dtype: str) -> float:
    """The dtype's largest finite number: a value stored beyond it is inf there."""
    return float(torch.finfo(DTYPES[dtype]).max)


def is_power_of_two(x: float) -> bool:
    """Whether ``x`` is 2^k for an integer k (its significand is exactly 1/2 in ``math.frexp``)."""
    return math.frexp(x)[0] == 0.5


def plan_tolerance(dtype: str, slopes: Sequence[float], window: int) -> float:
    """The default tolerance of a plan: ``TOLERANCE[dtype]``, and in float32 at least
    ``FLOAT32_BIAS_HALF_ULPS`` half-ulps of the largest bias ``m L`` of the window. Any float32 computation of
    ALiBi's bias rounds it by up to half an ulp of m j (the source's own ``slope * position`` does), and the
    exact rotation's error grows the same way (u m L; ``error_model._exact_rotation_rounding``): past ~16K tokens
    a fixed 1e-3 would refuse conversions as exact as float32 itself resolves the bias there."""
    tolerance = TOLERANCE[_checks.choice("dtype", dtype, tuple(DTYPES))]
    if dtype == "float32":
        tolerance = max(tolerance, FLOAT32_BIAS_HALF_ULPS * float(half_ulp(max(slopes) * window, "float32")))
    return tolerance


@dataclass(frozen=True)
class Numerics:
    """What an emulated head's error depends on besides its pairs: the logit ``scale`` 1/sqrt(hd), the
    ``window`` L, the ``dtype``, the ``cutoff`` (logits below -cutoff carry no weight) and the ``split`` rule of
    N (``emulation.pairs.split_for``: None, "sqrt" or a number)."""

    scale: float
    window: int
    dtype: str
    cutoff: float = DEFAULT_CUTOFF
    split: float | str | None = None

    def __post_init__(self) -> None:
        _checks.positive("scale", self.scale)
        _checks.positive_int("window", self.window)
        _checks.choice("dtype", self.dtype, tuple(DTYPES))
        _checks.positive("cutoff", self.cutoff)

    @classmethod
    def of(cls, source: Any, request: Any) -> Numerics:
        """For ``source`` (its ``head_dim``) and a resolved request (window, dtype, cutoff (None: ``DEFAULT_CUTOFF``),
        split)."""
        return cls(1.0 / math.sqrt(source.head_dim), request.window, request.dtype,
                   request.cutoff or DEFAULT_CUTOFF, request.split)
