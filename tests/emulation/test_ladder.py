"""The ladder's plan: the head-dim rule, the cutoff and floors, the base, one plan whatever --jobs."""

import json
import math

import pytest

from ropebridge.alibi import slopes as alibi_slopes
from ropebridge.checkpoint.config import AlibiSource
from ropebridge.emulation import EmulationPlan, PlanRequest, ladder, plan
from ropebridge.emulation.fixed_base import engine_frequencies


def plan_ladder(slopes, head_dim, window, **kw):
    """The ladder plan of heads with these slopes (bfloat16 unless ``dtype`` says otherwise)."""
    source = AlibiSource("bloom", len(slopes), head_dim, 8.0, tuple(slopes))
    return plan(source, PlanRequest(window=window, strategy="ladder", **{"dtype": "bfloat16", **kw}))


@pytest.mark.parametrize("head_dim, kernel, expected", [
    (64, "any", 32), (32, "any", 32), (128, "any", 32), (80, "any", 32), (100, "any", 44),
    (128, "fa3", 64), (64, "fa3", 32), (64, "flashinfer", 64), (128, "flashinfer", 128), (128, "fa2", 32),
    (64, "llama.cpp-cuda", 32), (128, "llama.cpp-cuda", 128), (112, "fa2", 32),
])
def test_rotary_dim_rule_gives_heads_the_kernel_runs(head_dim, kernel, expected):
    from ropebridge.targets.kernels import KERNELS

    r = ladder.rotary_dim_for(head_dim, kernel)
    assert r == expected and KERNELS[kernel].native(head_dim + r) and r >= ladder.MIN_ROTARY_DIM
    assert not any(KERNELS[kernel].native(head_dim + s) for s in range(ladder.MIN_ROTARY_DIM, r, 2))  # the smallest


def test_a_kernel_is_planned_for_and_a_head_dim_it_does_not_run_refused():
    p = plan_ladder(alibi_slopes(4).tolist(), 128, 512, kernel="fa3")
    assert p.head_dim + p.rotary_dim == 192  # FA3 pads 160 to its 192 kernel anyway: R = 64 costs nothing more
    with pytest.raises(ValueError, match="--rotary-dim 32 gives head dim 160, which --kernel flashinfer does not run"):
        plan_ladder(alibi_slopes(4).tolist(), 128, 512, kernel="flashinfer", rotary_dim=32)
    with pytest.raises(ValueError, match="kernel"):
        PlanRequest(kernel="tpu")


def test_the_plan_is_the_same_whatever_jobs(monkeypatch):
    # 4 distinct heads over 16K tokens, the pool taken whatever its rule says (and seen to start)
    slopes, window = alibi_slopes(4).tolist(), 16384
    one = plan_ladder(slopes, 64, window, tolerance=2.0, jobs=1)
    pools = []
    real_pool = ladder._pool
    monkeypatch.setattr(ladder, "worth_a_pool", lambda distinct, window: True)
    monkeypatch.setattr(ladder, "_pool", lambda jobs: pools.append(jobs) or real_pool(jobs))
    two = plan_ladder(slopes, 64, window, tolerance=2.0, jobs=2)
    assert pools == [2] and one == two


def test_a_pool_only_where_it_pays_off():
    # benchmarks/results/plan_time.json: many short Python-bound fits, or very long ones
    assert not ladder.worth_a_pool(16, 131072) and not ladder.worth_a_pool(6, 32768)
    assert ladder.worth_a_pool(112, 2048) and ladder.worth_a_pool(32, 8192) and ladder.worth_a_pool(6, 2**20)


@pytest.mark.parametrize("window, dtype, expected", [(2048, "bfloat16", 13.17), (32768, "bfloat16", 15.94),
                                                     (2048, "float16", 15.25), (32768, "float16", 18.02)])
def test_default_cutoff_leaves_the_far_keys_one_unit_roundoff(window, dtype, expected):
    cutoff = ladder.default_cutoff(window, dtype)
    assert cutoff == pytest.approx(expected, abs=0.01)
    u = {"bfloat16": 2.0**-8, "float16": 2.0**-11}[dtype]
    assert window * math.exp(-cutoff) == pytest.approx(u, rel=1e-12)  # the L far keys' total weight


def test_floors_are_the_cutoff_plus_the_advantage():
    slopes = alibi_slopes(4).tolist()
    planned = plan_ladder(slopes, 32, 256, dtype="bfloat16", advantage=[1.0, 2.0, 3.0, 4.0], cutoff=15.0,
                       tolerance=2.0)
    assert [h.ladder.floor for h in planned.heads] == [16.0, 17.0, 18.0, 19.0] and planned.cutoff == 15.0
    default = plan_ladder(slopes, 32, 256, dtype="bfloat16", tolerance=2.0)
    assert default.cutoff == ladder.default_cutoff(256, "bfloat16")
    assert {h.ladder.floor for h in default.heads} == {default.cutoff + ladder.DEFAULT_ADVANTAGE}
    with pytest.raises(ValueError, match="not both"):
        plan_ladder(slopes, 32, 256, floor=60.0, advantage=1.0)
    with pytest.raises(ValueError, match="advantage"):
        plan_ladder(slopes, 32, 256, advantage=-1.0)


def test_plan_serialises_and_respects_a_fixed_base():
    p = plan_ladder(alibi_slopes(4).tolist(), 32, 1024, dtype="float16", rope_base=10000.0, rotary_dim=32,
                       tolerance=0.25)
    assert p.strategy == "ladder" and p.base == 10000.0 and p.rotary_dim == 32 and p.pairs_per_head == 16
    h = p.heads[0]
    assert len(h.pairs) == 16 and h.ladder.floor == ladder.default_cutoff(1024, "float16") + ladder.DEFAULT_ADVANTAGE
    assert [p.theta for p in h.pairs] == engine_frequencies(10000.0, 32).tolist()
    again = EmulationPlan.from_dict(json.loads(p.to_json()))
    assert again == p


def test_plan_refuses_bad_values():
    with pytest.raises(ValueError, match="floor"):
        plan_ladder([0.5], 32, 256, floor=[10.0])
    with pytest.raises(ValueError, match="floors for"):
        plan_ladder([0.5, 0.25], 32, 256, floor=[50.0])
    with pytest.raises(ValueError, match="rotary_dim"):
        plan_ladder([0.5], 32, 256, rotary_dim=7)


def test_the_fits_cost_is_said_before_a_long_fit_and_a_fit_beyond_memory_is_refused(monkeypatch, caplog):
    """A window whose fit would outgrow the memory available is refused in one line naming --window and the
    size, before any fit runs; a fit predicted to run long says so first (on a terminal or not)."""
    import logging

    from ropebridge.checkpoint.config import from_heads
    from ropebridge.emulation import PlanRequest, plan
    from ropebridge.emulation import ladder

    seconds, per_process = ladder.fit_cost(6, 4 * 2**20, 32, 2)
    assert 150 < seconds < 250 and 4 * 2**30 < per_process < 8 * 2**30  # the measured 185 s and 5.5 GB
    monkeypatch.setattr(ladder, "_available_memory", lambda: 2**27)
    with pytest.raises(ValueError, match=r"--window 65536: the ladder's fit on 32 rotary dims would hold about .* "
                                         r"GiB .* more than the 0.125 GiB available; plan a shorter --window"):
        plan(from_heads(4, 32), PlanRequest(window=65536, dtype="bfloat16"))
    monkeypatch.setattr(ladder, "_available_memory", lambda: None)
    monkeypatch.setattr(ladder, "LONG_FIT_SECONDS", 0.0)
    with caplog.at_level(logging.WARNING, logger="ropebridge.emulation.ladder"):
        plan(from_heads(4, 32), PlanRequest(window=512, dtype="bfloat16"))
    assert any("fitting 4 heads over a 512-token window: about" in r.message for r in caplog.records)


def test_a_size_that_would_not_fit_memory_is_decided_before_any_fit(monkeypatch, caplog):
    """The next rotary dim, tried where the first misses the tolerance, is not tried where its fit would outgrow
    the memory available (said before any fit); where the first would, nothing is fitted at all."""
    import logging

    from ropebridge.checkpoint.config import from_heads
    from ropebridge.emulation import ladder_fit

    fitted = []
    real = ladder_fit.fit_head

    def counted(slope, thetas, *args, **kwargs):
        fitted.append(len(thetas))
        return real(slope, thetas, *args, **kwargs)

    monkeypatch.setattr(ladder, "fit_head", counted)
    window = 4096
    sizes = ladder._ladder_sizes("any", 32, ladder.MIN_ROTARY_DIM, 2)
    first, second = (ladder.fit_cost(1, window, r, 1)[1] for r in sizes)
    assert sizes[0] == 32 and first < second
    monkeypatch.setattr(ladder, "_available_memory", lambda: int((first + second) / 2))  # 32 dims fit, the next not
    with caplog.at_level(logging.WARNING, logger="ropebridge.emulation.ladder"):
        # a tolerance no ladder meets: without the budget, the next size would be fitted too
        p = plan(from_heads(2, 32), PlanRequest(window=window, dtype="bfloat16", tolerance=1e-6, jobs=1))
    assert p.rotary_dim == 32 and set(fitted) == {16}, fitted  # 16 pairs: only the 32-dim ladder ran
    assert any(f"the ladder on 32 rotary dims is tried alone: {sizes[1]}" in r.message for r in caplog.records)
    fitted.clear()
    monkeypatch.setattr(ladder, "_available_memory", lambda: int(first / 2))
    with pytest.raises(ValueError, match="would hold about"):
        plan(from_heads(2, 32), PlanRequest(window=window, dtype="bfloat16", jobs=1))
    assert fitted == []


def test_a_kernel_size_beyond_the_ladders_largest_is_refused_before_any_fit(monkeypatch):
    # vLLM's CPU sizes jump from 256 to 512: a head dim of 226 to 254 would need R = 512 - hd > 128, which takes
    # hours to fit (given by hand, --rotary-dim 280 is refused); refused at once, naming the R it would need
    monkeypatch.setattr(ladder, "fit_head", lambda *a, **k: pytest.fail("fitted"))
    with pytest.raises(ValueError, match=r"head dim 232: no rotary dim R from 32 to 128 makes 232 \+ R a size "
                                         r"--kernel vllm-cpu runs natively .* \(the first is R = 280, beyond the 128"):
        plan_ladder(alibi_slopes(4).tolist(), 232, 8192, kernel="vllm-cpu")
    assert ladder.rotary_dim_for(224, "vllm-cpu") == 32  # 256: within the ladder's sizes
