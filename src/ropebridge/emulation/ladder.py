"""The frequency ladder: ALiBi emulated on every pair of a rotary block, exact where it matters.

A single slow pair's bias is the small difference of two products of size ~ m sqrt(hd) * position, so in a 16-bit
dtype its rounding grows with the absolute position (and N overflows float16). The ladder uses all R/2 pairs of the
target's rotary block, ``theta_r = base^(-2r/R)`` (the free base turns the slowest pair one radian over the window),
each head with its own amplitudes fitted by ``ladder_fit.fit_head``: with q = (-N_r/s, M_r/s), k = (0, s) on pair r
the head's bias is ``f(d) = sum_r a_r sin(theta_r d) + b_r cos(theta_r d)``, a function of the distance d alone.

**The cutoff** (``default_cutoff``): a key more than ``cutoff`` logits below the best one has weight below
e^-cutoff, the L keys of the window together at most ``L e^-cutoff``; the default makes that the dtype's unit
roundoff u, ``cutoff = ln(L / u)`` (bfloat16 at 2K: 13.2 logits, float16 at 32K: 17.9). The floor of a head is the
cutoff plus the content advantage a far key can have (``DEFAULT_ADVANTAGE``, or measured on text by
``checkpoint.calibration``). Source: A. Litzenberger, "Emulating ALiBi with RoPE",
https://alexlitzenberger.com/blog/emulating_alibi_with_rope; the choices of R, the advantage and the objective are
explained, with their measurements, in ``docs/decisions.md``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from collections.abc import Sequence

import numpy as np

from .. import _log
from .. import _checks
from ..numerics import unit_roundoff
from ..targets.kernels import KERNELS, rotary_dims
from .ladder_fit import HeadFit, fit_head
from .plan import EmulationPlan, HeadPlan, LadderHead, PairTerm
from .strategy import Strategy, base_words

log = _log.logger(__name__)
DEFAULT_ADVANTAGE = 45.0  # content advantage (logits) assumed without calibration (docs/decisions.md)
MAX_ROTARY_DIM = 128  # the largest ladder fitted: R = 128 takes ~10 s on a 6-head demo, 2 cores
MIN_ROTARY_DIM = 32  # the smallest ladder (docs/decisions.md: R = 16 measured 1.2-3.6x the error of 32)


def rotary_dim_for(head_dim: int, kernel: str = "any", minimum: int = MIN_ROTARY_DIM) -> int:
    """The smallest even R >= ``minimum`` whose head dim hd' = hd + R the kernel runs natively
    (``targets.kernels``). any: hd 64 -> 32 (96), hd 32 -> 32 (64), hd 128 -> 32 (160), hd 80 -> 32 (112);
    fa3: hd 128 -> 64 (192); flashinfer: hd 64 -> 64 (128)."""
    head_dim = _checks.positive_int("head_dim", head_dim)
    _checks.choice("kernel", kernel, tuple(KERNELS))
    return _ladder_sizes(kernel, head_dim, _checks.positive_int("rotary_dim", minimum, even=True), 1)[0]


def _ladder_sizes(kernel: str, head_dim: int, minimum: int, count: int) -> list[int]:
    """The first ``count`` rotary dims ``minimum`` <= R <= ``MAX_ROTARY_DIM`` with hd + R a size the kernel runs
    natively; ``ValueError`` naming the head dim when there is none (an odd head dim plus an even R is never a
    multiple of 2; a head dim just above one of the kernel's sizes needs an R beyond the ladder's largest)."""
    sizes = list(itertools.islice(rotary_dims(kernel, head_dim, minimum, MAX_ROTARY_DIM), count))
    if not sizes:
        beyond = next(rotary_dims(kernel, head_dim, minimum), None)
        why = "" if beyond is None else (f" (the first is R = {beyond}, beyond the {MAX_ROTARY_DIM} the ladder is "
                                         "fitted on: its time grows about eightfold with each doubling)")
        raise ValueError(f"head dim {head_dim}: no rotary dim R from {minimum} to {MAX_ROTARY_DIM} makes {head_dim} "
                         f"+ R a size --kernel {kernel} runs natively ({KERNELS[kernel].sizes}){why}; the ladder "
                         "cannot be served on that kernel: plan for another --kernel or --engine, or --strategy "
                         "single where the kernel runs its head dim")
    return sizes


def default_cutoff(window: int, dtype: str) -> float:
    """``ln(L / u)``: the L keys of the window below -cutoff carry at most u of the softmax weight together,
    u = 2^-p the dtype's unit roundoff (module doc). bfloat16: 13.2 at 2K, 16.0 at 32K; float16: 15.2, 17.9."""
    return math.log(_checks.positive_int("window", window)) - math.log(unit_roundoff(dtype))


def free_base(window: int, rotary_dim: int) -> float:
    """The base whose slowest pair turns one radian over the window: ``base^(-(R-2)/R) * L = 1`` (a window
    of one token is planned as two: any base turns a pair less than a radian there)."""
    return float(max(window, 2)) ** (rotary_dim / (rotary_dim - 2))


def per_head(name: str, value, heads: int) -> list:
    """One value for every head, or one per head (``ValueError`` on another count)."""
    values = [value] * heads if np.ndim(value) == 0 else list(value)
    if len(values) != heads:
        raise ValueError(f"{len(values)} {name} for {heads} heads")
    return values


def head_floors(heads: int, cutoff: float, floor=None, advantage=None) -> list[float]:
    """The floor C of every head: ``floor`` (one or per head, each >= the cutoff), else cutoff + ``advantage``
    (default ``DEFAULT_ADVANTAGE``)."""
    if floor is None:
        advantages = per_head("advantages", DEFAULT_ADVANTAGE if advantage is None else advantage, heads)
        floor = [cutoff + _checks.at_least(f"advantage[{i}]", a, 0.0) for i, a in enumerate(advantages)]
    return [_checks.at_least(f"floor[{i}]", c, cutoff) for i, c in enumerate(per_head("floors", floor, heads))]


# A pool pays off where each head's fit is short and Python-bound (many heads) or very long; in between torch's
# own threads already keep the cores busy and a pool only adds its start (each worker imports torch, ~2 s):
# benchmarks/results/plan_time.json, 2 cores.
POOL_HEADS = 32
POOL_WINDOW = 2**19


def worth_a_pool(distinct: int, window: int) -> bool:
    """Whether ``distinct`` heads' fits over ``window`` positions are worth a process pool: at least
    ``POOL_HEADS`` of them, or a window of at least ``POOL_WINDOW``."""
    return distinct >= POOL_HEADS or window >= POOL_WINDOW


# The fit's cost, measured (benchmarks/results/plan_time.json and by hand: 6 heads, R = 32, 2 cores, 2 processes:
# 1M tokens 33 s and 1.2 GB per process, 4M 185 s and 5.5 GB): it holds a few (window + 1) x R float64 arrays.
FIT_SECONDS_PER_DISTANCE_DIM = 15.5 / (2**20 * 32)  # one head's fit, seconds per distance per rotary dim
FIT_BYTES_PER_DISTANCE_DIM = 48  # a process's peak, bytes per distance per rotary dim
FIT_BASE_BYTES = 0.3 * 2**30  # a process before the fit (torch, numpy, the solver)
LONG_FIT_SECONDS = 120  # beyond this the plan says what it will cost before it starts


def fit_cost(heads: int, window: int, rotary_dim: int, jobs: int) -> tuple[float, float]:
    """The predicted seconds (2 cores) and bytes per process of fitting ``heads`` distinct heads of ``rotary_dim``
    over ``window`` in ``jobs`` processes, from the measured rates above."""
    per_head = FIT_SECONDS_PER_DISTANCE_DIM * (window + 1) * rotary_dim
    return per_head * math.ceil(heads / jobs), FIT_BASE_BYTES + FIT_BYTES_PER_DISTANCE_DIM * (window + 1) * rotary_dim


def _available_memory() -> int | None:
    """Bytes of memory available now (Linux's MemAvailable), or None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


@dataclass(frozen=True)
class FitBudget:
    """What fitting ``distinct`` heads of one rotary dim will take, known before any fit: the processes it runs in
    (``jobs``: a pool where it is worth one), the predicted ``seconds`` and bytes per process, and, where that
    memory is more than is available, the one-line ``refusal``."""

    jobs: int
    seconds: float
    per_process: float
    refusal: str | None


def fit_budget(distinct: int, window: int, rotary_dim: int, jobs: int) -> FitBudget:
    """The ``FitBudget`` of fitting ``distinct`` heads on ``rotary_dim`` dims over ``window`` with ``jobs`` asked."""
    jobs = min(jobs, distinct) if worth_a_pool(distinct, window) else 1
    seconds, per_process = fit_cost(distinct, window, rotary_dim, jobs)
    available, refusal = _available_memory(), None
    if available is not None and per_process * jobs > available:
        refusal = (f"--window {window}: the ladder's fit on {rotary_dim} rotary dims would hold about "
                   f"{per_process * jobs / 2**30:.3g} GiB ({jobs} process{'es' if jobs > 1 else ''} of "
                   f"{per_process / 2**30:.3g}; it evaluates every distance up to the window), more than the "
                   f"{available / 2**30:.3g} GiB available; plan a shorter --window" +
                   (" or fewer --jobs" if jobs > 1 else ""))
    return FitBudget(jobs, seconds, per_process, refusal)


def fit_heads(
    keys: Sequence[tuple[float, float]], thetas: np.ndarray, window: int, dtype: str, stored_scale: float, *,
    jobs: int = 1, progress: bool = False,
) -> dict[tuple[float, float], HeadFit]:
    """``fit_head`` for every distinct (slope, floor) in ``keys``, in ``jobs`` processes where the work is worth
    a pool (``worth_a_pool``); each fit is a pure function of its arguments, so the result is the same whatever
    ``jobs``. ``progress`` shows a bar on stderr once the fits have run two seconds."""
    from .._progress import progress_bar

    distinct = list(dict.fromkeys((float(m), float(c)) for m, c in keys))
    args = [(m, tuple(np.asarray(thetas, np.float64).tolist()), window, c, dtype, stored_scale) for m, c in distinct]
    budget = fit_budget(len(distinct), window, 2 * len(thetas), jobs)
    if budget.refusal is not None:
        raise ValueError(budget.refusal)
    jobs, seconds, per_process = budget.jobs, budget.seconds, budget.per_process
    if seconds > LONG_FIT_SECONDS:  # said before the work, where its cost is known (the bar needs a terminal)
        log.warning("fitting %d heads over a %d-token window: about %.0f minutes and %.3g GiB per process on 2 cores "
                    "(the fit evaluates every distance up to the window)", len(distinct), window, seconds / 60,
                    per_process / 2**30)
    bar = progress_bar(len(distinct), "plan", enabled=progress, unit="head", delay=2.0)
    fits: dict[tuple[float, float], HeadFit] = {}
    try:
        if jobs == 1:
            for key, arg in zip(distinct, args):
                fits[key] = _fit((key, arg))[1]
                bar.update()
        else:
            # spawn, not fork: a forked child of a process whose torch threads have run can hang. The workers
            # ignore Ctrl-C (the terminal sends it to them too): this process answers it and ends them.
            pool = _pool(jobs)
            try:
                for key, fit in pool.imap_unordered(_fit, list(zip(distinct, args))):
                    fits[key] = fit
                    bar.update()
            finally:
                pool.terminate()
                pool.join()
    finally:
        bar.close()
    return fits


def _pool(jobs: int):
    """A spawn pool whose workers ignore SIGINT from their first instant: an ignored signal stays ignored
    through exec, and Python then installs no handler of its own, so SIGINT is ignored here while they start
    (from the main thread; elsewhere their initializer ignores it once their imports are done)."""
    import multiprocessing
    import signal
    import threading

    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
    try:
        return multiprocessing.get_context("spawn").Pool(jobs, initializer=_ignore_interrupt)
    finally:
        if main:
            signal.signal(signal.SIGINT, previous)


def _ignore_interrupt() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _fit(item: tuple) -> tuple[tuple[float, float], HeadFit]:
    key, (slope, thetas, window, floor, dtype, stored_scale) = item
    return key, fit_head(slope, thetas, window, floor, dtype, stored_scale=stored_scale)


def ladder_on(source, request, rotary_dim: int, floors: Sequence[float], cutoff: float) -> EmulationPlan:
    """The ladder of every head of ``source`` (``slopes`` ``(h,)``, ``head_dim``, ``family``) on ``rotary_dim`` dims
    at the request's base (``free_base`` when it gives none)."""
    window, dtype, base = request.window, request.dtype, request.rope_base
    b = free_base(window, rotary_dim) if base is None else base
    try:
        rope, thetas = request.target_row.ladder_frequencies(b, rotary_dim, source.head_dim + rotary_dim, window)
    except ValueError as exc:
        raise ValueError(f"--rope-base {b:g}: {exc}" if base is not None else str(exc)) from None
    scale, stored = 1 / math.sqrt(source.head_dim), 1 / math.sqrt(source.head_dim + rotary_dim)
    fits = fit_heads(list(zip(source.slopes, floors)), thetas, window, dtype, stored, jobs=request.jobs,
                     progress=request.progress)
    heads = []
    for h, (m, c) in enumerate(zip(source.slopes, floors)):
        f = fits[m, c]
        pairs = tuple(PairTerm(float(t), -a / scale, i, bb / scale)
                      for i, (t, a, bb) in enumerate(zip(thetas, f.a, f.b)))
        heads.append(HeadPlan(h, m, pairs, 1.0, f.approximation_error, f.rounding_error, f.predicted_error,
                              LadderHead(f.floor, f.exact_distance, f.shift)))
    return EmulationPlan(source.head_dim, window, dtype, "ladder", tuple(heads), cutoff, request.tolerance,
                         base=float(b), rotary_dim=rotary_dim, pairs_per_head=rotary_dim // 2, rope_parameters=rope,
                         family=source.family)


def plan_ladder(source, request) -> EmulationPlan:
    """The ladder plan of ``source`` for a ``resolved.Resolved``: R = ``rotary_dim``, or ``rotary_dim_for(hd, kernel)``
    and, where that plan misses the tolerance, the next size the kernel runs if it does better; floors from
    ``floor`` or ``advantage`` (``head_floors``); the cutoff ``default_cutoff`` unless given."""
    cutoff, floors = request.cutoff, request.floors  # resolved: default_cutoff unless given; ``head_floors``
    if request.rotary_dim is not None:
        sizes = [request.rotary_dim]
    else:
        sizes = _ladder_sizes(request.kernel, source.head_dim, MIN_ROTARY_DIM, 2)
    distinct = len(set(zip(source.slopes, floors)))
    budgets = [fit_budget(distinct, request.window, r, request.jobs) for r in sizes]
    if budgets[0].refusal is not None:  # decided before any fit
        raise ValueError(budgets[0].refusal)
    if any(b.refusal for b in budgets[1:]):  # the next size, tried where the first misses, would not fit memory
        log.warning("the ladder on %d rotary dims is tried alone: %d, which is tried where it misses the tolerance, "
                    "would need more memory than is available", sizes[0], sizes[1])
        sizes = sizes[:1]
    plans = []
    for r in sizes:
        plans.append(ladder_on(source, request, r, floors, cutoff))
        if plans[-1].meets_tolerance:
            break
    return min(plans,
               key=lambda p: (not p.meets_tolerance, p.worst_head.predicted_error if not p.meets_tolerance else 0))


def check_ladder(request) -> None:
    """What the ladder refuses: the single pair's options, and a rotary dim it cannot fit (below 4, above
    ``MAX_ROTARY_DIM``)."""
    if request.single_flags:
        raise ValueError("--theta, --max-phase, --pairs and --split are for --strategy single; the ladder plans "
                         "every pair")
    if request.rotary_dim is not None and request.rotary_dim < 4:
        raise ValueError(f"rotary_dim must be >= 4 for a ladder, got {request.rotary_dim}")
    if request.rotary_dim is not None and request.rotary_dim > MAX_ROTARY_DIM:
        raise ValueError(f"--rotary-dim {request.rotary_dim}: the ladder is fitted on at most {MAX_ROTARY_DIM} rotary "
                         f"dims (its time grows about eightfold with each doubling: {MAX_ROTARY_DIM} takes seconds per "
                         f"head, {request.rotary_dim} would take days)")


STRATEGY = Strategy("ladder", plan_ladder, check_ladder, base_words, default_cutoff)
