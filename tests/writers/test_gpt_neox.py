"""The gpt-neox writer: a remote-code family it carries
(Replit's ``replit_lm``) converted and run by transformers' GPT-NeoX against an independent reading."""

import json

import torch
import transformers as T
from pico import build_remote
from remote_models import greedy_continuation, replit_logits

from ropebridge.convert import convert
from ropebridge.emulation import PlanRequest
from ropebridge.numerics import TOLERANCE


def test_replit_lm_converts_by_default_to_gpt_neox_exact_in_float32(tmp_path):
    # MosaicGPT's names and keys (ln_1, mlp.mlp_up, top-level alibi keys), no biases, the head tied; read
    # independently by transformers' MPT on the tensors renamed (remote_models.replit_logits)
    src = build_remote(tmp_path / "replit", "replit")
    res = convert(src, tmp_path / "neox", PlanRequest(window=512, dtype="float32"))
    config = json.loads((res.destination / "config.json").read_text())
    assert res.target == "gpt-neox" and config["architectures"] == ["GPTNeoXForCausalLM"]
    assert config["intermediate_size"] == 480 and config["tie_word_embeddings"] is False  # the MLP as is
    model = T.AutoModelForCausalLM.from_pretrained(res.destination, dtype=torch.float32).eval()
    ids = torch.randint(0, 320, (1, 512), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        err = float((model(ids).logits.double() - replit_logits(src, ids)).abs().max())
    assert err <= TOLERANCE["float32"] / 4, err
    with torch.no_grad():
        greedy = model.generate(ids[:, :8], max_new_tokens=16, do_sample=False)[0, 8:]
    assert greedy.tolist() == greedy_continuation(replit_logits, src, ids[:, :8], 16)
