"""A plan run in another dtype: its own numbers in its own dtype, and predictions checked against measurement."""

import dataclasses
import math

import pytest
import torch
from oracles import measure, measure_ladder

from ropebridge.checkpoint.config import from_heads
from ropebridge.emulation import PlanRequest, plan
from ropebridge.emulation import cross_dtype
from ropebridge.emulation.cross_dtype import coarser, predicted_in
from ropebridge.emulation.error_model import PairSpec
from ropebridge.emulation.ladder_fit import HeadFit
from ropebridge.numerics import DTYPES, TOLERANCE, Numerics

BLOOM = from_heads(8, 64)
PLANS = {  # every strategy and placement: the request's fields
    "single exact rotation": dict(target="starcoder2", dtype="float32", strategy="single"),
    "single, opposed pairs": dict(target="llama", dtype="float32", strategy="single"),
    "single in bfloat16": dict(target="starcoder2", dtype="bfloat16", strategy="single"),
    "single in float16, split": dict(target="starcoder2", dtype="float16", strategy="single"),
    "fixed base": dict(target="gpt-neox", dtype="float32", strategy="fixed-base", rope_base=10000.0, window=512),
    "ladder bfloat16": dict(target="gpt-neox", dtype="bfloat16", strategy="ladder"),
    "ladder float16": dict(target="nemotron", dtype="float16", strategy="ladder"),
    "ladder on llama": dict(target="llama", dtype="bfloat16", strategy="ladder"),
}


def _plan(**request):
    return plan(BLOOM, PlanRequest(**{"window": 2048, **request}))


@pytest.mark.parametrize("case", list(PLANS))
def test_in_its_own_dtype_the_plans_own_prediction(case):
    p = _plan(**PLANS[case])
    assert predicted_in(p, p.dtype) == p.worst_head.predicted_error
    head_error = cross_dtype._ladder_head if p.strategy == "ladder" else cross_dtype._pairs_head
    recomputed = max(head_error(p, h, p.dtype, p.window) for h in p.heads)  # every term derived again
    assert recomputed == pytest.approx(p.worst_head.predicted_error, rel=1e-9, abs=1e-12)


def test_coarser():
    assert coarser("float32", "bfloat16") == "bfloat16" and coarser("bfloat16", "float16") == "bfloat16"
    assert coarser("float16", "float16") == "float16"


def _ladder_measured(p, dtype):
    """The worst of a ladder plan's heads computed as a model does in ``dtype``, from the amplitudes P stored."""
    scale, stored = 1 / math.sqrt(p.head_dim), 1 / math.sqrt(p.head_dim + p.rotary_dim)
    worst = 0.0
    for h in p.heads:
        thetas = [t.theta for t in h.pairs]
        fit = HeadFit(h.slope, h.ladder.floor, h.ladder.exact_distance, tuple(-t.N * scale for t in h.pairs),
                      tuple(t.M * scale for t in h.pairs), 0.0, 0.0, h.ladder.shift)
        worst = max(worst, *measure_ladder(fit, thetas, Numerics(stored, p.window, dtype), queries=64))
    return worst


def _pairs_measured(p, dtype):
    """The worst of a single-pair plan's heads computed in ``dtype``, from the amplitudes P stored (q = N/s)."""
    worst = 0.0
    for h in p.heads:
        stored = [PairSpec(s.theta, float(torch.tensor(s.N / h.split).to(DTYPES[p.dtype]).double()) * h.split)
                  for s in h.specs()]
        num = Numerics(p.scale, p.window, dtype, cutoff=p.cutoff)
        worst = max(worst, measure(h.slope, stored, num, split=h.split, queries=64))
    return worst


@pytest.mark.parametrize("planned, run", [("bfloat16", "float32"), ("bfloat16", "float16"), ("float16", "bfloat16"),
                                          ("float16", "float32")])
def test_ladder_in_another_dtype_against_measurement(planned, run):
    p = _plan(target="gpt-neox", dtype=planned, strategy="ladder")
    measured, predicted = _ladder_measured(p, run), predicted_in(p, run)
    assert measured <= predicted <= 4 * measured, (measured, predicted)


@pytest.mark.parametrize("planned, run", [("float32", "bfloat16"), ("bfloat16", "float32")])
def test_single_pair_in_another_dtype_against_measurement(planned, run):
    p = _plan(target="starcoder2", dtype=planned, strategy="single")
    measured, predicted = _pairs_measured(p, run), predicted_in(p, run)
    assert measured <= predicted <= 4 * measured, (measured, predicted)
    if planned == "float32":  # the exact pair's large amplitudes: float32's plan is unfit for bfloat16
        assert predicted > TOLERANCE["bfloat16"] > p.worst_head.predicted_error


def test_a_value_beyond_the_dtypes_range_predicts_inf():
    p = _plan(target="starcoder2", dtype="float32", strategy="single")  # N ~ 1e7: beyond float16's 65504
    assert predicted_in(p, "float16") == math.inf and math.isfinite(predicted_in(p, "bfloat16"))


@pytest.mark.parametrize("case", ["single exact rotation", "single in float16, split", "ladder bfloat16",
                                  "ladder float16"])
def test_over_fewer_positions_the_prediction_shrinks_to_the_plans_at_the_window(case):
    p = _plan(**PLANS[case])
    at = [predicted_in(p, p.dtype, n) for n in (64, 512, 1024, p.window)]
    assert at[-1] == predicted_in(p, p.dtype) and at == sorted(at), at
    with pytest.raises(ValueError, match="positions must be in 1..2048"):
        predicted_in(p, p.dtype, p.window + 1)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_over_fewer_positions_the_ladder_prediction_against_measurement(dtype):
    # what verify compares on 512 tokens of a 2048-token plan: measured over those positions only
    p, n = _plan(target="gpt-neox", dtype=dtype, strategy="ladder"), 512
    short = dataclasses.replace(p, window=n)  # the same heads, measured over n positions
    measured, predicted = _ladder_measured(short, dtype), predicted_in(p, dtype, n)
    assert measured <= predicted <= 4 * measured, (measured, predicted)
    assert predicted < predicted_in(p, dtype)
