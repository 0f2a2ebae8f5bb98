"""Canonical tensors a family stores differently: a row-wise concatenation of row ranges of stored tensors
(``ViewReader``), or the transpose of a stored one (``TransposedReader``).

Refact stores q alone and k, v fused (``attn.q``, ``attn.kv``), and the MLP's gate and up fused (``gate_up_proj``,
gate first); the canonical block reads one fused QKV ``(h + 2) hd`` rows (h query heads, one k, one v) and a gate
and an up of F rows each. A ``Segment`` names a stored tensor and the rows of it a canonical tensor takes; a
``ViewReader`` answers for the canonical names (shape, dtype, rows) and passes every other name to the checkpoint
itself. ``names`` lists the stored tensors, so a parameter count sees each stored byte once.

GPT-2's ``Conv1D`` (Jais, BTLM) stores a linear layer's weight input x output; a ``TransposedReader`` answers for
those names with the canonical output x input shape and reads a block of canonical rows as the stored columns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from .tensor_io import CheckpointReader


@dataclass(frozen=True)
class Segment:
    """Rows ``[start, stop)`` of the stored tensor ``name``. A stored tensor has exactly as many rows as the
    largest ``stop`` of the segments that read it (``stored_rows``), which the shape check holds it to."""

    name: str
    start: int
    stop: int


def stored_rows(views: Mapping[str, tuple[Segment, ...]]) -> dict[str, int]:
    """Each stored tensor the views read -> the rows it must have."""
    rows: dict[str, int] = {}
    for segments in views.values():
        for s in segments:
            rows[s.name] = max(rows.get(s.name, 0), s.stop)
    return rows


class ViewReader:
    """``reader`` with the canonical tensors of ``views`` (canonical name -> its segments, in row order)."""

    def __init__(self, reader: CheckpointReader, views: Mapping[str, tuple[Segment, ...]]):
        self.reader = reader
        self.views = dict(views)
        self.directory = reader.directory
        self.files = reader.files

    def _rows(self, segment: Segment) -> tuple[int, int]:
        total = self.reader.shape(segment.name)[0]
        if not 0 <= segment.start <= segment.stop <= total:
            raise ValueError(f"tensor {segment.name!r} has {total} rows; its rows {segment.start}:{segment.stop} "
                             "are read")
        return segment.start, segment.stop

    def names(self) -> list[str]:
        return self.reader.names()

    def __contains__(self, name: str) -> bool:
        if name in self.views:
            return all(s.name in self.reader for s in self.views[name])
        return name in self.reader

    def shape(self, name: str) -> tuple[int, ...]:
        if name not in self.views:
            return self.reader.shape(name)
        segments = self.views[name]
        rest = self.reader.shape(segments[0].name)[1:]
        return (sum(b - a for a, b in map(self._rows, segments)), *rest)

    def dtype(self, name: str) -> torch.dtype:
        return self.reader.dtype(self.views[name][0].name if name in self.views else name)

    def read(self, name: str, rows: tuple[int, int] | None = None, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """Tensor ``name`` (or its rows ``[start, stop)``) in ``dtype``: a canonical one from the rows of its
        segments that fall in the range, each read on its own."""
        if name not in self.views:
            return self.reader.read(name, rows, dtype)
        total = self.shape(name)[0]
        lo, hi = (0, total) if rows is None else rows
        if not 0 <= lo <= hi <= total:
            raise ValueError(f"rows {lo}:{hi} of tensor {name!r} lie outside its {total} rows")
        parts, offset = [], 0
        for segment in self.views[name]:
            a, b = self._rows(segment)
            start, stop = max(lo, offset), min(hi, offset + b - a)
            if start < stop:
                parts.append(self.reader.read(segment.name, (a + start - offset, a + stop - offset), dtype))
            offset += b - a
        if not parts:
            return torch.zeros(0, *self.shape(name)[1:], dtype=dtype)
        return torch.cat(parts)

    def read_elements(self, name: str, start: int, stop: int) -> torch.Tensor:
        return self.reader.read_elements(name, start, stop)


class TransposedReader:
    """``reader`` with the 2-D tensors ``names`` read as their transpose ``(out, in)`` (stored ``(in, out)``)."""

    def __init__(self, reader, names):
        self.reader = reader
        self.transposed = frozenset(names)
        self.directory = reader.directory
        self.files = reader.files

    def names(self) -> list[str]:
        return self.reader.names()

    def __contains__(self, name: str) -> bool:
        return name in self.reader

    def shape(self, name: str) -> tuple[int, ...]:
        shape = self.reader.shape(name)
        return tuple(reversed(shape)) if name in self.transposed and len(shape) == 2 else shape

    def dtype(self, name: str) -> torch.dtype:
        return self.reader.dtype(name)

    def read(self, name: str, rows: tuple[int, int] | None = None, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """Tensor ``name`` (or its canonical rows ``[start, stop)``, the stored columns) in ``dtype``."""
        if name not in self.transposed or len(self.reader.shape(name)) != 2:
            return self.reader.read(name, rows, dtype)
        total = self.shape(name)[0]
        lo, hi = (0, total) if rows is None else rows
        if not 0 <= lo <= hi <= total:
            raise ValueError(f"rows {lo}:{hi} of tensor {name!r} lie outside its {total} rows (stored transposed)")
        return self.reader.read_columns(name, (lo, hi), dtype).T.contiguous()  # (hi - lo, in)

    def read_elements(self, name: str, start: int, stop: int) -> torch.Tensor:
        return self.reader.read_elements(name, start, stop)
