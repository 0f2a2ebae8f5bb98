"""A transformers causal LM run with its weights on disk: each block is read just before it runs, released after.

``LayeredModel(directory, dtype)`` builds the model transformers' ``AutoModelForCausalLM`` builds from
``config.json``, every parameter a placeholder of its shape and dtype (one element of storage), and attaches a
forward pre-hook to each *unit* (each element of a ``ModuleList``: the decoder layers; and every other module that
holds parameters of its own: final norm, BLOOM's embedding LayerNorm) that reads the unit's tensors from the
checkpoint, cast once to ``dtype`` exactly as ``from_pretrained`` casts them, and a post-hook that puts the
placeholders back. The model computes what ``from_pretrained``'s model computes, with the same modules and the same
weights; memory holds one unit's weights at a time. Two units are replaced by equivalents that never hold a whole
vocabulary: the input embedding gathers only the rows of the ids it is given, and the output head
(``head_rows``) is read a block of vocabulary rows at a time.

Checkpoint keys are matched to parameters as transformers matches them: the name itself, or with the base
model's prefix added or stripped; a tied head reads the tensor it is tied to.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from ..checkpoint.config import load_config
from ..checkpoint.tensor_io import CheckpointReader


def _placeholder(shape: torch.Size, dtype: torch.dtype, device: torch.device) -> torch.nn.Parameter:
    """A parameter of ``shape`` and ``dtype`` on ``device`` backed by one element (an expanded zero)."""
    return torch.nn.Parameter(torch.zeros((), dtype=dtype, device=device).expand(shape), requires_grad=False)


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


class _GatherEmbedding(torch.nn.Module):
    """The input embedding ``(V, D)`` as a lookup of the ids' rows only, read from the checkpoint per call."""

    def __init__(self, reader: CheckpointReader, key: str, dtype: torch.dtype, device: torch.device):
        super().__init__()
        self.reader, self.key, self.dtype, self.device = reader, key, dtype, device
        self.num_embeddings, self.embedding_dim = reader.shape(key)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:  # (b, s) -> (b, s, D)
        unique, inverse = torch.unique(ids.cpu(), return_inverse=True)
        rows = torch.stack([self.reader.read(self.key, (int(r), int(r) + 1), self.dtype, finite=False)[0] for r in unique])
        return rows[inverse].to(self.device)


class _BlockedHead(torch.nn.Module):
    """The output head ``F.linear(h, W, b)`` over the vocabulary a block of rows at a time (``head_rows``), the
    blocks concatenated: what ``generate`` calls on the last position."""

    def __init__(self, owner: LayeredModel):
        super().__init__()
        self.owner = owner

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:  # (b, s, D) -> (b, s, V)
        return torch.cat([self.owner.logits_block(hidden, a, b) for a, b in self.owner.vocab_blocks(hidden)], -1)


class LayeredModel:
    """A checkpoint directory as transformers' causal LM with its weights read unit by unit (module doc).

    ``model``: the transformers module (call it, ``generate`` with it); ``hidden(ids, mask)``: the final hidden
    states ``(b, s, D)``; ``logits_block(hidden, a, b)``: the logits of vocabulary rows ``[a, b)``;
    ``largest_unit_bytes``: the most bytes of weights held at once; ``loads``: units read so far; ``on_layer()`` is
    called after each decoder layer runs (progress); ``attn_implementation`` as ``from_pretrained``'s; ``device``:
    where each unit runs (its weights read on the CPU, moved once)."""

    def __init__(self, directory: str | Path, dtype: torch.dtype, *, block_bytes: int = 64 << 20,
                 on_layer: Callable[[], None] | None = None, attn_implementation: str | None = None,
                 device: str | torch.device = "cpu"):
        from transformers import AutoConfig, AutoModelForCausalLM
        from transformers.initialization import no_init_weights

        self.directory, self.dtype, self.block_bytes = Path(directory), dtype, block_bytes
        self.device = torch.device(device)
        load_config(self.directory)  # one line for a config that is not JSON
        config = AutoConfig.from_pretrained(self.directory)
        with _parameters_on_meta(), no_init_weights():
            extra = {} if attn_implementation is None else {"attn_implementation": attn_implementation}
            model = AutoModelForCausalLM.from_config(config, dtype=dtype, **extra)
        model.tie_weights()  # as from_pretrained ties them (config.tie_word_embeddings)
        self.model = model.eval()
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
        self.loads, self.largest_unit_bytes, self.on_layer = 0, 0, on_layer
        self.unit_bytes = 0  # the most bytes one unit's weights take, from the shapes (nothing read)
        for unit, layer in self._units():
            params = [(m, n, keys[id(p)]) for m, n, p in self._own(unit)]
            self.unit_bytes = max(self.unit_bytes, sum(p.numel() * p.element_size() for _, _, p in self._own(unit)))
            unit.register_forward_pre_hook(lambda mod, args, ps=params: self._load(ps))
            unit.register_forward_hook(lambda mod, args, out, ps=params, layer=layer: self._release(ps, layer))

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
        """Every meta parameter replaced by a placeholder (tied ones by one shared placeholder); returns ``keys``
        re-indexed by the placeholders' identities."""
        metas, placeholders = {}, {}
        for module in self.model.modules():
            for name, p in list(module._parameters.items()):
                if p is not None:
                    metas[id(p)] = p  # alive until the end, so identities stay unique
                    module._parameters[name] = placeholders.setdefault(id(p), _placeholder(p.shape, self.dtype,
                                                                                          self.device))
        return {id(placeholders[i]): key for i, key in keys.items()}

    def _units(self) -> list[tuple[torch.nn.Module, bool]]:
        """Each element of a ``ModuleList`` (a decoder layer: True) and every other module with parameters of its own
        (module doc)."""
        units: list[tuple[torch.nn.Module, bool]] = []

        def walk(module: torch.nn.Module) -> None:
            if isinstance(module, (_GatherEmbedding, _BlockedHead)):
                return
            if isinstance(module, torch.nn.ModuleList):
                units.extend((m, True) for m in module)
                return
            if any(p is not None for p in module._parameters.values()):
                units.append((module, False))
                return
            for child in module.children():
                walk(child)

        walk(self.model)
        return units

    @staticmethod
    def _own(unit: torch.nn.Module) -> list[tuple[torch.nn.Module, str, torch.nn.Parameter]]:
        return [(m, n, p) for m in unit.modules() for n, p in m._parameters.items() if p is not None]

    # -- the hooks ----------------------------------------------------------------------------------------------
    def _load(self, params) -> None:
        held = 0
        for module, name, key in params:
            t = self.reader.read(key, dtype=self.dtype, finite=False).to(self.device)  # as stored: judged after
            module._parameters[name] = torch.nn.Parameter(t, requires_grad=False)
            held += t.nbytes
        self.loads += 1
        self.largest_unit_bytes = max(self.largest_unit_bytes, held)

    def _release(self, params, layer: bool) -> None:
        for module, name, _ in params:
            p = module._parameters[name]
            module._parameters[name] = _placeholder(p.shape, self.dtype, self.device)
        if layer and self.on_layer is not None:
            self.on_layer()

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
        as transformers' head computes them."""
        w = self.reader.read(self.head_key, (a, b), self.dtype, finite=False).to(self.device)
        bias = None if self.head_bias_key is None else self.reader.read(self.head_bias_key, (a, b), self.dtype,
                                                                        finite=False).to(self.device)
        return torch.nn.functional.linear(hidden, w, bias)

    @torch.no_grad()
    def hidden(self, ids: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The final hidden states ``(b, s, D)`` (after the final norm) of ``ids`` ``(b, s)``, in the model's dtype."""
        base = self.model.get_decoder() if hasattr(self.model, "get_decoder") else self.model.base_model
        return base(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
