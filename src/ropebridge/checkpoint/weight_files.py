"""Which files a checkpoint directory's tensors are read from, as engines read them: one weights file, or an
index and the shards it names, each tensor stored once, in the shard the index names for it (transformers and
vLLM load every tensor of the shards an index names; a reader of the folder's files loads unnamed shards too:
any layout where those readings differ is refused). PyTorch ``.bin`` files load with ``weights_only=True``."""

from __future__ import annotations

import json
import re
import warnings
import zipfile
from pathlib import Path

import torch


def weight_files(d: Path) -> tuple[list[Path], tuple[str, dict[str, str]] | None]:
    """The weight files, and the index's name and weight map where there is one: its shards must be every
    file of its kind in the directory (a shard it does not name, which a reader of the folder's files may
    load and a reader of the index skips, is refused)."""
    for index_name, suffix in (("model.safetensors.index.json", ".safetensors"),
                              ("pytorch_model.bin.index.json", ".bin")):
        index = d / index_name
        if index.is_file():
            try:
                data = json.loads(index.read_text())
            except (json.JSONDecodeError, UnicodeDecodeError):
                raise ValueError(f"{index} is not a valid checkpoint index (not JSON)") from None
            weight_map = data.get("weight_map") if isinstance(data, dict) else None
            if not isinstance(weight_map, dict) or not all(
                    isinstance(v, str) and v and "/" not in v and v not in (".", "..") for v in weight_map.values()):
                raise ValueError(f"{index} is not a valid checkpoint index (an object whose weight_map maps "
                                 "tensor names to file names)")
            single = d / ("model.safetensors" if suffix == ".safetensors" else "pytorch_model.bin")
            if single.is_file() and single.name not in weight_map.values():
                raise ValueError(f"{d} holds both {index_name} and {single.name}: transformers loads one, ropebridge "
                                 "would read the other; remove the one that is stale")
            files = sorted({d / name for name in weight_map.values()})
            missing = [f.name for f in files if not f.is_file()]
            if missing:
                raise FileNotFoundError(f"shard {missing[0]} listed in {index_name} is missing from {d}")
            unnamed = sorted(p.name for p in d.glob("*" + suffix) if p.is_file() and p.name not in weight_map.values())
            if unnamed:
                raise ValueError(f"{d} holds {unnamed[0]}, a shard {index_name} does not name: a reader of the "
                                 "index skips it, a reader of the folder's files loads it; remove it or name it")
            return files, (index_name, weight_map)
    for single in ("model.safetensors", "pytorch_model.bin"):
        if (d / single).is_file():
            return [d / single], None
    raise FileNotFoundError(f"no model.safetensors or pytorch_model.bin (or index) in {d}")


def load_bin(f: Path) -> dict[str, torch.Tensor]:
    """A PyTorch ``.bin`` state dict, loaded with ``weights_only=True`` (a memory map where the file is a zip
    archive; a legacy pre-1.6 file, which transformers loads, is read whole). A pickle that asks for anything
    but tensors is refused in one line naming what it asked for; torch's own warnings are not printed."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.load(f, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(f))
    except Exception as exc:  # torch raises many types for a damaged archive
        found = re.search(r"GLOBAL (\S+)", str(exc))
        if found:
            raise ValueError(f"{f.name} is a pickle that asks for {found.group(1)}, which is not a tensor: ropebridge "
                             "loads .bin files with weights_only=True and runs no code from them; save the weights "
                             "as safetensors from a copy you trust") from None
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"cannot read {f.name} (weights_only=True): {first}") from None


def check_index(index_name: str, weight_map: dict[str, str], stored: dict[str, list[str]]) -> None:
    """Every tensor stored once, in the shard the index names for it, and every index entry stored there: an
    engine loads what the index names, another every tensor of every shard, so any other layout is two models.
    ``ValueError`` naming the tensor and the shards."""
    for name, files in sorted(stored.items()):
        if len(files) > 1:
            raise ValueError(f"tensor {name!r} is stored in both {files[0]} and {files[1]}: readers may load either "
                             f"({index_name} names {weight_map.get(name, 'neither')}); keep one copy")
        if weight_map.get(name) != files[0]:
            named = f"names {weight_map[name]} for it" if name in weight_map else "does not list it"
            raise ValueError(f"tensor {name!r} is stored in {files[0]}, but {index_name} {named}")
    for name, shard in sorted(weight_map.items()):
        if name not in stored:
            raise ValueError(f"{index_name} names {shard} for tensor {name!r}, which {shard} lacks")
