"""transformers' named departures from each family's definition: which apply to a config, and each patch made
and undone on the loaded model (that the patched model computes the definition: tests/checkpoint/test_model.py)."""

import pytest
import torch
import transformers as T
from pico import build

from ropebridge.checkpoint.model import SourceModel
from ropebridge.verify.deviations import DEVIATIONS, as_defined, deviations_of


def _whats(family, config):
    return [d.what for d in deviations_of(family, config)]


def test_deviations_are_named_per_config():
    assert _whats("mpt", {"attn_config": {"alibi_bias_max": 16}}) == ["alibi_bias_max ignored (always 8)"]
    assert _whats("mpt", {"attn_config": {"alibi_bias_max": 8}}) == []
    assert _whats("mpt", {"no_bias": False}) == ["bias tensors ignored (no_bias false)"]
    assert _whats("bloom", {}) == [] and _whats("bloom", {"pretraining_tp": 2}) == []
    assert _whats("bloom", {"pretraining_tp": 2, "slow_but_exact": True}) == [
        "dense biases dropped (pretraining_tp > 1, slow_but_exact)"]
    assert _whats("bloom", {"pretraining_tp": 1, "slow_but_exact": True}) == []
    assert _whats("falcon", {}) == ["bias rounded to bfloat16"]


def test_every_family_of_the_table_is_known():
    from ropebridge.checkpoint.config import FAMILIES

    assert set(DEVIATIONS) <= set(FAMILIES)


@pytest.mark.parametrize("family", ["bloom-tp2", "mpt-biases", "falcon-rw"])
def test_a_patch_changes_the_model_only_while_it_holds(tmp_path, family):
    src = build(tmp_path / family, family)
    model = T.AutoModelForCausalLM.from_pretrained(src, dtype=torch.float64).eval()
    ids = torch.randint(0, 320, (1, 48), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = model(ids).logits
        with as_defined(model, SourceModel(src)):
            during = model(ids).logits
        after = model(ids).logits
    assert torch.equal(before, after)  # undone, bit for bit
    assert not torch.equal(before, during)  # and it did something
