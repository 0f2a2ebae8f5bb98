"""Source adapters: an ALiBi checkpoint of any family of ``checkpoint.families.FAMILIES`` as one canonical pre-norm
transformer.

Canonical block (float64 tensors), with x the residual stream (D), N a LayerNorm or an RMSNorm
(``SourceInfo.norm``) and the MLP plain, down(act(up x)), or gated, down(act(gate x) * up x):

    a = attention(N1(x)),  m = MLP(N2(x or, parallel, the same N1 output))
    sequential: x <- x + a; x <- x + MLP(N2(x))      parallel: x <- x + a + MLP(N1(x))
    attention logits per head = qk_scale * q.k - slope * (i - j), causal

Per-family facts: each family's module in ``checkpoint.families`` (its docstring says how the canonical model
reads it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from .config import SourceInfo, declared_biases, family_slopes, from_config, load_config
from .families import FOREIGN_TENSORS
from .tensor_io import CheckpointReader
from .views import TransposedReader, ViewReader, stored_rows


@dataclass
class Layer:
    """One block's weights in float64. Shapes: q/k/v_w ``(h, hd, D)``, q/k/v_b ``(h, hd)``, o_w ``(D, h*hd)``,
    up_w ``(F, D)``, down_w ``(D, F)``; LayerNorm weights ``(D,)``; ``ln2`` is None when parallel."""

    ln1: tuple[torch.Tensor, torch.Tensor]
    ln2: tuple[torch.Tensor, torch.Tensor] | None
    q_w: torch.Tensor
    q_b: torch.Tensor
    k_w: torch.Tensor
    k_b: torch.Tensor
    v_w: torch.Tensor
    v_b: torch.Tensor
    o_w: torch.Tensor
    o_b: torch.Tensor
    up_w: torch.Tensor
    up_b: torch.Tensor
    down_w: torch.Tensor
    down_b: torch.Tensor
    gate_w: torch.Tensor | None = None  # (F, D): a gated MLP's gate (``SourceInfo.gated``), else None
    gate_b: torch.Tensor | None = None


def qkv_rows(info: SourceInfo) -> int:
    """The fused QKV's row count a config implies: (h + 2 kv) hd: 3 h hd, or (h + 2) hd for a multi-query Falcon."""
    return (info.n_heads + 2 * info.kv_heads) * info.head_dim


def expected_shapes(info: SourceInfo) -> dict[str, tuple[tuple[int, ...], bool]]:
    """Every tensor the converter reads from a checkpoint of ``info``: name -> (shape the config implies,
    required). Biases and the untied output head are optional; a fused QKV may also have Falcon's multi-query
    rows (h + 2) hd."""
    d, f, v, hd_all = info.hidden_size, info.intermediate_size, info.vocab_size, info.n_heads * info.head_dim
    g = info.family_row.globals
    out: dict[str, tuple[tuple[int, ...], bool]] = {g["emb"]: ((v, d), True), g["head"]: ((v, d), False),
                                                     g["ln_f"] + ".weight": ((d,), True),
                                                    g["ln_f"] + ".bias": ((d,), False)}
    if info.family_row.slopes_tensor:
        out[info.family_row.slopes_tensor] = ((info.n_heads, 1), False)
    if info.family_row.embedding_norm:
        out[info.family_row.embedding_norm + ".weight"] = ((d,), True)
        out[info.family_row.embedding_norm + ".bias"] = ((d,), False)
    for i in range(info.n_layers):
        n = info.family_row.tensor_names(i)
        norms = ("ln1",) if info.parallel else ("ln1", "ln2")
        out.update({n[k] + ".weight": ((d,), True) for k in norms})
        out.update({n[k] + ".bias": ((d,), False) for k in norms})
        linears = {"qkv": (qkv_rows(info), d), "o": (d, hd_all), "up": (f, d), "down": (d, f)}
        if info.gated:
            linears["gate"] = (f, d)
        for key, (rows, cols) in linears.items():
            out[n[key] + ".weight"] = ((rows, cols), True)
            out[n[key] + ".bias"] = ((rows,), False)
        if info.family_row.views is not None:  # the stored tensors a family's fused canonical ones are read from
            views = info.family_row.views(info, i)
            cols = {s.name: out[canonical][0][1:] for canonical, segs in views.items() for s in segs}
            for canonical in views:
                del out[canonical], out[canonical.removesuffix(".weight") + ".bias"]
            for name, rows in stored_rows(views).items():
                out[name] = ((rows, *cols[name]), True)
                out[name.removesuffix(".weight") + ".bias"] = ((rows,), False)
    return out


def transposed_names(info: SourceInfo) -> list[str]:
    """The block weights a family stores input x output (``Family.transposed``: GPT-2's Conv1D), else none."""
    if not info.family_row.transposed:
        return []
    linears = ("qkv", "o", "up", "down") + (("gate",) if info.gated else ())
    return [info.family_row.tensor_names(i)[k] + ".weight" for i in range(info.n_layers) for k in linears]


def stored_shapes(info: SourceInfo) -> dict[str, tuple[tuple[int, ...], bool]]:
    """``expected_shapes`` as the checkpoint stores them: a transposed family's block weights input x output."""
    flip = set(transposed_names(info))
    return {n: (tuple(reversed(s)) if n in flip else s, required) for n, (s, required) in expected_shapes(info).items()}


def _zeros_if_missing(reader: CheckpointReader, name: str, shape: tuple[int, ...]) -> torch.Tensor:
    return reader.read(name) if name in reader else torch.zeros(shape, dtype=torch.float64)


class SourceModel:
    """A checkpoint directory read tensor by tensor as the canonical transformer (see the module doc)."""

    def __init__(self, directory, config: Mapping[str, Any] | None = None):
        """``directory``'s tensors as the canonical transformer of its config (read here unless given: a command
        that has read it passes it on); every tensor's shape is checked before any byte is read."""
        self.config = load_config(directory) if config is None else config
        self.info = from_config(self.config)  # family, geometry, slopes; refuses non-ALiBi models and variants
        if not self.info.n_layers or not self.info.vocab_size:
            raise ValueError(f"the {self.info.family} config lacks the layer count or vocab_size")
        self.reader = CheckpointReader(directory)
        if self.info.family_row.transposed:  # GPT-2's Conv1D: block weights stored input x output
            self.reader = TransposedReader(self.reader, transposed_names(self.info))
        if self.info.family_row.views is not None:  # its fused tensors, read as the canonical ones
            views = self.info.family_row.views
            self.reader = ViewReader(self.reader, {k: v for i in range(self.info.n_layers)
                                                   for k, v in views(self.info, i).items()})
        self._check_shapes()
        self._check_biases()
        for name, why in self.info.family_row.refused_tensors.items():
            if name in self.reader:
                raise ValueError(f"tensor {name!r} is {why}: this {self.info.family} model has no stock RoPE form")
        self._check_variant()
        self._take_stored_slopes()

    def _check_variant(self) -> None:
        """Refuse a source whose tensors belong to another variant of its family (``families.FOREIGN_TENSORS``)
        while its config says ALiBi: the one line names the tensor and the config key."""
        key = self.info.family_row.alibi_key
        value: Any = self.config
        for part in key.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        for name in self.reader.names():
            what = next((w for end, w in FOREIGN_TENSORS.items() if name.endswith(end)), None)
            if what is not None:
                raise ValueError(f"tensor {name!r} is {what}, but config {key} = {value!r} makes this "
                                 f"{self.info.family} source an ALiBi model: it contradicts itself; fix the config "
                                 "or the checkpoint")

    def _take_stored_slopes(self) -> None:
        """The slopes a family stores (``Family.slopes_tensor``: Jais, BTLM) are what its code applies: each is checked
        against Press et al.'s formula as the family builds it (float32), rounded to the stored dtype, to within one
        unit in the last place of that dtype, and taken as stored (divided by ``alibi_factor``); a slope further off
        (trained or edited) is refused, naming the head. Absent, the formula's values stand (the code builds them)."""
        name = self.info.family_row.slopes_tensor
        if name is None or name not in self.reader:
            return
        info, dtype = self.info, self.reader.dtype(name)
        stored = self.reader.read(name).reshape(-1)  # (h,) float64
        formula = torch.tensor(family_slopes(info.family, info.n_heads, info.head_dim, info.max_bias),
                               dtype=torch.float64).to(dtype).to(torch.float64)
        off = (stored - formula).abs() > torch.finfo(dtype).eps * formula
        if bool(off.any()):
            h = int(off.nonzero()[0])
            raise ValueError(f"tensor {name!r} holds slope {float(stored[h]):.9g} for head {h}, where ALiBi's formula "
                             f"gives {float(formula[h]):.9g} in {str(dtype)[6:]}: trained or edited slopes are not "
                             "this family's ALiBi; refusing to convert")
        self.info = dataclasses.replace(info, slopes=tuple((stored / info.alibi_factor).tolist()))

    def _names(self, i: int) -> dict[str, str]:
        return self.info.family_row.tensor_names(i)

    def _global_names(self) -> Mapping[str, str]:
        return self.info.family_row.globals

    def expected_shapes(self) -> dict[str, tuple[tuple[int, ...], bool]]:
        """``expected_shapes`` of this checkpoint's config."""
        return expected_shapes(self.info)

    def linears(self) -> tuple[str, ...]:
        """The names of a block's linear layers: qkv, o, up, down, and gate where the MLP is gated."""
        return ("qkv", "o", "up", "down") + (("gate",) if self.info.gated else ())

    def _check_shapes(self) -> None:
        """Every tensor's shape and dtype against ``expected_shapes`` before any byte is read: a missing tensor,
        an integer dtype or another shape names the tensor, what was found and what was expected."""
        for name, (shape, required) in self.expected_shapes().items():
            if name not in self.reader:
                if required:
                    raise ValueError(f"tensor {name!r} is missing: the checkpoint does not match its "
                                     f"{self.info.family} config")
                continue
            if not self.reader.dtype(name).is_floating_point:
                raise ValueError(f"tensor {name!r} has dtype {str(self.reader.dtype(name))[6:]}; a weight is "
                                 "floating point")
            found = tuple(self.reader.shape(name))
            if found != shape:
                stored = " (read transposed, as GPT-2's Conv1D stores it)" if tuple(found) != tuple(
                    self.reader.reader.shape(name) if isinstance(self.reader, TransposedReader) else found) else ""
                raise ValueError(f"tensor {name!r} has shape {list(found)}{stored}, the {self.info.family} config "
                                 f"implies {list(shape)} (hidden {self.info.hidden_size}, {self.info.n_heads} heads of "
                                 f"{self.info.head_dim}, vocabulary {self.info.vocab_size})")

    def _check_biases(self) -> None:
        """Refuse a checkpoint whose biases disagree with its config: the family builds the biases its config
        declares (``config.declared_biases``) and ignores the others, so a bias tensor the config does not declare,
        or a declared linear bias missing, would make the family's code and this reader two different models."""
        key, declared, norms = declared_biases(self.info.family, self.config)
        names = [self._names(i)[k] + ".bias" for i in range(self.info.n_layers) for k in self.linears()]
        covered = [n for n in self.expected_shapes() if n.endswith(".bias")] if norms else names
        present = [n for n in covered if n in self.reader]
        if not declared and present:
            declares = (f"config {key} = {self.config.get(key)!r} declares none" if key else
                        f"the {self.info.family} family has none")
            raise ValueError(f"tensor {present[0]!r} is a bias, but {declares}: the family's code ignores it and "
                             "ropebridge would read it; fix the config or the checkpoint")
        missing = [n for n in names if n not in self.reader]
        if declared and key and missing:
            raise ValueError(f"config {key} = {self.config.get(key)!r} declares linear biases, but tensor "
                             f"{missing[0]!r} is missing: transformers would initialise it and ropebridge would read "
                             "zeros")

    # -- canonical access ---------------------------------------------------------------------------------------
    def _ln(self, prefix: str) -> tuple[torch.Tensor, torch.Tensor]:
        w = self.reader.read(prefix + ".weight")
        return w, _zeros_if_missing(self.reader, prefix + ".bias", w.shape)

    def embedding_rows(self, start: int, stop: int) -> torch.Tensor:
        """Input embedding rows ``(rows, D)``, BLOOM's embedding LayerNorm folded in, times ``info.embedding_scale``
        (muP; 1 for most families), float64."""
        return self._embedded(self.reader.read(self._global_names()["emb"], (start, stop)))

    def embedding_of(self, ids: torch.Tensor) -> torch.Tensor:
        """The embedding ``(…, D)`` of token ids ``(…)``, as ``embedding_rows``, reading only the rows of the ids."""
        unique, inverse = torch.unique(ids, return_inverse=True)
        name = self._global_names()["emb"]
        rows = torch.cat([self.reader.read(name, (int(r), int(r) + 1)) for r in unique])  # (u, D) float64
        return self._embedded(rows)[inverse]

    def _embedded(self, rows: torch.Tensor) -> torch.Tensor:
        if self.info.family_row.embedding_norm:
            w, b = self._ln(self.info.family_row.embedding_norm)
            rows = torch.nn.functional.layer_norm(rows, (rows.shape[-1],), w, b, self.info.eps)  # float64
        return rows * self.info.embedding_scale if self.info.embedding_scale != 1 else rows

    def head_rows(self, start: int, stop: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """Output head rows ``(rows, D)``: ``lm_head`` if stored, else the tied (raw) embedding; with
        ``info.head_norm`` each row divided by its length (max(|w|, 1e-12), ``torch.nn.functional.normalize``'s), and
        times ``info.logit_scale`` (muP's output scale, which multiplies the logits), in float64 and cast once."""
        g, scale = self._global_names(), self.info.logit_scale
        name = g["head"] if g["head"] in self.reader else g["emb"]
        if not self.info.head_norm and scale == 1:
            return self.reader.read(name, (start, stop), dtype)
        rows = self.reader.read(name, (start, stop))  # float64
        if self.info.head_norm:
            rows = torch.nn.functional.normalize(rows, dim=-1)
        return (rows * scale if scale != 1 else rows).to(dtype)

    def final_norm(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._ln(self._global_names()["ln_f"])

    def norm(self, i: int, which: str) -> tuple[torch.Tensor, torch.Tensor]:
        """LayerNorm ``which`` ('ln1' or 'ln2') of block i: weight and bias ``(D,)``."""
        return self._ln(self._names(i)[which])

    def qkv_part(self, i: int, part: int, heads: tuple[int, int] | None = None, suffix: str = ".weight",
                 dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """Block i's q (part 0), k (1) or v (2) weight ``(n, hd, D)`` (or, with ``suffix=".bias"``, bias
        ``(n, hd)``) for heads ``[a, b)`` (all by default), in ``dtype``, reading only those heads' rows."""
        info, name = self.info, self._names(i)["qkv"]
        h, hd, d = info.n_heads, info.head_dim, info.hidden_size
        a, b = heads or (0, h)
        rest = (d,) if suffix == ".weight" else ()
        total = self.reader.shape(name + ".weight")[0]

        def rows(start: int, stop: int) -> torch.Tensor:  # (stop - start, *rest)
            if name + suffix in self.reader:
                return self.reader.read(name + suffix, (start, stop), dtype)
            return torch.zeros(stop - start, *rest, dtype=dtype)

        if total == 3 * h * hd and info.family_row.qkv_layout == "blocks":  # [Q | K | V]
            return rows((part * h + a) * hd, (part * h + b) * hd).view(b - a, hd, *rest)
        if total == 3 * h * hd:  # per head (h, 3, hd): one read per head
            return torch.stack([rows((3 * j + part) * hd, (3 * j + part + 1) * hd) for j in range(a, b)])
        if total == (h + 2) * hd and info.family_row.qkv_layout in ("per-head-or-multi-query",
                                                                    "multi-query"):  # h q, 1 k, 1 v
            if part == 0:
                return rows(a * hd, b * hd).view(b - a, hd, *rest)
            one = h + part - 1
            return rows(one * hd, (one + 1) * hd).view(1, hd, *rest).expand(b - a, hd, *rest)  # replicated (exact)
        raise ValueError(f"{name}.weight has {total} rows; expected {3 * h * hd}"
                         + (f" or {(h + 2) * hd}" if "multi-query" in info.family_row.qkv_layout else ""))

    def qkv(self, i: int) -> tuple[torch.Tensor, ...]:
        """Block i's (q_w, k_w, v_w) ``(h, hd, D)`` and (q_b, k_b, v_b) ``(h, hd)``, float64."""
        return (*(self.qkv_part(i, p) for p in range(3)), *(self.qkv_part(i, p, suffix=".bias") for p in range(3)))

    def weight(self, i: int, which: str, dtype: torch.dtype = torch.float64,
               rows: tuple[int, int] | None = None) -> torch.Tensor:
        """Block i's linear ``which`` ('o', 'up', 'down' or 'gate'): weight ``(out, in)``, or its rows ``[a, b)``, in
        ``dtype`` (float64 by default; float32 holds any float32/bf16/fp16 source exactly)."""
        return self.reader.read(self._names(i)[which] + ".weight", rows, dtype)

    def weight_shape(self, i: int, which: str) -> tuple[int, int]:
        """The shape ``(out, in)`` of block i's linear ``which``, from the header (nothing read)."""
        return tuple(self.reader.shape(self._names(i)[which] + ".weight"))

    def bias(self, i: int, which: str, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """The bias ``(out,)`` of block i's linear ``which``, zeros if it has none."""
        name = self._names(i)[which]
        if name + ".bias" in self.reader:
            return self.reader.read(name + ".bias", dtype=dtype)
        return torch.zeros(self.reader.shape(name + ".weight")[0], dtype=dtype)

    def linear(self, i: int, which: str, dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
        """``weight`` and ``bias`` of block i's linear ``which``."""
        return self.weight(i, which, dtype), self.bias(i, which, dtype)

    def layer(self, i: int) -> Layer:
        """All of block i (for references and tests; the converter reads tensor by tensor)."""
        qw, kw, vw, qb, kb, vb = self.qkv(i)
        (o_w, o_b), (up_w, up_b), (down_w, down_b) = (self.linear(i, w) for w in ("o", "up", "down"))
        gate = self.linear(i, "gate") if self.info.gated else (None, None)
        return Layer(self.norm(i, "ln1"), None if self.info.parallel else self.norm(i, "ln2"),
                     qw, qb, kw, kb, vw, vb, o_w, o_b, up_w, up_b, down_w, down_b, *gate)
