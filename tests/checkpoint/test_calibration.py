"""Calibration: the content advantage from its definition, and the floors it gives."""

import pytest
import torch
import transformers as T

from ropebridge.checkpoint.model import SourceModel
from ropebridge.emulation import PlanRequest, ladder


def test_calibrated_floors_cover_the_content_advantage(bloom):
    from ropebridge.checkpoint.calibration import content_advantage

    src = SourceModel(bloom)
    ids = torch.randint(0, 320, (256,), generator=torch.Generator().manual_seed(4))
    adv = content_advantage(src, ids)
    assert adv.shape == (4,) and (adv >= 0).all()
    # direct check on the exact attention of layer 0: A(i) from its definition, on a few queries
    from ropebridge.checkpoint.reference import _ln

    layer = src.layer(0)
    h1 = _ln(src.embedding_rows(0, src.info.vocab_size)[ids], layer.ln1, src.info)
    q = torch.einsum("sd,hed->hse", h1, layer.q_w) + layer.q_b[:, None, :]
    k = torch.einsum("sd,hed->hse", h1, layer.k_w) + layer.k_b[:, None, :]
    content = src.info.qk_scale * q @ k.transpose(-1, -2)  # (h, s, t)
    for head, m in enumerate(src.info.slopes):
        for i in (10, 100, 255):
            s = content[head, i, : i + 1]
            a = float(s.max() - (s - m * torch.arange(i, -1, -1.0, dtype=torch.float64)).max())
            assert a <= float(adv[head]) + 1e-12


def test_calibrated_floors_are_the_cutoff_plus_the_measured_advantage():
    # convert/plan --calibration-text: C = cutoff + 1.25 A per head, with the cutoff given (or the default)
    from ropebridge.checkpoint.calibration import DEFAULT_MARGIN, content_advantage
    from ropebridge.demo import data_dir
    from ropebridge.planning import plan_checkpoint

    src = data_dir("demo")
    text = (src / "heldout.txt").read_text()[:3000]
    ids = torch.tensor(T.AutoTokenizer.from_pretrained(src)(text)["input_ids"])
    adv = content_advantage(SourceModel(src), ids)
    for cutoff in (10.0, None):
        plan, _, _ = plan_checkpoint(src,
                                     PlanRequest(dtype="bfloat16", window=512, calibration_text=text, cutoff=cutoff,
                                                   tolerance=2.0))
        expected_cutoff = ladder.default_cutoff(512, "bfloat16") if cutoff is None else cutoff
        assert plan.strategy == "ladder" and plan.cutoff == expected_cutoff
        for h, a in zip(plan.heads, adv.tolist()):
            assert h.ladder.floor == pytest.approx(expected_cutoff + DEFAULT_MARGIN * a, rel=1e-12)
