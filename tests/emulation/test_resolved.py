"""resolve: every rule that completes a request, in one function; a Resolved has every choice made."""

import dataclasses
from types import SimpleNamespace

import pytest

from ropebridge.checkpoint.config import from_heads
from ropebridge.emulation import PlanRequest, Resolved, resolve
from ropebridge.emulation.ladder import DEFAULT_ADVANTAGE, default_cutoff
from ropebridge.emulation.resolved import checkpoint_dtype
from ropebridge.numerics import DEFAULT_CUTOFF, plan_tolerance

CHOICES = ("window", "dtype", "target", "engine", "kernel", "strategy", "head_dim", "tolerance", "cutoff", "floors")


@pytest.mark.parametrize("kwargs, strategy", [
    ({"dtype": "float32"}, "single"), ({"dtype": "bfloat16"}, "ladder"), ({"dtype": "float16"}, "ladder"),
    ({"dtype": "bfloat16", "target": "nemotron"}, "ladder"), ({"dtype": "bfloat16", "target": "starcoder2"}, "single"),
    ({"dtype": "bfloat16", "theta": 1e-6}, "single"),
    ({"dtype": "float32", "rope_base": 1e4}, "fixed-base"), ({"dtype": "bfloat16", "rope_base": 1e4}, "ladder"),
    ({"dtype": "float32", "strategy": "single", "rope_base": 1e4}, "fixed-base"),
    ({"dtype": "bfloat16", "rotary_dim": 128}, "ladder"),
    ({"dtype": "float32", "engine": "vllm"}, "ladder"),  # hd 64 + 4 is no size vLLM runs: the float32 ladder
    ({"dtype": "float32", "engine": "vllm", "target": "gpt-neox", "rope_base": 1e4, "rotary_dim": 64}, "fixed-base"),
])
def test_the_strategy_rule(kwargs, strategy):
    assert resolve(from_heads(4, 64), PlanRequest(**kwargs)).strategy == strategy


@pytest.mark.parametrize("kwargs, needle", [
    ({"dtype": "bfloat16", "target": "starcoder2", "strategy": "ladder"}, "ladder needs --target gpt-neox"),
    ({"dtype": "float32", "floor": 30.0}, "--floor and --calibration-text are for --strategy ladder"),
    ({"dtype": "float32", "rotary_dim": 8}, "--rotary-dim needs --rope-base"),
    ({"dtype": "float32", "target": "starcoder2", "rope_base": 1e4}, "are for gpt-neox"),
    ({"dtype": "float16", "rotary_dim": 130}, "at most 128"),  # the ladder by default in half precision
    ({"dtype": "float32", "kernel": "fa3"}, "no float32 path"),
    ({"calibration_text": "text", "dtype": "bfloat16"}, "needs a checkpoint directory with weights"),
])
def test_what_depends_on_the_source_is_refused_once_resolved(kwargs, needle):
    asked = PlanRequest(**kwargs)  # each value alone is fine
    with pytest.raises(ValueError, match=needle):
        resolve(from_heads(4, 64), asked)


def test_resolve_makes_every_choice_once():
    source = from_heads(4, 64, family="baichuan")
    resolved = resolve(source, PlanRequest(window=1024, dtype="bfloat16"))
    assert isinstance(resolved, Resolved)
    assert all(getattr(resolved, k) is not None for k in CHOICES)
    assert (resolved.target, resolved.strategy, resolved.engine, resolved.kernel) == ("llama", "ladder",
                                                                                     "transformers", "any")
    assert resolved.tolerance == plan_tolerance("bfloat16", source.slopes, 1024)
    assert resolved.cutoff == default_cutoff(1024, "bfloat16")
    assert resolved.floors == (resolved.cutoff + DEFAULT_ADVANTAGE,) * 4 and resolved.head_dim == 64
    assert resolve(source, resolved.asked) == resolved  # the asked request resolves to the same, always
    single = resolve(source, PlanRequest(window=1024, dtype="float32", tolerance=0.5, cutoff=30.0))
    assert (single.strategy, single.tolerance, single.cutoff, single.floors) == ("single", 0.5, 30.0, ())
    assert resolve(from_heads(4, 64), PlanRequest(dtype="float32", strategy="single")).cutoff == DEFAULT_CUTOFF
    assert resolve(from_heads(4, 64), PlanRequest()).dtype == "float32"  # no config: float32


def test_the_engine_chooses_the_target_and_the_kernel_where_none_is_asked():
    source = from_heads(4, 64)  # bloom: gpt-neox by default, which vLLM runs only through its backend
    vllm = resolve(source, PlanRequest(dtype="bfloat16", engine="vllm"))
    assert (vllm.target, vllm.kernel) == ("nemotron", "vllm-cpu")
    asked = resolve(source, PlanRequest(dtype="bfloat16", engine="vllm", kernel="fa2", target="gpt-neox"))
    assert (asked.target, asked.kernel) == ("gpt-neox", "fa2")  # what is asked is kept


def test_the_dtype_comes_from_the_checkpoint_s_config():
    assert checkpoint_dtype({"torch_dtype": "bfloat16"}) == "bfloat16"
    assert checkpoint_dtype({"dtype": "torch.float16"}) == "float16"
    assert checkpoint_dtype({"dtype": "int8"}) == checkpoint_dtype(None) == "float32"
    source = SimpleNamespace(**dataclasses.asdict(from_heads(4, 64)), config={"dtype": "float16"})
    assert resolve(source, PlanRequest()).dtype == "float16"


def test_a_target_that_cannot_carry_the_source_is_refused():
    gated = SimpleNamespace(family="baichuan", block="rmsnorm-gated", parallel=False, head_dim=64,
                            slopes=from_heads(4, 64).slopes)
    with pytest.raises(ValueError, match="cannot carry this baichuan model"):
        resolve(gated, PlanRequest(dtype="float32", target="gpt-neox"))
    assert resolve(gated, PlanRequest(dtype="float32")).target == "llama"


def test_the_record_s_two_objects():
    resolved = resolve(from_heads(4, 64), PlanRequest(dtype="bfloat16", jobs=2, window=512))
    data = resolved.to_dict()
    assert set(data) >= set(CHOICES) and "jobs" not in data and "asked" not in data
    assert "jobs" not in resolved.asked_dict() and resolved.asked_dict()["dtype"] == "bfloat16"
