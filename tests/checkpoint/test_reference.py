"""The exact float64 ALiBi reference: its query blocks and left padding change nothing, each remote-code family's
modelling code agrees with it (transformers' families: ``checkpoint/test_model.py``), and the half-precision floor
(the source model in a dtype with attention and the ALiBi bias exact)."""

import math

import pytest
import torch
import transformers as T
from pico import build

from ropebridge.checkpoint.model import SourceModel
from ropebridge.checkpoint.reference import Blocks, reference_hidden, reference_logits


def test_floor_rounds_every_op_but_keeps_attention_exact(tmp_path):
    src_dir = build(tmp_path / "bloom", "bloom-4heads")
    src = SourceModel(src_dir)
    ids = torch.randint(0, 320, (384,), generator=torch.Generator().manual_seed(0))
    head = src.head_rows(0, src.info.vocab_size)
    exact = reference_hidden(src, ids) @ head.T
    # rounding to float64 is the identity: the floor's plumbing leaves the exact pass unchanged
    torch.testing.assert_close(reference_hidden(src, ids, round_to=torch.float64) @ head.T, exact, rtol=0, atol=0)
    floor_hidden = reference_hidden(src, ids, round_to=torch.bfloat16)
    assert torch.equal(floor_hidden.to(torch.bfloat16).double(), floor_hidden)  # the result is a bfloat16 tensor
    floor = floor_hidden @ head.to(torch.bfloat16).double().T
    native = T.AutoModelForCausalLM.from_pretrained(src_dir, dtype=torch.bfloat16).eval()
    with torch.no_grad():
        native_err = float((native(ids[None]).logits[0].double() - exact).abs().max())
    floor_err = float((floor - exact).abs().max())
    # bfloat16 arithmetic moves logits (a few units of 2^-8 on O(10) values) ...
    assert floor_err > 1e-3
    # ... but less than native BLOOM in bfloat16, which also rounds its bias m*j (up to 0.5 logits at j = 256)
    assert floor_err < native_err, (floor_err, native_err)


def test_the_query_block_changes_nothing_but_the_summation_order(tmp_path):
    src = build(tmp_path / "src", "falcon-rw")
    model = SourceModel(src)
    ids = torch.randint(0, 320, (150,), generator=torch.Generator().manual_seed(2))
    whole, blocked = (reference_hidden(model, ids, blocks=Blocks(q)) for q in (512, 64))
    eps = torch.finfo(torch.float64).eps
    assert float((blocked - whole).abs().max()) <= 256 * eps * float(whole.abs().max())


def test_the_fused_bias_is_the_rounded_one_to_float64_rounding_and_sees_no_future(tmp_path):
    # without an observer the bias is subtracted in one fused multiply-add, in place; with one, after rounding m d
    # (with these power-of-two slopes m d is exact and the two agree bit for bit)
    from ropebridge.checkpoint.reference import reference_states

    model = SourceModel(build(tmp_path / "src", "bloom-4heads"))
    ids = torch.randint(0, 320, (1, 200), generator=torch.Generator().manual_seed(6))
    fused = reference_states(model, ids, blocks=Blocks(48))
    rounded = reference_states(model, ids, blocks=Blocks(48), observe=lambda *seen: None)
    eps = torch.finfo(torch.float64).eps
    assert float((fused - rounded).abs().max()) <= 256 * eps * float(rounded.abs().max())
    changed = ids.clone()
    changed[0, 150:] = (changed[0, 150:] + 1) % 320  # a later token changes no earlier row, in any query block
    later = reference_states(model, changed, blocks=Blocks(48))
    assert torch.equal(later[:, :150], fused[:, :150]) and not torch.equal(later[:, 150:], fused[:, 150:])


@pytest.mark.parametrize("family", ["bloom-4heads", "mpt", "falcon-parallel-mq"])
def test_left_padding_leaves_the_real_positions_of_a_batch_as_each_sequence_alone(tmp_path, family):
    # positions from the cumulative mask: a left-padded row's real positions give the logits of that sequence run
    # alone (to float64 rounding), a layer at a time, the embedding rows of the ids only, a block of queries at a time
    from ropebridge.checkpoint.reference import reference_states

    model = SourceModel(build(tmp_path / "src", family))
    ids = torch.randint(0, 320, (2, 90), generator=torch.Generator().manual_seed(4))
    mask = torch.ones_like(ids)
    mask[1, :31] = 0
    head = model.head_rows(0, model.info.vocab_size)
    batch = reference_states(model, ids, mask, blocks=Blocks(16)) @ head.T  # (2, s, V)
    alone = reference_logits(model, ids[1:, 31:])[0]  # (s - 31, V)
    eps = torch.finfo(torch.float64).eps
    assert float((batch[1, 31:] - alone).abs().max()) <= 256 * eps * float(alone.abs().max())
    first = reference_logits(model, ids[:1])[0]
    assert float((batch[0] - first).abs().max()) <= 256 * eps * float(first.abs().max())
    assert torch.equal(model.embedding_of(ids), model.embedding_rows(0, model.info.vocab_size)[ids])


def test_the_attention_probabilities_a_caller_collects_are_those_of_each_layer(tmp_path):
    from ropebridge.checkpoint.reference import attention_probs

    model = SourceModel(build(tmp_path / "src", "bloom-4heads"))
    ids = torch.randint(0, 320, (1, 40), generator=torch.Generator().manual_seed(5))
    kept: list = []
    reference_logits(model, ids, probs_out=kept)
    probs = attention_probs(model, ids)
    assert len(kept) == len(probs) == model.info.n_layers and all(torch.equal(a, b) for a, b in zip(kept, probs))
    for p in probs:  # (1, h, s, s): causal rows summing to 1
        assert torch.equal(p.triu(1), torch.zeros_like(p))
        assert float((p.sum(-1) - 1).abs().max()) <= p.shape[-1] * torch.finfo(torch.float64).eps


def test_baichuan_reference_is_its_modelling_code(tmp_path):
    # the float64 reference on Baichuan-13B and Baichuan2-13B picos in their real layout (W_pack thirds,
    # RMSNorm, gated SiLU MLP, Baichuan2's NormHead) against an independent reading of the published code
    from pico import build_remote
    from remote_models import baichuan_logits

    for family in ("baichuan", "baichuan2"):
        src_dir = build_remote(tmp_path / family, family)
        model = SourceModel(src_dir)
        ids = torch.randint(0, 320, (1, 96), generator=torch.Generator().manual_seed(3))
        ours, theirs = reference_logits(model, ids), baichuan_logits(src_dir, ids)
        assert model.info.head_norm == (family == "baichuan2")
        scale = float(theirs.abs().max())
        assert float((ours - theirs).abs().max()) <= 64 * torch.finfo(torch.float64).eps * scale, family
        # the blockwise pass is the same model
        blocked = reference_hidden(model, ids[0], blocks=Blocks(32)) @ model.head_rows(0, model.info.vocab_size).T
        assert float((blocked - ours[0]).abs().max()) <= 64 * torch.finfo(torch.float64).eps * scale, family


def test_baichuan_head_norm_changes_the_logits(tmp_path):
    # the NormHead is read: a Baichuan2 pico read without it is another model (the test can fail)
    import dataclasses

    from pico import build_remote

    model = SourceModel(build_remote(tmp_path / "b2", "baichuan2"))
    ids = torch.randint(0, 320, (1, 16), generator=torch.Generator().manual_seed(4))
    plain = SourceModel(tmp_path / "b2")
    plain.info = dataclasses.replace(plain.info, head_norm=False)
    assert float((reference_logits(model, ids) - reference_logits(plain, ids)).abs().max()) > 1.0


def test_replit_reference_is_transformers_mpt_on_its_renamed_tensors(tmp_path):
    # MosaicGPT (replit_lm) is MPT's earlier code: transformers' MPT on the renamed tensors reads it independently;
    # transformers builds MPT's bias in float32, so the two agree to float32's rounding of the scores
    from pico import build_remote
    from remote_models import replit_logits

    src_dir = build_remote(tmp_path / "replit", "replit")
    ids = torch.randint(0, 320, (1, 96), generator=torch.Generator().manual_seed(6))
    ours, theirs = reference_logits(SourceModel(src_dir), ids), replit_logits(src_dir, ids)
    scale = float(theirs.abs().max())
    assert float((ours - theirs).abs().max()) <= 64 * torch.finfo(torch.float32).eps * scale


@pytest.mark.parametrize("tied", [False, True])
def test_refact_reference_is_its_modelling_code(tmp_path, tied):
    # LayerNorm without bias, one kv head, gate_up_proj, m (j + 1) with its float32 slopes, the head tied where
    # lm_head is absent: against an independent reading of modeling_gpt_refact.py
    from pico import build_remote
    from remote_models import refact_logits

    src_dir = build_remote(tmp_path / "refact", "refact", **({"tie_word_embeddings": True} if tied else {}))
    model = SourceModel(src_dir)
    ids = torch.randint(0, 320, (1, 96), generator=torch.Generator().manual_seed(5))
    ours, theirs = reference_logits(model, ids), refact_logits(src_dir, ids)
    scale = float(theirs.abs().max())
    assert float((ours - theirs).abs().max()) <= 64 * torch.finfo(torch.float64).eps * scale


@pytest.mark.parametrize("family", ["bloom-4heads", "mpt", "falcon-parallel-mq", "baichuan", "refact"])
def test_the_blocked_reference_is_the_whole_layer_one_to_float64_rounding(tmp_path, family):
    # one row (one head) of each linear map at a time against every map whole: the same products, summed in
    # another order at most
    from pico import build_remote

    src = (build_remote if family in ("baichuan", "refact") else build)(tmp_path / "src", family)
    model = SourceModel(src)
    ids = torch.randint(0, 320, (70,), generator=torch.Generator().manual_seed(6))
    whole, blocked = (reference_hidden(model, ids, blocks=Blocks(weight_bytes=b)) for b in (None, 1))
    eps = torch.finfo(torch.float64).eps
    assert float((blocked - whole).abs().max()) <= 256 * eps * float(whole.abs().max())
    assert float((blocked - whole).abs().max()) < float(whole.abs().max())  # not vacuous: both are the model


def test_one_block_of_weights_is_alive_when_the_next_is_read(tmp_path):
    # counted, not timed: every weight the reference reads is a block within block_bytes (one head of q, k or v at
    # the least), released before the next is read, so a layer 46 times the budget runs within it; every layer's
    # attention probabilities (attention_probs) are the streamed ones
    import gc
    import weakref

    from ropebridge.checkpoint.reference import attention_probs, reference_states

    model = SourceModel(build(tmp_path / "src", "bloom-4heads"))
    block = model.info.head_dim * model.info.hidden_size * 8  # one head's rows of q, k or v in float64
    sizes, alive, refs = [], [], []

    def counted(read):
        def wrapper(*args, **kwargs):
            out = read(*args, **kwargs)
            if kwargs.get("suffix") != ".bias":  # a weight (q, k and v's biases are 2-D too)
                gc.collect()
                alive.append(sum(ref() is not None for ref in refs))
                sizes.append(out.numel() * out.element_size())
                refs.append(weakref.ref(out))
            return out
        return wrapper

    model.weight, model.qkv_part = counted(model.weight), counted(model.qkv_part)
    ids = torch.randint(0, 320, (1, 40), generator=torch.Generator().manual_seed(5))
    reference_states(model, ids, blocks=Blocks(16, block))
    layer = sum(math.prod(shape) for name, (shape, _) in model.expected_shapes().items()
                if ".h.0." in name and len(shape) == 2) * 8
    assert max(sizes) <= block < layer / 40 and set(alive) == {0}, (max(sizes), block, layer, alive)
    assert sum(sizes) == model.info.n_layers * layer  # every weight read once, each q, k, v head by head
    probs = attention_probs(model, ids)
    assert len(probs) == model.info.n_layers and probs[0].shape == (1, model.info.n_heads, 40, 40)
    torch.testing.assert_close(probs[-1].sum(-1), torch.ones(1, model.info.n_heads, 40, dtype=torch.float64),
                               rtol=0, atol=64 * torch.finfo(torch.float64).eps)
    assert float(probs[-1].triu(1).abs().max()) == 0.0  # causal
