"""The functional check of ``verify``: the converted model against the exact float64 reference, in bounded memory.

Every model is run a weight at a time: the converted one and the source as transformers runs it as
``read_on_use.ReadOnUseModel`` (transformers' own modules, each weight read from disk when an operation uses it), the
exact reference as ``reference.reference_states`` (each linear map's float64 rows a block at a time). Only final
hidden states ``(b, s, D)`` are kept; their logits are formed and compared one block of vocabulary rows at a time
(``logit_stats.compare``). So the memory is the largest matrix (or a block of rows), a layer's activations, the
hidden states and one logit block, whatever the width, the depth or the vocabulary, and ``memory_need`` bounds it
from the shapes before anything is read.

Measured, on ``context`` tokens and a left-padded batch of them (2, s):

- judged: the converted model's max |logit error| from exact on the tokens and on the batch's real positions,
  KL(exact || converted), top-1 agreement and greedy tokens (float32);
- in half precision, the baseline: the source in that dtype with attention and bias exact (``reference_states``
  with ``round_to``) against exact, which the limit allows for (``verdict.BASELINE_FACTOR``);
- each head's content advantage on the tokens (``calibration.AdvantageTracker``), which a ladder's floors cover;
- reported: the source run as defined (``deviations.as_defined``) against exact and against the converted model,
  transformers' own numbers where it deviates, and, on the first ``READING_TOKENS`` tokens alone, the source as
  defined against exact (judged in float32 by ``verdict.judge``).

Greedy generation runs with the KV cache (the converted model, the source as defined) or, for a family
transformers has no class for, as the exact reference's own argmax token by token. A model whose weights fit the
budget keeps them while it generates; otherwise each generated token streams every weight again, and beyond
``GREEDY_STREAM_BYTES`` the count is bounded and the report says so.
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import _log
from ..checkpoint.calibration import AdvantageTracker
from ..checkpoint.model import SourceModel
from ..checkpoint.reference import BLOCK_BYTES, Blocks, reference_states
from ..numerics import DTYPES
from . import logit_stats
from .read_on_use import ReadOnUseModel
from .deviations import as_defined, deviations_of
from .stages import Converted, Reference, Side, Source, held, sides, views
from .verdict import READING_TOKENS, VerifyReport

GREEDY_STREAM_BYTES = 96 << 30  # weights streamed by greedy generation, at most: fewer tokens beyond
GREEDY_PROMPT = 16  # the greedy check continues the first tokens of the compared sequence
OVERHEAD_BYTES = 900 << 20  # the interpreter, torch and transformers resident before any weight
QUERY_BLOCK = 256  # the reference's queries per attention block
LOGIT_BYTES = 256 << 20  # the logit blocks compared at once (float64, every side, their temporaries, the heads' rows)
log = _log.logger(__name__)
PACE_AFTER = 5.0  # seconds of greedy generation after which its remaining time is predicted
LONG_SECONDS = 60.0  # a greedy check predicted to take longer says so (a warning), as convert does


@dataclass(frozen=True)
class MemoryNeed:
    """What one verify holds at most, from the shapes alone (bytes): the weights held at once (the larger of the
    reference's block of rows and a model's largest matrix, each with the transient of reading it), attention's
    working set at ``s`` tokens, and the total against which ``--max-memory`` is checked."""

    weights: int
    attention: int
    total: int


def reference_layer_bytes(info) -> int:
    """Bytes of one block's weights in float64 (``checkpoint.model.Layer``): q, k, v ``(h, hd, D)`` and their
    biases, the output projection, the MLP (gated or not) and the norms; what the reference streams per layer."""
    d, f, hd_all = info.hidden_size, info.intermediate_size, info.n_heads * info.head_dim
    gates = 1 + bool(info.gated)
    return 8 * (4 * hd_all * d + 3 * hd_all + f * d * (1 + gates) + f * gates + 6 * d)


def memory_need(info, positions: int, model_weight: int) -> MemoryNeed:
    """``MemoryNeed`` of verifying a source of ``info`` (``SourceInfo``) on ``positions`` tokens (a batch of 2 for
    the padded check), where the largest weight either model reads whole is ``model_weight`` bytes in the check's
    dtype (``read_on_use.largest_weight_bytes``): the overhead; the weights held at once, the larger of the reference's
    block (``reference.BLOCK_BYTES`` of float64, less where the largest matrix is smaller, more where one head's q
    rows are, three times: the block, its rounded copy for the baseline, and the read's transient) and the model's
    matrix twice (the matrix and the read's transient: the stored bytes where they are cast); eager attention's float32
    scores and probabilities ``(2, h, s, s)`` (the reference's are a block of queries, smaller); the activations of a
    layer and the hidden states; the logit blocks (``LOGIT_BYTES``). The stages run one after another, so no weight of
    one is held beside another's."""
    d, hd = info.hidden_size, info.head_dim
    block = max(8 * hd * d, min(BLOCK_BYTES, 8 * d * max(info.n_heads * hd, info.intermediate_size)))
    weights = max(3 * block, 2 * model_weight)
    attention = 2 * 2 * info.n_heads * positions * positions * 4
    hidden = 2 * positions * (info.hidden_size + info.intermediate_size) * 8 * 4
    need = OVERHEAD_BYTES + weights + attention + hidden + LOGIT_BYTES
    return MemoryNeed(weights, attention, need)


def check_memory(info, positions: int, max_memory: int, model_weight: int) -> MemoryNeed:
    """``memory_need``, or ``ValueError`` in one line naming the budget it needs where that exceeds ``max_memory``."""
    need = memory_need(info, positions, model_weight)
    if need.total > max_memory:
        raise ValueError(f"verify needs --max-memory {math.ceil(need.total / 2**30 * 10) / 10:g} GiB or more for "
                         f"this checkpoint at {positions} tokens (weights held at once: {need.weights / 2**30:.3g} "
                         f"GiB; attention {need.attention / 2**30:.3g} GiB); the budget is "
                         f"{max_memory / 2**30:.3g} GiB")
    return need


def tokens(src: Path, text: str | None, context: int, vocab: int, seed: int) -> torch.Tensor:
    """The ids ``(1, s)`` a check runs on: ``context`` random ids from ``seed``, or the first ``context`` tokens of
    ``text`` through SRC's tokenizer."""
    if text is None:
        g = torch.Generator().manual_seed(seed)
        return torch.randint(0, vocab, (1, context), generator=g)
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(src)
    except Exception:  # missing or broken tokenizer files surface as many types: one line
        has = [n for n in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
               if (Path(src) / n).is_file()]
        why = ("it has no tokenizer files (tokenizer.json, tokenizer_config.json, tokenizer.model)" if not has else
               f"its {', '.join(has)} do not load with this transformers")
        raise ValueError(f"--text is tokenized with SRC's tokenizer, and {src} has none that loads: {why}; without "
                         "--text verify compares on random ids") from None
    ids = tokenizer(text, return_tensors="pt")["input_ids"][:, :context]
    if ids.shape[1] < 2:
        raise ValueError("the text gives fewer than 2 tokens")
    return ids


def padded_batch(ids: torch.Tensor, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch ``(2, s)`` of ``ids`` ``(1, s)`` and its first half left-padded to s, and its attention mask."""
    n = ids.shape[1]
    short = max(2, n // 2)
    batch = torch.full((2, n), pad_id, dtype=torch.long)
    batch[0], batch[1, n - short:] = ids[0], ids[0, :short]
    mask = torch.ones_like(batch)
    mask[1, : n - short] = 0
    return batch, mask


class Pace:
    """The greedy check's pace: ``tick()`` after each token generated (by any model), ``total`` tokens in all; once
    ``PACE_AFTER`` seconds have passed, the rest's predicted time at the pace so far is said (a warning, once)
    where it is more than ``LONG_SECONDS``, and the bar counts the tokens. A ``transformers`` stopping criterion
    that never stops."""

    def __init__(self, total: int, bar):
        self.total, self.bar, self.done, self.said = total, bar, 0, False
        self.started = time.perf_counter()

    def tick(self) -> None:
        self.done += 1
        self.bar.update()
        elapsed = time.perf_counter() - self.started
        if not self.said and elapsed >= PACE_AFTER:
            self.said = True
            rest = elapsed / self.done * (self.total - self.done)
            if rest > LONG_SECONDS:
                log.warning("greedy check: %d of %d tokens in %.0f s; about %.0f minutes more at this pace (fewer "
                            "with --greedy-tokens)", self.done, self.total, elapsed, rest / 60)

    def __call__(self, input_ids, scores, **kwargs) -> torch.Tensor:
        self.tick()
        return torch.zeros(input_ids.shape[0], dtype=torch.bool)


def _greedy(model, prompt: torch.Tensor, n: int, pad_id: int, pace: Pace | None = None) -> list[int]:
    out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n, min_new_tokens=n,
                         do_sample=False, pad_token_id=pad_id, eos_token_id=None,
                         stopping_criteria=None if pace is None else [pace])
    return out[0, prompt.shape[1]:].tolist()


def _reference_greedy(source: SourceModel, prompt: torch.Tensor, n: int, block: int, device: str,
                      pace: Pace | None = None) -> list[int]:
    """The exact reference's own greedy tokens: the argmax of its last position's logits, token by token."""
    seq, out = prompt.cpu(), []
    for _ in range(n):
        h = reference_states(source, seq, blocks=Blocks(QUERY_BLOCK), device=device)[:, -1:]  # (1, 1, D)
        side = {Side.EXACT: lambda a, c: h @ source.head_rows(a, c).T.to(device)}
        stats, _ = logit_stats.compare(side, [], source.info.vocab_size, block)
        out.append(int(stats[Side.EXACT].argmax[0, 0]))
        seq = torch.cat([seq, torch.tensor([[out[-1]]])], 1)
        if pace is not None:
            pace.tick()
    return out


def _ppl(stats: logit_stats.SideStats) -> float:
    return float(torch.exp(-stats.target_logprob[0, :-1].mean()))


def measure(source: SourceModel, src: Path, dst: Path, request, bar) -> tuple[VerifyReport, torch.Tensor]:
    """Every number ``verify`` reports (module doc), measured in ``request.dtype``, thresholds recorded, no verdict
    yet, and the ids ``(1, s)`` they were measured on; within ``request.max_memory`` bytes (``check_memory``, which
    the caller has passed). ``bar`` (a progress bar) counts the layers run and the logits pass."""
    started, seconds = time.perf_counter(), {}
    dtype, info = DTYPES[request.dtype], source.info
    tick = lambda: bar.update()  # noqa: E731
    device = request.device
    conv = ReadOnUseModel(dst, dtype, on_layer=tick, device=device)
    runs = info.family_row.attention is not None  # transformers has a class for the source
    source_model = ReadOnUseModel(src, dtype, on_layer=tick, device=device) if runs else None
    ids = tokens(src, request.text, request.context, info.vocab_size, request.seed)  # (1, s)
    n = ids.shape[1]
    weight = max(conv.tensor_bytes, source_model.tensor_bytes if source_model else 0)
    max_memory, need = request.max_memory, memory_need(info, n, weight)
    pad_id = int(conv.model.config.pad_token_id or 0)
    batch, mask = (t.to(device) for t in padded_batch(ids, pad_id))
    ids = ids.to(device)
    deviations = deviations_of(info.family, source.config) if runs else ()
    exact = (lambda: as_defined(source_model.model, source)) if runs else nullcontext  # noqa: E731
    head = ids[:, :READING_TOKENS]  # (1, m)
    half = request.dtype != "float32"  # the dtype's baseline is measured (one more reference pass)
    passes = 3 + half + (2 + 2 * bool(deviations) if runs else 0)
    bar.reset(total=passes * info.n_layers + 1)

    def stage(name: str) -> None:
        seconds[name] = time.perf_counter() - started - sum(seconds.values())
        bar.set_postfix_str(name)

    with torch.no_grad():
        bar.set_postfix_str(f"converted, {n} tokens")
        converted = Converted(conv.hidden(ids), conv.hidden(batch, mask))  # (1, s, D'), (2, s, D')
        stage("converted")
        bar.set_postfix_str(f"exact float64 reference, {n} tokens")
        advantage = AdvantageTracker(info.slopes)  # what the ladder's floors must cover, on these tokens
        exact_ids = reference_states(source, ids, blocks=Blocks(QUERY_BLOCK), on_layer=lambda i: tick(),
                                     device=device, observe=advantage)  # (1, s, D)
        stage("reference")
        baseline = None
        if half:
            bar.set_postfix_str(f"baseline: SRC in {request.dtype}, attention and bias exact, {n} tokens")
            baseline = reference_states(source, ids, blocks=Blocks(QUERY_BLOCK), round_to=dtype,
                                        on_layer=lambda i: tick(), device=device)  # (1, s, D)
            stage("baseline")
        reference = Reference(exact_ids, mask, advantage.worst, baseline)
        ran = None
        if runs:
            bar.set_postfix_str(f"source, {n} tokens")
            with exact():
                own = source_model.hidden(ids), source_model.hidden(head)  # (1, s, D), (1, m, D)
            hf = (source_model.hidden(ids), source_model.hidden(head)) if deviations else None
            ran = Source(*own, hf)
            stage("source")
    models = {Side.CONVERTED: conv, Side.CONVERTED_BATCH: conv, Side.SOURCE: source_model,
              Side.SOURCE_HEAD: source_model,
              Side.TRANSFORMERS: source_model, Side.TRANSFORMERS_HEAD: source_model}
    made, pairs = sides(source, reference, converted, ran, models, dtype, device)
    rows = [h.shape[:-1].numel() for h in held(reference, converted, ran)]  # each side's positions, b * s
    rows += [n, n, head.shape[1]]  # the exact side's padded row, and its views: row 0 and the reading's head
    # each row of a block, an upper bound (the sides run one after another): the exact head's (and the baseline's) in
    # float64, each model's as read and as cast
    widths = [info.hidden_size] * (1 + half) + [2 * m.head_width for m in (conv, source_model) if m is not None]
    block = logit_stats.vocab_block(sum(rows), max(rows), LOGIT_BYTES, row_bytes=8 * sum(widths))
    targets = torch.cat([ids[:, 1:], ids[:, :1]], 1)  # (1, s): the next token (the last is ignored)
    bar.set_postfix_str(f"logits, {info.vocab_size} rows in blocks of {block}")
    side_stats, pair_stats = logit_stats.compare(
        made, pairs, info.vocab_size, block, views=views(head.shape[1]),
        targets={Side.EXACT0: targets, Side.CONVERTED: targets, **({Side.SOURCE: targets} if runs else {})},
        kl=[(Side.EXACT0, Side.CONVERTED)])  # the KL reported; every other pair's max |difference| alone
    del made  # and with it SRC's head rows it read last
    bar.update()
    stage("logits")
    report = _report(source, (src, dst), request, (side_stats, pair_stats), mask, deviations)
    report.content_advantage = reference.advantage.cpu().tolist()
    kept = _greedy_check(report, source, (conv, source_model), ids, request, (block, bar, need))
    stage("greedy")
    report.cost = {"seconds": time.perf_counter() - started, "stage_seconds": seconds, "max_memory": max_memory,
                   "memory_need": need.total + kept, "weights_held_bytes": need.weights, "greedy_kept_bytes": kept,
                   "model_tensor_bytes": max(conv.largest_read_bytes,
                                             source_model.largest_read_bytes if source_model else 0),
                   "vocab_block": block}
    return report, ids.cpu()


def _report(source, paths: tuple[Path, Path], request, stats: tuple[dict, dict], mask: torch.Tensor,
            deviations) -> VerifyReport:
    """The report of the compared logits ``stats`` (sides, pairs: ``measure``) of ``paths`` (SRC, DST)."""
    (src, dst), (s, p), runs = paths, stats, source.info.family_row.attention is not None
    text = request.text is not None
    judged, padded = p[Side.EXACT0, Side.CONVERTED], p[Side.EXACT, Side.CONVERTED_BATCH]
    agree = (s[Side.CONVERTED].argmax == s[Side.EXACT].argmax[:1]).double().mean()
    report = VerifyReport(
        source=str(src), converted=str(dst), family=source.info.family, dtype=request.dtype,
        context=int(mask.shape[1]), source_attention=source.info.family_row.attention or "not run", source_ran=runs,
        reference_converted_max_err=float(judged.max_abs_diff.max()), mean_kl=float(judged.kl.mean()),
        padded_max_abs_logit_diff=float(padded.max_abs_diff[mask.bool()].max()), top1_agreement=float(agree),
        error_by_position=judged.max_abs_diff[0].tolist(),
        ppl_reference=_ppl(s[Side.EXACT0]) if text else None, ppl_converted=_ppl(s[Side.CONVERTED]) if text else None,
        thresholds={"max_abs_logit_diff": request.max_logit_diff, "greedy_identical": request.dtype == "float32"})
    worst = lambda a, b: float(p[a, b].max_abs_diff.max())  # noqa: E731
    if (Side.EXACT0, Side.BASELINE) in p:
        report.baseline_max_err = worst(Side.EXACT0, Side.BASELINE)
    if runs:
        report.max_abs_logit_diff = worst(Side.SOURCE, Side.CONVERTED)
        report.reference_source_max_err = worst(Side.SOURCE, Side.EXACT0)
        report.source_reading_max_err = worst(Side.SOURCE_HEAD, Side.EXACT_HEAD)
        report.ppl_source = _ppl(s[Side.SOURCE]) if text else None
    if deviations:
        report.transformers_deviation = "; ".join(d.what for d in deviations)
        report.transformers_max_abs_logit_diff = worst(Side.TRANSFORMERS, Side.CONVERTED)
        report.transformers_reading_max_err = worst(Side.TRANSFORMERS_HEAD, Side.EXACT_HEAD)
    return report


def _greedy_check(report: VerifyReport, source, models: tuple, ids: torch.Tensor, request, progress: tuple) -> int:
    """Greedy tokens of the converted model ``models[0]`` and of the source (``models[1]``, None or run as
    defined, or the exact reference). A model whose weights fit the budget beside the check's need (``progress``'s
    ``MemoryNeed``) keeps them while it generates (``ReadOnUseModel.resident``: one model at a time); the others
    stream every weight per token, bounded so that what they stream stays within ``GREEDY_STREAM_BYTES`` (the report
    names the bound); ``progress``: the logit block, the bar and the need. Returns the most bytes of weights kept
    (0 where none is), which the check's need grows by."""
    (block, bar, need), (conv, source_model), asked = progress, models, request.greedy_tokens
    pad_id = int(conv.model.config.pad_token_id or 0)
    if not asked:
        return 0
    keeps = {m: need.total + m.resident_bytes <= request.max_memory for m in (conv, source_model) if m is not None}
    per_token = sum(m.layer_bytes for m, kept in keeps.items() if not kept) * source.info.n_layers
    if source_model is None:  # the exact reference recomputes its prefix per token
        per_token += reference_layer_bytes(source.info) * source.info.n_layers
    tokens = min(asked, max(1, GREEDY_STREAM_BYTES // max(1, per_token)))
    if tokens < asked:
        report.greedy_bound = (f"{tokens} of {asked} tokens: each streams {per_token / 2**30:.3g} GiB of weights, "
                               f"bounded at {GREEDY_STREAM_BYTES / 2**30:g} GiB")
    bar.reset(total=2 * tokens)
    bar.unit = "token"
    bar.set_postfix_str(f"greedy, {tokens} tokens per model")
    pace = Pace(2 * tokens, bar)
    prompt = ids[:, : min(GREEDY_PROMPT, ids.shape[1])]
    held = lambda m: m.resident() if keeps[m] else nullcontext()  # noqa: E731
    with torch.no_grad():
        if source_model is not None:
            with as_defined(source_model.model, source), held(source_model):
                g_source = _greedy(source_model.model, prompt, tokens, pad_id, pace)
        else:
            g_source = _reference_greedy(source, prompt, tokens, block, request.device, pace)
        with held(conv):
            g_conv = _greedy(conv.model, prompt, tokens, pad_id, pace)
    divergence = next((i for i, (x, y) in enumerate(zip(g_source, g_conv)) if x != y), None)
    report.greedy_source, report.greedy_converted = g_source, g_conv
    report.greedy_identical, report.greedy_first_divergence = divergence is None, divergence
    return max((m.resident_bytes for m, kept in keeps.items() if kept), default=0)
