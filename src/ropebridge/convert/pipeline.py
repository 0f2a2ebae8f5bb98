"""``convert``: an ALiBi checkpoint (BLOOM, MPT, Falcon-RW) into a stock RoPE checkpoint.

Safety: SRC is only read; the result is written into a temporary directory next to DST and renamed
into place at the end, so a failure leaves nothing half-written; an existing DST is refused unless
``force``; DST may not lie inside SRC.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import __version__, _checks
from .._progress import progress_bar
from ..checkpoint.tensor_io import ShardWriter
from ..emulation import EmulationPlan, PlanRequest
from ..emulation.error_model import DTYPES
from ..planning import plan_checkpoint, what_would_fit
from ..targets import TARGETS
from .card import model_card

log = logging.getLogger(__name__)

COPIED_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt",
    "tokenizer.model", "added_tokens.json", "generation_config.json",
)


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


def source_fingerprint(src_dir: Path) -> str:
    """sha256 of config.json and, for every weight file, its size and first and last MiB: the same for a
    copy of the checkpoint anywhere, different for other weights (``verify`` checks DST against SRC)."""
    import hashlib

    h = hashlib.sha256((src_dir / "config.json").read_bytes())
    files = sorted([*src_dir.glob("*.safetensors"), *src_dir.glob("*.bin")], key=lambda p: p.name)
    for path in files:
        size = path.stat().st_size
        h.update(f"{path.name}:{size}".encode())
        with open(path, "rb") as f:
            h.update(f.read(2**20))
            f.seek(max(0, size - 2**20))
            h.update(f.read(2**20))
    return h.hexdigest()


SPACE_SLACK = 64 << 20  # headers, index, config and report, with room to spare


def check_free_space(directory: Path, needed: int) -> None:
    """Refuse (OSError, with the numbers) when ``directory``'s file system has less free space than ``needed``
    bytes plus a slack; checked before anything is written. An existing DST replaced with ``--force`` is
    removed only after the new one is complete, so it does not count as free."""
    free = shutil.disk_usage(directory).free
    if free < needed + SPACE_SLACK:
        raise OSError(f"not enough free space in {directory}: the output needs {_size(needed)} plus "
                      f"{_size(SPACE_SLACK)} of headroom, and {_size(free)} are free")


def _size(n: int) -> str:
    """Bytes as a person reads them: 1.5 GiB, 64 MiB, 2.1 KiB."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.3g} {unit}"
    return f"{n} bytes"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _check_destination(src: Path, dst: Path, force: bool) -> None:
    s, d = src.resolve(), dst.resolve()
    if d == s:
        raise ValueError(f"destination {dst} is the source {src}; the source is never modified")
    if s in d.parents:
        raise ValueError(f"destination {dst} lies inside the source {src}")
    if d in s.parents:
        raise ValueError(f"destination {dst} contains the source {src}")
    if dst.exists() and not force:
        raise FileExistsError(f"{dst} exists; pass --force to replace it")
    if not dst.parent.exists():
        raise FileNotFoundError(f"the parent directory of {dst} does not exist")


def _publish(tmp: Path, dst: Path, force: bool) -> None:
    """Rename the finished ``tmp`` to ``dst`` atomically: a rename never replaces a directory that is not empty,
    so of two converts into one DST the first rename wins and the other is refused (``FileExistsError``), unless
    ``force``: then whatever stands at DST is moved aside first and the last rename wins. DST is at every
    instant absent, the old checkpoint or a complete new one."""
    moved: list[Path] = []
    while True:
        try:
            os.rename(tmp, dst)
            break
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                raise
            if not force:
                raise FileExistsError(f"{dst} appeared while converting (another convert into it?); nothing "
                                      "written: pass --force to replace it") from None
        old = dst.with_name(f".{dst.name}.old-{time.time_ns()}")
        try:
            os.rename(dst, old)
            moved.append(old)
        except FileNotFoundError:  # another convert moved it first: try again
            pass
    for old in moved:  # removed once the new checkpoint stands
        if old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink(missing_ok=True)


def convert(src: str | Path, dst: str | Path, request: PlanRequest | None = None, *, accept_error: bool = False,
            force: bool = False, max_shard_mb: float = 2000.0) -> ConversionResult:
    """Convert SRC (directory or hub id) into a stock RoPE checkpoint at DST (module doc) with the plan
    ``planning.plan_checkpoint`` computes for ``request`` (default ``PlanRequest()``); a plan whose prediction exceeds
    its tolerance is refused unless ``accept_error``."""
    start = time.perf_counter()
    request = PlanRequest() if request is None else request
    max_shard_mb = _checks.positive("max_shard_mb", max_shard_mb)
    dst = Path(os.path.abspath(dst))  # "." and "sub/.." have a name once absolute
    if not Path(src).is_dir() and dst.exists() and not force:  # a hub id: refuse before any download
        raise FileExistsError(f"{dst} exists; pass --force to replace it")
    src_dir = resolve_source(src)
    _check_destination(src_dir, dst, force)  # (DST = SRC is named as such before "exists")
    plan, model = plan_checkpoint(src_dir, request, source_name=str(src))
    if model is None:
        raise FileNotFoundError(f"no weights (*.safetensors or *.bin) in {src_dir}")
    dtype = plan.dtype
    if not plan.meets_tolerance:
        miss = (f"the plan predicts a worst error of {plan.worst_head.predicted_error:.3g} logits (head "
                f"{plan.worst_head.head}), above the {dtype} tolerance {plan.tolerance:g}; {what_would_fit(plan, request.kernel)}")
        if not accept_error:
            raise ValueError(miss + ", or pass --accept-error")
        log.warning("%s (accepted with --accept-error)", miss)
    target = TARGETS[request.target]
    code = target.code()
    layout = code.layout(model, plan)
    geometry = code.geometry(model, layout)
    log.info("plan: %s heads, %s, worst predicted error %.3g", len(plan.heads), geometry,
             plan.worst_head.predicted_error)

    writer = ShardWriter(dst.parent, DTYPES[dtype], int(max_shard_mb * 2**20))  # directory: the temporary one below
    code.add_tensors(model, layout, writer)  # describes the tensors; nothing is read yet
    check_free_space(dst.parent, writer.total_bytes() + sum(
        (src_dir / name).stat().st_size for name in COPIED_FILES if (src_dir / name).is_file()))
    tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}.tmp-", dir=dst.parent))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes it 0700; DST gets what a plain mkdir would give
    try:
        writer.directory = tmp
        writer.progress = progress_bar(writer.total_bytes(), "convert", enabled=request.progress, unit="B",
                                       unit_scale=True)
        try:
            writer.write({"ropebridge": __version__})
        finally:
            writer.progress.close()  # clears its line: an error starts a line of its own
        (tmp / "config.json").write_text(json.dumps(code.config(model, layout, plan, dtype), indent=1))
        copy_side_files(src_dir, tmp)
        record = {
            "ropebridge_version": __version__,
            "source": str(src),
            "source_family": model.info.family,
            "source_fingerprint": source_fingerprint(src_dir),
            "target": target.name,
            "dtype": dtype,
            "torch_version": torch.__version__,
            "layout": geometry,
            "plan": plan.to_dict(),
            "accepted_error": not plan.meets_tolerance,
        }
        (tmp / "ropebridge.json").write_text(json.dumps(record, indent=1))
        (tmp / "README.md").write_text(model_card(str(src), dst.name, plan, target, request,
                                                  hub_id=not Path(src).is_dir()))
        _publish(tmp, dst, force)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ConversionResult(dst, plan, target.name, dtype, time.perf_counter() - start, writer.total_bytes())
