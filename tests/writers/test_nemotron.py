"""The nemotron writer's config: the single pair as a linear-scaled pair on dims (0, 1), the ladder as a default
rope block at the plan's base, also where transformers 4.x reads it; LayerNorm1P stored as weight - 1."""

import pytest
import transformers as T
from pico import build

from ropebridge.emulation import PlanRequest
from ropebridge.planning import plan_checkpoint
from ropebridge.targets import TARGETS
from ropebridge.writers import writer_for


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return build(tmp_path_factory.mktemp("nemotron") / "bloom", "bloom-4heads")


def _config(src, **kw):
    target = TARGETS["nemotron"]
    plan, _, model = plan_checkpoint(src, PlanRequest(window=512, target="nemotron", **kw))
    writer = writer_for(target)
    return plan, writer.config(model, writer.layout(model, plan, target), plan)


def test_the_single_pair_is_a_linear_rope_on_the_first_two_dims(src):
    plan, config = _config(src, dtype="float32")
    rope = config["rope_parameters"]
    assert rope["rope_type"] == "linear" and rope["factor"] == 1 / plan.heads[0].theta
    assert int(config["head_dim"] * rope["partial_rotary_factor"]) == 2 and config["head_dim"] == plan.head_dim + 2
    assert config["architectures"] == ["NemotronForCausalLM"] and "rope_theta" not in config


def test_the_ladder_is_a_default_block_at_the_plans_base(src):
    plan, config = _config(src, dtype="bfloat16", rotary_dim=16)
    assert config["rope_parameters"] == {"rope_type": "default", "rope_theta": plan.base,
                                         "partial_rotary_factor": config["partial_rotary_factor"]}
    assert config["rope_theta"] == plan.base and config["head_dim"] == plan.head_dim + 16
    T.NemotronConfig(**config)  # transformers takes it as written
