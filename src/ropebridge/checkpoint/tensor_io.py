"""Checkpoint I/O that never holds a whole model: safetensors read by byte range, written by stream.

Reading parses the safetensors header (8-byte little-endian length, JSON, raw little-endian data)
and reads the bytes of one tensor, or of a block of its rows, with ``os.pread``: no memory map, so
the resident set stays at what is being transformed. PyTorch ``.bin`` checkpoints load with
``weights_only=True`` (and a memory map). Writing lays out each shard's header first and streams the
tensors' bytes after it, so a tensor larger than a shard (a big embedding) is written block by block.
"""

from __future__ import annotations

import json
import mmap
import os
import queue
import struct
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from .weight_files import check_index, load_bin, weight_files

ST_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}
ST_NAMES = {v: k for k, v in ST_DTYPES.items()}


@dataclass(frozen=True)
class TensorInfo:
    file: Path
    dtype: torch.dtype
    shape: tuple[int, ...]
    begin: int  # absolute byte offset in the file
    end: int


def _read_header(path: Path) -> dict[str, TensorInfo]:
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path} is not a safetensors file (truncated header)")
        (n,) = struct.unpack("<Q", raw)
        size = path.stat().st_size
        if n > size - 8:
            raise ValueError(f"{path} is not a safetensors file (header length {n} beyond the file)")
        try:
            header = json.loads(f.read(n))
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise ValueError(f"{path} is not a safetensors file (corrupt header)") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path} is not a safetensors file (its header is a {type(header).__name__}, not an object)")
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(meta, dict):
            raise ValueError(f"{path}: header entry {name!r} is {meta!r}, not an object with dtype, shape and "
                             "data_offsets")
        if meta.get("dtype") not in ST_DTYPES:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {meta.get('dtype')!r}")
        offsets, shape = meta.get("data_offsets"), meta.get("shape")
        if not (isinstance(offsets, list) and len(offsets) == 2
                and all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
                and 0 <= offsets[0] <= offsets[1]):
            raise ValueError(f"{path}: tensor {name} has data offsets {offsets!r} (two byte offsets, begin <= end)")
        if not (isinstance(shape, list)
                and all(isinstance(k, int) and not isinstance(k, bool) and k >= 0 for k in shape)):
            raise ValueError(f"{path}: tensor {name} has shape {shape!r} (a list of sizes)")
        begin, end = offsets
        if 8 + n + end > size:
            raise ValueError(f"{path} is truncated: tensor {name} ends beyond the file")
        dtype, shape = ST_DTYPES[meta["dtype"]], tuple(shape)
        need = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
        if end - begin != need:
            raise ValueError(f"{path}: tensor {name} has {end - begin} bytes, its shape {list(shape)} and dtype "
                             f"{meta['dtype']} need {need}")
        out[name] = TensorInfo(path, dtype, shape, 8 + n + begin, 8 + n + end)
    spans = sorted((t.begin, t.end, name) for name, t in out.items())
    for (_, end, first), (begin, _, second) in zip(spans, spans[1:]):
        if begin < end:
            raise ValueError(f"{path}: tensors {first} and {second} overlap in the file (corrupt header)")
    return out


class CheckpointReader:
    """Tensors of a checkpoint directory (safetensors, sharded or not; or PyTorch .bin), read on demand."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self._infos: dict[str, TensorInfo] = {}
        self._bin: dict[str, torch.Tensor] = {}
        self._maps: dict[Path, mmap.mmap] = {}  # the files ``mapped`` has mapped, kept while the reader lives
        self.files, index = weight_files(self.directory)  # the files the tensors are read from (one, or an index's)
        stored: dict[str, list[str]] = {}  # tensor name -> the files that store it
        for f in self.files:
            if f.suffix == ".safetensors":
                infos = _read_header(f)
                self._infos.update(infos)
            else:
                infos = load_bin(f)
                self._bin.update(infos)
            for name in infos:
                stored.setdefault(name, []).append(f.name)
        if index is not None:
            check_index(*index, stored)

    def names(self) -> list[str]:
        return sorted([*self._infos, *self._bin])

    def __contains__(self, name: str) -> bool:
        return name in self._infos or name in self._bin

    def shape(self, name: str) -> tuple[int, ...]:
        return self._infos[name].shape if name in self._infos else tuple(self._bin[name].shape)

    def dtype(self, name: str) -> torch.dtype:
        return self._infos[name].dtype if name in self._infos else self._bin[name].dtype

    def read_elements(self, name: str, start: int, stop: int) -> torch.Tensor:
        """Elements ``[start, stop)`` of tensor ``name`` flattened, ``(stop - start,)``, in its stored dtype, as
        stored (no finiteness check: a comparison judges them)."""
        if name in self._bin:
            return self._bin[name].reshape(-1)[start:stop].clone()
        info = self._infos[name]
        size = torch.empty((), dtype=info.dtype).element_size()
        begin, end = info.begin + start * size, info.begin + stop * size
        if not (info.begin <= begin <= end <= info.end):
            raise ValueError(f"elements {start}:{stop} of tensor {name!r} lie outside it")
        return self._pread(info.file, begin, end, name).view(info.dtype)

    @staticmethod
    def _pread(file: Path, begin: int, end: int, name: str) -> torch.Tensor:
        """Bytes ``[begin, end)`` of ``file`` as a uint8 tensor ``(end - begin,)`` (``os.preadv`` into memory that is
        not zeroed first: no memory map)."""
        fd = os.open(file, os.O_RDONLY)
        try:
            data = torch.empty(end - begin, dtype=torch.uint8)
            view, got = memoryview(data.numpy()), 0
            while got < len(data):
                n = os.preadv(fd, [view[got:]], begin + got)
                if n == 0:
                    raise ValueError(f"{file} is truncated while reading {name}")
                got += n
        finally:
            os.close(fd)
        return data

    def mapped(self, name: str) -> torch.Tensor:
        """Tensor ``name`` as stored (its dtype and shape), read-only, as a view onto a memory map of its file: its
        pages are the file's (shared with the page cache, reclaimable), not memory of this process's own; a
        ``.bin`` checkpoint's tensor as loaded, and one whose offset is not a multiple of its element size
        (never written so by safetensors) as a copy. Nothing is checked for finiteness."""
        if name not in self:
            raise ValueError(f"tensor {name!r} is missing from the checkpoint in {self.directory}")
        if name in self._bin:
            return self._bin[name]
        info = self._infos[name]
        size = torch.empty((), dtype=info.dtype).element_size()
        if info.begin % size:
            return self._pread(info.file, info.begin, info.end, name).view(info.dtype).reshape(info.shape)
        if info.file not in self._maps:
            with open(info.file, "rb") as f:
                self._maps[info.file] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        count = (info.end - info.begin) // size
        with warnings.catch_warnings():  # read-only by design: nothing writes into a weight
            warnings.filterwarnings("ignore", message="The given buffer is not writable")
            flat = torch.frombuffer(self._maps[info.file], dtype=info.dtype, count=count, offset=info.begin)
        return flat.reshape(info.shape)

    def read(self, name: str, rows: tuple[int, int] | None = None, dtype: torch.dtype = torch.float64, *,
             finite: bool = True) -> torch.Tensor:
        """Tensor ``name`` (or rows ``[start, stop)`` of its first dim) in ``dtype`` (float64 by default);
        ``ValueError`` where it holds NaN or inf, unless ``finite`` is False (a model run as stored, judged after)."""
        if name not in self:
            raise ValueError(f"tensor {name!r} is missing from the checkpoint in {self.directory}")
        full = self.shape(name)
        if rows is not None and not (0 <= rows[0] <= rows[1] <= (full[0] if full else 0)):
            raise ValueError(f"rows {rows[0]}:{rows[1]} of tensor {name!r} lie outside its {list(full)}")
        if name in self._bin:
            t = self._bin[name]
            stored = t if rows is None else t[rows[0]: rows[1]]
            return _finite_cast(name, stored, dtype) if finite else stored.to(dtype)
        info = self._infos[name]
        shape, begin, end = list(info.shape), info.begin, info.end
        if rows is not None:
            row_bytes = (end - begin) // max(shape[0], 1)
            begin, end = begin + rows[0] * row_bytes, begin + rows[1] * row_bytes
            shape[0] = rows[1] - rows[0]
        stored = self._pread(info.file, begin, end, name).view(info.dtype).reshape(shape)
        return _finite_cast(name, stored, dtype) if finite else stored.to(dtype)

    def read_columns(self, name: str, cols: tuple[int, int], dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """Columns ``[start, stop)`` of the 2-D tensor ``name`` ``(rows, stop - start)`` in ``dtype``: one read of
        each row's span (a file opened once), so memory holds those columns only."""
        full = self.shape(name)
        if len(full) != 2 or not 0 <= cols[0] <= cols[1] <= full[1]:
            raise ValueError(f"columns {cols[0]}:{cols[1]} of tensor {name!r} lie outside its {list(full)}")
        if name in self._bin or cols == (0, full[1]):
            return self.read(name, dtype=dtype)[:, cols[0]: cols[1]].contiguous()
        info = self._infos[name]
        size = torch.empty((), dtype=info.dtype).element_size()
        width = (cols[1] - cols[0]) * size
        data = bytearray(full[0] * width)
        view = memoryview(data)
        fd = os.open(info.file, os.O_RDONLY)
        try:
            for r in range(full[0]):
                begin = info.begin + (r * full[1] + cols[0]) * size
                if os.preadv(fd, [view[r * width: (r + 1) * width]], begin) != width:
                    raise ValueError(f"{info.file} is truncated while reading {name}")
        finally:
            os.close(fd)
        out = torch.frombuffer(data, dtype=info.dtype).reshape(full[0], cols[1] - cols[0]) if data else \
            torch.empty(full[0], 0, dtype=info.dtype)
        return _finite_cast(name, out, dtype)


def _finite_cast(name: str, stored: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``stored`` cast to ``dtype``, ``ValueError`` naming the tensor where it holds NaN or inf: checked on the
    stored values where the cast cannot overflow (``dtype`` holds every finite value of the stored one), which is
    fewer bytes than the cast's, else on the cast."""
    both_float = stored.is_floating_point() and dtype.is_floating_point
    if both_float and torch.finfo(dtype).max >= torch.finfo(stored.dtype).max:
        return _finite(name, stored).to(dtype)
    return _finite(name, stored.to(dtype))


def _finite(name: str, t: torch.Tensor) -> torch.Tensor:
    """``t``, or ``ValueError`` naming the tensor when it holds NaN or inf (a conversion would copy them)."""
    if t.is_floating_point() and t.numel() and not bool(torch.isfinite(torch.stack(torch.aminmax(t))).all()):
        # the least and the largest: NaN propagates to both, an infinity is one of them (one vectorised pass)
        bad = int((~torch.isfinite(t)).sum())
        raise ValueError(f"tensor {name!r} holds {bad} non-finite value(s) (NaN or inf): refusing to convert it")
    return t


Producer = Callable[[], Iterator[torch.Tensor]]  # yields blocks of rows, in order

# Working-set budget of one block: a large matrix is read, transformed and written this many bytes of
# float64 at a time (at least one row, or one head for the fused QKV), so peak memory is a few blocks, not a
# tensor. Read at call time, so tests can force tiny blocks.
BLOCK_BYTES = 32 << 20


def rows_per_block(row_bytes: int) -> int:
    """How many rows of ``row_bytes`` (float64 working bytes) fit ``BLOCK_BYTES``: at least one."""
    return max(1, BLOCK_BYTES // max(row_bytes, 1))


def single(fn: Callable[[], torch.Tensor]) -> Producer:
    """A producer of one block: the whole tensor, computed when written."""
    return lambda: iter([fn()])


def row_blocks(fn: Callable[[int, int], torch.Tensor], n_rows: int, row_bytes: int) -> Producer:
    """A producer of ``fn(start, stop)`` for consecutive row blocks of ``rows_per_block(row_bytes)`` rows, the
    block size chosen when the tensor is written (bounds the memory of big tensors)."""

    def gen() -> Iterator[torch.Tensor]:
        block = rows_per_block(row_bytes)
        for start in range(0, n_rows, block):
            yield fn(start, min(n_rows, start + block))

    return gen


@dataclass
class _Pending:
    name: str
    shape: tuple[int, ...]
    producer: Producer


class ShardWriter:
    """Writes named tensors into ``model-0000i-of-0000n.safetensors`` shards of at most ``max_shard_bytes``
    (a single larger tensor gets a shard of its own) plus ``model.safetensors.index.json``.

    Tensors are described first (name, shape, a producer yielding row blocks in the output dtype), so each
    shard's header can be written before its data, then streamed.
    """

    def __init__(self, dtype: torch.dtype, max_shard_bytes: int):
        self.dtype, self.max_shard_bytes = dtype, max_shard_bytes
        self.itemsize = torch.empty((), dtype=dtype).element_size()
        self.pending: list[_Pending] = []
        self.largest_block = 0  # bytes of the largest block produced, in the dtype it was produced in

    def add(self, name: str, shape: tuple[int, ...], producer: Producer) -> None:
        self.pending.append(_Pending(name, tuple(shape), producer))

    def nbytes(self, p: _Pending) -> int:
        n = self.itemsize
        for s in p.shape:
            n *= s
        return n

    def total_bytes(self) -> int:
        return sum(self.nbytes(p) for p in self.pending)

    def blocks(self, p: _Pending) -> Iterator[torch.Tensor]:
        """Tensor ``p``'s values as written: its producer's blocks cast once to the output dtype, flattened
        ``(n,)`` and contiguous, in order; ``ValueError`` naming the tensor where the cast overflows."""
        for block in p.producer():
            self.largest_block = max(self.largest_block, block.nbytes)
            out = block.to(self.dtype)
            if not bool(torch.isfinite(out).all()):  # the source is finite (read): the cast overflowed
                raise ValueError(f"tensor {p.name} overflows {str(self.dtype)[6:]} (largest |value| "
                                 f"{float(block.abs().max()):.4g}); convert to another --dtype")
            yield out.contiguous().reshape(-1)

    def _groups(self) -> list[list[_Pending]]:
        groups: list[list[_Pending]] = [[]]
        size = 0
        for p in self.pending:
            if groups[-1] and size + self.nbytes(p) > self.max_shard_bytes:
                groups.append([])
                size = 0
            groups[-1].append(p)
            size += self.nbytes(p)
        return [g for g in groups if g]

    def write(self, directory: Path, metadata: dict[str, str] | None = None, progress=None) -> list[Path]:
        """Every described tensor into shards in ``directory``, then the index; ``progress`` (a bar) is told each
        block's bytes as they are written. The shards' paths."""
        directory = Path(directory)
        groups = self._groups()
        weight_map, paths = {}, []
        for k, group in enumerate(groups, 1):
            name = f"model-{k:05d}-of-{len(groups):05d}.safetensors"
            self._write_shard(directory / name, group, metadata or {}, progress)
            paths.append(directory / name)
            weight_map.update({p.name: name for p in group})
        index = {"metadata": {"total_size": self.total_bytes()}, "weight_map": weight_map}
        (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=1))
        return paths

    def _write_shard(self, path: Path, group: list[_Pending], metadata: dict[str, str], progress) -> None:
        header, offset = {"__metadata__": {"format": "pt", **metadata}}, 0
        for p in group:
            header[p.name] = {"dtype": ST_NAMES[self.dtype], "shape": list(p.shape),
                              "data_offsets": [offset, offset + self.nbytes(p)]}
            offset += self.nbytes(p)
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)  # keep the data 8-byte aligned
        # A worker thread computes the next blocks while this one writes (torch and file I/O release the GIL);
        # the queue holds at most two blocks, so memory stays bounded.
        blocks: queue.Queue = queue.Queue(maxsize=2)
        stop = threading.Event()

        def produce() -> None:
            try:
                for p in group:
                    for out in self.blocks(p):
                        if stop.is_set():
                            return
                        data = out.view(torch.uint8).numpy()  # bf16 too
                        blocks.put((p, data))
                    blocks.put((p, None))
            except BaseException as exc:  # handed to the writing thread
                blocks.put((None, exc))

        worker = threading.Thread(target=produce, daemon=True)
        worker.start()
        try:
            with open(path, "wb") as f:
                f.write(struct.pack("<Q", len(raw)))
                f.write(raw)
                written: dict[str, int] = {}
                done = 0
                while done < len(group):
                    p, data = blocks.get()
                    if p is None:
                        raise data
                    if data is None:
                        if written.get(p.name, 0) != self.nbytes(p):
                            raise RuntimeError(f"tensor {p.name}: wrote {written.get(p.name, 0)} bytes, "
                                               f"expected {self.nbytes(p)}")
                        done += 1
                        continue
                    f.write(data.data)  # the block's own buffer, no copy
                    written[p.name] = written.get(p.name, 0) + data.nbytes
                    if progress is not None:
                        progress.update(data.nbytes)
        finally:
            stop.set()
            while worker.is_alive():  # unblock a producer waiting on a full queue
                try:
                    blocks.get_nowait()
                except queue.Empty:
                    pass
                worker.join(timeout=0.05)
