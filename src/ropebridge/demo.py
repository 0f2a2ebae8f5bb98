"""``ropebridge demo``: the embedded ALiBi model converted into a RoPE model, and the proof that they agree.

The package ships a small BLOOM (``data/demo``, trained by ``scripts/train_demo_model.py`` on the Python
documentation) with its tokenizer, a held-out slice of the corpus and its training record. The demo
plans and converts it (float32), then runs both on the held-out text: perplexity at the training context
and at 4x beyond it (ALiBi extrapolates), max |Δlogit|, greedy continuations side by side, conversion and
forward times, and the perplexity of an untrained model of the same shape for scale.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from . import _log
from . import _checks
from ._progress import progress_bar
from .checkpoint.config import FAMILIES, from_config

log = _log.logger(__name__)
DATA_FILES = ("config.json", "model.safetensors", "tokenizer.json", "heldout.txt", "training.json")
PROMPT = "The json module"
EVAL_TOKENS = 16384  # held-out tokens scored at every context


def data_dir(name: str = "demo") -> Path:
    """An embedded model's directory: ``demo`` (BLOOM, package data, in the wheel), and in a source checkout only
    (the tests' and benchmarks') ``demo-mpt``, ``demo-falcon``, ``demo-baichuan`` (Baichuan-13B's architecture) and
    ``demo-jais`` (the Jais family's), all trained on the same text with the same tokenizer
    (``scripts/train_demo_model.py``)."""
    return Path(str(resources.files("ropebridge") / "data" / name))


@dataclass
class DemoReport:
    source_model: str  # the embedded model's family and shape, from its config
    train_context: int
    eval_context: int
    vocab_size: int
    heldout_tokens: int
    ppl_native: float  # at the training context
    ppl_converted: float
    ppl_native_extrapolated: float  # at eval_context (4x the training context by default)
    ppl_converted_extrapolated: float
    ppl_random_model: float
    ppl_relative_diff: float
    max_abs_logit_diff: float
    greedy_identical: bool
    prompt: str
    continuation_native: str
    continuation_converted: str
    convert_seconds: float
    forward_seconds_native: float
    forward_seconds_converted: float
    final_val_loss: float
    rope_base: float
    worst_predicted_error: float
    ppl_by_context: dict[str, list[float]] = field(default_factory=dict)
    out: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _check_data(model_dir: Path) -> dict:
    missing = [f for f in DATA_FILES if not (model_dir / f).is_file()]
    if missing:
        raise FileNotFoundError(f"demo model data is incomplete: {missing[0]} is missing from {model_dir}")
    try:
        record = json.loads((model_dir / "training.json").read_text())
        json.loads((model_dir / "config.json").read_text())
        return record
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"demo model data is damaged ({model_dir}): {exc}") from None


def _load(path: Path):
    from transformers import AutoModelForCausalLM

    try:
        return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    except Exception as exc:  # a damaged checkpoint surfaces as many types (safetensors has its own)
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise ValueError(f"cannot load the model in {path}: {first}") from None


@torch.no_grad()
def perplexity(model, ids: torch.Tensor, context: int, tokens: int = EVAL_TOKENS) -> tuple[float, torch.Tensor]:
    """Perplexity over the first ``tokens`` of ``ids`` ``(n,)`` cut into non-overlapping windows of ``context``
    (so every context is scored on the same text); also the logits ``(w, c, V)``."""
    n = min(len(ids) - 1, tokens) // context
    if n < 1:
        raise ValueError(f"the held-out text has fewer than {context + 1} tokens")
    x = ids[: n * context].view(n, context)  # (w, c)
    logits = torch.cat([model(chunk).logits for chunk in x.split(8)])  # (w, c, V)
    nll = torch.zeros((), dtype=torch.float64)
    for window, target in zip(logits, x):  # (c, V), (c,): float64 a window at a time, which stays in cache
        nll += torch.nn.functional.cross_entropy(window[:-1].double(), target[1:], reduction="sum")
    return float(torch.exp(nll / (n * (context - 1)))), logits


def _forward_seconds(model, x: torch.Tensor, repeats: int = 3) -> float:
    times = []
    with torch.no_grad():
        for _ in range(repeats):
            t = time.perf_counter()
            model(x)
            times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]


def run_demo(out: str | Path | None = None, *, context: int | None = None, model_dir: str | Path | None = None,
             greedy_tokens: int = 40, progress: bool = False) -> DemoReport:
    """Plan, convert and verify the embedded model; write ``report.md`` and plots into ``out`` when given."""
    model_dir = Path(model_dir) if model_dir is not None else data_dir()
    record = _check_data(model_dir)
    family = from_config(model_dir).family
    if FAMILIES[family].attention is None:
        raise ValueError(f"the demo runs the ALiBi model in transformers, which has no {family} class (remote code); "
                         f"convert and verify {model_dir} instead")
    train_context = int(record["train_context"])
    eval_context = 4 * train_context if context is None else _checks.positive_int("context", context)
    if out is not None:
        out = Path(out)
        try:
            out.mkdir(parents=True, exist_ok=True)
            probe = out / ".ropebridge-write-test"
            probe.write_text("")
            probe.unlink()
        except OSError as exc:
            raise PermissionError(f"--out {out} is not writable: {exc.strerror or exc}") from None
    steps = ["load", "convert", "perplexity", "generate", "time", "report"]
    bar = progress_bar(len(steps), "demo", enabled=progress)

    def step(name: str) -> None:
        log.info("demo: %s", name)
        bar.set_postfix_str(name)
        bar.update(1)

    try:
        return _run(model_dir, out, record, train_context, eval_context, greedy_tokens, step)
    finally:
        bar.close()  # clears its line: an error starts a line of its own


def _run(model_dir, out, record, train_context, eval_context, greedy_tokens, step) -> DemoReport:
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from .convert import convert
    from .emulation import PlanRequest

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    ids = torch.tensor(tokenizer((model_dir / "heldout.txt").read_text())["input_ids"])
    native = _load(model_dir)
    step("load")
    work = Path(tempfile.mkdtemp(prefix="ropebridge-demo-"))
    try:
        target = (out / "converted") if out is not None else work / "converted"
        t = time.perf_counter()
        result = convert(model_dir, target, PlanRequest(window=max(eval_context, train_context), dtype="float32"),
                         force=True)
        convert_seconds = time.perf_counter() - t
        converted = _load(target)
        step("convert")
        ppl_n, logits_n = perplexity(native, ids, train_context)
        ppl_c, logits_c = perplexity(converted, ids, train_context)
        ppl_n4, logits_n4 = perplexity(native, ids, eval_context)
        ppl_c4, logits_c4 = perplexity(converted, ids, eval_context)
        max_diff = max(float((logits_n - logits_c).abs().max()), float((logits_n4 - logits_c4).abs().max()))
        torch.manual_seed(0)
        random_model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir)).eval()
        ppl_random, _ = perplexity(random_model, ids, train_context, tokens=4 * train_context)
        sweep = sorted({c for c in (64, 128, train_context, 2 * train_context, eval_context) if c <= eval_context})
        by_context = {"context": sweep, "native": [], "converted": []}
        measured = {train_context: (ppl_n, ppl_c), eval_context: (ppl_n4, ppl_c4)}  # computed once, above
        for c in sweep:
            n, conv = measured.get(c) or (perplexity(native, ids, c)[0], perplexity(converted, ids, c)[0])
            by_context["native"].append(n)
            by_context["converted"].append(conv)
        step("perplexity")
        prompt_ids = tokenizer(PROMPT, return_tensors="pt")["input_ids"]
        gen = dict(max_new_tokens=greedy_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id,
                   attention_mask=torch.ones_like(prompt_ids))
        g_n = native.generate(prompt_ids, **gen)[0, prompt_ids.shape[1]:]
        g_c = converted.generate(prompt_ids, **gen)[0, prompt_ids.shape[1]:]
        step("generate")
        x = ids[:eval_context][None]
        fwd_n, fwd_c = _forward_seconds(native, x), _forward_seconds(converted, x)
        step("time")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    info = from_config(model_dir)
    shape = (f"{info.family_row.label}, {info.n_layers} layers, hidden {info.hidden_size}, "
             f"{info.n_heads} heads")
    report = DemoReport(
        source_model=shape, train_context=train_context, eval_context=eval_context, vocab_size=len(tokenizer),
                        heldout_tokens=len(ids),
        ppl_native=ppl_n, ppl_converted=ppl_c, ppl_native_extrapolated=ppl_n4, ppl_converted_extrapolated=ppl_c4,
        ppl_random_model=ppl_random, ppl_relative_diff=max(abs(ppl_c / ppl_n - 1), abs(ppl_c4 / ppl_n4 - 1)),
        max_abs_logit_diff=max_diff, greedy_identical=bool(torch.equal(g_n, g_c)), prompt=PROMPT,
        continuation_native=tokenizer.decode(g_n), continuation_converted=tokenizer.decode(g_c),
        convert_seconds=convert_seconds, forward_seconds_native=fwd_n, forward_seconds_converted=fwd_c,
        final_val_loss=float(record.get("final_val_loss_float16_weights", record.get("final_val_loss", math.nan))),
        rope_base=result.plan.base, worst_predicted_error=result.plan.worst_head.predicted_error,
        ppl_by_context=by_context, out=str(out) if out is not None else None,
    )
    if out is not None:
        from .reports import write_demo_report

        shutil.copytree(model_dir, out / "native", dirs_exist_ok=True)  # the source, for convert and verify
        write_demo_report(report, result.plan, out)
    step("report")
    return report
