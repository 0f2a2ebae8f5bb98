"""A transformers causal LM run with its weights on disk: each weight is read when an operation uses it, released
after.

``ReadOnUseModel(directory, dtype)`` builds the model transformers' ``AutoModelForCausalLM`` builds from
``config.json``, every parameter a ``_Unread`` tensor of its shape, dtype and device that holds no storage: any
operation given one reads that tensor from the checkpoint, cast once to ``dtype`` exactly as ``from_pretrained``
casts it, runs on it and lets it go. The model computes what ``from_pretrained``'s model computes, with the same
modules and the same weights, whichever module's code touches a weight (a parent slicing its child's, as BLOOM's
``slow_but_exact`` does, included); memory holds one tensor's weights at a time, the largest matrix of a layer
rather than the layer (inside ``resident``, every weight read is kept: greedy generation where the budget holds
the model). Two modules are replaced by equivalents that never hold a whole vocabulary: the input
embedding gathers only the rows of the ids it is given, and the output head (``head_rows``) is read a block of
vocabulary rows at a time.

Checkpoint keys are matched to parameters as transformers matches them: the name itself, or with the base
model's prefix added or stripped; a tied head reads the tensor it is tied to.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_map

from ..checkpoint.config import load_config
from ..checkpoint.tensor_io import CheckpointReader


class _Unread(torch.Tensor):
    """A parameter not in memory: its shape, dtype and device, no storage, and ``load()`` that reads it (or gives
    the copy ``ReadOnUseModel.resident`` keeps). Every
    operation on it (``__torch_dispatch__``) runs on the tensor read, which is then released: its result is a
    plain tensor."""

    @staticmethod
    def __new__(cls, shape: torch.Size, dtype: torch.dtype, device: torch.device, load: Callable[[], torch.Tensor]):
        t = torch.Tensor._make_wrapper_subclass(cls, shape, dtype=dtype, device=device, requires_grad=False)
        t.load = load
        return t

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        read = lambda a: a.load() if isinstance(a, _Unread) else a  # noqa: E731
        return func(*tree_map(read, args), **tree_map(read, kwargs or {}))

    def __repr__(self) -> str:
        return f"_Unread({list(self.shape)}, {self.dtype})"


def warm_threads() -> None:
    """One cosine before a model runs. In torch 2.13 on CPU, a process's first sin or cos over a tensor large enough
    to be split between threads may compute the worker thread's part on a less accurate path (cos(x) off by 3.4e-6
    for x <= 2^-12, where float32's cosine is 1; by 1.5e-4 at x ~ 8000), and a float32 conversion's exact pair
    turns an error e in cos(theta i) into N e sin(theta j) ~ m sqrt(hd') e j logits: the Falcon-RW demo's first
    forward at 8K then measured 5.5e-3 from exact instead of 4.4e-4, and in bfloat16 (a ladder's entries moved by
    an ulp) moved by up to 0.98 logits (``benchmarks/first_call_sincos.py``). A cosine of one element, computed on
    this thread first, leaves no first call to race (0 of 32 processes, sin and cos, against 1 to 5 of 16
    without). docs/convert.md gives users this line."""
    torch.cos(torch.ones(1))


@contextmanager
def _parameters_on_meta() -> Iterator[None]:
    """Every parameter registered inside on the meta device (no memory, no initialisation); buffers stay real."""
    original = torch.nn.Module.register_parameter

    def register(module, name, param):
        if param is not None and param.device.type != "meta":
            param = torch.nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        original(module, name, param)

    torch.nn.Module.register_parameter = register
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = original


def _meta_model(config, dtype: torch.dtype, attn_implementation: str | None = None) -> torch.nn.Module:
    """transformers' causal LM of ``config`` (a ``PretrainedConfig``) in ``dtype``, every parameter on the meta
    device (nothing allocated or initialised), its weights tied as ``from_pretrained`` ties them, in eval mode."""
    from transformers import AutoModelForCausalLM
    from transformers.initialization import no_init_weights

    with _parameters_on_meta(), no_init_weights():
        extra = {} if attn_implementation is None else {"attn_implementation": attn_implementation}
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, **extra)
    model.tie_weights()  # as from_pretrained ties them (config.tie_word_embeddings)
    return model.eval()


def largest_weight_bytes(config: Mapping[str, Any], dtype: torch.dtype) -> int:
    """The bytes in ``dtype`` of the largest weight a ``ReadOnUseModel`` of a model with ``config`` (config.json's
    object) reads whole (``ReadOnUseModel.tensor_bytes``): every parameter but the input and output embeddings,
    which are read by rows. From the shapes the config implies; nothing is read."""
    from transformers import AutoConfig

    model = _meta_model(AutoConfig.for_model(**copy.deepcopy(dict(config))), dtype)  # transformers edits nested dicts
    by_rows = {id(model.get_input_embeddings().weight), id(model.get_output_embeddings().weight)}
    size = torch.empty((), dtype=dtype).element_size()
    return max((p.numel() for p in model.parameters() if id(p) not in by_rows), default=0) * size


class _GatherEmbedding(torch.nn.Module):
    """The input embedding ``(V, D)`` as a lookup of the ids' rows only, read from the checkpoint per call."""

    def __init__(self, reader: CheckpointReader, key: str, dtype: torch.dtype, device: torch.device):
        super().__init__()
        self.reader, self.key, self.dtype, self.device = reader, key, dtype, device
        self.num_embeddings, self.embedding_dim = reader.shape(key)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:  # (b, s) -> (b, s, D)
        unique, inverse = torch.unique(ids.cpu(), return_inverse=True)
        rows = torch.stack([self.reader.read(self.key, (int(r), int(r) + 1), self.dtype,
                                             finite=False)[0] for r in unique])
        return rows[inverse].to(self.device)


class _BlockedHead(torch.nn.Module):
    """The output head ``F.linear(h, W, b)`` over the vocabulary a block of rows at a time (``head_rows``), the
    blocks concatenated: what ``generate`` calls on the last position."""

    def __init__(self, owner: ReadOnUseModel):
        super().__init__()
        self.owner = owner

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:  # (b, s, D) -> (b, s, V)
        return torch.cat([self.owner.logits_block(hidden, a, b) for a, b in self.owner.vocab_blocks(hidden)], -1)


class ReadOnUseModel:
    """A checkpoint directory as transformers' causal LM with its weights read as they are used (module doc).

    ``model``: the transformers module (call it, ``generate`` with it); ``hidden(ids, mask)``: the final hidden
    states ``(b, s, D)``; ``logits_block(hidden, a, b)``: the logits of vocabulary rows ``[a, b)``;
    ``largest_read_bytes``: the most bytes of one weight read so far outside ``resident`` (what is held at once);
    ``loads``: weights read so far; ``tensor_bytes``, ``layer_bytes`` and ``weight_bytes``: the bytes of the largest
    weight, of the largest decoder layer and of every weight ``resident`` keeps (the head's included) in ``dtype``,
    from the shapes (nothing read); ``on_layer()`` is called after each decoder layer runs (progress);
    ``attn_implementation`` as ``from_pretrained``'s; ``device``: where it runs (each weight read on the CPU,
    moved)."""

    def __init__(self, directory: str | Path, dtype: torch.dtype, *, block_bytes: int = 64 << 20,
                 on_layer: Callable[[], None] | None = None, attn_implementation: str | None = None,
                 device: str | torch.device = "cpu"):
        from transformers import AutoConfig

        self.directory, self.dtype, self.block_bytes = Path(directory), dtype, block_bytes
        self.device = torch.device(device)
        load_config(self.directory)  # one line for a config that is not JSON
        warm_threads()
        self.model = _meta_model(AutoConfig.from_pretrained(self.directory), dtype, attn_implementation)
        for module in self.model.modules():  # the buffers built from the config (rotary frequencies) where it runs
            for name, buffer in list(module._buffers.items()):
                if buffer is not None:
                    module._buffers[name] = buffer.to(self.device)
        self.reader = CheckpointReader(self.directory)
        keys = self._placeholders(self._keys())
        head, emb = self.model.get_output_embeddings(), self.model.get_input_embeddings()
        self.head_key = keys[id(head.weight)]
        self.head_bias_key = keys.get(id(head.bias)) if getattr(head, "bias", None) is not None else None
        self.vocab_size = self.reader.shape(self.head_key)[0]
        self.model.set_input_embeddings(_GatherEmbedding(self.reader, keys[id(emb.weight)], dtype, self.device))
        self.model.set_output_embeddings(_BlockedHead(self))
        self.loads, self.largest_read_bytes, self.on_layer = 0, 0, on_layer
        sizes = {id(p): p.numel() * p.element_size() for p in self.model.parameters()}
        self.tensor_bytes = max(sizes.values(), default=0)  # the embedding and the head are read by rows
        head_rows, width = self.reader.shape(self.head_key)
        self.weight_bytes = sum(sizes.values()) + head_rows * width * torch.empty((), dtype=dtype).element_size()
        self._kept: dict[str, torch.Tensor] | None = None
        self._head_rows: tuple[tuple[int, int] | None, tuple | None] = (None, None)
        self.layer_bytes = 0
        for layer in self._layers():
            self.layer_bytes = max(self.layer_bytes, sum(sizes[id(p)] for p in layer.parameters()))
            if on_layer is not None:
                layer.register_forward_hook(lambda mod, args, out: self.on_layer())

    # -- construction -------------------------------------------------------------------------------------------
    def _keys(self) -> dict[int, str]:
        """Each parameter (by identity, so tied ones share) -> the checkpoint key it is read from, renamed as
        ``from_pretrained`` renames keys (its ``WeightRenaming``s, the base model's prefix added or stripped), its shape
        checked; ``ValueError`` naming a parameter the checkpoint lacks or stores in another shape, or a model whose
        loading fuses or splits tensors (a ``WeightConverter``: not read tensor by tensor)."""
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightRenaming, rename_source_key

        mapping = get_model_conversion_mapping(self.model)
        if not all(isinstance(m, WeightRenaming) for m in mapping):
            raise ValueError(f"{self.directory}: transformers converts this model's tensors on load; verify reads "
                             "tensor by tensor")
        meta = self.model.state_dict()
        prefix = getattr(self.model, "base_model_prefix", None)
        found: dict[str, str] = {}
        for original in self.reader.names():
            renamed, _ = rename_source_key(original, mapping, [], prefix, meta)
            if renamed not in meta and original in meta:
                renamed, _ = rename_source_key(original, [], [], prefix, meta)
            found.setdefault(renamed, original)
        keys: dict[int, str] = {}
        for name, p in self.model.named_parameters(remove_duplicate=False):
            key = found.get(name)
            if key is None:
                if id(p) in keys:  # tied: read what it is tied to
                    continue
                raise ValueError(f"{self.directory}: tensor {name!r} is missing from the checkpoint")
            if tuple(self.reader.shape(key)) != tuple(p.shape):
                raise ValueError(f"{self.directory}: tensor {key!r} has shape {list(self.reader.shape(key))}, the "
                                 f"config implies {list(p.shape)}")
            keys.setdefault(id(p), key)
        return keys

    def _placeholders(self, keys: dict[int, str]) -> dict[int, str]:
        """Every meta parameter replaced by an ``_Unread`` that reads its key (tied ones by one shared); returns
        ``keys`` re-indexed by their identities."""
        metas, unread = {}, {}
        for module in self.model.modules():
            for name, p in list(module._parameters.items()):
                if p is not None:
                    metas[id(p)] = p  # alive until the end, so identities stay unique
                    module._parameters[name] = unread.setdefault(id(p), _Unread(  # every one has a key: _keys
                        p.shape, self.dtype, self.device, lambda key=keys[id(p)]: self._read(key)))
        return {id(unread[i]): key for i, key in keys.items()}

    def _layers(self) -> list[torch.nn.Module]:
        """The elements of the model's outermost ``ModuleList``s: its decoder layers."""
        layers: list[torch.nn.Module] = []

        def walk(module: torch.nn.Module) -> None:
            if isinstance(module, torch.nn.ModuleList):
                layers.extend(module)
                return
            for child in module.children():
                walk(child)

        walk(self.model)
        return layers

    def _read(self, key: str, rows: tuple[int, int] | None = None) -> torch.Tensor:
        """Weight ``key`` (or its ``rows``) as stored, cast once to the model's dtype, on its device (judged after,
        so not refused where non-finite). While ``resident``: on the CPU, from the memory map of its file (the
        stored bytes themselves where the dtype is the model's, else a cast of one weight, released after);
        elsewhere, kept whole on the device and sliced."""
        if self._kept is not None and self.device.type == "cpu":
            t = self.reader.mapped(key)
            t = t if rows is None else t[rows[0]: rows[1]]
            self.loads += 1
            if t.dtype != self.dtype:
                t = t.to(self.dtype)
                self.largest_read_bytes = max(self.largest_read_bytes, t.nbytes)
            return t
        if self._kept is not None:
            if key not in self._kept:
                self._kept[key] = self.reader.read(key, dtype=self.dtype, finite=False).to(self.device)
                self.loads += 1
            t = self._kept[key]
            return t if rows is None else t[rows[0]: rows[1]]
        t = self.reader.read(key, rows, dtype=self.dtype, finite=False).to(self.device)
        self.loads += 1
        self.largest_read_bytes = max(self.largest_read_bytes, t.nbytes)
        return t

    @property
    def resident_bytes(self) -> int:
        """The memory of this process's own that ``resident`` holds: none on the CPU (the files' memory maps, shared
        with the page cache and reclaimable), ``weight_bytes`` on another device (every weight kept there)."""
        return 0 if self.device.type == "cpu" else self.weight_bytes

    @contextmanager
    def resident(self) -> Iterator[None]:
        """Weights not read again for every use: for greedy generation, which would read every weight once per
        token. On the CPU each is used from its file's memory map (``CheckpointReader.mapped``: no copy where the
        stored dtype is the model's, one weight's cast at a time where not), so what is held stays one weight,
        whatever the depth; on another device every weight read is kept there until the end (the head's whole),
        where the budget holds ``resident_bytes`` more."""
        self._kept, self._head_rows = {}, (None, None)
        try:
            yield
        finally:
            self._kept, self._head_rows = None, (None, None)  # the last head rows are views of what was kept

    # -- outputs ------------------------------------------------------------------------------------------------
    def vocab_blocks(self, hidden: torch.Tensor) -> list[tuple[int, int]]:
        """Row ranges of the vocabulary such that one block's logits for ``hidden`` ``(b, s, D)`` stay within
        ``block_bytes`` in float64."""
        per_row = max(1, hidden.shape[:-1].numel()) * 8 + hidden.shape[-1] * 8
        rows = max(1, self.block_bytes // per_row)
        return [(a, min(self.vocab_size, a + rows)) for a in range(0, self.vocab_size, rows)]

    @property
    def head_width(self) -> int:
        """The output head's columns: the width of the hidden states it reads."""
        return self.reader.shape(self.head_key)[1]

    def logits_block(self, hidden: torch.Tensor, a: int, b: int) -> torch.Tensor:
        """Logits of vocabulary rows ``[a, b)`` for ``hidden`` ``(b, s, D)``: ``(b, s, b - a)`` in the model's dtype,
        as transformers' head computes them; the rows read are kept until other rows are asked for (the sides of
        one model read them once per block)."""
        if self._head_rows[0] != (a, b):
            self._head_rows = ((a, b), None)  # the previous rows released before these are read
            w = self._read(self.head_key, (a, b))
            bias = None if self.head_bias_key is None else self._read(self.head_bias_key, (a, b))
            self._head_rows = ((a, b), (w, bias))
        w, bias = self._head_rows[1]
        return torch.nn.functional.linear(hidden, w, bias)

    @torch.no_grad()
    def hidden(self, ids: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The final hidden states ``(b, s, D)`` (after the final norm) of ``ids`` ``(b, s)``, in the model's dtype."""
        base = self.model.get_decoder() if hasattr(self.model, "get_decoder") else self.model.base_model
        return base(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
