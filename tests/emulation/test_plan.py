"""Plan types: frozen, JSON round trips, and refusals on construction."""

import dataclasses
import json

import pytest

from ropebridge.checkpoint.config import from_heads
from ropebridge.emulation import STRATEGIES, EmulationPlan, PlanRequest, plan
from ropebridge.emulation.plan import HeadPlan, PairTerm

REQUESTS = {
    "single": PlanRequest(window=1024, dtype="float16", target="starcoder2"),
    "fixed-base": PlanRequest(window=1024, dtype="float32", rope_base=10000.0, rotary_dim=16, pairs=2),
    "ladder": PlanRequest(window=512, dtype="bfloat16", rotary_dim=16),
}


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_is_frozen_and_round_trips_through_json(strategy):
    p = plan(from_heads(4, 64), REQUESTS[strategy])
    assert p.strategy == strategy
    data = json.loads(p.to_json())
    assert {"heads", "window", "dtype", "rotary_dim", "max_window"} <= set(data)
    assert {"head", "slope", "theta", "N", "approximation_error", "predicted_error"} <= set(data["heads"][0])
    assert EmulationPlan.from_dict(data) == p
    assert (p.heads[0].ladder is not None) == (strategy == "ladder")
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.window = 3


def test_the_opposed_pairs_round_trip_and_only_they_say_so():
    # the llama target's single strategy: pairs 0 and 1, the second opposed; every other plan's record keeps the
    # fields it had (no "opposed": checkpoints written before it are byte for byte the same)
    p = plan(from_heads(4, 64, family="baichuan"), PlanRequest(window=1024, dtype="float32", target="llama"))
    data = json.loads(p.to_json())
    assert [pair.get("opposed", False) for pair in data["heads"][0]["pairs"]] == [False, True]
    assert "opposed" not in data["heads"][0]["pairs"][0]
    assert EmulationPlan.from_dict(data) == p and p.rotary_dim == 4
    single = json.loads(plan(from_heads(4, 64), REQUESTS["single"]).to_json())
    assert all("opposed" not in pair for h in single["heads"] for pair in h["pairs"])


def test_construction_refuses_what_cannot_be_served():
    pair = PairTerm(1e-3, 100.0)
    head = HeadPlan(0, 0.5, (pair,), 1.0, 0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="pi/2"):  # a single pair must stay monotone over the window
        EmulationPlan(64, 2000, "float32", "single", (head,), theta_rule="theta")
    big = HeadPlan(0, 0.5, (PairTerm(1e-6, 1e6),), 1.0, 0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="float16"):
        EmulationPlan(64, 1000, "float16", "single", (big,), theta_rule="theta")
    for bad, match in [({"theta": 0.0}, "theta"), ({"N": float("nan")}, "N")]:
        with pytest.raises(ValueError, match=match):
            PairTerm(**{"theta": 1e-3, "N": 1.0, **bad})
    with pytest.raises(ValueError, match="strategy"):
        EmulationPlan(64, 1000, "float32", "guess", (head,))
    with pytest.raises(ValueError, match="theta_rule"):  # the single pair says how its theta was chosen
        EmulationPlan(64, 1000, "float32", "single", (head,))
    with pytest.raises(ValueError, match="theta_rule"):  # and only the single pair has a rule
        EmulationPlan(64, 1000, "float32", "ladder", (head,), theta_rule="theta")


def test_the_strategy_label_names_the_single_pair_s_rule():
    assert plan(from_heads(2, 64), REQUESTS["ladder"]).strategy_label == "ladder"
    assert plan(from_heads(2, 64), REQUESTS["single"]).strategy_label == "single (error-optimal)"
