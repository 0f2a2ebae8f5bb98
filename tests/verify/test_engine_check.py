"""verify.engine_check: how a run in an engine is judged and reported."""

import math

import pytest

from ropebridge.verify.engine_check import NEAR_TIE, EngineCheck, judge, rows

RUN = {"engine": "vllm", "title": "vLLM", "flags": ["--kv-cache-dtype", "fp8"], "options": {}, "python": "py",
       "gguf": None}


def check(**numbers) -> EngineCheck:
    base = dict(max_err=0.1, mean_err=0.01, ppl_exact=10.0, ppl_engine=10.1, greedy_tokens=8, decode_max_err=0.2)
    return EngineCheck(run=RUN, facts={"engine": "vllm 0.32.0", "kv_cache_dtype": "fp8"}, **{**base, **numbers})


def test_within_the_limit_passes_and_each_number_beyond_it_fails_naming_the_option():
    assert judge(check(), 1.0, "tolerance 1") == []
    assert judge(check(max_err=1.5), 1.0, "tolerance 1") == [
        "in vLLM --kv-cache-dtype fp8: max |Δ log p| from exact ALiBi 1.5 > the limit 1 (tolerance 1)"]
    assert judge(check(decode_max_err=1.5), 1.0, "t") == [
        "in vLLM --kv-cache-dtype fp8: greedy decoding through its KV cache, max |Δ log p| 1.5 > the limit 1 (t)"]


@pytest.mark.parametrize("name", ["max_err", "mean_err", "ppl_engine", "decode_max_err"])
@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_a_number_that_is_not_finite_fails(name, value):
    failures = judge(check(**{name: value}), 1e9, "t")
    assert any("not a finite number" in f for f in failures), failures


def test_a_parting_fails_beyond_a_near_tie_only():
    assert judge(check(parting=3, parting_margin=NEAR_TIE * 1.0), 1.0, "t") == []
    failures = judge(check(parting=3, parting_margin=NEAR_TIE * 1.0 + 1e-9), 1.0, "t")
    assert failures and "parts from exact's at token 3" in failures[0]
    assert judge(check(parting=3, parting_margin=math.nan), 1.0, "t")  # a margin not known is no near tie


def test_an_engine_that_did_not_run_is_one_failure_and_one_row():
    refused = EngineCheck(run=RUN, refused="ValueError: head size 72 is not supported")
    assert judge(refused, 1.0, "t") == ["in vLLM --kv-cache-dtype fp8: the engine did not run DST: ValueError: head "
                                        "size 72 is not supported"]
    assert rows(refused, "bar") == [("engine", "did not run DST: ValueError: head size 72 is not supported", "judged")]


def test_the_rows_say_what_ran_and_how_each_number_is_judged():
    got = rows(check(parting=3, parting_margin=0.5, seconds=12.0), "judged: <= 1")
    names = [r[0] for r in got]
    assert names == ["engine", "scored tokens", "mean |Δ log p|", "perplexity", "decode (8 tokens)", "greedy",
                     "engine time"]
    assert got[0] == ("engine", "vllm 0.32.0", "reported: kv_cache_dtype fp8")
    assert got[3][1] == "exact 10, engine 10.1 (+1.00%)"
    assert got[5][1] == "parts at token 3 (exact's margin there 0.5)"
    assert check().label == "vLLM --kv-cache-dtype fp8"
