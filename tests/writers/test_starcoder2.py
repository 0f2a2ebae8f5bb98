"""The starcoder2 writer's config: one pair at 1/factor = theta on dims (0, hd'/2) as a proportional rope, every
other pair at frequency 0."""

import torch
import transformers as T
from pico import build

from ropebridge.emulation import PlanRequest
from ropebridge.planning import plan_checkpoint
from ropebridge.targets import TARGETS
from ropebridge.writers import writer_for


def test_the_single_pair_is_a_proportional_rope_that_transformers_turns_at_theta(tmp_path):
    src = build(tmp_path / "bloom", "bloom-4heads")
    target = TARGETS["starcoder2"]
    plan, _, model = plan_checkpoint(src, PlanRequest(window=512, target="starcoder2", dtype="float32"))
    writer = writer_for(target)
    layout = writer.layout(model, plan, target)
    config = writer.config(model, layout, plan)
    assert layout.emulation.tolist() == [0, layout.head_dim // 2]  # rotate_half pairs dim 0 with dim hd'/2
    assert config["rope_parameters"]["rope_type"] == "proportional" and config["architectures"] == [
        "Starcoder2ForCausalLM"]
    # transformers' own reading of the config: pair 0 at theta, every other pair at frequency 0
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    inv_freq, _ = ROPE_INIT_FUNCTIONS["proportional"](T.Starcoder2Config(**config), "cpu")
    assert torch.isclose(inv_freq[0].double(), torch.tensor(plan.heads[0].theta, dtype=torch.float64), rtol=1e-6)
    assert (inv_freq[1:] == 0).all()
