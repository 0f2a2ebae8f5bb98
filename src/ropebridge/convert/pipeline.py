"""``convert``: an ALiBi checkpoint (BLOOM, MPT, Falcon-RW) into a stock RoPE checkpoint.

Safety: SRC is only read; the result is written into a temporary directory next to DST and renamed
into place at the end, so a failure leaves nothing half-written; an existing DST is refused unless
``force``; DST may not lie inside SRC.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import __version__, _checks
from ..emulation import EmulationPlan, plan_emulation, shared_theta
from ..error_model import DTYPES, EXACT_TABLE_ANGLE, PLAN_TOLERANCE
from ..ladder import DEFAULT_HEAD_DIM_MULTIPLE, plan_ladder
from ..sources import load_config
from . import compact, gpt_neox
from .calibration import calibrated_floors
from .families import SourceModel
from .tensor_io import ShardWriter

log = logging.getLogger(__name__)

TARGETS = ("gpt-neox", "starcoder2", "nemotron")
EMULATIONS = ("ladder", "single")
COPIED_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt",
    "tokenizer.model", "added_tokens.json", "generation_config.json",
)
DEFAULT_WINDOW = 8192
SINGLE_PAIR_ROTARY_DIM = 4  # pair 0 always turns at 1 rad/token; pair 1 at base^(-1/2) = the planned theta


@dataclass(frozen=True)
class ConversionResult:
    destination: Path
    plan: EmulationPlan
    target: str
    dtype: str
    seconds: float
    bytes_written: int


def resolve_source(src: str | Path) -> Path:
    """A local checkpoint directory, or a Hugging Face hub id downloaded to the local cache."""
    p = Path(src)
    if p.is_dir():
        return p
    if p.exists():
        raise NotADirectoryError(f"{src} is not a directory")
    if str(src).count("/") != 1 or str(src).startswith((".", "/")):
        raise FileNotFoundError(f"{src} is neither a directory nor a hub id (owner/name)")
    try:
        from huggingface_hub import snapshot_download

        patterns = ["*.json", "*.safetensors", "*.txt", "*.model", "*.bin"]
        return Path(snapshot_download(str(src), allow_patterns=patterns))
    except Exception as exc:  # network, auth, missing repo: one clear line for the CLI
        raise FileNotFoundError(f"cannot fetch {src} from the hub: {type(exc).__name__}: {exc}") from None


def default_dtype(config: dict) -> str:
    name = str(config.get("dtype") or config.get("torch_dtype") or "float32").replace("torch.", "")
    return name if name in DTYPES else "float32"


def copy_side_files(src_dir: Path, out: Path) -> None:
    """Copy the tokenizer and generation files. transformers 5 names its fast tokenizer class
    ``TokenizersBackend``, a name 4.x (and the engines' converters, which pin 4.x) cannot load; the
    portable ``PreTrainedTokenizerFast`` loads the same tokenizer.json in both."""
    for name in COPIED_FILES:
        if not (src_dir / name).is_file():
            continue
        shutil.copy2(src_dir / name, out / name)
        if name == "tokenizer_config.json":
            config = json.loads((out / name).read_text())
            if config.get("tokenizer_class") == "TokenizersBackend":
                config["tokenizer_class"] = "PreTrainedTokenizerFast"
                (out / name).write_text(json.dumps(config, indent=2) + "\n")
                log.info("tokenizer_class TokenizersBackend written as PreTrainedTokenizerFast (transformers 4.x)")


def exact_rotation_theta(window: int) -> float:
    """theta = 2^-k, the largest power of two with theta * window <= 2^-12: every float32 angle p * theta
    (p <= window) is exact (a power of two only shifts the exponent), cos(p theta) rounds to exactly 1 and
    sin(p theta) to p theta itself (their next terms, x^2/2 and x^3/6, fall below half an ulp), so the
    rotation of the emulation pair is exact: the rounding that remains is that of the products with N.
    The sine approximation then costs m theta^2 d^3 / 6 <= m d 2^-24 / 6, below float32's own rounding
    of m d. Measured on the demo model at 2K tokens, against an exact float64 ALiBi forward pass: 8e-6
    logits, where the error-optimal theta (4.3e-7, not a power of two) gave 5e-4 and native BLOOM in
    float32 2.3e-4. Half precision keeps the error-optimal theta: its tables are rounded anyway, and a
    float16 sine of 2^-25 is zero."""
    return math.ldexp(EXACT_TABLE_ANGLE, -(window - 1).bit_length())  # bit_length: ceil(log2(window))


def default_emulation(dtype: str, target: str) -> str:
    """The frequency ladder for bfloat16/float16 on gpt-neox (its rounding does not grow with the context);
    the exact single pair in float32 and on the compact targets (which rotate one pair only)."""
    return "ladder" if dtype != "float32" and target == "gpt-neox" else "single"


def conversion_plan(
    src: SourceModel, *, window: int, dtype: str, theta: float | None = None, max_phase: float | None = None,
    base: float | None = None, rotary_dim: int | None = None, pairs: int = 1, tolerance: float | None = None,
    target: str = "gpt-neox", emulation: str | None = None, floors: float | list[float] | None = None,
    head_dim_multiple: int = DEFAULT_HEAD_DIM_MULTIPLE,
) -> EmulationPlan:
    """The emulation plan a target can express: every head of a stock model shares one frequency set.

    ``emulation="ladder"`` (default for bfloat16/float16 on gpt-neox, ``default_emulation``, unless ``theta``,
    ``max_phase`` or ``pairs`` ask for the single pair): every pair of a
    rotary block of R dims (``rotary_dim``, default from the head-dim rule ``head_dim_multiple``), base free or
    ``base``, per-head amplitudes and floors (``ladder.plan_ladder``). ``"single"``:
    gpt-neox with ``base`` (an engine that fixes it, e.g. llama.cpp's 10000): ``rotary_dim`` pairs of that base,
    the best ``pairs`` consecutive ones per head. Otherwise one theta for all heads (``theta``,
    ``max_phase/window``, ``exact_rotation_theta`` in float32, else the worst-head error-optimal theta):
    gpt-neox realises it with the minimal rotary
    dim 4 and base ``theta^-2``, the compact targets with a RoPE scaling factor ``1/theta``.
    """
    info = src.info
    tolerance = PLAN_TOLERANCE[dtype] if tolerance is None else _checks.positive("tolerance", tolerance)
    common = dict(dtype=dtype, tolerance=tolerance, family=info.family, source=None)
    if emulation is None:  # the single pair's own flags choose it
        single = theta is not None or max_phase is not None or pairs != 1
        emulation = "single" if single else default_emulation(dtype, target)
    _checks.choice("emulation", emulation, EMULATIONS)
    if emulation == "ladder":
        if target != "gpt-neox":
            raise ValueError(f"--target {target} rotates one pair at one theta; the ladder needs --target gpt-neox "
                             "(or --emulation single)")
        if theta is not None or max_phase is not None or pairs != 1:
            raise ValueError("--theta, --max-phase and --pairs are for --emulation single; the ladder plans every pair")
        return plan_ladder(info.slopes, info.head_dim, window, base=base, rotary_dim=rotary_dim,
                           head_dim_multiple=head_dim_multiple, floors=floors, **common)
    if floors is not None:
        raise ValueError("--floor and --calibration-text are for --emulation ladder")
    if target != "gpt-neox" and (base is not None or pairs != 1):
        raise ValueError(f"--target {target} rotates one pair at a free theta: --rope-base and --pairs are for gpt-neox")
    if base is not None:
        if theta is not None or max_phase is not None:
            raise ValueError("give either base (with rotary_dim) or theta/max_phase, not both")
        return plan_emulation(info.slopes, info.head_dim, window, base=base, rope_dim=rotary_dim or 16,
                              pairs=pairs, **common)
    if pairs != 1:
        raise ValueError("pairs > 1 needs a fixed base (--rope-base), whose frequency set provides the pairs")
    if theta is None:
        if max_phase is not None:
            if not 0 < max_phase < math.pi / 2:
                raise ValueError(f"max_phase must be in (0, pi/2), got {max_phase!r}")
            theta = max_phase / window
        elif dtype == "float32":
            theta = exact_rotation_theta(window)
        else:
            theta = shared_theta(info.slopes, info.head_dim, window, dtype=dtype)
    theta = _checks.positive("theta", theta)
    if theta * window >= math.pi / 2:
        raise ValueError(f"theta * window = {theta * window:.4g} must be < pi/2")
    if target != "gpt-neox":
        return plan_emulation(info.slopes, info.head_dim, window, theta=theta, **common)
    # (no max_window search: with a free base the window is whatever theta was planned for)
    return plan_emulation(info.slopes, info.head_dim, window, base=theta**-2.0, rope_dim=SINGLE_PAIR_ROTARY_DIM,
                          max_window=False, **common)


def _what_would_fit(plan: EmulationPlan) -> str:
    """One clause for a refusal: what the planner knows would meet the tolerance."""
    hints = []
    if plan.max_window is not None and plan.max_window < plan.window:
        hints.append(f"--window {plan.max_window} fits" if plan.max_window > 0 else "no window fits this base")
    else:
        hints.append("try a shorter --window")
    if plan.dtype != "float32":
        hints.append("--dtype float32 (exact rotation)")
    if plan.mode == "fixed-base":
        hints.append("more --pairs or a larger --rotary-dim")
    elif plan.mode == "ladder":
        hints.append("a larger --rotary-dim or --calibration-text (a lower floor)")
    return ", ".join(hints)


def _check_destination(src: Path, dst: Path, force: bool) -> None:
    s, d = src.resolve(), dst.resolve()
    if d == s or s in d.parents:
        raise ValueError(f"destination {dst} lies inside the source {src}")
    if d in s.parents:
        raise ValueError(f"destination {dst} contains the source {src}")
    if dst.exists() and not force:
        raise FileExistsError(f"{dst} exists; pass --force to replace it")
    if not dst.parent.exists():
        raise FileNotFoundError(f"the parent directory of {dst} does not exist")


def convert(
    src: str | Path,
    dst: str | Path,
    *,
    window: int = DEFAULT_WINDOW,
    dtype: str | None = None,
    target: str = "gpt-neox",
    theta: float | None = None,
    max_phase: float | None = None,
    base: float | None = None,
    rotary_dim: int | None = None,
    pairs: int = 1,
    emulation: str | None = None,
    floor: float | None = None,
    calibration_text: str | None = None,
    head_dim_multiple: int = DEFAULT_HEAD_DIM_MULTIPLE,
    tolerance: float | None = None,
    accept_error: bool = False,
    force: bool = False,
    max_shard_mb: float = 2000.0,
    progress: bool = False,
) -> ConversionResult:
    """Convert SRC (directory or hub id) into a stock RoPE checkpoint at DST; see the module doc."""
    start = time.perf_counter()
    _checks.choice("target", target, TARGETS)
    window = _checks.positive_int("window", window)
    max_shard_mb = _checks.positive("max_shard_mb", max_shard_mb)
    dst = Path(dst)
    if dst.exists() and not force:  # before any download or planning
        raise FileExistsError(f"{dst} exists; pass --force to replace it")
    src_dir = resolve_source(src)
    _check_destination(src_dir, dst, force)
    config = load_config(src_dir)
    model = SourceModel(src_dir, config)
    dtype = default_dtype(config) if dtype is None else _checks.choice("dtype", dtype, tuple(DTYPES))
    floors: float | list[float] | None = floor
    if calibration_text is not None:
        if floor is not None:
            raise ValueError("give --floor or --calibration-text, not both")
        floors = calibrated_floors(model, src_dir, calibration_text)
    plan = conversion_plan(model, window=window, dtype=dtype, theta=theta, max_phase=max_phase, base=base,
                           rotary_dim=rotary_dim, pairs=pairs, target=target, emulation=emulation, floors=floors,
                           head_dim_multiple=head_dim_multiple, tolerance=tolerance)
    plan = dataclasses.replace(plan, source=str(src))
    if not plan.meets_tolerance:
        miss = (f"the plan predicts a worst error of {plan.worst_head.predicted_error:.3g} logits (head "
                f"{plan.worst_head.head}), above the {dtype} tolerance {plan.tolerance:g}; {_what_would_fit(plan)}")
        if not accept_error:
            raise ValueError(miss + ", or pass --accept-error")
        log.warning("%s (accepted with --accept-error)", miss)
    if target == "gpt-neox":
        layout = gpt_neox.layout_for(model, plan)
        geometry = {"rotary_dim": layout.rotary_dim, "head_dim": layout.head_dim, "hidden_size": layout.hidden_size,
                    "pad_dims": layout.hidden_size - model.info.hidden_size, "rope_base": layout.base,
                    "content_q_scale": layout.content_scale}
        module = gpt_neox
    else:
        layout = compact.layout_for(model, plan, target)
        geometry = {"head_dim": layout.head_dim, "pair_dims": [layout.pair_x, layout.pair_y], "theta": layout.theta,
                    "rope_factor": 1.0 / layout.theta, "content_q_scale": layout.content_scale}
        module = compact
    log.info("plan: %s heads, %s, worst predicted error %.3g", len(plan.heads), geometry,
             plan.worst_head.predicted_error)

    tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}.tmp-", dir=dst.parent))
    try:
        bar = None
        writer = ShardWriter(tmp, DTYPES[dtype], int(max_shard_mb * 2**20))
        module.add_tensors(model, layout, writer)
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=writer.total_bytes(), unit="B", unit_scale=True, desc="convert", leave=False)
        writer.progress = bar
        writer.write({"ropebridge": __version__})
        if bar is not None:
            bar.close()
        (tmp / "config.json").write_text(json.dumps(module.config_for(model, layout, plan, dtype), indent=1))
        copy_side_files(src_dir, tmp)
        record = {
            "ropebridge_version": __version__,
            "source": str(src),
            "source_family": model.info.family,
            "target": target,
            "dtype": dtype,
            "torch_version": torch.__version__,
            "layout": geometry,
            "plan": plan.to_dict(),
            "accepted_error": not plan.meets_tolerance,
        }
        (tmp / "ropebridge.json").write_text(json.dumps(record, indent=1))
        if dst.exists():
            old = dst.with_name(f".{dst.name}.old-{time.time_ns()}")
            dst.rename(old)
            tmp.rename(dst)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(dst)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ConversionResult(dst, plan, target, dtype, time.perf_counter() - start, writer.total_bytes())
