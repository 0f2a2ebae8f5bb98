"""Pico checkpoints of every ALiBi family, built locally (config -> random weights -> save_pretrained)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch
import transformers as T

T.logging.set_verbosity_error()
T.utils.logging.disable_progress_bar()

FAMILIES = {
    "bloom-4heads": lambda: T.BloomConfig(n_layer=2, hidden_size=128, n_head=4, vocab_size=320),
    "bloom-12heads": lambda: T.BloomConfig(n_layer=2, hidden_size=144, n_head=12, vocab_size=320),
    "bloom-hd96": lambda: T.BloomConfig(n_layer=2, hidden_size=192, n_head=2, vocab_size=320),
    "mpt": lambda: T.MptConfig(n_layers=2, d_model=120, n_heads=6, vocab_size=320),
    "falcon-rw": lambda: T.FalconConfig(num_hidden_layers=2, hidden_size=144, num_attention_heads=12, vocab_size=320,
                                        alibi=True, new_decoder_architecture=False, multi_query=False,
                                        parallel_attn=False, bias=True),
    "falcon-parallel-mq": lambda: T.FalconConfig(num_hidden_layers=2, hidden_size=96, num_attention_heads=6,
                                                 vocab_size=320, alibi=True, new_decoder_architecture=False,
                                                 multi_query=True, parallel_attn=True, bias=False),
}


def build(directory: Path, family: str, *, seed: int = 0, safe_serialization: bool = True, std: float = 0.2,
          **overrides) -> Path:
    """Save a random pico model of ``family``; weights are drawn wider than the default init (``std``) so that
    attention is sharp and logits are O(1-10), which makes the comparisons demanding."""
    config = FAMILIES[family]()
    for k, v in overrides.items():
        setattr(config, k, v)
    torch.manual_seed(seed)
    model = T.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
            else:
                p.normal_(0.0, std)
    model.save_pretrained(directory)
    if not safe_serialization:  # transformers 5 always writes safetensors: make the legacy PyTorch file by hand
        torch.save({k: v.contiguous() for k, v in model.state_dict().items()}, Path(directory) / "pytorch_model.bin")
        (Path(directory) / "model.safetensors").unlink()
    return Path(directory)


def tree_hash(directory: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(directory.rglob("*")):
        h.update(str(p.relative_to(directory)).encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()
