"""Give a checkpoint GPT-2's tokenizer so that llama.cpp's ``convert_hf_to_gguf.py`` accepts it.

    PYTHONPATH=LLAMA_CPP_DIR/gguf-py python benchmarks/engines/workers/gpt2_vocab.py LLAMA_CPP_DIR CHECKPOINT

llama.cpp's converter recognises a BPE tokenizer by the hash of the token ids it gives for a fixed text, and
refuses one it does not know ("BPE pre-tokenizer was not recognized"). BLOOM's, MPT's and Falcon's are known,
so converted hub checkpoints need nothing; a tokenizer trained for one model, like ropebridge's demo model's
4096-token BPE, is refused. This writes GPT-2's byte-level BPE (tokens and merges as llama.cpp ships them in
``models/ggml-vocab-gpt-2.gguf``, read with its ``gguf-py``) into CHECKPOINT as a transformers tokenizer, and
pads every tensor with a vocabulary-sized first dimension (embedding, output head) with zero rows to GPT-2's
50257 entries, ``vocab_size`` in ``config.json`` with it. The model's own token ids keep their rows, so the
logits of a sequence of its ids are unchanged (the padded entries' logits are 0); text must still be
tokenised with the model's own tokenizer. Runs with llama.cpp's Python requirements (torch, transformers,
safetensors).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def gpt2_tokenizer(llama_dir: Path, out: Path) -> int:
    """Write GPT-2's tokenizer (from LLAMA_DIR/models/ggml-vocab-gpt-2.gguf) into OUT; return its size."""
    import gguf  # llama.cpp's gguf-py, on PYTHONPATH
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    fields = gguf.GGUFReader(llama_dir / "models" / "ggml-vocab-gpt-2.gguf").fields

    def strings(key):
        f = fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    tokens, merges = strings("tokenizer.ggml.tokens"), strings("tokenizer.ggml.merges")
    bpe = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)},
                               merges=[tuple(m.split(" ")) for m in merges]))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    eot = tokens[int(fields["tokenizer.ggml.eos_token_id"].contents())]
    bpe.add_special_tokens([AddedToken(eot, special=True)])
    PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token=eot, eos_token=eot, unk_token=eot).save_pretrained(out)
    return len(tokens)


def pad_vocabulary(checkpoint: Path, vocab: int) -> None:
    """Pad CHECKPOINT's vocabulary-sized tensors (first dim = config ``vocab_size``) with zero rows to VOCAB."""
    import torch
    from safetensors.torch import load_file, save_file

    config = json.loads((checkpoint / "config.json").read_text())
    old = config["vocab_size"]
    if old > vocab:
        raise SystemExit(f"{checkpoint}: vocabulary {old} is larger than GPT-2's {vocab}")
    for path in sorted(checkpoint.glob("*.safetensors")):
        tensors = load_file(path)
        for name, t in tensors.items():
            if t.dim() == 2 and t.shape[0] == old:
                tensors[name] = torch.cat([t, t.new_zeros(vocab - old, t.shape[1])])  # (vocab, D)
        save_file(tensors, path, metadata={"format": "pt"})
    index = checkpoint / "model.safetensors.index.json"
    if index.exists():
        data = json.loads(index.read_text())
        data["metadata"]["total_size"] = sum(
            t.numel() * t.element_size() for p in checkpoint.glob("*.safetensors") for t in load_file(p).values())
        index.write_text(json.dumps(data, indent=1))
    config["vocab_size"] = vocab
    (checkpoint / "config.json").write_text(json.dumps(config, indent=1))


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.splitlines()[2].strip(), file=sys.stderr)
        return 2
    llama_dir, checkpoint = map(Path, argv)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt"):
        (checkpoint / name).unlink(missing_ok=True)
    vocab = gpt2_tokenizer(llama_dir, checkpoint)
    pad_vocabulary(checkpoint, vocab)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
