"""Independent float64 readings of the remote-code families (Baichuan, Refact, Replit, Jais, BTLM), written from their
published modelling code and nothing of ropebridge's: the cross-check of ``checkpoint.reference`` (and of what a
conversion computes) for families transformers has no class for.

Baichuan-13B / Baichuan2-13B (``modeling_baichuan.py`` of both): per layer, RMSNorm (variance over the last dim,
times ``rsqrt(variance + eps)``, times the weight); ``W_pack`` output unflattened to (3, hidden): q, k, v; scores
q.k / sqrt(hd) plus the ALiBi mask ``slopes * arange(max_pos)`` over the key position, ``-inf`` above the diagonal;
softmax; ``o_proj``; the MLP ``down(silu(gate x) * up x)``; the final RMSNorm; the head (Baichuan2: its rows
normalised, NormHead). The slopes are ``_get_interleave(n)`` (Press et al.'s reference code,
``oracles.press_reference``) as a float32 tensor.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from tests.oracles import press_reference


@torch.no_grad()
def baichuan_logits(directory: Path, ids: torch.Tensor) -> torch.Tensor:
    """Logits ``(1, s, V)`` float64 of the Baichuan checkpoint in ``directory`` on ``ids`` ``(1, s)``."""
    from safetensors.torch import load_file

    config = json.loads((Path(directory) / "config.json").read_text())
    w = {k: v.double() for k, v in load_file(Path(directory) / "model.safetensors").items()}
    n, hidden, eps = config["num_attention_heads"], config["hidden_size"], config["rms_norm_eps"]
    hd, s = hidden // n, ids.shape[1]

    def rms(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    slopes = torch.tensor(press_reference(n), dtype=torch.float32).double()  # (n,): _get_interleave
    mask = torch.full((s, s), float("-inf"), dtype=torch.float64).triu(1)  # (s, s)
    alibi = slopes[:, None, None] * torch.arange(s, dtype=torch.float64)[None, None, :] + mask  # (n, s, s)
    x = w["model.embed_tokens.weight"][ids[0]]  # (s, D)
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms(x, w[p + "input_layernorm.weight"])
        proj = (h @ w[p + "self_attn.W_pack.weight"].T).unflatten(-1, (3, hidden))  # (s, 3, D)
        q, k, v = (proj[:, j].view(s, n, hd).transpose(0, 1) for j in range(3))  # (n, s, hd)
        scores = q @ k.transpose(1, 2) / math.sqrt(hd) + alibi  # (n, s, s)
        ctx = (torch.softmax(scores, -1) @ v).transpose(0, 1).reshape(s, hidden)  # (s, D)
        x = x + ctx @ w[p + "self_attn.o_proj.weight"].T
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        gate, up = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    head = w["lm_head.weight"]
    if config["vocab_size"] == 125696:  # Baichuan2's NormHead
        head = head / head.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    return (rms(x, w["model.norm.weight"]) @ head.T)[None]  # (1, s, V)


@torch.no_grad()
def refact_logits(directory: Path, ids: torch.Tensor, norm: str = "layernorm") -> torch.Tensor:
    """Logits ``(1, s, V)`` float64 of the Refact checkpoint in ``directory`` on ``ids`` ``(1, s)``, read from its
    ``modeling_gpt_refact.py``: per layer ``ln_1`` (LayerNorm, no bias); q from ``attn.q``, k and v the two halves
    of ``attn.kv`` (one head, shared by every query head); scores q.k * hd^-0.5 plus ``get_alibi_biases``
    (the causal mask's cumulative sum, j + 1 on and below the diagonal, times ``_get_slopes``: ``torch.pow`` of
    2^(-8/n) in float32), ``-inf`` above the diagonal; softmax; ``attn.c_proj``; the residual; ``ln_2``; the MLP
    ``c_proj(silu(x1) * x2)`` with x1, x2 the two halves of ``gate_up_proj``; the residual; ``ln_f`` (LayerNorm,
    no bias); ``lm_head`` (the embedding where it is absent). ``norm="rmsnorm"`` reads every norm as an RMSNorm
    instead, as llama.cpp's Refact does."""
    from safetensors.torch import load_file

    config = json.loads((Path(directory) / "config.json").read_text())
    w = {k: v.double() for k, v in load_file(Path(directory) / "model.safetensors").items()}
    n, hidden, eps = config["n_head"], config["n_embd"], config["layer_norm_epsilon"]
    hd, s = hidden // n, ids.shape[1]

    def ln(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        if norm == "rmsnorm":
            return weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        return torch.nn.functional.layer_norm(x, (hidden,), weight, None, eps)

    p2 = 2 ** math.floor(math.log2(n))  # _get_slopes, in torch's float32 as its code computes it
    slopes = torch.pow(2.0 ** (-8.0 / p2), torch.arange(1, 1 + p2))
    if p2 < n:
        slopes = torch.cat([slopes, torch.pow(2.0 ** (-4.0 / p2), torch.arange(1, 1 + 2 * (n - p2), 2))])
    causal = torch.ones(s, s).tril()  # (s, s)
    distance = causal.cumsum(-1).double()  # (s, s): j + 1 where j <= i
    alibi = slopes.double()[:, None, None] * distance[None] + torch.full((s, s), float("-inf")).triu(1).double()
    x = w["transformer.wte.weight"][ids[0]]  # (s, D)
    for i in range(config["n_layer"]):
        p = f"transformer.h.{i}."
        h = ln(x, w[p + "ln_1.weight"])
        q = (h @ w[p + "attn.q.weight"].T).view(s, n, hd).transpose(0, 1)  # (n, s, hd)
        k, v = (h @ w[p + "attn.kv.weight"].T).split(hd, dim=-1)  # (s, hd) each
        scores = q @ k.T * hd ** -0.5 + alibi  # (n, s, s)
        ctx = (torch.softmax(scores, -1) @ v).transpose(0, 1).reshape(s, hidden)  # (s, D)
        x = x + ctx @ w[p + "attn.c_proj.weight"].T
        x1, x2 = (ln(x, w[p + "ln_2.weight"]) @ w[p + "mlp.gate_up_proj.weight"].T).chunk(2, dim=-1)
        x = x + (torch.nn.functional.silu(x1) * x2) @ w[p + "mlp.c_proj.weight"].T
    head = w.get("lm_head.weight", w["transformer.wte.weight"])
    return (ln(x, w["ln_f.weight"]) @ head.T)[None]  # (1, s, V)


@torch.no_grad()
def greedy_continuation(logits, directory: Path, prompt: torch.Tensor, n: int) -> list[int]:
    """The ``n`` tokens a reading (``baichuan_logits``, ``refact_logits``) continues ``prompt`` ``(1, s)`` with,
    greedily, recomputing the whole sequence each step (no cache: the reading is the plain formula)."""
    seq, out = prompt, []
    for _ in range(n):
        nxt = int(logits(directory, seq)[0, -1].argmax())
        out.append(nxt)
        seq = torch.cat([seq, torch.tensor([[nxt]])], 1)
    return out


@torch.no_grad()
def replit_logits(directory: Path, ids: torch.Tensor) -> torch.Tensor:
    """Logits ``(1, s, V)`` float64 of the ``replit_lm`` checkpoint in ``directory`` on ``ids`` ``(1, s)``, run by
    transformers' MPT: MosaicGPT, which ``replit_lm.py`` is, is the code MPT grew from, and Replit's repository
    later renamed its tensors to MPT's (``ln_1`` -> ``norm_1``, ``mlp.mlp_up`` -> ``ffn.up_proj``, ``ln_f`` ->
    ``norm_f``, as ggml's Replit loader followed) and its top-level keys into ``attn_config``."""
    import transformers as T
    from safetensors.torch import load_file

    config = json.loads((Path(directory) / "config.json").read_text())
    renames = {"ln_1.": "norm_1.", "ln_2.": "norm_2.", "mlp.mlp_up.": "ffn.up_proj.", "mlp.mlp_down.": "ffn.down_proj.",
               "transformer.ln_f.": "transformer.norm_f."}
    state = {}
    for name, tensor in load_file(Path(directory) / "model.safetensors").items():
        for old, new in renames.items():
            name = name.replace(old, new)
        state[name] = tensor.double()
    mpt = T.MptConfig(d_model=config["d_model"], n_heads=config["n_heads"], n_layers=config["n_layers"],
                      expansion_ratio=config["mlp_ratio"], max_seq_len=config["max_seq_len"],
                      vocab_size=config["vocab_size"], no_bias=config["no_bias"],
                      attn_config={"alibi": True, "alibi_bias_max": config["alibi_bias_max"]})
    model = T.MptForCausalLM(mpt).double().eval()
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)  # the head is tied
    return model(ids).logits  # (1, s, V)


@torch.no_grad()
def jais_logits(directory: Path, ids: torch.Tensor) -> torch.Tensor:
    """Logits ``(1, s, V)`` float64 of the Jais or BTLM checkpoint in ``directory`` on ``ids`` ``(1, s)``, read from
    ``modeling_jais.py`` / ``modeling_btlm.py`` (GPT-2 with muP and ALiBi): ``wte`` times ``embeddings_scale``
    (``mup_embeddings_scale``); per layer ``ln_1`` (LayerNorm with bias); ``c_attn`` a ``Conv1D`` (x @ W + b, W
    stored input x output) split into q, k, v; scores q.k / hd^p (p = 1 where ``scale_qk_dot_by_d``, read first,
    or ``mup_scale_qk_dot_by_d`` is set, else 1/2), plus ``relative_pe``'s bias ``(slopes / -scale) * |j - i|`` with
    the stored slopes and scale ``alibi_scaling.factor`` (1 without it), ``-inf`` above the diagonal; softmax;
    ``c_proj``; the residual; ``ln_2``; the MLP ``c_proj(c_fc(h) * silu(c_fc2(h)))``; the residual; ``ln_f``; the
    head (``lm_head``, or ``wte`` where tied) times ``width_scale`` (else ``mup_output_alpha * mup_width_scale``)."""
    from safetensors.torch import load_file

    c = json.loads((Path(directory) / "config.json").read_text())
    w = {k: v.double() for k, v in load_file(Path(directory) / "model.safetensors").items()}
    n, hidden, eps = c["n_head"], c["n_embd"], c["layer_norm_epsilon"]
    hd, s = hidden // n, ids.shape[1]
    by_d = c["scale_qk_dot_by_d"] if "scale_qk_dot_by_d" in c else c.get("mup_scale_qk_dot_by_d", False)
    scale = (c.get("alibi_scaling") or {}).get("factor", 1.0)
    out_scale = c["width_scale"] if "width_scale" in c else c.get("mup_output_alpha", 1.0) * c.get("mup_width_scale",
                                                                                                   1.0)

    def ln(x: torch.Tensor, prefix: str) -> torch.Tensor:
        return torch.nn.functional.layer_norm(x, (hidden,), w[prefix + ".weight"], w[prefix + ".bias"], eps)

    def conv1d(x: torch.Tensor, prefix: str) -> torch.Tensor:
        return x @ w[prefix + ".weight"] + w[prefix + ".bias"]

    pos = torch.arange(s, dtype=torch.float64)
    alibi = (w["transformer.relative_pe.slopes"] / -scale)[:, :,
                                                           None] * (pos[None, :] - pos[:, None]).abs()  # (n, s, s)
    alibi = alibi + torch.full((s, s), float("-inf"), dtype=torch.float64).triu(1)
    x = w["transformer.wte.weight"][ids[0]] * c.get("embeddings_scale", c.get("mup_embeddings_scale", 1.0))  # (s, D)
    for i in range(c["n_layer"]):
        p = f"transformer.h.{i}."
        qkv = conv1d(ln(x, p + "ln_1"), p + "attn.c_attn")  # (s, 3 D)
        q, k, v = (t.view(s, n, hd).transpose(0, 1) for t in qkv.split(hidden, -1))  # (n, s, hd) each
        scores = q @ k.transpose(1, 2) / hd ** (1.0 if by_d else 0.5) + alibi  # (n, s, s)
        x = x + conv1d((torch.softmax(scores, -1) @ v).transpose(0, 1).reshape(s, hidden), p + "attn.c_proj")
        h = ln(x, p + "ln_2")
        x = x + conv1d(conv1d(h, p + "mlp.c_fc") * torch.nn.functional.silu(conv1d(h, p + "mlp.c_fc2")),
                       p + "mlp.c_proj")
    head = w.get("lm_head.weight", w["transformer.wte.weight"])
    return (ln(x, "transformer.ln_f") @ head.T * out_scale)[None]  # (1, s, V)


READINGS = {"baichuan": baichuan_logits, "baichuan2": baichuan_logits, "refact": refact_logits,
            "replit": replit_logits, "jais": jais_logits, "btlm": jais_logits}  # pico name -> reading


@torch.no_grad()
def embedded_conversion(name: str, family: str, reading, tmp_path: Path, tokens: int = 512) -> dict:
    """The embedded real-text model ``name`` (``ropebridge.demo.data_dir``) of a remote-code ``family``, measured
    against its ``reading`` on the first ``tokens`` of its held-out text (``ids``): the module it was trained as
    (``scripts/train_demo_model.py``), run in float64, relative to the reading's largest logit (``trained``); its
    default float32 conversion (``result``) run in float64 (``as_function``) and in float32 (``float32``), max
    |logit difference|; and whether the converted model's 16 greedy tokens after 64 are the reading's
    (``greedy``)."""

    import transformers as T
    from transformers import AutoTokenizer

    from ropebridge.convert import convert
    from ropebridge.demo import data_dir
    from ropebridge.emulation import PlanRequest

    src = data_dir(name)
    text = (src / "heldout.txt").read_text()[:20_000]
    ids = torch.tensor([AutoTokenizer.from_pretrained(src)(text)["input_ids"][:tokens]])
    logits = reading(src, ids)
    from scripts import train_demo_model

    trained = train_demo_model.remote_from(family, src).double()
    if isinstance(getattr(trained, "slopes", None), torch.Tensor):  # a plain attribute, not a buffer .double() casts
        trained.slopes = trained.slopes.double()
    result = convert(src, tmp_path / "converted", PlanRequest(window=2048, dtype="float32"))

    def error(dtype: torch.dtype) -> float:
        model = T.AutoModelForCausalLM.from_pretrained(result.destination, dtype=dtype).eval()
        return float((model(ids).logits.double() - logits).abs().max())

    model = T.AutoModelForCausalLM.from_pretrained(result.destination, dtype=torch.float32).eval()
    greedy = model.generate(ids[:, :64], max_new_tokens=16, do_sample=False)[0, 64:]
    return {"trained": float((trained(ids).logits - logits).abs().max()) / float(logits.abs().max()),
            "result": result, "architecture": type(model).__name__, "as_function": error(torch.float64),
            "float32": error(torch.float32),
            "greedy": greedy.tolist() == greedy_continuation(reading, src, ids[:, :64], 16)}
