"""``verify``: prove that a converted checkpoint reproduces its ALiBi source.

Four checks, in this order, each independent of what DST says of itself:

1. **The pair.** DST's record names its source's fingerprint: sha256 over SRC's config and every byte of its
   weight files (``pipeline.source_fingerprint``); another SRC is refused before anything is measured.
2. **The bytes** (``byte_check``): from SRC and the options DST records, the checkpoint ``convert`` writes is
   derived again and compared with DST: every tensor value, the config (every key), the tokenizer and
   generation files, the set of files and the plan, field by field. ``quick`` skips the tensors' values.
3. **The function.** Both models run through transformers on the same tokens: the source with its own
   attention (BLOOM and MPT: eager, the only path they have; Falcon: its default SDPA path, which adds the ALiBi
   bias once), the converted one with its default (SDPA). Where transformers departs from the family's
   definition (``native.NATIVE_DEVIATIONS``) the source runs as defined and transformers' own numbers are
   reported beside. For sources up to ``reference_max_params`` both are compared with
   ``reference.reference_logits``, an exact float64 ALiBi forward pass, and judged by ``verdict.judge``: the
   converted model's max |logit error| from it within the limit (the dtype's default tolerance at the plan's
   window, or ``verdict.LOGIT_FACTOR`` times the plan's predicted worst score error where larger; the plan
   derived again from SRC, so a ``--tolerance`` DST's record names is never the limit). Native's own error is
   reported beside, never used as an allowance. Without the reference the same bound applies to the difference
   from native.
4. **One reading of the source** (float32, with the reference): the source run as defined on the first
   ``verdict.READING_TOKENS`` tokens alone must agree with the exact reference within the same limit (where native's
   own bias m*j is still small enough for float32), so transformers and ropebridge read SRC as one model and
   the named deviations are the only difference.

A byte difference fails without the functional check (it would measure a checkpoint ``convert`` did not write).

A family transformers has no class for (``Family.attention`` None: Baichuan's remote code) is not run: the exact
reference stands for SRC in every comparison (logits, padded batch, greedy generation), which needs the source
within ``reference_max_params``, and the report says SRC's own code did not run (no reading check is possible).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .. import _checks
from .._progress import progress_bar
from ..checkpoint.config import SourceInfo, load_config
from ..checkpoint.model import SourceModel
from ..checkpoint.reference import reference_logits
from ..numerics import DTYPES, plan_tolerance
from . import byte_check
from .native import as_defined, native_deviations
from .pipeline import derive, resolve_source, source_fingerprint
from .verdict import READING_TOKENS, VerifyReport, judge, limit_of

log = logging.getLogger(__name__)


def source_attention(spec) -> str:
    """How the source runs beside the conversion: its transformers attention implementation (``Family.attention``),
    or, for a remote-code family, that it is not run and the exact reference stands for it."""
    if spec.attention is None:
        return "not run: no transformers class (remote code); the exact reference stands for it"
    return spec.attention


def _load(path: str | Path, dtype: torch.dtype):
    from transformers import AutoModelForCausalLM

    try:
        return AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()
    except Exception as exc:  # transformers raises many types for a checkpoint it cannot build: one line
        what = " ".join(str(exc).split())  # its message on one line
        raise ValueError(f"transformers cannot load {path}: {type(exc).__name__}: {what[:240]}") from None


def _kl(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """KL(p || q) per position, float64, shape ``(…,)``."""
    lp, lq = torch.log_softmax(p_logits.double(), -1), torch.log_softmax(q_logits.double(), -1)
    return (lp.exp() * (lp - lq)).sum(-1)


def _greedy(model, prompt: torch.Tensor, n: int, pad_id: int) -> list[int]:
    out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n, min_new_tokens=n,
                         do_sample=False, pad_token_id=pad_id, eos_token_id=None)
    return out[0, prompt.shape[1]:].tolist()


def _ppl(logits: torch.Tensor, ids: torch.Tensor) -> float:
    nll = torch.nn.functional.cross_entropy(logits[0, :-1].double(), ids[0, 1:])
    return float(torch.exp(nll))


def _tokens(src: Path, text: str | None, context: int, vocab: int, seed: int) -> torch.Tensor:
    if text is None:
        g = torch.Generator().manual_seed(seed)
        return torch.randint(0, vocab, (1, context), generator=g)
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(src)
    except Exception as exc:  # missing or broken tokenizer files surface as many types: one line
        raise ValueError(f"--text needs the source's tokenizer, which does not load from {src} "
                         f"({type(exc).__name__})") from None
    ids = tokenizer(text, return_tensors="pt")["input_ids"][:, :context]
    if ids.shape[1] < 2:
        raise ValueError("the text gives fewer than 2 tokens")
    return ids


def _agreement(a: torch.Tensor, b: torch.Tensor, ids: torch.Tensor, greedy_a: list[int], greedy_b: list[int],
               text: bool) -> dict[str, Any]:
    """The report's comparison of SRC's logits ``a`` (run, or the reference standing for it) with the converted
    ``b``, both ``(1, s, V)`` on ``ids`` ``(1, s)``, and of their greedy tokens: max |diff|, mean KL, top-1
    agreement, the error by position, the first divergence, and the perplexities where the ids are ``text``."""
    diff = (a - b).abs()  # (1, s, V)
    divergence = next((i for i, (x, y) in enumerate(zip(greedy_a, greedy_b)) if x != y), None)
    return dict(max_abs_logit_diff=float(diff.max()), mean_kl=float(_kl(a, b).mean()),
                top1_agreement=float((a.argmax(-1) == b.argmax(-1)).double().mean()),
                error_by_position=diff[0].amax(-1).tolist(), greedy_identical=divergence is None,
                greedy_first_divergence=divergence, greedy_native=greedy_a, greedy_converted=greedy_b,
                ppl_native=_ppl(a, ids) if text else None, ppl_converted=_ppl(b, ids) if text else None)


def _padded_batch(ids: torch.Tensor, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch ``(2, s)`` of ``ids`` ``(1, s)`` and its first half left-padded to s, and its attention mask."""
    n = ids.shape[1]
    short = max(2, n // 2)
    batch = torch.full((2, n), pad_id, dtype=torch.long)
    batch[0], batch[1, n - short:] = ids[0], ids[0, :short]
    mask = torch.ones_like(batch)
    mask[1, : n - short] = 0
    return batch, mask


def _padded_diff(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> float:
    """max |a - b| ``(2, s, V)`` over the real (unpadded) positions of ``mask`` ``(2, s)``."""
    return float((a - b).abs().amax(-1)[mask.bool()].max())


def _conversion_record(dst: Path) -> dict[str, Any]:
    """DST's ``ropebridge.json``, its shape checked (the options it records are re-derived, never trusted);
    ``ValueError`` for a directory ropebridge did not write or a record that is malformed."""
    path = dst / "ropebridge.json"
    if not path.is_file():
        raise ValueError(f"{dst} is not a ropebridge conversion (no ropebridge.json): verify compares a converted "
                         "checkpoint with its source")
    try:
        record = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(record, dict) or not isinstance(record.get("plan"), dict):
        raise ValueError(f"{path} has no conversion plan: not a ropebridge conversion")
    heads = record["plan"].get("heads")
    if not isinstance(heads, list) or not heads or not all(
            isinstance(h, dict) and isinstance(h.get("slope"), (int, float)) for h in heads):
        raise ValueError(f"{path}: its plan's heads are malformed (a list of objects, each with a numeric slope)")
    return record


def _check_pair(info: SourceInfo, src: Path, dst: Path, record: dict[str, Any]) -> None:
    """Refuse a DST that was not converted from SRC, before anything is measured: its recorded plan must have
    SRC's heads, head dim and slopes, its config SRC's vocabulary and depth, and its record SRC's fingerprint
    (every byte of SRC's weights)."""
    dst_config = load_config(dst)
    if not isinstance(dst_config, dict):
        raise ValueError(f"{dst}/config.json is not a JSON object")
    plan = record["plan"]
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
    recorded = record.get("source_fingerprint")
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
    tolerance at DST's window, ``numerics.plan_tolerance``), the exact reference up to ``reference_max_params`` parameters, the ``seed`` of the ids,
    ``report_dir`` for report.md/json, ``card``: record the result in DST's model card, and ``quick``: skip
    reading the tensors' bytes (everything else is still compared)."""

    context: int = 256
    dtype: str | None = None
    text: str | None = None
    greedy_tokens: int = 32
    max_logit_diff: float | None = None
    reference_max_params: int = 50_000_000
    seed: int = 0
    report_dir: Path | None = None
    card: bool = False  # write the result into DST's model card (its README.md) as its "Verification" section
    quick: bool = False

    def __post_init__(self) -> None:
        _checks.positive_int("context", self.context)
        _checks.non_negative_int("greedy_tokens", self.greedy_tokens)
        if self.dtype is not None:
            _checks.choice("dtype", self.dtype, tuple(DTYPES))
        if self.max_logit_diff is not None:
            object.__setattr__(self, "max_logit_diff", _checks.positive("max_logit_diff", self.max_logit_diff))
        if self.report_dir is not None:
            object.__setattr__(self, "report_dir", Path(self.report_dir))


def verify(src: str | Path, dst: str | Path, request: VerifyRequest | None = None, *, progress: bool = False,
           **options: Any) -> VerifyReport:
    """Check DST against SRC (module doc): the pair, the bytes (``byte_check``), then the function (``measure``,
    judged by ``judge``). ``request`` or its fields as keyword ``options``; ``progress``: a bar on stderr naming
    each stage."""
    request = VerifyRequest(**options) if request is None else request
    src, dst = resolve_source(src), resolve_source(dst)  # directories, or hub ids as in convert
    for p in (src, dst):
        if not (p / "config.json").is_file():
            raise FileNotFoundError(f"no config.json in {p}")
    if src.resolve() == dst.resolve():
        raise ValueError(f"{dst} is the source itself: verify compares a converted checkpoint with its source")
    record = _conversion_record(dst)
    if request.card and not (dst / "README.md").is_file():
        raise FileNotFoundError(f"--card: {dst} has no model card (README.md) to record the result in")
    source = SourceModel(src)  # its shapes checked against its config before anything else
    _check_pair(source.info, src, dst, record)
    if source.info.spec.attention is None:
        params = sum(math.prod(source.reader.shape(n)) for n in source.reader.names())
        if params > request.reference_max_params:
            raise ValueError(f"transformers has no {source.info.family} class (remote code), so verify compares DST with "
                             f"the exact float64 reference, which needs --reference-max-params >= {params} (the "
                             f"source's {params / 1e6:.4g}M parameters, held in float64 on the CPU)")
    derived = derive(src, byte_check.request_of(record), str(record.get("source", src)), model=source)
    plan = derived.plan
    dtype = plan.dtype if request.dtype is None else request.dtype
    if request.context > plan.window:
        raise ValueError(f"--context {request.context} is beyond the window {plan.window} that {dst} was converted "
                         "for (its bias is planned up to there only); convert again with a larger --window")
    positions = source.info.max_positions
    if positions is not None and request.context > positions:
        raise ValueError(f"--context {request.context} is beyond the source's own limit of {positions} positions")
    threshold = request.max_logit_diff
    if threshold is None:  # the dtype's default tolerance at this window: never a --tolerance DST's record names
        threshold = plan_tolerance(dtype, source.info.slopes, plan.window)
    predicted = plan.worst_head.predicted_error if dtype == plan.dtype else None
    request = dataclasses.replace(request, dtype=dtype, max_logit_diff=threshold)
    checked = byte_check.compare(derived, dst, record, quick=request.quick, progress=progress)
    if checked.failures:
        report = VerifyReport(source=str(src), converted=str(dst), family=source.info.family, dtype=dtype,
                              context=request.context, source_attention=source_attention(source.info.spec),
                              byte_check=checked.to_dict(), predicted_error=predicted,
                              functional_skipped="DST is not what convert writes from SRC",
                              failures=list(checked.failures))
        native = converted = ids = None
    else:
        bar = progress_bar(6, "verify", enabled=progress, unit="stage")  # load, 2 forwards, padded, reference, greedy
        try:
            report, native, converted, ids = measure(source, src, dst, request, bar)
        finally:
            bar.close()
        report.byte_check, report.predicted_error = checked.to_dict(), predicted
        report.thresholds["limit"] = limit_of(report)
        report.failures.extend(judge(report))
    if request.card:
        from .card import record_verification

        record_verification(dst / "README.md", report)
    if request.report_dir is not None:
        from ..reports import write_report

        try:
            write_report(report, request.report_dir, native, converted, ids)
        except OSError as exc:  # keep the computed result: the caller prints it and says why the report is missing
            report.report_error = str(exc.strerror or exc)
            log.info("cannot write the report into %s: %s", request.report_dir, report.report_error)
    return report


def measure(source: SourceModel, src: Path, dst: Path, request: VerifyRequest, bar) -> tuple:
    """Every number ``verify`` reports, measured in ``request.dtype`` (its thresholds recorded, no verdict yet):
    (report, native model, converted model, input ids ``(1, s)``). ``bar`` counts the six stages."""
    def stage(name: str) -> None:
        bar.set_postfix_str(name)
        bar.update()

    dtype, text, greedy_tokens = request.dtype, request.text, request.greedy_tokens
    stage("load")
    if source.info.spec.attention is None:
        return _measure_against_reference(source, src, dst, request, stage)
    native, converted = _load(src, DTYPES[dtype]), _load(dst, DTYPES[dtype])
    ids = _tokens(src, text, request.context, source.info.vocab_size, request.seed)  # (1, s)
    pad_id = int(native.config.pad_token_id or 0)
    n = ids.shape[1]

    deviations = native_deviations(source.info.family, source.config)
    exact = lambda: as_defined(native, source)  # noqa: E731
    hf_native_diff = hf_reading = reading = None
    with torch.no_grad():
        stage(f"converted, {n} tokens")
        b = converted(ids).logits.double()  # (1, s, V)
        stage(f"native, {n} tokens")
        if deviations:
            hf_native_diff = float((native(ids).logits.double() - b).abs().max())
        with exact():
            a = native(ids).logits.double()  # (1, s, V)
        stage(f"left-padded batch, 2 x {n} tokens")
        batch, mask = _padded_batch(ids, pad_id)
        with exact():
            pa = native(batch, attention_mask=mask).logits.double()  # (2, s, V)
        padded = _padded_diff(pa, converted(batch, attention_mask=mask).logits.double(), mask)
        ref_native = ref_conv = skipped = None
        params = sum(p.numel() for p in native.parameters())
        if params <= request.reference_max_params:
            stage(f"exact float64 reference, {n} tokens")
            ref = reference_logits(source, ids)
            ref_native, ref_conv = float((a - ref).abs().max()), float((b - ref).abs().max())
            # a forward of the first tokens alone: native's own bias m*j stays small there whatever the context
            # (MPT's is m (j - s + 1), relative to the last position), so float32 resolves it
            head = ids[:, :READING_TOKENS]  # (1, m)
            with exact():
                reading = float((native(head).logits.double() - ref[:, : head.shape[1]]).abs().max())
            if deviations:
                hf_reading = float((native(head).logits.double() - ref[:, : head.shape[1]]).abs().max())
        else:
            stage("exact reference skipped")
            skipped = (f"{params / 1e6:.4g}M parameters, above --reference-max-params "
                       f"{request.reference_max_params / 1e6:g}M (float64 on the CPU)")
    stage(f"greedy, {greedy_tokens} tokens")
    prompt = ids[:, : min(16, n)]
    g_native = g_conv = []
    if greedy_tokens:
        with exact():
            g_native = _greedy(native, prompt, greedy_tokens, pad_id)
        g_conv = _greedy(converted, prompt, greedy_tokens, pad_id)
    report = VerifyReport(
        source=str(src), converted=str(dst), family=source.info.family, dtype=dtype, context=n,
        source_attention=source_attention(source.info.spec),
        transformers_native_deviation="; ".join(d.what for d in deviations) or None,
        transformers_reading_max_err=hf_reading, native_reading_max_err=reading, padded_max_abs_logit_diff=padded,
        **_agreement(a, b, ids, g_native, g_conv, text is not None),
        transformers_native_max_abs_logit_diff=hf_native_diff,
        reference_native_max_err=ref_native, reference_converted_max_err=ref_conv, reference_skipped=skipped,
        thresholds={"max_abs_logit_diff": request.max_logit_diff, "greedy_identical": dtype == "float32",
                    "against": "native" if ref_conv is None else "exact float64 reference"},
    )
    return report, native, converted, ids


def _measure_against_reference(source: SourceModel, src: Path, dst: Path, request: VerifyRequest, stage) -> tuple:
    """``measure`` for a family transformers cannot run (module doc): the converted model against the exact
    reference on the tokens, a left-padded batch and a greedy generation (the reference's own, one float64 forward
    per token). Returns (report, None, converted model, input ids ``(1, s)``)."""
    dtype, greedy_tokens = request.dtype, request.greedy_tokens
    converted = _load(dst, DTYPES[dtype])
    ids = _tokens(src, request.text, request.context, source.info.vocab_size, request.seed)  # (1, s)
    pad_id, n = int(converted.config.pad_token_id or 0), ids.shape[1]
    with torch.no_grad():
        stage(f"converted, {n} tokens")
        b = converted(ids).logits.double()  # (1, s, V)
        stage(f"exact float64 reference, {n} tokens")
        ref = reference_logits(source, ids)  # (1, s, V)
        stage(f"left-padded batch, 2 x {n} tokens")
        batch, mask = _padded_batch(ids, pad_id)
        padded = _padded_diff(reference_logits(source, batch, mask),
                              converted(batch, attention_mask=mask).logits.double(), mask)
    stage(f"greedy, {greedy_tokens} tokens")
    prompt = ids[:, : min(16, n)]
    g_ref, seq = [], prompt
    for _ in range(greedy_tokens):
        nxt = int(reference_logits(source, seq)[0, -1].argmax())
        g_ref.append(nxt)
        seq = torch.cat([seq, torch.tensor([[nxt]])], 1)
    g_conv = _greedy(converted, prompt, greedy_tokens, pad_id) if greedy_tokens else []
    agreement = _agreement(ref, b, ids, g_ref, g_conv, request.text is not None)
    report = VerifyReport(
        source=str(src), converted=str(dst), family=source.info.family, dtype=dtype, context=n,
        source_attention=source_attention(source.info.spec),
        padded_max_abs_logit_diff=padded, **agreement, native_ran=False,
        reference_native_max_err=0.0, reference_converted_max_err=agreement["max_abs_logit_diff"],
        thresholds={"max_abs_logit_diff": request.max_logit_diff, "greedy_identical": dtype == "float32",
                    "against": "exact float64 reference"},
    )
    return report, None, converted, ids
