"""The emulation plan: theta and N for every ALiBi head (Litzenberger, "Emulating ALiBi with RoPE").

Each head gets a rotary pair with fixed q = (-N, 0), k = (0, 1) (zero weights, constant biases),
rotating at theta while every other dim is unrotated. The pair adds ``-N sin(theta d)`` to q.k,
``-(N/sqrt(hd)) sin(theta d)`` to the logit, and ``N = m sqrt(hd)/theta`` matches ALiBi's ``-m d``
in the small-angle limit. N is stated in the source's convention (scale 1/sqrt(hd), hd the source
head dim); a converter whose target scales differently adapts it. Example (the source text): BLOOM-560M
(16 heads, hd 64), window 65536, phase 0.1: steepest head m ~ 0.7071, theta ~ 1.526e-6, N ~ 3.707e6.

Modes: ``max-phase`` (theta = phase/L), ``theta`` (given), ``error-optimal`` (default: the theta
minimising the predicted error of ``error_model`` for the dtype and window; where that error is flat,
as in float32 and bfloat16 once the sine term is negligible, the largest theta within 1% of the
minimum, which keeps N smallest), and ``fixed-base`` (theta from ``base^(-2r/R)``, best r or best K
consecutive pairs per head, see ``fixed_base``). float16 cannot hold N > 65504: N is then split,
q = (-N/s, 0), k = (0, s), s = sqrt(N) by default; a plan the dtype cannot represent is refused.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from . import __version__, _checks
from .error_model import DTYPES, PairSpec, predict
from .fixed_base import frequency_set, is_non_increasing, max_window_for_phase, multi_pair_amplitudes

MODES = ("error-optimal", "max-phase", "theta", "fixed-base", "ladder", "exact-rotation")
HALF_PI = math.pi / 2


@dataclass(frozen=True)
class PairTerm:
    """One rotating pair of a head: frequency (rad/token), amplitudes N and M (pre-scale), index r in a fixed set.

    The pair carries q = (-N/s, M/s), k = (0, s) and adds ``scale (M cos(theta d) - N sin(theta d))`` to the
    logit; M is 0 except in the frequency ladder (``ladder``)."""

    theta: float
    N: float
    index: int | None = None
    M: float = 0.0

    def __post_init__(self) -> None:
        _checks.positive("theta", self.theta)
        _checks.number("N", self.N)
        _checks.number("M", self.M)


@dataclass(frozen=True)
class HeadPlan:
    """The emulation of one head and its predicted worst logit error over the window. ``sine_error`` is the
    approximation error in exact arithmetic (the sine's, or the ladder fit's); the ladder also records its
    floor C (logits), the distance W = C/m up to which the bias is exact and its shift s (the bias is
    s - m d there, the same for every key of a query: no softmax sees it)."""

    head: int
    slope: float
    pairs: tuple[PairTerm, ...]
    split: float
    phase: float
    sine_error: float
    rounding_error: float
    predicted_error: float
    floor: float | None = None
    exact_distance: int | None = None
    shift: float = 0.0

    def __post_init__(self) -> None:
        _checks.positive("slope", self.slope)
        _checks.positive("split", self.split)
        if not self.pairs:
            raise ValueError(f"head {self.head} has no pairs")
        if len(self.pairs) == 1 and not self.phase < HALF_PI:
            raise ValueError(f"head {self.head}: phase theta*L = {self.phase!r} must be < pi/2 (monotone bias)")

    @property
    def theta(self) -> float:
        """Frequency of the slowest pair (the only one unless the multi-pair fit is used)."""
        return min(p.theta for p in self.pairs)

    @property
    def N(self) -> float:  # noqa: N802 (the source's name)
        return next(p.N for p in self.pairs if p.theta == self.theta)

    def specs(self) -> list[PairSpec]:
        return [PairSpec(p.theta, p.N) for p in self.pairs]


@dataclass(frozen=True)
class EmulationPlan:
    """Per-head emulation of an ALiBi model, frozen and JSON-serialisable (``to_dict`` / ``from_dict``)."""

    head_dim: int
    window: int
    dtype: str
    mode: str
    heads: tuple[HeadPlan, ...]
    cutoff: float = 40.0
    tolerance: float = 1e-3
    base: float | None = None
    rope_dim: int | None = None
    pairs_per_head: int = 1
    max_window: int | None = None
    family: str | None = None
    source: str | None = None
    version: str = field(default=__version__)

    def __post_init__(self) -> None:
        _checks.positive_int("head_dim", self.head_dim)
        _checks.positive_int("window", self.window)
        _checks.choice("dtype", self.dtype, tuple(DTYPES))
        _checks.choice("mode", self.mode, MODES)
        _checks.positive("cutoff", self.cutoff)
        _checks.positive("tolerance", self.tolerance)
        if not self.heads:
            raise ValueError("a plan needs at least one head")
        limit = torch.finfo(DTYPES[self.dtype]).max
        for h in self.heads:
            q = max(max(abs(p.N), abs(p.M)) for p in h.pairs) / h.split
            if q > limit or h.split > limit:
                raise ValueError(
                    f"head {h.head}: q = N/s = {q:.4g} and k = s = {h.split:.4g} must fit {self.dtype} (max {limit:.6g}); "
                    "choose another split, a larger theta or a wider dtype"
                )

    @property
    def scale(self) -> float:
        """The source's logit scale 1/sqrt(head_dim), in which N is stated."""
        return 1.0 / math.sqrt(self.head_dim)

    @property
    def worst_head(self) -> HeadPlan:
        return max(self.heads, key=lambda h: h.predicted_error)

    @property
    def meets_tolerance(self) -> bool:
        return self.worst_head.predicted_error <= self.tolerance

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for h, row in zip(self.heads, out["heads"]):
            row["theta"], row["N"] = h.theta, h.N
        out["worst_head"] = self.worst_head.head
        out["worst_predicted_error"] = self.worst_head.predicted_error
        out["meets_tolerance"] = self.meets_tolerance
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EmulationPlan:
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        heads = []
        for row in data["heads"]:
            pairs = tuple(PairTerm(**p) for p in row["pairs"])
            keep = {k: v for k, v in row.items() if k in HeadPlan.__dataclass_fields__ and k != "pairs"}
            heads.append(HeadPlan(pairs=pairs, **keep))
        fields["heads"] = tuple(heads)
        return cls(**fields)


def _split_for(n_max: float, dtype: str, split: float | str | None) -> float:
    if split is None:  # split only where the dtype needs it
        return math.sqrt(n_max) if n_max > torch.finfo(DTYPES[dtype]).max else 1.0
    if split == "sqrt":
        return math.sqrt(n_max)
    return _checks.positive("split", split)


def _evaluate(head, slope, thetas, indices, scale, window, dtype, cutoff, split) -> HeadPlan | None:
    """The head's plan on the given pairs, or None when their bias would rise somewhere in the window."""
    amplitudes = multi_pair_amplitudes(slope, thetas)  # logits
    if len(thetas) > 1 and not is_non_increasing(amplitudes, thetas, window):
        return None
    ns = amplitudes / scale
    s = _split_for(float(np.abs(ns).max()), dtype, split)
    specs = [PairSpec(float(t), float(n)) for t, n in zip(thetas, ns)]
    err = predict(slope, specs, scale, window, dtype, cutoff=cutoff, split=s)
    pairs = tuple(PairTerm(float(t), float(n), i) for t, n, i in zip(thetas, ns, indices))
    return HeadPlan(head, slope, pairs, s, float(max(thetas)) * window, err.sine, err.rounding, err.total)


def _error_optimal(head, slope, scale, window, dtype, cutoff, split) -> HeadPlan:
    """Minimise the predicted error over theta in (0, pi/(2L)): a log grid, refined, then the largest
    theta within 1% of the minimum."""
    top = HALF_PI * (1 - 1e-6) / window
    grid = top * 10.0 ** (-np.arange(49) / 4)  # 12 decades
    plans = [_evaluate(head, slope, [t], [None], scale, window, dtype, cutoff, split) for t in grid]
    best = int(np.argmin([p.predicted_error for p in plans]))
    lo, hi = grid[min(best + 1, len(grid) - 1)], grid[max(best - 1, 0)]
    plans += [_evaluate(head, slope, [t], [None], scale, window, dtype, cutoff, split) for t in np.geomspace(lo, hi, 9)]
    floor = min(p.predicted_error for p in plans)
    return max((p for p in plans if p.predicted_error <= 1.01 * floor), key=lambda p: p.theta)


def shared_theta(
    slopes: Sequence[float], head_dim: int, window: int, *, dtype: str = "float32", cutoff: float = 40.0,
    split: float | str | None = None,
) -> float:
    """One theta for every head (a target whose heads share one frequency): the theta minimising the worst
    head's predicted error, the largest within 1% of that minimum (the search of ``_error_optimal``)."""
    scale = 1.0 / math.sqrt(head_dim)
    top = HALF_PI * (1 - 1e-6) / window
    # The search runs on the heads that can be worst: rounding grows with m (steepest head), the sine term
    # with m*D^3, D = min(L, cutoff/m) (the shallowest head, and the steepest whose D is still L); the
    # candidates it keeps are then scored on every head.
    ms = sorted(set(slopes))
    critical = {ms[0], ms[-1], max((m for m in ms if m <= cutoff / window), default=ms[0])}

    def worst(t: float, heads) -> float:
        return max(_evaluate(0, m, [t], [None], scale, window, dtype, cutoff, split).predicted_error for m in heads)

    grid = list(top * 10.0 ** (-np.arange(49) / 4))
    errors = [worst(t, critical) for t in grid]
    best = int(np.argmin(errors))
    fine = list(np.geomspace(grid[min(best + 1, 48)], grid[max(best - 1, 0)], 9))
    grid, errors = grid + fine, errors + [worst(t, critical) for t in fine]
    keep = sorted(range(len(grid)), key=lambda k: errors[k])[:5]
    exact = {grid[k]: worst(grid[k], ms) for k in keep}
    floor = min(exact.values())
    return float(max(t for t, e in exact.items() if e <= 1.01 * floor))


def _fixed_candidates(base: float, rope_dim: int, k: int) -> list[tuple[list[float], list[int]]]:
    freqs = frequency_set(base, rope_dim)
    if k > len(freqs):
        raise ValueError(f"pairs={k} exceeds the {len(freqs)} pairs of rope_dim {rope_dim}")
    return [(list(freqs[r : r + k]), list(range(r, r + k))) for r in range(len(freqs) - k + 1)]


def _best_fixed(head, slope, candidates, scale, window, dtype, cutoff, split) -> HeadPlan | None:
    plans = []
    for thetas, idx in candidates:
        if len(thetas) == 1 and thetas[0] * window >= HALF_PI:
            continue
        p = _evaluate(head, slope, thetas, idx, scale, window, dtype, cutoff, split)
        if p is not None:
            plans.append(p)
    return min(plans, key=lambda p: p.predicted_error) if plans else None


def fixed_base_max_window(
    slopes: Sequence[float], head_dim: int, base: float, rope_dim: int, *, pairs: int = 1, dtype: str = "float32",
    tolerance: float = 1e-3, cutoff: float = 40.0, split: float | str | None = None,
) -> int:
    """Longest window in which every head, on its best K consecutive pairs of ``base^(-2r/R)``, has a predicted
    error <= ``tolerance`` (bisection; the 4 slowest windows of pairs are tried, faster ones only add sine error)."""
    scale = 1.0 / math.sqrt(head_dim)
    candidates = _fixed_candidates(base, rope_dim, pairs)[-4:]
    order = sorted(set(slopes), key=lambda m: -m)

    def ok(window: int) -> bool:
        for m in order:
            p = _best_fixed(0, m, candidates, scale, window, dtype, cutoff, split)
            if p is None or p.predicted_error > tolerance:
                return False
        return True

    lo, hi = 0, 1
    theta_min = min(t for c, _ in candidates for t in c)
    limit = int(8 * HALF_PI / theta_min)
    while hi < limit and ok(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def plan_emulation(
    slopes: Sequence[float],
    head_dim: int,
    window: int,
    *,
    dtype: str = "float32",
    max_phase: float | None = None,
    theta: float | None = None,
    base: float | None = None,
    rope_dim: int | None = None,
    pairs: int = 1,
    split: float | str | None = None,
    cutoff: float = 40.0,
    tolerance: float = 1e-3,
    family: str | None = None,
    source: str | None = None,
    max_window: bool = True,
) -> EmulationPlan:
    """Plan theta and N for every head; see the module doc for the modes.

    Args:
        slopes: per-logit ALiBi slopes, one per head (``sources.family_slopes``), shape ``(h,)``.
        head_dim: the source head dim (N is stated for the scale 1/sqrt(head_dim)).
        window: longest context L to serve (distances and positions 0..L), extrapolation included.
        dtype: the dtype the converted model runs in.
        max_phase / theta: the source text's modes; with ``base`` and ``rope_dim``, ``max_phase`` only sets the
            phase of the reported ``max_window_at_phase``.
        base, rope_dim, pairs: a fixed frequency set and the number of pairs per head (multi-pair fit).
        split: None (split N between q and k only where the dtype needs it), "sqrt", or the k value s.
        cutoff: logits below -cutoff carry no softmax weight (bounds the distances that count).
        tolerance: the predicted error the plan must meet (``meets_tolerance``).
        max_window: with a fixed base, also search the longest window within ``tolerance`` (a bisection).
    """
    window = _checks.positive_int("window", window)
    head_dim = _checks.positive_int("head_dim", head_dim)
    _checks.choice("dtype", dtype, tuple(DTYPES))
    pairs = _checks.positive_int("pairs", pairs)
    slopes = [_checks.positive(f"slope[{i}]", m) for i, m in enumerate(slopes)]
    if (base is None) != (rope_dim is None):
        raise ValueError("base and rope_dim go together (the fixed frequency set base^(-2r/rope_dim))")
    if theta is not None and (max_phase is not None or base is not None):
        raise ValueError("theta cannot be combined with max_phase or base")
    if max_phase is not None:
        max_phase = _checks.positive("max_phase", max_phase)
        if max_phase >= HALF_PI:
            raise ValueError(f"max_phase must be < pi/2 so the emulated bias stays monotone, got {max_phase!r}")
    if theta is not None:
        theta = _checks.positive("theta", theta)
        if theta * window >= HALF_PI:
            raise ValueError(f"theta * window = {theta * window:.4g} must be < pi/2; theta={theta!r} is too large")
    if pairs > 1 and base is None:
        raise ValueError("pairs > 1 needs a fixed frequency set: give base and rope_dim")
    scale = 1.0 / math.sqrt(head_dim)
    args = (scale, window, dtype, cutoff, split)

    extra: dict[str, Any] = {}
    if base is not None:
        mode = "fixed-base"
        candidates = _fixed_candidates(base, rope_dim, pairs)
        heads = []
        for h, m in enumerate(slopes):
            p = _best_fixed(h, m, candidates, *args)
            if p is None:
                raise ValueError(
                    f"window {window} is beyond what base {base:g} with rope_dim {rope_dim} can emulate monotonically "
                    f"(the slowest pair reaches pi/2 at ~{max_window_for_phase(base, rope_dim, HALF_PI)} tokens)"
                )
            heads.append(p)
        extra = {"base": float(base), "rope_dim": int(rope_dim), "pairs_per_head": pairs}
        if max_window:
            extra["max_window"] = fixed_base_max_window(slopes, head_dim, base, rope_dim, pairs=pairs, dtype=dtype,
                                                        tolerance=tolerance, cutoff=cutoff, split=split)
    elif max_phase is not None or theta is not None:
        mode = "max-phase" if max_phase is not None else "theta"
        t = max_phase / window if max_phase is not None else theta
        heads = [_evaluate(h, m, [t], [None], *args) for h, m in enumerate(slopes)]
    else:
        mode = "error-optimal"
        heads = [_error_optimal(h, m, *args) for h, m in enumerate(slopes)]
    return EmulationPlan(head_dim, window, dtype, mode, tuple(heads), cutoff, tolerance, family=family, source=source,
                         **extra)
