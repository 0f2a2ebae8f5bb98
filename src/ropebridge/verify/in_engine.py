"""``verify --engine``: DST run by an engine as the user serves it (``runners``: the engine's interpreter, its
serving options), against the exact float64 ALiBi reference on the same ids (``engine_check`` says how it is
judged).

The exact side is ``exact_scores``: ``reference.reference_states`` (a block of each matrix's rows at a time) and
its logits a vocabulary block at a time (``logit_stats.compare``), kept per position as the log p of the next
token, exact's argmax and its margin; in half precision, in the same pass, the baseline's max |logit error|
(SRC in the dtype with attention and bias exact), the allowance verify's limit has. The decode is checked in one
more exact pass over the prompt and the tokens the engine chose: the log p exact gives each, after the same prefix,
and whether it was exact's argmax there.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ..checkpoint.model import SourceModel
from ..checkpoint.reference import Blocks, reference_states
from ..numerics import DTYPES
from ..runners import Job, launch
from . import logit_stats
from .engine_check import EngineCheck
from .measure import GREEDY_PROMPT, LOGIT_BYTES, QUERY_BLOCK, tokens
from .stages import baseline_side, head_reader
from .verdict import VerifyReport


@dataclass(frozen=True)
class ExactScores:
    """The exact reference over one sequence ``ids`` ``(s,)``, per position i < s - 1: ``logprobs``, log p of
    ``ids[i + 1]`` after ``ids[: i + 1]``; ``argmax``, exact's top token there; ``margin``, its log p less that of
    ``ids[i + 1]`` (0 where that is the top); and, in half precision (None in float32), the baseline, SRC in the
    dtype with attention and bias exact, against exact: ``baseline_max_err`` (max |logit error| over every position
    and the vocabulary) and ``baseline_mean_err`` (mean |Δ log p| of the next tokens)."""

    logprobs: tuple[float, ...]
    argmax: tuple[int, ...]
    margin: tuple[float, ...]
    baseline_max_err: float | None = None
    baseline_mean_err: float | None = None

    @property
    def ppl(self) -> float:
        return math.exp(-sum(self.logprobs) / len(self.logprobs))


@torch.no_grad()
def exact_scores(source: SourceModel, ids: torch.Tensor, *, baseline: torch.dtype | None = None, device: str = "cpu",
                 on_layer=None) -> ExactScores:
    """``ExactScores`` of ``ids`` ``(s,)`` (module doc); ``baseline``: the half-precision dtype whose baseline is
    measured in the same vocabulary pass (None: none); ``on_layer(i)`` after each layer of each pass."""
    info, ids = source.info, ids.reshape(1, -1).cpu()  # (1, s)
    blocks = Blocks(QUERY_BLOCK)
    hidden = reference_states(source, ids, blocks=blocks, on_layer=on_layer, device=device)  # (1, s, D)
    head = head_reader(source, device)
    sides = {"exact": lambda a, c: hidden @ head(a, c)}  # (1, s, c - a)
    pairs = []
    if baseline is not None:
        rounded = reference_states(source, ids, blocks=blocks, round_to=baseline, on_layer=on_layer,
                                   device=device)  # (1, s, D)
        sides["baseline"] = baseline_side(rounded, head, baseline)
        pairs.append(("exact", "baseline"))
    s = ids.shape[1]
    block = logit_stats.vocab_block(s * len(sides), s, LOGIT_BYTES, row_bytes=8 * info.hidden_size * len(sides))
    targets = torch.cat([ids[:, 1:], ids[:, :1]], 1).to(device)  # (1, s): the next token (the last is ignored)
    stats, pair = logit_stats.compare(sides, pairs, info.vocab_size, block, targets={name: targets for name in sides})
    e = stats["exact"]
    logprobs, top = e.target_logprob[0, :-1].cpu(), e.top_logprob[0, :-1].cpu()  # (s - 1,)
    argmax = e.argmax[0, :-1].cpu()
    margin = torch.where(argmax == ids[0, 1:], torch.zeros_like(top), top - logprobs)
    base = mean = None
    if pairs:
        base = float(pair["exact", "baseline"].max_abs_diff.max())
        mean = float((stats["baseline"].target_logprob[0, :-1].cpu() - logprobs).abs().mean())
    return ExactScores(tuple(logprobs.tolist()), tuple(argmax.tolist()), tuple(margin.tolist()), base, mean)


def cached_exact_scores(source: SourceModel, fingerprint: str, ids: list[int], cache: Path, *,
                        baseline: str | None = None) -> ExactScores:
    """``exact_scores`` computed once per model and ids: kept in ``cache`` under a name from SRC's ``fingerprint``
    (``convert.pipeline.source_fingerprint``), the ids and the baseline's dtype, read back on a later call."""
    key = hashlib.sha256(json.dumps([fingerprint, list(map(int, ids)), baseline]).encode()).hexdigest()[:24]
    path = Path(cache) / f"exact-{key}.json"
    if path.is_file():
        return ExactScores(**{k: tuple(v) if isinstance(v, list) else v for k,
                              v in json.loads(path.read_text()).items()})
    scores = exact_scores(source, torch.tensor(ids), baseline=None if baseline is None else DTYPES[baseline])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(scores)))
    return scores


def measure_in_engine(source: SourceModel, src: Path, dst: Path, request, bar) -> tuple[VerifyReport, torch.Tensor]:
    """DST run by ``request.engine`` (an ``EngineRun``) on the ids verify compares and a greedy continuation of
    their first ``GREEDY_PROMPT``, against ``exact_scores`` of the same ids (with the baseline in half precision)
    and of the prompt and the engine's tokens; a report with ``engine`` filled, no verdict yet, and the ids."""
    started, info, run = time.perf_counter(), source.info, request.engine
    ids = tokens(src, request.text, request.context, info.vocab_size, request.seed)  # (1, s)
    s, n = ids.shape[1], request.greedy_tokens
    prompt = ids[0, : min(GREEDY_PROMPT, s)]  # (p,)
    half = request.dtype != "float32"
    bar.reset(total=(2 + half + bool(n)) * info.n_layers + 1)
    bar.set_postfix_str(f"DST in {run.describe()}")
    job = Job(model=run.gguf or str(dst), dtype=request.dtype, max_model_len=max(s + 1, len(prompt) + n),
              sequences=(tuple(ids[0].tolist()),), prompts=(tuple(prompt.tolist()),) if n else (), greedy_tokens=n,
              options=run.options, vocab=info.vocab_size)  # SRC's vocabulary: an engine's padded rows are not
    result = launch(run.interpreter, run.runner.worker, job)
    bar.update()
    check = EngineCheck(run=run.to_dict(), facts=result.facts, refused=result.refused, seconds=result.seconds,
                        greedy_tokens=n)
    report = VerifyReport(source=str(src), converted=str(dst), family=info.family, dtype=request.dtype, context=s,
                          source_attention="not run (the exact reference only)", source_ran=False, engine=check,
                          thresholds={"max_abs_logit_diff": request.max_logit_diff, "greedy_identical": False})
    tick = lambda i: bar.update()  # noqa: E731
    bar.set_postfix_str(f"exact float64 reference, {s} tokens")
    exact = exact_scores(source, ids[0], baseline=DTYPES[request.dtype] if half else None, device=request.device,
                         on_layer=tick)
    report.baseline_max_err, check.baseline_mean_err = exact.baseline_max_err, exact.baseline_mean_err
    if result.refused is None:
        _score(check, exact, result.logprobs[0])
        if n:
            bar.set_postfix_str(f"exact float64 reference, the engine's {n} greedy tokens")
            chosen = torch.tensor(result.greedy[0], dtype=torch.long)
            decoded = exact_scores(source, torch.cat([prompt, chosen]), device=request.device, on_layer=tick)
            _decode(check, decoded, result.greedy[0], result.greedy_logprobs[0], len(prompt))
    report.cost = {"seconds": time.perf_counter() - started, "engine_seconds": result.seconds}
    return report, ids


def _score(check: EngineCheck, exact: ExactScores, got: tuple[float, ...]) -> None:
    """The scored ids: |Δ log p| per next token, and the perplexities."""
    if len(got) != len(exact.logprobs):
        raise ValueError(f"the engine scored {len(got)} tokens of {len(exact.logprobs)}")
    diffs = [abs(a - b) for a, b in zip(got, exact.logprobs)]
    check.max_err = max(diffs) if all(math.isfinite(d) for d in diffs) else math.inf
    check.mean_err = sum(diffs) / len(diffs)
    check.ppl_exact, check.ppl_engine = exact.ppl, math.exp(-sum(got) / len(got))


def _decode(check: EngineCheck, exact: ExactScores, chosen: tuple[int, ...], got: tuple[float, ...],
            prompt: int) -> None:
    """The decoded tokens: exact's log p of each after the same prefix (positions ``prompt - 1`` on), and the first
    step where the engine's token was not exact's argmax, with exact's margin there."""
    want = exact.logprobs[prompt - 1:]
    diffs = [abs(a - b) for a, b in zip(got, want)]
    check.decode_max_err = max(diffs) if diffs and all(math.isfinite(d) for d in diffs) else \
        (math.inf if diffs else 0.0)
    for step, token in enumerate(chosen):
        if exact.argmax[prompt - 1 + step] != token:
            check.parting, check.parting_margin = step, exact.margin[prompt - 1 + step]
            break
