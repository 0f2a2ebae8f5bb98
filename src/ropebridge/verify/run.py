"""``verify``: prove that a converted checkpoint reproduces its ALiBi source.

Four checks, in this order, each independent of what DST says of itself:

1. **The pair.** DST's record names its source's fingerprint: sha256 over SRC's config and every byte of its
   weight files (``pipeline.source_fingerprint``); another SRC is refused before anything is measured.
2. **The bytes** (``byte_check``): from SRC and the options DST records, the checkpoint ``convert`` writes is
   derived again and compared with DST: every tensor value, the config (every key), the tokenizer and
   generation files, the set of files and the plan, field by field, whatever version DST's record names.
   ``quick`` skips the tensors' values; ``accept_older`` reports the tensors that differ instead of failing.
3. **The function** (``measure``): both models run, a weight at a time, through transformers' own modules on the
   same tokens, the converted one with its default attention (SDPA), the source with its own (BLOOM and MPT:
   eager, the only path they have; Falcon: its default SDPA path, which adds the ALiBi bias once), as the family
   defines it where transformers departs from it (``deviations.DEVIATIONS``, transformers' own numbers
   reported beside), and the exact float64 reference (``reference.reference_states``) for every source, whatever
   its size. The converted model is judged against the reference by ``verdict.judge``: its max |logit error|
   within the limit (``limit.limit``, the one ``plan`` and ``convert`` state: the largest of the dtype's default
   tolerance at the plan's window, ``LOGIT_FACTOR`` times the plan's predicted worst score error in the dtype it
   runs in, over the positions the check reaches (``cross_dtype.predicted_in``; none for a plan unfit for that
   dtype) and, in half precision, ``BASELINE_FACTOR`` times the baseline measured from SRC; the plan derived
   again from SRC, so a ``--tolerance`` DST's record names is never the limit). Native's own error is reported
   beside, never used as an allowance.
4. **One reading of the source** (float32): the source run as defined on the first ``verdict.READING_TOKENS``
   tokens alone must agree with the exact reference within the same limit, so transformers and ropebridge read
   SRC as one model and the named deviations are the only difference.

A byte difference fails without the functional check (it would measure a checkpoint ``convert`` did not write).
The memory the check needs is bounded from the shapes before anything is read (``measure.memory_need``) and
refused above ``max_memory``.

A family transformers has no class for (``Family.attention`` None: Baichuan's, Refact's, Jais' and BTLM's remote
code) is not run: the exact reference stands for SRC in every comparison (logits, padded batch, greedy generation),
and the report says SRC's own code did not run (no reading check is possible).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .. import _log
from .. import __version__, _checks
from .._progress import progress_bar
from ..checkpoint.config import SourceInfo, load_config
from ..checkpoint.model import SourceModel
from ..checkpoint.tensor_io import CheckpointReader, rows_per_block
from ..emulation.cross_dtype import predicted_in
from ..runners import EngineRun
from ..serving import Geometry
from ..numerics import DTYPES, largest, plan_tolerance
from . import byte_check
from .read_on_use import largest_weight_bytes
from .measure import GREEDY_PROMPT, check_memory, measure
from ..checkpoint.hub import resolve_source
from ..convert.pipeline import derive, source_fingerprint
from ..convert.record import ConversionRecord, written_by_older
from .verdict import VerifyReport, judge, limit_of

DEFAULT_MAX_MEMORY = 8 << 30  # bytes verify may hold: a third of a 24 GB machine
DEVICES = ("cpu", "cuda")


def check_device(device: str) -> None:
    """``ValueError`` in one line where ``device`` is ``cuda`` and torch sees no CUDA device."""

    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device (torch.cuda.is_available() is False); run on the CPU")

log = _log.logger(__name__)


def source_attention(row) -> str:
    """How the source runs beside the conversion: its transformers attention implementation (``Family.attention``),
    or, for a remote-code family, that it is not run and the exact reference stands for it."""
    if row.attention is None:
        return "not run: no transformers class (remote code); the exact reference stands for it"
    return row.attention


def _check_pair(info: SourceInfo, src: Path, dst: Path, record: ConversionRecord) -> None:
    """Refuse a DST that was not converted from SRC, before anything is measured: its recorded plan must have
    SRC's heads, head dim and slopes, its config SRC's vocabulary and depth, and its record SRC's fingerprint
    (every byte of SRC's weights)."""
    dst_config = load_config(dst)
    if not isinstance(dst_config, dict):
        raise ValueError(f"{dst}/config.json is not a JSON object")
    plan = record.plan
    slopes = [h["slope"] for h in plan["heads"]]
    problems = []
    if (plan.get("head_dim") != info.head_dim or len(slopes) != info.n_heads
            or any(abs(a - b) > 1e-12 * b for a, b in zip(slopes, info.slopes))):
        problems.append(f"its plan is for {len(slopes)} heads of dim {plan.get('head_dim')}, the source has "
                        f"{info.n_heads} of dim {info.head_dim}")
    if dst_config.get("vocab_size") != info.vocab_size:
        problems.append(f"vocabulary {dst_config.get('vocab_size')} vs the source's {info.vocab_size}")
    layers = dst_config.get("num_hidden_layers")
    if layers is not None and layers != info.n_layers:
        problems.append(f"{layers} layers vs the source's {info.n_layers}")
    recorded = record.source_fingerprint
    if not problems and recorded != source_fingerprint(src):
        problems.append("its recorded source fingerprint (config and every byte of the weight files) differs from "
                        "SRC's" if recorded is not None else "its record has no source fingerprint")
    if problems:
        raise ValueError(f"{dst} was not converted from {src}: " + "; ".join(problems))


@dataclass(frozen=True)
class VerifyRequest:
    """What ``verify`` is asked besides the two checkpoints, validated on construction: ``context`` tokens
    (random ids, or ``text`` through SRC's tokenizer), the ``dtype`` to run in (None: the one DST was converted
    for), ``greedy_tokens`` generated with the KV cache (0: none), ``max_logit_diff`` (None: the dtype's default
    tolerance at DST's window, ``numerics.plan_tolerance``), ``max_memory`` bytes the check may hold (refused in one
    line where the check needs more: ``measure.memory_need``), the ``seed`` of the ids, ``report_dir`` for
    report.md/json, ``card``: record the result in DST's model card, ``quick``: skip reading the tensors' bytes
    (everything else is still compared), and ``accept_older``: report the tensors whose bytes differ instead of failing
    on them, for a conversion by an older ropebridge (the report says the bytes are not proven; the functional check
    decides); ``engine``: the functional check runs DST in that engine with its serving options (``in_engine``)."""

    context: int = 256
    dtype: str | None = None
    text: str | None = None
    greedy_tokens: int = 32
    max_logit_diff: float | None = None
    max_memory: int = DEFAULT_MAX_MEMORY
    device: str = "cpu"  # where the models and the exact reference run: "cpu", or "cuda" (float64 there too)
    seed: int = 0
    report_dir: Path | None = None
    card: bool = False  # write the result into DST's model card (its README.md) as its "Verification" section
    quick: bool = False
    accept_older: bool = False
    engine: EngineRun | None = None  # run DST in this engine (``in_engine``) instead of transformers

    def __post_init__(self) -> None:
        _checks.positive_int("context", self.context)
        _checks.non_negative_int("greedy_tokens", self.greedy_tokens)
        if self.dtype is not None:
            _checks.choice("dtype", self.dtype, tuple(DTYPES))
        _checks.positive_int("max_memory", self.max_memory)
        _checks.choice("device", self.device, DEVICES)
        if self.max_logit_diff is not None:
            object.__setattr__(self, "max_logit_diff", _checks.positive("max_logit_diff", self.max_logit_diff))
        if self.report_dir is not None:
            object.__setattr__(self, "report_dir", Path(self.report_dir))
        if self.engine is not None and not isinstance(self.engine, EngineRun):
            raise ValueError(f"engine must be an EngineRun, got {self.engine!r}")


def verify(src: str | Path, dst: str | Path, request: VerifyRequest | None = None, *, progress: bool = False,
           **options: Any) -> VerifyReport:
    """Check DST against SRC (module doc): the pair (``_read_pair``), the limits (``_limits``), the bytes
    (``byte_check``), then the function (``measure``, judged by ``judge``: ``_functional``), and the outputs the
    request asks for (``_record``). ``request`` or its fields as keyword ``options``; ``progress``: a bar on stderr
    naming each stage."""
    request = VerifyRequest(**options) if request is None else request
    check_device(request.device)
    src, dst, record, source = _read_pair(src, dst, request)
    derived = derive(src, record.plan_request(), str(src if record.source is None else record.source),
                     model=source)
    limits = _limits(source.info, derived.plan, request, dst)
    _check_parallel(request.engine, derived.config, dst)
    check_memory(source.info, request.context, request.max_memory,  # before any weight is read
                 _largest_weight(src, source.info, derived.config, limits.dtype))
    request = dataclasses.replace(request, dtype=limits.dtype, max_logit_diff=limits.threshold)
    older = request.accept_older and written_by_older(record.ropebridge_version)
    checked = byte_check.compare(derived, dst, record, quick=request.quick, accept_older=older, progress=progress)
    if request.accept_older and not older:  # nothing older to accept: every byte is compared
        checked.note = (f"--accept-older ignored: DST's record names ropebridge {record.ropebridge_version}, not "
                        f"older than this {__version__}")
    if checked.failures:
        report = VerifyReport(source=str(src), converted=str(dst), family=source.info.family, dtype=limits.dtype,
                              context=request.context, source_attention=source_attention(source.info.family_row),
                              byte_check=checked.to_dict(), predicted_error=limits.allowance,
                              functional_skipped="DST is not what convert writes from SRC",
                              failures=list(checked.failures))
        ids = None
    else:
        report, ids = _functional(source, (src, dst), derived.plan, request, (limits, checked), progress)
    _record(report, request, dst, ids)
    return report


def _largest_weight(src: Path, info: SourceInfo, converted: dict[str, Any], dtype: str) -> int:
    """The largest weight a model of the check reads whole, in bytes of ``dtype``: the conversion's, from the
    config convert writes (``derived.config``, SRC's, not DST's claim), and the source's where transformers runs it."""
    configs = [converted] + ([load_config(src)] if info.family_row.attention is not None else [])
    return max(largest_weight_bytes(c, DTYPES[dtype]) for c in configs)


def _read_pair(src, dst, request: VerifyRequest) -> tuple[Path, Path, ConversionRecord, SourceModel]:
    """SRC and DST as directories (or hub ids fetched), DST's record, SRC read (its shapes checked before anything
    else), and the pair refused where DST was not converted from SRC (``_check_pair``)."""
    src, dst = resolve_source(src), resolve_source(dst)  # directories, or hub ids as in convert
    for p in (src, dst):
        if not (p / "config.json").is_file():
            raise FileNotFoundError(f"no config.json in {p}")
    if src.resolve() == dst.resolve():
        raise ValueError(f"{dst} is the source itself: verify compares a converted checkpoint with its source")
    record = ConversionRecord.read(dst)
    if request.card and not (dst / "README.md").is_file():
        raise FileNotFoundError(f"--card: {dst} has no model card (README.md) to record the result in")
    source = SourceModel(src)  # its shapes checked against its config before anything else
    _check_pair(source.info, src, dst, record)
    return src, dst, record, source


@dataclass(frozen=True)
class Limits:
    """What the functional check is judged by: the ``dtype`` it runs in, the ``threshold`` (the dtype's default
    tolerance at the plan's window unless asked), the plan's prediction in that dtype over the positions the check
    reaches (``predicted``), and whether the plan is fit for it over its window (``fit``: else the prediction is no
    allowance)."""

    dtype: str
    threshold: float
    predicted: float
    fit: bool

    @property
    def allowance(self) -> float | None:
        return self.predicted if self.fit else None


def _check_parallel(engine: EngineRun | None, config: dict, dst: Path) -> None:
    """Refuse an engine's ``--tensor-parallel-size`` that cannot split DST's heads or MLP evenly (read from the
    config derived again from SRC, ``serving.Geometry.tp_problems``), before anything is read or run."""
    ranks = (engine.options.get("tensor_parallel_size") if engine is not None else None) or 1
    problems = Geometry.from_config(config).tp_problems(ranks)
    if problems:
        raise ValueError(f"--tensor-parallel-size {ranks} cannot split {dst}: " + "; ".join(problems))


def _limits(info: SourceInfo, plan, request: VerifyRequest, dst: Path) -> Limits:
    """The ``Limits`` of a verify of ``plan`` (derived again from SRC, never DST's claim), after refusing a context
    or greedy tokens beyond the plan's window or the source's own limit."""
    dtype = plan.dtype if request.dtype is None else request.dtype
    if request.context > plan.window:
        raise ValueError(f"--context {_checks.shown(request.context)} is beyond the window {plan.window} that {dst} "
                         "was converted for (its bias is planned up to there only); convert again with a larger "
                         "--window")
    reach = min(GREEDY_PROMPT, request.context) + request.greedy_tokens
    if reach > plan.window:  # its cost grows with the square of the tokens, and past the window nothing is planned
        raise ValueError(f"--greedy-tokens {request.greedy_tokens} would generate up to position {reach}, beyond the "
                         f"window {plan.window} that {dst} was converted for; give at most "
                         f"{plan.window - min(GREEDY_PROMPT, request.context)}")
    positions = info.max_positions
    if positions is not None and request.context > positions:
        raise ValueError(f"--context {_checks.shown(request.context)} is beyond the source's own limit of {positions} "
                         "positions")
    threshold = request.max_logit_diff
    if threshold is None:  # the dtype's default tolerance at this window: never a --tolerance DST's record names
        threshold = plan_tolerance(dtype, info.slopes, plan.window)
    fit = dtype == plan.dtype or predicted_in(plan, dtype) <= max(plan_tolerance(d, info.slopes, plan.window)
                                                                  for d in (dtype, plan.dtype))
    # over the positions the check reaches (the tokens, or the greedy prompt and tokens), not the whole window:
    # in another dtype than DST's, its values as stored and D's arithmetic
    predicted = predicted_in(plan, dtype, positions=max(request.context, reach))
    return Limits(dtype, threshold, predicted, fit)


def _functional(source: SourceModel, paths: tuple[Path, Path], plan, request: VerifyRequest, judged: tuple,
                progress: bool) -> tuple[VerifyReport, Any]:
    """The functional check (``measure``) judged (``judge``) with ``judged``'s limits and byte check: the report and
    the ids it measured on. A DST run in another dtype than it was converted for that fails says why it cannot run
    there."""
    (src, dst), (limits, checked) = paths, judged
    bar = progress_bar(1, "verify", enabled=progress, unit="step")  # layers run and the logits pass; an ETA
    try:
        if request.engine is None:
            report, ids = measure(source, src, dst, request, bar)
            report.source_attention = source_attention(source.info.family_row)
        else:
            from .in_engine import measure_in_engine

            report, ids = measure_in_engine(source, src, dst, request, bar)
    finally:
        bar.close()
    report.byte_check, report.predicted_error = checked.to_dict(), limits.allowance
    if plan.strategy == "ladder":
        report.advantage_allowed = [h.ladder.floor - plan.cutoff for h in plan.heads]
    report.thresholds["limit"] = limit_of(report)
    report.failures.extend(judge(report))
    if report.failures and limits.dtype != plan.dtype:  # a DST run in another dtype than it was converted for
        why = beyond_range(dst, limits.dtype) or (None if limits.fit else f"its emulation in {limits.dtype} is "
                                                  f"predicted to err by {limits.predicted:.3g} logits, beyond "
                                                  f"{limits.dtype}'s tolerance")
        if why:
            report.failures.insert(0, f"DST was converted for {plan.dtype}: {why}; it cannot run in {limits.dtype} "
                                   f"(convert with --dtype {limits.dtype})")
    return report, ids


def _record(report: VerifyReport, request: VerifyRequest, dst: Path, ids) -> None:
    """What the request asks to keep: the result in DST's model card, report.md/json in ``report_dir`` (a report
    that cannot be written says why and keeps the verdict)."""
    if request.card:
        from .report import record_verification

        record_verification(dst / "README.md", report)
    if request.report_dir is not None:
        from .report import write_report

        try:
            write_report(report, request.report_dir, ids)
        except OSError as exc:  # keep the computed result: the caller prints it and says why the report is missing
            report.report_error = str(exc.strerror or exc)
            log.info("cannot write the report into %s: %s", request.report_dir, report.report_error)


def beyond_range(dst: Path, dtype: str) -> str | None:
    """The first tensor of DST holding a value beyond ``dtype``'s largest finite number (which would be inf
    there), as ``tensor NAME holds |values| up to V, beyond DTYPE's largest M``; None when every value fits.
    Read ``tensor_io.BLOCK_BYTES`` at a time, in the stored dtype (its largest |value| is exact there)."""
    top = largest(dtype)
    reader = CheckpointReader(dst)
    for name in reader.names():
        n, block = math.prod(reader.shape(name)), rows_per_block(reader.dtype(name).itemsize)
        peak = max((float(reader.read_elements(name, a, min(n, a + block)).abs().max())
                    for a in range(0, n, block)), default=0.0)
        if peak > top:
            return f"tensor {name} holds |values| up to {peak:.3g}, beyond {dtype}'s largest {top:.5g}"
    return None
