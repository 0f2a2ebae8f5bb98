"""The exact float64 ALiBi reference: blockwise equals whole, and the half-precision floor (the source model in a
dtype with attention and the ALiBi bias exact)."""

import torch
import transformers as T
from pico import build

from ropebridge.checkpoint.model import SourceModel
from ropebridge.checkpoint.reference import reference_hidden, reference_logits


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


def test_blockwise_reference_equals_full_reference(tmp_path):
    from ropebridge.checkpoint.reference import reference_hidden

    src = build(tmp_path / "src", "falcon-rw")
    model = SourceModel(src)
    ids = torch.randint(0, 320, (1, 150), generator=torch.Generator().manual_seed(2))
    full = reference_logits(model, ids)[0]
    blocked = reference_hidden(model, ids[0], query_block=64) @ model.head_rows(0, model.info.vocab_size).T
    torch.testing.assert_close(blocked, full, rtol=1e-12, atol=1e-12)  # same float64 math, other summation order
