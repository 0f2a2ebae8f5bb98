"""Records of older releases: the one reader (``convert.older``) gives today's plan and the request each asked."""

import pytest

from ropebridge.checkpoint.config import from_heads
from ropebridge.convert import older
from ropebridge.verify.byte_check import first_difference
from ropebridge.emulation import EmulationPlan, PlanRequest, plan
from ropebridge.emulation.strategy import STRATEGY_NAMES

REQUESTS = {
    "single": PlanRequest(window=1024, dtype="float16", target="starcoder2", theta=1e-4),
    "fixed-base": PlanRequest(window=1024, dtype="float32", rope_base=10000.0, rotary_dim=16, pairs=2),
    "ladder": PlanRequest(window=512, dtype="bfloat16", rotary_dim=16, floor=(30.0, 31.0, 32.0, 33.0)),
}


def test_a_plan_of_ropebridge_0_1_is_read_in_today_s_names():
    p = plan(from_heads(4, 64), REQUESTS["ladder"])
    old = p.to_dict()
    old["rope_dim"] = old.pop("rotary_dim")
    for row in old["heads"]:
        row["sine_error"] = row.pop("approximation_error")
        row.update(row.pop("ladder"), phase=0.0)
    assert EmulationPlan.from_dict(older.plan(old)) == p
    assert older.floors(old) == older.floors({"plan": old}) == (30.0, 31.0, 32.0, 33.0)


def test_mode_is_read_as_strategy_and_theta_rule():
    # ropebridge 0.1 and early 0.2 named both in one field, "mode"
    for strategy, request in REQUESTS.items():
        p = plan(from_heads(4, 64), request)
        old = {k: v for k, v in p.to_dict().items() if k not in ("strategy", "theta_rule")}
        old["mode"] = p.theta_rule or strategy
        assert EmulationPlan.from_dict(older.plan(old)) == p
    with pytest.raises(ValueError, match="mode"):
        older.plan({**old, "mode": "guess"})


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_a_0_1_record_asks_what_its_plan_shows(name):
    source = from_heads(4, 64)
    made = plan(source, REQUESTS[name]).to_dict()
    asked = older.asked(None, made, REQUESTS[name].target)
    assert asked["strategy"] == name
    assert first_difference(made, plan(source, PlanRequest(**asked)).to_dict()) is None


def test_a_0_2_request_is_read_as_asked():
    assert older.asked({"emulation": "single", "window": 512}, {}, None) == {"strategy": "single", "window": 512}
    with pytest.raises(ValueError, match="not an object"):
        older.asked([1], {}, None)


def test_a_record_s_geometry_under_0_2_s_key_is_read_as_geometry():
    assert older.keys({"layout": {"head_dim": 64}, "plan": {}}) == {"geometry": {"head_dim": 64}, "plan": {}}
    today = {"geometry": {"head_dim": 64}, "layout": "ignored"}
    assert older.keys(today) is today  # a record with both keeps today's
