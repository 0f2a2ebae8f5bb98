"""emulation.kv_cache: a cache coarser than the plan's dtype rounds the pairs' keys again; the formats as data, the
prediction from the plan's amplitudes, and which caches hold."""

import json
import math

import pytest
import torch

from ropebridge.checkpoint.config import from_heads
from ropebridge.emulation import PlanRequest, plan
from ropebridge.emulation import kv_cache
from ropebridge.emulation.ladder_fit import extreme_factor


@pytest.fixture(scope="module")
def plans():
    source = from_heads(6, 32)
    return {dtype: plan(source, PlanRequest(window=1024, dtype=dtype)) for dtype in ("bfloat16", "float16", "float32")}


@pytest.mark.parametrize("name, dtype", [("fp8_e4m3", torch.float8_e4m3fn), ("fp8_e5m2", torch.float8_e5m2),
                                         ("bfloat16", torch.bfloat16), ("float16", torch.float16)])
def test_a_float_formats_rounding_is_torchs_cast(name, dtype):
    # the unit roundoff and the largest value, against torch's own cast: uniform values in [1, 2) round within u
    # relative, and the largest finite value is the format's
    fmt = kv_cache.FORMATS[name]
    x = 1 + torch.rand(100_000, dtype=torch.float64)
    err = ((x.to(dtype).double() - x) / x).abs().max().item()
    assert fmt.u / 2 < err <= fmt.u and fmt.top == torch.finfo(dtype).max
    std = ((x.to(dtype).double() - x) / x).std().item()  # uniform within ±u·x/x: sigma u/√3 per unit, up to x's spread
    assert fmt.sigma / 2 < std < fmt.sigma * 1.01


@pytest.mark.parametrize("name, levels", [("q8_0", 127), ("q4_0", 8)])
def test_a_block_formats_rounding_is_llama_cpps(name, levels):
    # llama.cpp's q8_0/q4_0 quantize a block of 32 with d = max|x| / levels (q4_0: the signed max / -8) and round
    # to the nearest level: the error is uniform within ±d/2, so sigma d/(2√3) for a block whose max is 1
    x = torch.rand(1000, kv_cache.BLOCK, dtype=torch.float64) * 2 - 1
    x[:, 0] = 1.0  # every block's largest |value| is 1, as a rotated k of amplitude 1 has about
    d = x.abs().amax(1, keepdim=True) / levels
    err = (torch.round(x / d) * d - x)
    assert err.abs().max().item() <= 0.5 / levels + 1e-12
    assert kv_cache.FORMATS[name].sigma == pytest.approx(err[:, 1:].std().item(), rel=0.05)


def test_the_cache_error_is_the_extreme_of_the_pairs_roundings(plans):
    p = plans["bfloat16"]
    fmt = kv_cache.FORMATS["fp8"]
    scale = 1 / math.sqrt(p.head_dim)
    want = max(extreme_factor(p.window) * fmt.sigma * math.sqrt(sum((math.hypot(q.N, q.M) * scale) ** 2
                                                                   for q in h.pairs)) for h in p.heads)
    assert kv_cache.cache_error(p, "fp8") == pytest.approx(want, rel=1e-12)
    assert kv_cache.cache_error(p, "auto") == 0.0
    # e5m2 has one bit fewer: twice e4m3's; both above the plan's own rounding, as q8_0 is with its query's
    assert kv_cache.cache_error(p, "fp8_e5m2") == pytest.approx(2 * kv_cache.cache_error(p, "fp8"))
    assert min(kv_cache.cache_error(p, n) for n in ("fp8", "q8_0")) > p.worst_head.rounding_error
    h = max(p.heads, key=lambda h: max(math.hypot(q.N, q.M) for q in h.pairs))
    amplitudes = [math.hypot(q.N, q.M) * scale for q in h.pairs]
    query = extreme_factor(p.window) * math.sqrt(len(amplitudes)) * max(amplitudes) / (254 * math.sqrt(3))
    assert kv_cache.cache_error(p, "q8_0") >= query


@pytest.mark.parametrize("dtype, engine, held", [
    ("bfloat16", "vllm", ["auto", "float16", "bfloat16"]),
    ("float16", "vllm", ["auto", "float16"]),
    ("float16", "llama.cpp", ["f32", "f16"]),
    ("bfloat16", "llama.cpp", ["f32", "f16", "bf16"]),
    ("float32", "vllm", ["auto"]),
    ("bfloat16", "sglang", ["auto", "bfloat16", "bf16"]),  # SGLang's two spellings of one format
    ("float16", "sglang", ["auto"]),
    ("float32", "sglang", ["auto"]),
])
def test_which_caches_hold_follows_the_plans_dtype(plans, dtype, engine, held):
    assert sorted(kv_cache.holding(plans[dtype], engine)) == sorted(held)
    for name in ("fp8", "fp8_e5m2"):
        assert not kv_cache.holds(plans[dtype], name)
    assert not kv_cache.holds(plans[dtype], "q4_0")


def test_a_key_beyond_the_formats_range_breaks_it(plans):
    import dataclasses

    p = plans["float16"]
    big = dataclasses.replace(p, heads=tuple(dataclasses.replace(h, split=1000.0) for h in p.heads))
    assert kv_cache.cache_error(big, "fp8") == math.inf and not kv_cache.holds(big, "fp8")
    assert kv_cache.cache_error(big, "float16") < math.inf


def test_plan_and_convert_refuse_a_cache_that_breaks_the_plan_in_one_line(tmp_path, capsys):
    from pico import build

    from ropebridge.cli import main

    src = build(tmp_path / "bloom", "bloom-4heads")
    for command in (["plan", "--model", str(src)], ["convert", str(src), str(tmp_path / "rope")]):
        argv = [*command, "--engine", "vllm", "--dtype", "bfloat16", "--window", "256"]
        assert main([*argv, "--kv-cache-dtype", "fp8"]) == 2
        err = capsys.readouterr().err
        assert "--kv-cache-dtype fp8 breaks this bfloat16 plan" in err and "hold for it: auto, float16, bfloat16" in err
        assert err.count("\n") == 1 and not (tmp_path / "rope").exists()
        assert main([*argv, "--kv-cache-dtype", "q8_0"]) == 2
        assert "is not a cache --engine vllm keeps" in capsys.readouterr().err
        assert main([*argv, "--kv-cache-dtype", "auto"]) == 0
        capsys.readouterr()
    record = json.loads((tmp_path / "rope" / "ropebridge.json").read_text())
    assert record["resolved"]["kv_cache_dtype"] == "auto" and record["asked"]["kv_cache_dtype"] == "auto"


def test_a_request_without_a_cache_records_as_before(tmp_path):
    request = PlanRequest(window=256)
    assert "kv_cache_dtype" not in request.to_dict()
    assert PlanRequest(window=256, kv_cache_dtype="q8_0").to_dict()["kv_cache_dtype"] == "q8_0"
    with pytest.raises(ValueError, match="kv_cache_dtype must be one of"):
        PlanRequest(kv_cache_dtype="fp4")


RESULTS = __import__("pathlib").Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "serving_options.json"


def test_the_prediction_is_within_4x_of_every_cache_measured_both_ways():
    # every conversion run under a K cache coarser than its dtype (llama.cpp's q8_0 and q4_0 on float16 and bfloat16
    # plans, fp8 through transformers' rounded cache on vLLM's bfloat16 ones, SGLang's own fp8_e4m3 and fp8_e5m2 caches
    # on its bfloat16 ones): measured max |Δ log p| / predicted
    from ropebridge.limit import LOGIT_FACTOR

    rows = [r for r in json.loads(RESULTS.read_text())["rows"]
            if r.get("predicted_cache_error") is not None and not r.get("refused")]
    assert len(rows) >= 40 and {r["model"] for r in rows} == {"demo", "demo-mpt", "demo-falcon", "demo-baichuan",
                                                              "demo-jais"}
    assert {r["engine"] for r in rows} == {"llama.cpp", "transformers", "sglang"}
    ratios = [r["max_abs_dlogp"] / r["predicted_cache_error"] for r in rows]
    assert 1 / LOGIT_FACTOR <= min(ratios) and max(ratios) <= LOGIT_FACTOR, (min(ratios), max(ratios))
    # each was predicted to break its plan, and each moved every token more than any setting that holds does (their
    # mean |Δ log p| at most 8.4 times the baseline's; these at least 12.5); one, MPT's bfloat16 conversion with a
    # q8_0 K cache, stays within 0.5% of exact's perplexity (+0.47%)
    assert min(r["mean_over_baseline"] for r in rows) >= 12.5
    holding = [r["mean_over_baseline"] for r in json.loads(RESULTS.read_text())["rows"] if r.get("holds")
               and r["kind"] == "converted" and r.get("predicted_cache_error") is None]
    assert max(holding) < 9


def test_the_stored_prediction_is_this_codes():
    from ropebridge.demo import data_dir
    from ropebridge.planning import plan_checkpoint

    stored = next(r for r in json.loads(RESULTS.read_text())["rows"] if r["model"] == "demo" and r["kind"] ==
                  "converted" and r["engine"] == "transformers" and r["setting"] == "--kv-cache-dtype fp8")
    p, _, _ = plan_checkpoint(data_dir("demo"), PlanRequest(window=2048, dtype="bfloat16", engine="vllm"))
    assert kv_cache.cache_error(p, "fp8", 1024) == pytest.approx(stored["predicted_cache_error"], rel=1e-9)


def test_sglang_caches_are_refused_by_sglangs_names(tmp_path, capsys):
    from pico import build

    from ropebridge.cli import main

    src = build(tmp_path / "bloom", "bloom-4heads")
    argv = ["plan", "--model", str(src), "--engine", "sglang", "--dtype", "bfloat16", "--window", "256"]
    assert main([*argv, "--kv-cache-dtype", "fp8_e4m3"]) == 2
    err = capsys.readouterr().err
    assert "--kv-cache-dtype fp8_e4m3 breaks this bfloat16 plan" in err and "hold for it: auto, bfloat16, bf16" in err
    assert main([*argv, "--kv-cache-dtype", "fp8"]) == 2  # vLLM's name for e4m3: SGLang calls it fp8_e4m3
    assert "is not a cache --engine sglang keeps" in capsys.readouterr().err
    assert main([*argv, "--kv-cache-dtype", "bf16"]) == 0
