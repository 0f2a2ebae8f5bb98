"""Train the small ALiBi model that ships with ropebridge (``ropebridge demo``). Not run in CI.

    python scripts/train_demo_model.py [--steps 900] [--out src/ropebridge/data/demo]

Corpus: the Python 3.11 documentation sources (reStructuredText, ``html/_sources``) from Debian's
``python3.11-doc`` package, fetched with ``apt-get download`` (no installation), licensed under the PSF
License Agreement (Python's documentation licence; text in ``CORPUS_LICENSE.txt`` beside the model).
Every 25th document (in sorted path order) is held out; a slice of the held-out text ships as
``heldout.txt`` for evaluation.

Model: transformers' ``BloomForCausalLM`` (a genuine ALiBi checkpoint): 4 layers, hidden 192, 6 heads
(head dim 32, a non-power-of-two head count), byte-level BPE of 4096 tokens trained with ``tokenizers``,
trained at context 256 so the demo can show extrapolation to 4x that. Weights are stored in float16.
``--family mpt|falcon --tokenizer src/ropebridge/data/demo`` trains the same shape as an MPT or a Falcon-RW
(alibi) model with the demo's tokenizer, for the fidelity benchmark (``data/demo-mpt``, ``data/demo-falcon``);
``--family baichuan`` a Baichuan-13B-architecture model (``data/demo-baichuan``, MLP 512 wide), which
transformers cannot build (remote code): ``Baichuan`` below computes what its ``modeling_baichuan.py`` computes
and saves the published config keys and tensor names; ``--family jais`` likewise a Jais-architecture model
(``data/demo-jais``: ``Jais`` below, ``modeling_jais.py``'s function with its muP scales, Conv1D tensors and
stored slopes).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
HELD_OUT_EVERY = 25
# One shape for every family: 4 layers, hidden 192, 6 heads of 32. MPT's max_seq_len bounds the inputs it
# accepts (its ALiBi table is built that long), so it is set to the longest context the benchmarks use.
FAMILIES = {
    "bloom": lambda T, vocab, special: T.BloomConfig(vocab_size=vocab, hidden_size=192, n_layer=4, n_head=6,
                                                     **special),
    "mpt": lambda T, vocab, special: T.MptConfig(vocab_size=vocab, d_model=192, n_layers=4, n_heads=6,
                                                 max_seq_len=32768, **special),
    "falcon": lambda T, vocab, special: T.FalconConfig(vocab_size=vocab, hidden_size=192, num_hidden_layers=4,
                                                       num_attention_heads=6, alibi=True,
                                                       new_decoder_architecture=False, multi_query=False,
                                                       parallel_attn=False, bias=True, **special),
}
HELDOUT_CHARS = 120_000
BAICHUAN = {"architectures": ["BaichuanForCausalLM"], "model_type": "baichuan", "hidden_act": "silu",
            "hidden_size": 192, "num_attention_heads": 6, "num_hidden_layers": 4, "intermediate_size": 512,
            "rms_norm_eps": 1e-6, "initializer_range": 0.02, "model_max_length": 4096, "tie_word_embeddings": False,
            "use_cache": True, "torch_dtype": "float16"}


class _RMSNorm(torch.nn.Module):
    def __init__(self, d: int, eps: float):
        super().__init__()
        self.weight, self.eps = torch.nn.Parameter(torch.ones(d)), eps

    def forward(self, x):  # (b, s, D)
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def _interleave(n: int) -> list[float]:
    """Press et al.'s slopes as Baichuan's ``_get_interleave`` computes them (start * ratio^i, in Python floats)."""
    def power_of_2(n: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start ** i for i in range(n)]

    c = 2 ** math.floor(math.log2(n))
    return power_of_2(n) if c == n else power_of_2(c) + _interleave(2 * c)[0::2][: n - c]


class Baichuan(torch.nn.Module):
    """Baichuan-13B (``modeling_baichuan.py``), trainable: per layer RMSNorm, ``W_pack`` = [Q | K | V], scores
    q.k/sqrt(hd) + m*j (j the key position, m Press et al.'s slopes as a float32 tensor), causal softmax,
    ``o_proj``, RMSNorm, ``down(silu(gate) * up)``; a final RMSNorm and an untied ``lm_head``. Parameter names
    are the checkpoint's tensor names. ``forward(ids (b, s), labels)`` returns ``.loss`` like transformers."""

    def __init__(self, c: dict):
        super().__init__()
        nn, d, f, v = torch.nn, c["hidden_size"], c["intermediate_size"], c["vocab_size"]
        self.n = c["num_attention_heads"]
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(v, d)
        self.model.layers = nn.ModuleList()
        for _ in range(c["num_hidden_layers"]):
            layer = nn.Module()
            layer.input_layernorm, layer.post_attention_layernorm = (_RMSNorm(d, c["rms_norm_eps"]) for _ in "ab")
            layer.self_attn, layer.mlp = nn.Module(), nn.Module()
            layer.self_attn.W_pack = nn.Linear(d, 3 * d, bias=False)
            layer.self_attn.o_proj = nn.Linear(d, d, bias=False)
            layer.mlp.gate_proj, layer.mlp.up_proj = (nn.Linear(d, f, bias=False) for _ in "ab")
            layer.mlp.down_proj = nn.Linear(f, d, bias=False)
            self.model.layers.append(layer)
        self.model.norm = _RMSNorm(d, c["rms_norm_eps"])
        self.lm_head = nn.Linear(d, v, bias=False)
        for name, p in self.named_parameters():
            if not name.endswith("layernorm.weight") and name != "model.norm.weight":
                nn.init.normal_(p, std=c["initializer_range"])
        self.register_buffer("slopes", torch.tensor(_interleave(self.n), dtype=torch.float32), persistent=False)

    def forward(self, ids, labels=None):
        from types import SimpleNamespace

        b, s = ids.shape
        bias = self.slopes[:, None, None] * torch.arange(s, dtype=torch.float32)  # (n, 1, s): m * j
        bias = bias + torch.full((s, s), float("-inf")).triu(1)  # (n, s, s)
        x = self.model.embed_tokens(ids)  # (b, s, D)
        for layer in self.model.layers:
            qkv = layer.self_attn.W_pack(layer.input_layernorm(x)).view(b, s, 3, self.n, -1)  # (b, s, 3, n, hd)
            q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each (b, n, s, hd)
            ctx = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(q.dtype))
            x = x + layer.self_attn.o_proj(ctx.transpose(1, 2).reshape(b, s, -1))  # (b, s, D)
            h = layer.post_attention_layernorm(x)
            x = x + layer.mlp.down_proj(torch.nn.functional.silu(layer.mlp.gate_proj(h)) * layer.mlp.up_proj(h))
        logits = self.lm_head(self.model.norm(x))  # (b, s, V)
        loss = None if labels is None else torch.nn.functional.cross_entropy(
            logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten())
        return SimpleNamespace(loss=loss, logits=logits)

    def save_pretrained(self, out: Path) -> None:
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in self.state_dict().items()}, out / "model.safetensors",
                  metadata={"format": "pt"})
        config = {**BAICHUAN, "vocab_size": self.lm_head.out_features, **self.special,
                  "torch_dtype": str(self.lm_head.weight.dtype).removeprefix("torch.")}
        (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")


JAIS = {"architectures": ["JAISLMHeadModel"], "model_type": "jais", "position_embedding_type": "alibi",
        "activation_function": "swiglu", "n_embd": 192, "n_head": 6, "n_layer": 4, "n_inner": 512,
        "layer_norm_epsilon": 1e-5, "n_positions": 32768, "scale_attn_weights": True, "mup_embeddings_scale": 14.6,
        "mup_output_alpha": 2.22, "mup_width_scale": 0.25, "mup_scale_qk_dot_by_d": True, "alibi_scaling": None,
        "tie_word_embeddings": True, "initializer_range": 0.02, "use_cache": True, "torch_dtype": "float16"}


class _Conv1D(torch.nn.Module):
    """GPT-2's Conv1D: ``x @ weight + bias``, the weight stored input x output."""

    def __init__(self, n_in: int, n_out: int, std: float):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(n_in, n_out) * std)
        self.bias = torch.nn.Parameter(torch.zeros(n_out))

    def forward(self, x):  # (..., in) -> (..., out)
        return x @ self.weight + self.bias


class Jais(torch.nn.Module):
    """Jais (``modeling_jais.py``, the Jais family's mup_* keys), trainable: the embedding times
    ``mup_embeddings_scale``; per layer LayerNorm, ``c_attn`` = [Q | K | V], scores q.k/hd (``mup_scale_qk_dot_by_d``)
    - m|i - j| with m ``relative_pe.slopes`` (a stored, frozen parameter), causal softmax, ``c_proj``, LayerNorm,
    ``c_proj(c_fc(h) * silu(c_fc2(h)))``, every linear with a bias; a final LayerNorm and the head tied to the
    embedding, the logits times ``mup_output_alpha * mup_width_scale``. Parameter names are the checkpoint's."""

    def __init__(self, c: dict):
        super().__init__()
        nn, d, f, v, std = torch.nn, c["n_embd"], c["n_inner"], c["vocab_size"], c["initializer_range"]
        self.n, self.c = c["n_head"], c
        self.transformer = nn.Module()
        self.transformer.wte = nn.Embedding(v, d)
        nn.init.normal_(self.transformer.wte.weight, std=std)
        self.transformer.h = nn.ModuleList()
        for _ in range(c["n_layer"]):
            block = nn.Module()
            block.ln_1, block.ln_2 = (nn.LayerNorm(d, eps=c["layer_norm_epsilon"]) for _ in "ab")
            block.attn, block.mlp = nn.Module(), nn.Module()
            block.attn.c_attn, block.attn.c_proj = _Conv1D(d, 3 * d, std), _Conv1D(d, d, std)
            block.mlp.c_fc, block.mlp.c_fc2 = _Conv1D(d, f, std), _Conv1D(d, f, std)
            block.mlp.c_proj = _Conv1D(f, d, std)
            self.transformer.h.append(block)
        self.transformer.ln_f = nn.LayerNorm(d, eps=c["layer_norm_epsilon"])
        self.transformer.relative_pe = nn.Module()
        slopes = torch.tensor(_interleave(self.n)).unsqueeze(-1)  # (n, 1): as its torch.tensor builds them
        self.transformer.relative_pe.slopes = nn.Parameter(slopes, requires_grad=False)

    def forward(self, ids, labels=None):
        from types import SimpleNamespace

        b, s = ids.shape
        c, hd = self.c, self.c["n_embd"] // self.n
        pos = torch.arange(s)
        bias = -self.transformer.relative_pe.slopes[:, :, None] * (pos[None, :] - pos[:, None]).abs()  # (n, s, s)
        bias = bias + torch.full((s, s), float("-inf")).triu(1)
        x = self.transformer.wte(ids) * c["mup_embeddings_scale"]  # (b, s, D)
        for block in self.transformer.h:
            qkv = block.attn.c_attn(block.ln_1(x)).view(b, s, 3, self.n, hd)  # (b, s, 3, n, hd)
            q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each (b, n, s, hd)
            ctx = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(q.dtype), scale=1 / hd)
            x = x + block.attn.c_proj(ctx.transpose(1, 2).reshape(b, s, -1))  # (b, s, D)
            h = block.ln_2(x)
            x = x + block.mlp.c_proj(block.mlp.c_fc(h) * torch.nn.functional.silu(block.mlp.c_fc2(h)))
        scale = c["mup_output_alpha"] * c["mup_width_scale"]
        logits = self.transformer.ln_f(x) @ self.transformer.wte.weight.T * scale  # (b, s, V)
        loss = None if labels is None else torch.nn.functional.cross_entropy(
            logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten())
        return SimpleNamespace(loss=loss, logits=logits)

    def save_pretrained(self, out: Path) -> None:
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in self.state_dict().items()}, out / "model.safetensors",
                  metadata={"format": "pt"})
        config = {**JAIS, "vocab_size": self.transformer.wte.num_embeddings, **self.special,
                  "torch_dtype": str(self.transformer.wte.weight.dtype).removeprefix("torch.")}
        (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")


REMOTE = {"baichuan": (Baichuan, BAICHUAN), "jais": (Jais, JAIS)}  # remote-code families: (module, config keys)


def remote_from(family: str, out: Path) -> torch.nn.Module:
    """The saved remote-code demo model of ``family`` (``REMOTE``), in float32."""
    from safetensors.torch import load_file

    module, keys = REMOTE[family]
    model = module({**keys, **json.loads((out / "config.json").read_text())})
    model.load_state_dict({k: v.float() for k, v in load_file(out / "model.safetensors").items()})
    return model.eval()


def fetch_corpus(work: Path) -> tuple[list[str], list[str], str]:
    """(train documents, held-out documents, licence text) from python3.11-doc's rst sources."""
    subprocess.run(["apt-get", "download", "python3.11-doc"], cwd=work, check=True, capture_output=True)
    deb = next(work.glob("python3.11-doc_*.deb"))
    subprocess.run(["dpkg-deb", "-x", str(deb), str(work / "x")], check=True)
    sources = work / "x/usr/share/doc/python3.11/html/_sources"
    files = sorted(sources.rglob("*.rst.txt"))
    docs = [f.read_text(encoding="utf-8", errors="replace") for f in files]
    train = [d for i, d in enumerate(docs) if i % HELD_OUT_EVERY]
    held = [d for i, d in enumerate(docs) if not i % HELD_OUT_EVERY]
    licence = (sources / "license.rst.txt").read_text(encoding="utf-8")
    return train, held, licence


def train_tokenizer(train: list[str], vocab: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<pad>", "<s>", "</s>", "<unk>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(train, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>")


def portable_tokenizer_config(out: Path) -> None:
    """Name the tokenizer class transformers 4.x knows too (5.x writes its own new name), so the
    engines' converters, which pin transformers 4.x, load the demo model's tokenizer."""
    path = out / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    path.write_text(json.dumps(config, indent=2) + "\n")


def encode(tokenizer, docs: list[str]) -> torch.Tensor:
    eos = tokenizer.eos_token_id
    ids: list[int] = []
    for d in docs:
        ids += tokenizer(d)["input_ids"] + [eos]
    return torch.tensor(ids, dtype=torch.long)


@torch.no_grad()
def evaluate(model, data: torch.Tensor, context: int, batches: int = 16) -> float:
    model.eval()
    n = (len(data) - 1) // context
    starts = torch.linspace(0, (n - 1) * context, min(n, batches * 8)).long()
    losses = []
    for chunk in starts.split(8):
        x = torch.stack([data[s: s + context] for s in chunk])
        losses.append(model(x, labels=x).loss.item())
    model.train()
    return sum(losses) / len(losses)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "src/ropebridge/data/demo"))
    p.add_argument("--steps", type=int, default=900)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--family", choices=(*FAMILIES, *REMOTE), default="bloom",
                   help="architecture: bloom (the demo), mpt, falcon (Falcon-RW: alibi, sequential, bias), "
                        "baichuan (Baichuan-13B) or jais (the Jais family)")
    p.add_argument("--tokenizer", help="reuse this directory's tokenizer (the demo's, for mpt/falcon) instead of "
                                       "training one")
    args = p.parse_args()
    import transformers as T

    torch.manual_seed(args.seed)
    work = Path(tempfile.mkdtemp())
    t0 = time.time()
    train_docs, held_docs, licence = fetch_corpus(work)
    if args.tokenizer:
        tokenizer = T.AutoTokenizer.from_pretrained(args.tokenizer)
    else:
        tokenizer = train_tokenizer(train_docs, args.vocab)
    train_ids, held_ids = encode(tokenizer, train_docs), encode(tokenizer, held_docs)
    print(f"corpus: {len(train_docs)} train docs ({len(train_ids)} tokens), {len(held_docs)} held out "
          f"({len(held_ids)} tokens)", flush=True)

    special = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                   pad_token_id=tokenizer.pad_token_id)
    if args.family in REMOTE:
        module, keys = REMOTE[args.family]
        model = module({**keys, "vocab_size": len(tokenizer)})
        model.special = special
    else:
        model = T.AutoModelForCausalLM.from_config(FAMILIES[args.family](T, len(tokenizer), special))
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1, betas=(0.9, 0.95))
    warmup = max(1, args.steps // 20)

    def lr_at(step: int) -> float:
        if step < warmup:
            return args.lr * (step + 1) / warmup
        return args.lr * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, args.steps - warmup)))

    g = torch.Generator().manual_seed(args.seed)
    history = []
    for step in range(args.steps):
        starts = torch.randint(0, len(train_ids) - args.context - 1, (args.batch,), generator=g)
        x = torch.stack([train_ids[s: s + args.context] for s in starts])
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        loss = model(x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 100 == 0 or step == args.steps - 1:
            val = evaluate(model, held_ids, args.context)
            history.append({"step": step, "train_loss": loss.item(), "val_loss": val})
            print(f"step {step:5d}  train {loss.item():.3f}  val {val:.3f}  ({time.time() - t0:.0f} s)", flush=True)

    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    model.eval()
    model.to(torch.float16).save_pretrained(out)
    tokenizer.save_pretrained(out)
    portable_tokenizer_config(out)
    text = "\n\n".join(held_docs)[:HELDOUT_CHARS]
    (out / "heldout.txt").write_text(text)
    (out / "CORPUS_LICENSE.txt").write_text(
        "The training text and heldout.txt come from the Python 3.11 documentation (reStructuredText sources\n"
        "in Debian's python3.11-doc package), Copyright (c) 2001-2023 Python Software Foundation, distributed\n"
        "under the PSF License Agreement reproduced below.\n\n" + licence)
    model32 = model.float()
    record = {
        "command": "python scripts/train_demo_model.py " + " ".join(sys.argv[1:]),
        "corpus": "python3.11-doc (Debian), html/_sources/*.rst.txt; every 25th document held out",
        "corpus_license": "PSF License Agreement (see CORPUS_LICENSE.txt)",
        "train_tokens": len(train_ids), "heldout_tokens": len(held_ids),
        "family": args.family,
        "config": {"hidden_size": 192, "n_layer": 4, "n_head": 6, "vocab_size": len(tokenizer)},
        "train_context": args.context, "steps": args.steps, "batch": args.batch, "lr": args.lr,
        "final_val_loss": evaluate(model32, held_ids, args.context),
        "final_val_loss_float16_weights": evaluate(
            remote_from(args.family,
                        out) if args.family in REMOTE else T.AutoModelForCausalLM.from_pretrained(out).float(),
            held_ids, args.context),
        "history": history, "seconds": time.time() - t0, "torch": torch.__version__, "transformers": T.__version__,
    }
    (out / "training.json").write_text(json.dumps(record, indent=1))
    print(json.dumps({k: v for k, v in record.items() if k != "history"}, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
