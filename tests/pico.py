"""Pico checkpoints of every ALiBi family, built locally (config -> random weights -> save_pretrained)."""

from __future__ import annotations

import hashlib
import json
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
    # transformers' own departures from the family (convert.native): BLOOM's slice-by-slice dense drops its bias,
    # MPT builds no bias at all (the tensors are added by ``build``)
    "bloom-tp2": lambda: T.BloomConfig(n_layer=2, hidden_size=128, n_head=4, vocab_size=320, pretraining_tp=2,
                                       slow_but_exact=True),
    "mpt-biases": lambda: T.MptConfig(n_layers=2, d_model=120, n_heads=6, vocab_size=320, no_bias=False),
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
    if family == "mpt-biases":
        _add_mpt_biases(model, Path(directory), std)
    if not safe_serialization:  # transformers 5 always writes safetensors: make the legacy PyTorch file by hand
        torch.save({k: v.contiguous() for k, v in model.state_dict().items()}, Path(directory) / "pytorch_model.bin")
        (Path(directory) / "model.safetensors").unlink()
    return Path(directory)


def _add_mpt_biases(model, directory: Path, std: float) -> None:
    """Store a random bias for every block Linear and LayerNorm and the final norm of an MPT (``no_bias: false``,
    as the family defines it), which transformers' MPT does not build."""
    from safetensors.torch import load_file, save_file

    path = directory / "model.safetensors"
    tensors = load_file(path)
    for name, module in model.named_modules():
        if isinstance(module, (torch.nn.Linear, torch.nn.LayerNorm)) and name.startswith("transformer."):
            tensors[name + ".bias"] = std * torch.randn(module.weight.shape[0])
    save_file(tensors, path, metadata={"format": "pt"})


# Remote-code families (no transformers class): config.json and their tensors in the real layout, written directly.
REMOTE = {
    # Baichuan-13B's config keys (configuration_baichuan.py), 6 heads of 16 (not a power of two)
    "baichuan": dict(hidden_size=96, num_attention_heads=6, num_hidden_layers=2, intermediate_size=160,
                     vocab_size=320),
    # Baichuan2-13B: its vocabulary of 125696 makes the output head a NormHead
    "baichuan2": dict(hidden_size=32, num_attention_heads=4, num_hidden_layers=2, intermediate_size=64,
                      vocab_size=125696),
    # Refact-1.6B's config keys (configuration_gpt_refact.py), 6 heads of 16: its MLP is 256 wide (2/3 of 4D)
    "refact": dict(n_embd=96, n_head=6, n_layer=2, vocab_size=320),
    # Replit-code-v1-3b's first config (replit_lm, MosaicGPT's keys at the top level), 6 heads of 20
    "replit": dict(d_model=120, n_heads=6, n_layers=2, vocab_size=320),
    # Jais-13B's config keys (embeddings_scale, width_scale, scale_qk_dot_by_d), 6 heads of 16, the head tied
    "jais": dict(n_embd=96, n_head=6, n_layer=2, n_inner=160, vocab_size=320, embeddings_scale=14.6,
                 width_scale=0.111, scale_qk_dot_by_d=True),
    # BTLM-3B-8K's and Jais-30B's spelling (mup_*), 4 heads of 24, an untied head
    "btlm": dict(n_embd=96, n_head=4, n_layer=2, n_inner=192, vocab_size=320, mup_embeddings_scale=14.6,
                 mup_output_alpha=2.22, mup_width_scale=0.1, mup_scale_qk_dot_by_d=True, tie_word_embeddings=False),
}


def _baichuan(shape: dict, normal, norm) -> tuple[dict, dict]:
    config = {"architectures": ["BaichuanForCausalLM"], "model_type": "baichuan", "hidden_act": "silu",
              "rms_norm_eps": 1e-6, "model_max_length": 4096, "tie_word_embeddings": False, "pad_token_id": 0,
              "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32", **shape}
    d, f, v = shape["hidden_size"], shape["intermediate_size"], shape["vocab_size"]
    tensors = {"model.embed_tokens.weight": normal(v, d), "model.norm.weight": norm(d), "lm_head.weight": normal(v, d)}
    for i in range(shape["num_hidden_layers"]):
        p = f"model.layers.{i}."
        tensors.update({p + "input_layernorm.weight": norm(d), p + "post_attention_layernorm.weight": norm(d),
                        p + "self_attn.W_pack.weight": normal(3 * d, d), p + "self_attn.o_proj.weight": normal(d, d),
                        p + "mlp.gate_proj.weight": normal(f, d), p + "mlp.up_proj.weight": normal(f, d),
                        p + "mlp.down_proj.weight": normal(d, f)})
    return config, tensors


def _replit(shape: dict, normal, norm) -> tuple[dict, dict]:
    config = {"architectures": ["ReplitLM"], "model_type": "replit_lm", "alibi": True, "alibi_bias_max": 8,
              "attn_clip_qkv": None, "attn_impl": "triton", "attn_qk_ln": False, "attn_uses_sequence_id": False,
              "emb_pdrop": 0, "embedding_fraction": 1.0, "logit_scale": None, "low_precision_layernorm": True,
              "max_seq_len": 2048, "mlp_ratio": 4, "no_bias": True, "prefix_lm": False, "softmax_scale": None,
              "use_cache": False, "torch_dtype": "float32", **shape}
    d, v = shape["d_model"], shape["vocab_size"]
    f = config["mlp_ratio"] * d
    tensors = {"transformer.wte.weight": normal(v, d), "transformer.ln_f.weight": norm(d)}
    for i in range(shape["n_layers"]):
        p = f"transformer.blocks.{i}."
        tensors.update({p + "ln_1.weight": norm(d), p + "ln_2.weight": norm(d),
                        p + "attn.Wqkv.weight": normal(3 * d, d),
                        p + "attn.out_proj.weight": normal(d, d), p + "mlp.mlp_up.weight": normal(f, d),
                        p + "mlp.mlp_down.weight": normal(d, f)})
    return config, tensors


def _refact(shape: dict, normal, norm) -> tuple[dict, dict]:
    config = {"architectures": ["GPTRefactForCausalLM"], "model_type": "gpt_refact", "multi_query": True,
              "n_positions": 4096, "n_inner": None, "layer_norm_epsilon": 1e-5, "attention_softmax_in_fp32": True,
              "scale_attention_softmax_in_fp32": True, "attention_bias_in_fp32": True, "use_cache": True,
              "eos_token_id": 0, "torch_dtype": "float32", **shape}
    d, v, hd = shape["n_embd"], shape["vocab_size"], shape["n_embd"] // shape["n_head"]
    f = 256 * ((int(2 * 4 * d / 3) + 255) // 256)
    tensors = {"transformer.wte.weight": normal(v, d), "ln_f.weight": norm(d)}
    if not shape.get("tie_word_embeddings"):
        tensors["lm_head.weight"] = normal(v, d)
    for i in range(shape["n_layer"]):
        p = f"transformer.h.{i}."
        tensors.update({p + "ln_1.weight": norm(d), p + "ln_2.weight": norm(d), p + "attn.q.weight": normal(d, d),
                        p + "attn.kv.weight": normal(2 * hd, d), p + "attn.c_proj.weight": normal(d, d),
                        p + "mlp.gate_up_proj.weight": normal(2 * f, d), p + "mlp.c_proj.weight": normal(d, f)})
    return config, tensors


def _jais(shape: dict, normal, norm) -> tuple[dict, dict]:
    from tests.oracles import press_reference

    model_type = "btlm" if "mup_width_scale" in shape else "jais"
    config = {"architectures": ["BTLMLMHeadModel" if model_type == "btlm" else "JAISLMHeadModel"],
              "model_type": model_type, "position_embedding_type": "alibi", "activation_function": "swiglu",
              "layer_norm_epsilon": 1e-5, "n_positions": 2048, "scale_attn_weights": True,
              "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False, "use_cache": True,
              "bos_token_id": 0, "eos_token_id": 0, "torch_dtype": "float32", **shape}
    d, f, v, n = shape["n_embd"], shape["n_inner"], shape["vocab_size"], shape["n_head"]

    def ln(prefix: str) -> dict:
        return {prefix + ".weight": norm(d), prefix + ".bias": normal(d) / 2}

    # Conv1D: every block weight stored input x output; relative_pe.slopes as its torch.tensor builds them
    tensors = {"transformer.wte.weight": normal(v, d), **ln("transformer.ln_f"),
               "transformer.relative_pe.slopes": torch.tensor(press_reference(n)).unsqueeze(-1)}
    if not shape.get("tie_word_embeddings", True):
        tensors["lm_head.weight"] = normal(v, d)
    for i in range(shape["n_layer"]):
        p = f"transformer.h.{i}."
        tensors.update({**ln(p + "ln_1"), **ln(p + "ln_2"),
                        p + "attn.c_attn.weight": normal(d, 3 * d), p + "attn.c_attn.bias": normal(3 * d),
                        p + "attn.c_proj.weight": normal(d, d), p + "attn.c_proj.bias": normal(d),
                        p + "mlp.c_fc.weight": normal(d, f), p + "mlp.c_fc.bias": normal(f),
                        p + "mlp.c_fc2.weight": normal(d, f), p + "mlp.c_fc2.bias": normal(f),
                        p + "mlp.c_proj.weight": normal(f, d), p + "mlp.c_proj.bias": normal(d)})
    return config, tensors


def build_remote(directory: Path, family: str, *, seed: int = 0, std: float = 0.2, **overrides) -> Path:
    """Save a random pico of a remote-code family (``REMOTE``): its config.json and model.safetensors with the
    tensor names and shapes of the published modeling code (Baichuan: ``model.layers.i.self_attn.W_pack`` as
    [Q | K | V], RMSNorm weights, gate/up/down, an untied ``lm_head``; Replit (``replit_lm``): MosaicGPT's
    ``ln_1``, ``attn.Wqkv`` [Q | K | V], ``mlp.mlp_up``, LayerNorm weights without bias, the head tied; Refact:
    ``attn.q``, ``attn.kv`` (one k head, then one v), ``mlp.gate_up_proj`` (gate first), LayerNorm weights without bias,
    ``lm_head`` unless ``tie_word_embeddings``; Jais and BTLM: GPT-2's ``transformer.h.i`` with every block weight
    stored input x output
(``Conv1D``), ``attn.c_attn`` [Q | K | V], ``mlp.c_fc``, ``mlp.c_fc2``, ``mlp.c_proj``, biases everywhere,
``transformer.relative_pe.slopes``, ``lm_head`` unless tied). Norm weights are 1 + 0.1 N(0, 1), the rest N(0, std).
Overrides change config keys (``tie_word_embeddings`` false adds an ``lm_head``)."""
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(seed)

    def normal(*size: int) -> torch.Tensor:
        return std * torch.randn(*size, generator=g)

    def norm(d: int) -> torch.Tensor:
        return 1 + 0.1 * torch.randn(d, generator=g)

    layout = {"refact": _refact, "replit": _replit, "jais": _jais, "btlm": _jais}.get(family, _baichuan)
    config, tensors = layout({**REMOTE[family], **overrides}, normal, norm)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})
    return directory


def shard(directory: Path, parts: int = 2) -> dict[str, str]:
    """Split ``directory``'s model.safetensors into ``parts`` shards and an index, as save_pretrained lays out a
    large checkpoint; returns the index's weight map (tensor name -> shard file)."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(directory / "model.safetensors")
    (directory / "model.safetensors").unlink()
    names = sorted(tensors)
    weight_map = {}
    for k in range(parts):
        file = f"model-{k + 1:05d}-of-{parts:05d}.safetensors"
        group = names[k * len(names) // parts: (k + 1) * len(names) // parts]
        save_file({n: tensors[n] for n in group}, directory / file, metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(group, file))
    write_index(directory, weight_map)
    return weight_map


def write_index(directory: Path, weight_map: dict[str, str]) -> None:
    (directory / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def tree_hash(directory: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(directory.rglob("*")):
        h.update(str(p.relative_to(directory)).encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()
