"""``convert``: an ALiBi checkpoint of any family in ``checkpoint.families.FAMILIES`` into a stock RoPE
checkpoint of any target in ``targets.TARGETS`` (``derive`` describes it, ``convert`` writes it, with its
conversion record, ``record.ConversionRecord``).

Safety: SRC is only read; the result is written into a temporary directory next to DST and renamed
into place at the end, so a failure leaves nothing half-written; an existing DST is refused unless
``force``; DST may not lie inside SRC.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import _log
from .. import __version__, _checks, _interrupt
from .._progress import progress_bar
from ..checkpoint.hub import check_source_name, resolve_source
from ..checkpoint.model import SourceModel
from ..checkpoint.tensor_io import ShardWriter
from ..emulation import EmulationPlan, PlanRequest, Resolved
from ..numerics import DTYPES
from ..planning import plan_checkpoint, what_would_fit
from ..targets import Target
from ..writers import describe_checkpoint
from .card import model_card
from .record import FILE as RECORD_FILE
from .record import ConversionRecord

log = _log.logger(__name__)

COPIED_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt",
    "tokenizer.model", "added_tokens.json", "generation_config.json",
)


@dataclass(frozen=True)
class ConversionResult:
    """What ``convert`` wrote: where, the plan, the request resolved (``resolved.target``, ``resolved.dtype``),
    how long it took and how many bytes of tensors it wrote."""

    destination: Path
    plan: EmulationPlan
    resolved: Resolved
    seconds: float
    bytes_written: int

    @property
    def target(self) -> str:
        return self.resolved.target

    @property
    def dtype(self) -> str:
        return self.plan.dtype


def side_files(src_dir: Path) -> dict[str, bytes]:
    """The tokenizer and generation files as convert writes them (``COPIED_FILES`` that SRC has), name -> bytes.
    Two are rewritten:

    - transformers 5 names its fast tokenizer class ``TokenizersBackend``, a name 4.x (and the engines' converters,
      which pin 4.x) cannot load; the portable ``PreTrainedTokenizerFast`` loads the same tokenizer.json in both;
    - a generation config with ``use_cache: false`` (MPT's own default, a training setting) loses that key: it
      would override the target's ``use_cache: true`` and make ``generate`` recompute the whole prefix for every
      token (28 x slower at 16K tokens on the MPT demo)."""
    out = {}
    for name in COPIED_FILES:
        if not (src_dir / name).is_file():
            continue
        data = (src_dir / name).read_bytes()
        if name == "tokenizer_config.json":
            config = _json_file(src_dir / name, data)
            if isinstance(config, dict) and config.get("tokenizer_class") == "TokenizersBackend":
                config["tokenizer_class"] = "PreTrainedTokenizerFast"
                data = (json.dumps(config, indent=2) + "\n").encode()
                log.info("tokenizer_class TokenizersBackend written as PreTrainedTokenizerFast (transformers 4.x)")
        if name == "generation_config.json":
            config = _json_file(src_dir / name, data)
            if isinstance(config, dict) and config.get("use_cache") is False:
                del config["use_cache"]
                data = (json.dumps(config, indent=2) + "\n").encode()
                log.info("generation_config.json: use_cache false dropped (generate keeps its KV cache)")
        out[name] = data
    return out


def _json_file(path: Path, data: bytes):
    """``data``, the bytes of ``path``, as JSON; ``ValueError`` naming the file where it is not."""
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from None


def write_side_files(files: dict[str, bytes], out: Path) -> None:
    """Write the side files (``side_files``) into ``out``."""
    for name, data in files.items():
        (out / name).write_bytes(data)


def source_fingerprint(src_dir: Path, progress: bool = False) -> str:
    """sha256 over config.json and every byte of every weight file (name, size, bytes; streamed 16 MiB at a
    time): the same for a copy of the checkpoint anywhere, different for any other byte (``verify`` checks DST
    against SRC with it before measuring anything)."""
    import hashlib

    h = hashlib.sha256((src_dir / "config.json").read_bytes())
    files = sorted([*src_dir.glob("*.safetensors"), *src_dir.glob("*.bin"), *src_dir.glob("*.index.json")],
                   key=lambda p: p.name)
    bar = progress_bar(sum(p.stat().st_size for p in files), "fingerprint", enabled=progress, unit="B",
                       unit_scale=True)
    try:
        for path in files:
            h.update(f"{path.name}:{path.stat().st_size}".encode())
            with open(path, "rb") as f:
                while chunk := f.read(16 << 20):
                    h.update(chunk)
                    bar.update(len(chunk))
    finally:
        bar.close()
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
    for old in moved:  # removed once the new checkpoint stands (a symbolic link itself, never what it points to)
        _interrupt.remove(old)


@dataclass
class Derivation:
    """Everything ``convert`` writes for a source and a request, described before any tensor's byte is read:
    the request resolved for the source (``emulation.Resolved``: every choice made, and the request as asked,
    which the model card's command reproduces; ``ropebridge.json`` records both), the plan, the source, the target,
    the layout numbers recorded in ``ropebridge.json``, the tensors (a ``ShardWriter`` holding each one's name,
    shape and producer, in the output dtype), config.json and the side files. ``convert`` writes it; ``verify``
    derives it again from SRC and compares it with DST, byte for byte."""

    resolved: Resolved
    plan: EmulationPlan
    model: SourceModel
    geometry: dict[str, Any]
    shards: ShardWriter
    config: dict[str, Any]
    side_files: dict[str, bytes]

    @property
    def target(self) -> Target:
        return self.resolved.target_row

    def record(self, source_name: str, fingerprint: str) -> ConversionRecord:
        """``ropebridge.json`` for this derivation of ``source_name`` (its fingerprint): ``record.ConversionRecord``."""
        return ConversionRecord.of(self.resolved, self.plan, self.model.info.family, self.geometry, source_name,
                                   fingerprint)


def derive(src_dir: Path, request: PlanRequest, source_name: str, max_shard_bytes: int = 2000 * 2**20,
           model: SourceModel | None = None) -> Derivation:
    """The ``Derivation`` of checkpoint directory ``src_dir`` (``model``: already read) for ``request``
    (``planning.plan_checkpoint``: resolved once, then planned; the target's writer lays out and describes the
    tensors), whatever its plan predicts."""
    directory = Path(src_dir)
    plan, resolved, model = plan_checkpoint(directory, request, source_name, model, weights=True)
    shards = ShardWriter(DTYPES[plan.dtype], max_shard_bytes)
    geometry, config = describe_checkpoint(model, plan, resolved.target_row, shards)
    return Derivation(resolved, plan, model, geometry, shards, config, side_files(directory))


def convert(src: str | Path, dst: str | Path, request: PlanRequest | None = None, *, accept_error: bool = False,
            force: bool = False, max_shard_mb: float = 2000.0) -> ConversionResult:
    """Convert SRC (directory or hub id) into a stock RoPE checkpoint at DST (module doc): ``derive`` with
    ``request`` (default ``PlanRequest()``), then written; a plan whose prediction exceeds its tolerance is
    refused unless ``accept_error``."""
    start = time.perf_counter()
    request = PlanRequest() if request is None else request
    max_shard_mb = _checks.positive("max_shard_mb", max_shard_mb)
    dst = Path(os.path.abspath(dst))  # "." and "sub/.." have a name once absolute
    check_source_name(src)  # a SRC that names nothing is said first
    if not Path(src).is_dir() and dst.exists() and not force:  # a hub id: refuse before any download
        raise FileExistsError(f"{dst} exists; pass --force to replace it")
    src_dir = resolve_source(src)
    _check_destination(src_dir, dst, force)  # (DST = SRC is named as such before "exists")
    d = derive(src_dir, request, str(src), int(max_shard_mb * 2**20))
    plan, shards = d.plan, d.shards
    if not plan.meets_tolerance:
        miss = (f"the plan predicts a worst error of {plan.worst_head.predicted_error:.3g} logits (head "
                f"{plan.worst_head.head}), above the {plan.dtype} tolerance {plan.tolerance:g}; "
                f"{what_would_fit(plan, d.resolved)}")
        if not accept_error:
            raise ValueError(miss + ", or pass --accept-error")
        log.warning("%s (accepted with --accept-error)", miss)
    log.info("plan: %s heads, %s, worst predicted error %.3g", len(plan.heads), d.geometry,
             plan.worst_head.predicted_error)
    check_free_space(dst.parent, shards.total_bytes() + sum(len(b) for b in d.side_files.values()))
    with _interrupt.new_directory(dst.parent, f".{dst.name}.tmp-") as tmp:  # removed on any failure
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes it 0700; DST gets what a plain mkdir would give
        _write(d, src, src_dir, dst, tmp, force)
    return ConversionResult(dst, plan, d.resolved, time.perf_counter() - start, shards.total_bytes())


def _write(d: Derivation, src: str | Path, src_dir: Path, dst: Path, tmp: Path, force: bool) -> None:
    """Write the derivation into ``tmp`` and publish it as ``dst`` (its caller removes ``tmp`` on any failure).
    A signal that arrives while DST is published is kept until the rename is done, and then no longer stops
    anything: the conversion stands complete, and is reported as such."""
    plan, shards = d.plan, d.shards
    bar = progress_bar(shards.total_bytes(), "convert", enabled=d.resolved.progress, unit="B", unit_scale=True)
    try:
        shards.write(tmp, {"ropebridge": __version__}, bar)
    finally:
        bar.close()  # clears its line: an error starts a line of its own
    (tmp / "config.json").write_text(json.dumps(d.config, indent=1))
    write_side_files(d.side_files, tmp)
    (tmp / RECORD_FILE).write_text(d.record(str(src), source_fingerprint(src_dir)).to_json())
    (tmp / "README.md").write_text(model_card(str(src), dst.name, plan, d.target, d.resolved.asked,
                                              hub_id=not Path(src).is_dir()))
    published = False
    try:
        with _interrupt.uninterrupted():
            _publish(tmp, dst, force)
            published = True
    except KeyboardInterrupt:
        if not published:
            raise
        log.info("a signal arrived as %s was published: the conversion is complete", dst)
