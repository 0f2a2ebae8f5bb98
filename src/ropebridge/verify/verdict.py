"""The verdict of ``verify``: the report of everything it checked and measured, and the rule that judges it.

The limit is ``limit.limit``: the largest of the dtype's default tolerance at the plan's window, ``LOGIT_FACTOR``
times the plan's predicted worst score error over the positions compared and, in half precision,
``BASELINE_FACTOR`` times the dtype's baseline (the source itself in that dtype, measured by verify from SRC); the
source's own error is never an allowance. In float32 the source run as defined must also agree with the exact
reference over its first ``READING_TOKENS`` positions.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from ..limit import BASELINE_FACTOR, LOGIT_FACTOR, limit
from . import engine_check
from .engine_check import EngineCheck

DIFFERENCE_ROWS = 8  # tensors whose bytes differ (``--accept-older``) named in the rows; report.json has all
READING_TOKENS = 256  # the tokens on which the source as transformers runs it is held to the reference


@dataclass
class VerifyReport:
    """Everything ``verify`` checked and measured; ``passed`` is False when any check failed (listed in
    ``failures``). The measured numbers are None when the functional check did not run (``functional_skipped``
    says why: a byte difference). Judged: the converted model against the exact float64 reference (``reference_*``,
    ``padded_*``, ``mean_kl``, ``top1_agreement``, ``error_by_position``); reported beside: the source as transformers
    runs it (``reference_source_max_err``, ``greedy_source``, ``max_abs_logit_diff``), None where transformers has no
    class for it (``source_ran``)."""

    source: str
    converted: str
    family: str
    dtype: str
    context: int
    source_attention: str
    byte_check: dict[str, Any] = field(default_factory=dict)
    predicted_error: float | None = None  # the plan's worst predicted score error over the positions compared, from SRC
    baseline_max_err: float | None = None  # half precision: SRC in the dtype, attention and bias exact, vs exact
    content_advantage: list[float] = field(default_factory=list)  # per head, on the tokens (calibration module)
    advantage_allowed: list[float] | None = None  # per head, what the ladder's floor covers (C - cutoff)
    functional_skipped: str | None = None
    reference_converted_max_err: float | None = None  # judged: converted vs exact, max |logit error|
    padded_max_abs_logit_diff: float | None = None  # judged: the left-padded batch, converted vs exact
    mean_kl: float | None = None  # KL(exact || converted), mean over positions
    top1_agreement: float | None = None  # converted's argmax equal to exact's
    error_by_position: list[float] = field(default_factory=list)  # converted vs exact, max over the vocabulary
    greedy_identical: bool | None = None  # converted's greedy tokens against the source's (run, or exact)
    greedy_first_divergence: int | None = None
    greedy_source: list[int] = field(default_factory=list)  # the source's greedy tokens (run, or exact)
    greedy_converted: list[int] = field(default_factory=list)
    greedy_bound: str | None = None  # why fewer greedy tokens ran than were asked, if so
    ppl_reference: float | None = None
    ppl_source: float | None = None
    ppl_converted: float | None = None
    max_abs_logit_diff: float | None = None  # reported: converted vs the source as transformers runs it (defined)
    reference_source_max_err: float | None = None  # reported: the source as run vs exact
    transformers_max_abs_logit_diff: float | None = None  # transformers' own where it deviates:
    transformers_deviation: str | None = None  # how (``DEVIATIONS``); the source ran as defined
    transformers_reading_max_err: float | None = None  # transformers' own from exact, first READING_TOKENS
    source_reading_max_err: float | None = None  # the source as defined from exact, first READING_TOKENS
    thresholds: dict[str, Any] = field(default_factory=dict)
    cost: dict[str, Any] = field(default_factory=dict)  # memory budget, weights held, seconds per stage
    failures: list[str] = field(default_factory=list)
    report_error: str | None = None  # why --report DIR could not be written, if it could not
    source_ran: bool = True  # False: transformers has no class for SRC, the exact reference stood for it
    engine: EngineCheck | None = None  # verify --engine: DST run by an engine instead of transformers

    @property
    def source_name(self) -> str:
        """Whose greedy tokens the converted model's are compared with: SRC run by transformers, or exact."""
        return "source" if self.source_ran else "exact"

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def measured(self) -> bool:
        return self.functional_skipped is None

    @property
    def limit_why(self) -> str:
        """Where the limit comes from, in words: the tolerance and, when known, the prediction times its factor."""
        why = f"tolerance {self.thresholds['max_abs_logit_diff']:g}"
        if self.predicted_error is not None:
            why += f", {LOGIT_FACTOR:g} x predicted {self.predicted_error:.3g}"
        if self.baseline_max_err is not None:
            why += f", {BASELINE_FACTOR:g} x baseline {self.baseline_max_err:.3g}"
        return why

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "passed": self.passed}


def non_finite(report: VerifyReport) -> list[str]:
    """The failures for every measured number that is NaN or inf (no comparison can pass it)."""
    names = ("reference_converted_max_err", "padded_max_abs_logit_diff", "mean_kl", "top1_agreement", "ppl_reference",
             "ppl_converted", "ppl_source", "max_abs_logit_diff", "reference_source_max_err", "source_reading_max_err")
    values = {name: getattr(report, name) for name in names}
    return [f"{name} is {value}: not a finite number" for name, value in values.items()
            if value is not None and not math.isfinite(value)]


def describe(check: dict[str, Any]) -> str:
    """A byte check (``ByteCheck.to_dict``) in words, as the report, the CLI and the model card say it."""
    if check.get("mode") == "skipped":
        return "not read (--quick); files, config, tokenizer and plan as convert writes them"
    if check.get("failures"):
        return "differ from what convert writes from SRC"
    size = f"{check.get('tensors')} tensors, {check.get('bytes', 0) / 2**20:.1f} MiB"
    if check.get("mode") == "unproven":
        differences = check.get("differences") or []
        found = (f"{len(differences)} differ from what convert writes from SRC (first {differences[0]})"
                 if differences else "all identical to what convert writes from SRC")
        return f"not proven (--accept-older: the function decides): of {size}, {found}"
    return f"identical to what convert writes from SRC: {size}"


def limit_of(report: VerifyReport) -> float:
    """``limit`` of a report: its threshold, prediction and baseline."""
    return limit(report.thresholds["max_abs_logit_diff"], report.predicted_error, report.baseline_max_err)


def judge(report: VerifyReport) -> list[str]:
    """The failures of a measured report against its limit (``limit_of``): any non-finite number; the converted
    model's max |logit error| from the exact reference above the limit, on the tokens and on the left-padded batch;
    in float32, the source as defined above the limit from exact over its first ``READING_TOKENS`` positions, and
    greedy generations that differ. Native's error is never an allowance for the converted model's."""
    failures = non_finite(report)
    limit = report.thresholds["limit"]
    if report.engine is not None:
        return failures + engine_check.judge(report.engine, limit, report.limit_why)
    what = f"the limit {limit:.3g} ({report.limit_why})"
    if report.reference_converted_max_err > limit:
        failures.append(f"converted vs exact ALiBi: max |logit error| {report.reference_converted_max_err:.3g} > {what}"
                        + advantage_hint(report))
    if report.padded_max_abs_logit_diff > limit:
        failures.append(f"left-padded batch: converted vs exact, max |logit error| "
                        f"{report.padded_max_abs_logit_diff:.3g} > {what}")
    reading = report.source_reading_max_err
    if report.dtype == "float32" and reading is not None and reading > limit:
        as_defined = "" if report.transformers_deviation is None else \
            f" (run as defined: {report.transformers_deviation})"
        failures.append(f"transformers' {report.family}{as_defined} differs from ropebridge's exact reading of SRC by "
                        f"{reading:.3g} over its first {READING_TOKENS} tokens > {what}: SRC is read as two models")
    if report.thresholds["greedy_identical"] and report.greedy_identical is False:
        failures.append(f"greedy generations differ from token {report.greedy_first_divergence}")
    return failures


def beyond_floor(report: VerifyReport) -> tuple[int, float, float] | None:
    """The head whose content advantage on the tokens most exceeds what its ladder floor covers, as (head, measured,
    allowed); None for a plan that is not a ladder or when every head is covered."""
    if not report.advantage_allowed or not report.content_advantage:
        return None
    h = max(range(len(report.content_advantage)),
            key=lambda i: report.content_advantage[i] - report.advantage_allowed[i])
    measured, allowed = report.content_advantage[h], report.advantage_allowed[h]
    return (h, measured, allowed) if measured > allowed else None


def advantage_hint(report: VerifyReport) -> str:
    """Why a ladder may miss, where the tokens show it: a far key's content advantage beyond the ladder's floor."""
    found = beyond_floor(report)
    if found is None:
        return ""
    h, measured, allowed = found
    return (f"; head {h}'s content advantage on these tokens is {measured:.3g} logits, beyond the {allowed:.3g} its "
            "ladder floor covers: convert with --calibration-text FILE (text like what it will serve) or a larger "
            "--floor")


def _baseline_row(report: VerifyReport) -> list[tuple[str, str, str]]:
    if report.baseline_max_err is None:
        return []
    return [("baseline", f"{report.baseline_max_err:.3e}", f"reported: SRC in {report.dtype} vs exact, attention and "
             "bias exact")]


def rows(report: VerifyReport) -> list[tuple[str, str, str]]:
    """The report as rows (what, measured, how it is judged): the one content the terminal, ``report.md`` and the
    model card format. No row names the source where the source did not run."""
    out = [("bytes", describe(report.byte_check), report.byte_check.get("note") or "")]
    differences = report.byte_check.get("differences") or []
    out += [("  tensor differs", line, "reported, not judged") for line in differences[:DIFFERENCE_ROWS]]
    if len(differences) > DIFFERENCE_ROWS:
        out.append(("  tensor differs", f"{len(differences) - DIFFERENCE_ROWS} more (report.json lists them)", ""))
    if not report.measured:
        return out + [("functional check", f"skipped: {report.functional_skipped}", "")]
    limit = report.thresholds["limit"]
    bar = f"judged: <= {limit:.3g} ({report.limit_why})"
    if report.engine is not None:
        return out + engine_check.rows(report.engine, bar) + _baseline_row(report)
    out += [("converted vs exact", f"{report.reference_converted_max_err:.3e}", bar),
            ("left-padded batch", f"{report.padded_max_abs_logit_diff:.3e}", bar),
            *_baseline_row(report),
            ("mean KL(exact||conv)", f"{report.mean_kl:.3e}", ""),
            ("top-1 agreement", f"{report.top1_agreement:.4f}", "with exact")]
    if report.advantage_allowed and report.content_advantage:
        h = max(range(len(report.content_advantage)), key=report.content_advantage.__getitem__)
        found = beyond_floor(report)
        covered = "every head within its ladder floor" if found is None else \
            f"head {found[0]}: {found[1]:.3g} beyond the {found[2]:.3g} its floor covers"
        out.append(("content advantage", f"max {report.content_advantage[h]:.3g} logits (head {h})",
                    f"reported: {covered}"))
    if report.greedy_source or report.greedy_bound:
        n = len(report.greedy_source)
        same = "identical" if report.greedy_identical else f"differ from token {report.greedy_first_divergence}"
        how = ("judged" if report.thresholds["greedy_identical"] else "reported") + f", against {report.source_name}"
        out.append((f"greedy ({n} tokens)", same, how + (f"; {report.greedy_bound}" if report.greedy_bound else "")))
    if report.ppl_reference is not None:
        ppl = f"exact {report.ppl_reference:.6g}, converted {report.ppl_converted:.6g}"
        out.append(("perplexity", ppl + (f", source {report.ppl_source:.6g}" if report.ppl_source is not None else ""),
                    ""))
    if report.source_ran:
        out += [("source vs exact", f"{report.reference_source_max_err:.3e}", "reported"),
                ("converted vs source", f"{report.max_abs_logit_diff:.3e}", "reported")]
    if report.transformers_max_abs_logit_diff is not None:
        out.append((f"transformers' own {report.family}", f"{report.transformers_max_abs_logit_diff:.3e} from "
                    f"converted", f"reported: {report.transformers_deviation}"))
    if report.source_reading_max_err is not None and report.dtype == "float32":
        own = "" if report.transformers_reading_max_err is None else \
            f"; transformers' own {report.transformers_reading_max_err:.3e}"
        out.append(("reading of SRC", f"source vs exact, first {min(READING_TOKENS, report.context)} tokens "
                    f"{report.source_reading_max_err:.3e}{own}", bar))
    cost = report.cost
    if cost:
        out.append(("cost", f"{cost['seconds']:.1f}s, a weight at a time",
                    f"memory: needs {cost['memory_need'] / 2**30:.3g} of {cost['max_memory'] / 2**30:.3g} GiB"))
    return out
