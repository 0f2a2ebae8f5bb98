"""The verdict of ``verify``: the report of everything it checked and measured, and the rule that judges it.

The limit is the dtype's default tolerance at the plan's window, or ``LOGIT_FACTOR`` times the plan's
predicted worst score error where that is larger; native's own error is never an allowance. In float32 the
source run as defined must also agree with the exact reference over its first ``READING_TOKENS`` positions.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

# The converted model's logit error may reach this many times the plan's predicted worst *score* error: the
# error model's tests hold measurement <= prediction <= 4 x measurement for the scores, and the logits measured
# up to 2.6x the predicted score error on the real-text models (docs/verify.md, benchmarks/verdicts.py).
LOGIT_FACTOR = 3.0
READING_TOKENS = 256  # the tokens on which the source as transformers runs it is held to the reference


@dataclass
class VerifyReport:
    """Everything ``verify`` checked and measured; ``passed`` is False when any check failed (listed in
    ``failures``). The measured numbers are None when the functional check did not run (``functional_skipped``
    says why: a byte difference)."""

    source: str
    converted: str
    family: str
    dtype: str
    context: int
    source_attention: str
    byte_check: dict[str, Any] = field(default_factory=dict)
    predicted_error: float | None = None  # the plan's worst predicted score error, derived again from SRC
    functional_skipped: str | None = None
    max_abs_logit_diff: float | None = None
    mean_kl: float | None = None
    top1_agreement: float | None = None
    padded_max_abs_logit_diff: float | None = None
    greedy_identical: bool | None = None
    greedy_first_divergence: int | None = None
    greedy_native: list[int] = field(default_factory=list)
    greedy_converted: list[int] = field(default_factory=list)
    ppl_native: float | None = None
    ppl_converted: float | None = None
    transformers_native_max_abs_logit_diff: float | None = None  # transformers' own where it deviates:
    transformers_native_deviation: str | None = None  # how (``NATIVE_DEVIATIONS``); the source ran as defined
    transformers_reading_max_err: float | None = None  # transformers' own from exact, first READING_TOKENS
    reference_native_max_err: float | None = None
    native_reading_max_err: float | None = None  # the source as defined from exact, first READING_TOKENS
    reference_converted_max_err: float | None = None
    reference_skipped: str | None = None  # why the exact reference did not run, if it did not
    error_by_position: list[float] = field(default_factory=list)
    thresholds: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    report_error: str | None = None  # why --report DIR could not be written, if it could not
    native_ran: bool = True  # False: transformers has no class for SRC, the exact reference stood for it

    @property
    def native_name(self) -> str:
        """What the "native" numbers measured: SRC run by transformers, or the exact reference standing for it."""
        return "native" if self.native_ran else "reference"

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
        return why if self.predicted_error is None else f"{why}, {LOGIT_FACTOR:g} x predicted {self.predicted_error:.3g}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "passed": self.passed}


def non_finite(report: VerifyReport) -> list[str]:
    """The failures for every measured number that is NaN or inf (no comparison can pass it)."""
    names = ("max_abs_logit_diff", "mean_kl", "top1_agreement", "padded_max_abs_logit_diff", "ppl_native",
             "ppl_converted", "reference_native_max_err", "reference_converted_max_err", "native_reading_max_err")
    values = {name: getattr(report, name) for name in names}
    return [f"{name} is {value}: not a finite number" for name, value in values.items()
            if value is not None and not math.isfinite(value)]


def describe(check: dict[str, Any]) -> str:
    """A byte check (``ByteCheck.to_dict``) in words, as the report, the CLI and the model card say it."""
    if check.get("mode") == "skipped":
        return "not read (--quick); files, config, tokenizer and plan as convert writes them"
    if check.get("failures"):
        return "differ from what convert writes from SRC"
    how = "identical" if check.get("mode") == "exact" else "within the dtype's rounding (written by another version)"
    return f"{how} to what convert writes from SRC: {check.get('tensors')} tensors, {check.get('bytes', 0) / 2**20:.1f} MiB"


def limit_of(report: VerifyReport) -> float:
    """The largest logit error the functional check accepts: the threshold, or ``LOGIT_FACTOR`` times the plan's
    predicted worst score error where that is larger (module doc)."""
    threshold = report.thresholds["max_abs_logit_diff"]
    return threshold if report.predicted_error is None else max(threshold, LOGIT_FACTOR * report.predicted_error)


def judge(report: VerifyReport) -> list[str]:
    """The failures of a measured report against its limit (``limit_of``): any non-finite number; against the exact
    reference, the converted model's max |logit error| above the limit, and a padded batch that differs from
    native by more than the limit plus both models' errors from exact (it compares the two models); without the
    reference, the max |logit diff| and the padded batch's above the limit; in float32, the source as defined
    above the limit from exact over its first ``READING_TOKENS`` positions, and greedy generations that differ.
    Native's error is never an allowance for the converted model's."""
    failures = non_finite(report)
    limit, padded = report.thresholds["limit"], report.padded_max_abs_logit_diff
    ref_native, ref_conv = report.reference_native_max_err, report.reference_converted_max_err
    what = f"the limit {limit:.3g} ({report.limit_why})"
    if report.thresholds["against"] == "native":
        if report.max_abs_logit_diff > limit:
            failures.append(f"max |logit diff| {report.max_abs_logit_diff:.3g} > {what}")
        if padded > limit:
            failures.append(f"left-padded batch: max |logit diff| {padded:.3g} > {what}")
    else:
        if ref_conv > limit:
            failures.append(f"converted vs exact ALiBi: max |logit error| {ref_conv:.3g} > {what}")
        if padded > limit + ref_native + ref_conv:
            failures.append(f"left-padded batch: max |logit diff| {padded:.3g} > {what} + both models' error from "
                            f"exact ({ref_native:.3g} + {ref_conv:.3g})")
    reading = report.native_reading_max_err
    if report.dtype == "float32" and reading is not None and reading > limit:
        as_defined = "" if report.transformers_native_deviation is None else \
            f" (run as defined: {report.transformers_native_deviation})"
        failures.append(f"transformers' {report.family}{as_defined} differs from ropebridge's exact reading of SRC by "
                        f"{reading:.3g} over its first {READING_TOKENS} tokens > {what}: SRC is read as two models")
    if report.thresholds["greedy_identical"] and not report.greedy_identical:
        failures.append(f"greedy generations differ from token {report.greedy_first_divergence}")
    return failures
