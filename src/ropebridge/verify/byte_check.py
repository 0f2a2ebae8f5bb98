"""verify's byte check: DST against the checkpoint ``convert`` writes from SRC, derived again.

From SRC and the options DST records (its request: every option the plan and the tensors depend on),
``pipeline.derive`` describes again what ``convert`` writes: every tensor (produced block by block by the same
producers, the same bounded memory), config.json (every key, the legacy ones other engines read included),
the tokenizer and generation files, and the plan. Each is compared with DST: tensors value for value in their
stored bytes, the set of files, the config and the side files exactly, the recorded plan field by field. DST's
record supplies only the options; nothing it says of itself (the version that wrote it included) widens the
comparison.

``accept_older`` (verify's ``--accept-older``, for a conversion by an older ropebridge whose bytes this version
no longer writes): every tensor is still compared, each one that differs is reported (values that differ, max
|difference|) instead of failing, plan and config numbers agree within ``OTHER_VERSION_RTOL``, and the mode
``unproven`` says the bytes were not proven: the functional check decides.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from .._progress import progress_bar
from ..checkpoint.tensor_io import CheckpointReader
from ..convert.pipeline import Derivation
from ..convert.record import FILE as RECORD_FILE
from ..convert.record import ConversionRecord

FIXED_FILES = ("config.json", RECORD_FILE, "README.md", "model.safetensors.index.json")
# With accept_older, numbers of the plan and the config agree to this relative difference: both sides compute
# them in float64 from the same inputs, but another version's fit may take other solver steps.
OTHER_VERSION_RTOL = 1e-6


@dataclass
class ByteCheck:
    """What the byte check compared: ``mode`` exact (every byte), unproven (``accept_older``: every tensor
    compared, its differences in ``differences``, not failures) or skipped (``--quick``: the tensors' bytes not
    read, everything else compared); ``failures``: the first difference of each kind, naming the tensor, key or
    file and its size."""

    mode: str
    tensors: int = 0
    bytes: int = 0
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)  # unproven: one line per tensor whose bytes differ
    note: str = ""  # said beside the bytes row (--accept-older ignored for a record that is not older)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def first_difference(recorded: Any, derived: Any, where: str = "", rtol: float = 0.0) -> str | None:
    """The first place where two JSON values differ, as ``where: recorded ... , derived ...``; numbers within
    ``rtol`` relative agree (0: exactly). None when they agree."""
    if isinstance(derived, dict) and isinstance(recorded, dict):
        for key in sorted(set(derived) | set(recorded), key=str):
            if key not in recorded or key not in derived:
                side = "DST lacks" if key not in recorded else "DST adds"
                return f"{where + '.' if where else ''}{key}: {side} it"
            found = first_difference(recorded[key], derived[key], f"{where + '.' if where else ''}{key}", rtol)
            if found:
                return found
        return None
    if isinstance(derived, (list, tuple)) and isinstance(recorded, (list, tuple)):
        if len(derived) != len(recorded):
            return f"{where}: {len(recorded)} entries in DST, {len(derived)} derived"
        for i, (a, b) in enumerate(zip(recorded, derived)):
            found = first_difference(a, b, f"{where}[{i}]", rtol)
            if found:
                return found
        return None
    numbers = (int, float)
    if isinstance(derived, numbers) and isinstance(recorded, numbers) and not isinstance(derived, bool) \
            and not isinstance(recorded, bool):
        if recorded == derived or (rtol and math.isclose(recorded, derived, rel_tol=rtol)):
            return None
        return f"{where}: DST has {recorded!r}, SRC gives {derived!r}"
    if recorded == derived and type(recorded) is type(derived):
        return None
    return f"{where}: DST has {_short(recorded)}, SRC gives {_short(derived)}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def compare(derived: Derivation, dst: Path, record: ConversionRecord, *, quick: bool = False,
            accept_older: bool = False, progress: bool = False) -> ByteCheck:
    """DST against ``derived`` (module doc): files, config, side files, the plan, then (unless ``quick``) every
    tensor. Stops reading tensors at the first that differs, unless ``accept_older`` (then each is reported)."""
    start = time.perf_counter()
    rtol = OTHER_VERSION_RTOL if accept_older else 0.0
    check = ByteCheck("skipped" if quick else ("unproven" if accept_older else "exact"))
    fail = check.failures.append
    try:
        recorded_plan = record.current_plan()  # the same values under today's names
    except ValueError as exc:
        recorded_plan = record.plan
        fail(f"its recorded plan is malformed: {exc}")
    found = first_difference(recorded_plan, _comparable_plan(derived, record), "plan", rtol)
    if found:
        fail(f"its recorded plan is not the one SRC gives with its options: {found}")
    compared = [("target", derived.target.name), ("dtype", derived.plan.dtype),
                ("source_family", derived.model.info.family), ("geometry", derived.geometry)]
    if record.asked is not None or record.resolved is not None:  # a record older than both holds neither
        compared.append(("resolved", json.loads(json.dumps(derived.resolved.to_dict()))))
    for key, value in compared:
        found = first_difference(getattr(record, key), value, key, rtol)
        if found:
            fail(f"its record differs from the conversion SRC gives: {found}")
    try:
        found = first_difference(json.loads((dst / "config.json").read_text()), derived.config, "config.json", rtol)
    except (OSError, ValueError) as exc:
        found = f"it does not read ({exc})"
    if found:
        fail(f"its config differs from what convert writes: {found}")
    for name, data in derived.side_files.items():
        path = dst / name
        if not path.is_file():
            fail(f"it lacks {name}, which convert copies from SRC")
        elif path.read_bytes() != data:
            fail(f"its {name} differs from what convert writes from SRC's")
    try:
        reader = CheckpointReader(dst)
    except (OSError, ValueError) as exc:
        fail(f"its weights do not read: {exc}")
        check.seconds = time.perf_counter() - start
        return check
    expected = {*FIXED_FILES, *derived.side_files, *(f.name for f in reader.files)}
    extra = sorted(p.name for p in dst.iterdir() if p.is_file() and p.name not in expected)
    if extra:
        fail(f"it holds {extra[0]}, a file convert does not write (an engine may read it)")
    _compare_tensors(derived, reader, check, quick, progress)
    check.seconds = time.perf_counter() - start
    return check


def _comparable_plan(derived: Derivation, record: ConversionRecord) -> dict[str, Any]:
    """The derived plan as DST would record it: its ``source`` is whatever name SRC was given at convert, and
    its ``version`` the writing version."""
    plan = derived.plan.to_dict()
    recorded = record.plan
    plan["source"] = recorded.get("source")
    plan["version"] = recorded.get("version", plan["version"])
    return plan


def _compare_tensors(derived: Derivation, reader: CheckpointReader, check: ByteCheck, quick: bool,
                     progress: bool) -> None:
    """Names, shapes and dtypes of every tensor, then (unless ``quick``) every value, block by block."""
    shards, fail = derived.shards, check.failures.append
    names = {p.name for p in shards.pending}
    stored = set(reader.names())
    if stored != names:
        extra, missing = sorted(stored - names), sorted(names - stored)
        fail(f"its tensors differ from convert's: {'it adds ' + extra[0] if extra else 'it lacks ' + missing[0]}")
        return
    for p in shards.pending:
        if reader.dtype(p.name) != shards.dtype or tuple(reader.shape(p.name)) != p.shape:
            fail(f"tensor {p.name} is {str(reader.dtype(p.name))[6:]} {list(reader.shape(p.name))}; convert writes "
                 f"{str(shards.dtype)[6:]} {list(p.shape)}")
            return
    if quick:
        return
    bar = progress_bar(shards.total_bytes(), "verify: bytes", enabled=progress, unit="B", unit_scale=True)
    try:
        for p in shards.pending:
            offset, differing, largest = 0, 0, 0.0
            for out in shards.blocks(p):  # (n,) in the output dtype
                got = reader.read_elements(p.name, offset, offset + out.numel())  # (n,) as DST stores it
                if not torch.equal(got.view(torch.uint8), out.view(torch.uint8)):
                    if check.mode == "exact":
                        fail(_describe(p.name, got, out, offset))
                        return
                    bad = _differing(got, out)  # (n,) bool
                    diff = (got.double() - out.double()).abs()[bad].nan_to_num(float("inf"))  # NaN: as far as inf
                    differing, largest = differing + int(bad.sum()), max(largest, float(diff.max()))
                offset += out.numel()
                bar.update(out.numel() * out.element_size())
            if differing:
                check.differences.append(f"{p.name}: {differing} of {offset} values differ, max |difference| "
                                         f"{largest:.4g}")
            check.tensors += 1
            check.bytes += shards.nbytes(p)
    finally:
        bar.close()


def _differing(got: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Which values of two blocks ``(n,)`` of one dtype differ in their bytes: ``(n,)`` bool."""
    return (got.view(torch.uint8).view(-1, got.element_size()) != out.view(torch.uint8).view(-1, out.element_size())
            ).any(-1)


def _describe(name: str, got: torch.Tensor, out: torch.Tensor, offset: int) -> str:
    """One line: which tensor differs, in how many values of the block, by how much, where first."""
    g, o = got.double(), out.double()
    diff = (g - o).abs()
    bad = _differing(got, out)
    first = int(bad.nonzero()[0]) if bool(bad.any()) else 0
    size = float(diff[torch.isfinite(diff)].max()) if bool(torch.isfinite(diff).any()) else float("nan")
    return (f"tensor {name} differs from what convert writes from SRC: {int(bad.sum())} of {got.numel()} values in "
            f"the block from element {offset}, max |difference| {size:.4g} (first at element {offset + first}: "
            f"DST {float(g[first]):.6g}, SRC gives {float(o[first]):.6g})")
