"""The registry: every strategy under its own name in the order of STRATEGY_NAMES, each checking the options it
takes and saying its rope in words."""

import pytest

from ropebridge.checkpoint.config import from_heads
from ropebridge.emulation import PlanRequest, plan
from ropebridge.emulation.strategies import STRATEGIES
from ropebridge.emulation.strategy import STRATEGY_NAMES

REQUESTS = {
    "single": PlanRequest(window=1024, dtype="float16", target="starcoder2", theta=1e-4),
    "fixed-base": PlanRequest(window=1024, dtype="float32", rope_base=10000.0, rotary_dim=16, pairs=2),
    "ladder": PlanRequest(window=512, dtype="bfloat16", rotary_dim=16, floor=(30.0, 31.0, 32.0, 33.0)),
}


def test_the_registry_is_the_names_in_order_each_under_its_own():
    assert tuple(STRATEGIES) == STRATEGY_NAMES
    assert all(s.name == name for name, s in STRATEGIES.items())


@pytest.mark.parametrize("name, given, needle", [
    ("ladder", {"theta": 1e-4}, "are for --strategy single"),
    ("ladder", {"rotary_dim": 2}, "must be >= 4 for a ladder"),
    ("ladder", {"rotary_dim": 256}, "fitted on at most 128 rotary dims"),
    ("single", {"rotary_dim": 8}, "--rotary-dim needs --rope-base"),
    ("single", {"floor": 40.0}, "are for --strategy ladder"),
    ("fixed-base", {}, "needs --rope-base"),
    ("fixed-base", {"floor": 40.0, "rope_base": 1e4}, "are for --strategy ladder"),
])
def test_each_strategy_refuses_what_it_does_not_take(name, given, needle):
    with pytest.raises(ValueError, match=needle):
        PlanRequest(strategy=name, dtype="float32", **given)


def test_each_strategy_says_its_rope():
    source = from_heads(4, 64, family="baichuan")
    ladder = plan(source, REQUESTS["ladder"])
    assert STRATEGIES["ladder"].rope(ladder) == f"RoPE base {ladder.base:.6g}, rotary dim 16"
    one = plan(source, REQUESTS["single"])
    assert STRATEGIES["single"].rope(one) == f"theta {one.heads[0].theta:.6g} on one pair"
    opposed = plan(source, PlanRequest(window=1024, dtype="float32", target="llama"))
    assert STRATEGIES["single"].rope(opposed).endswith("on two opposed pairs")
