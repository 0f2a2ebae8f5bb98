"""targets.TARGETS: each entry's transformers class and config model_type agree with transformers' own, each row
is one writer's, and its facts are checked on construction."""

import transformers as T

import dataclasses

import pytest

from ropebridge.targets import TARGETS, carrying, of_model_type
from ropebridge.writers import WRITERS


def test_each_target_names_its_transformers_class_and_model_type():
    for target in TARGETS.values():
        assert getattr(T, target.architecture).config_class.model_type == target.model_type, target.name
        assert of_model_type(target.model_type) is target
    assert of_model_type("bloom") is None and of_model_type(None) is None


def test_every_target_has_one_writer_and_every_writer_a_target():
    assert set(WRITERS) == set(TARGETS)


def test_a_row_with_an_unknown_convention_is_refused():
    with pytest.raises(ValueError, match="pair_dims"):
        dataclasses.replace(TARGETS["nemotron"], pair_dims="last-two")
    with pytest.raises(ValueError, match="rope_form"):
        dataclasses.replace(TARGETS["nemotron"], rope_form="yarn")


def test_the_targets_carrying_a_strategy_come_from_the_rows():
    assert carrying("ladder") == ("gpt-neox", "nemotron", "llama", "persimmon", "stablelm")
    assert carrying("fixed-base") == ("gpt-neox", "persimmon", "stablelm")  # the rotary block's targets


def test_the_served_head_dim():
    neox, nemotron = TARGETS["gpt-neox"], TARGETS["nemotron"]
    assert neox.served_head_dim(64, 4, "single") == 68 and nemotron.served_head_dim(64, 4, "single") == 66
    assert nemotron.served_head_dim(64, 32, "ladder") == 96 and nemotron.served_head_dim(64, None, "single") == 66


def test_a_parallel_source_is_refused_in_one_place_by_every_sequential_target():
    from types import SimpleNamespace

    from ropebridge.targets import TARGETS

    parallel = SimpleNamespace(family="falcon", block="layernorm", parallel=True)
    for target in TARGETS.values():
        if target.parallel_residual:
            target.check_source(parallel)
            continue
        with pytest.raises(ValueError, match=f"--target {target.name} has a sequential residual only; this falcon "
                                             "model runs attention and MLP in parallel: use --target gpt-neox$"):
            target.check_source(parallel)
    assert [t.name for t in TARGETS.values() if t.carries(parallel)] == ["gpt-neox"]


@pytest.mark.parametrize("name, placement", [("gpt-neox", "block"), ("persimmon", "block"), ("starcoder2", "free"),
                                             ("nemotron", "free"), ("stablelm", "block"), ("llama", "opposed")])
def test_each_target_places_the_single_pair_as_its_rope_turns(name, placement):
    from ropebridge.targets import llama_rope

    pair = TARGETS[name].single_pair(2.0**-14, 64, 2048)
    assert pair.placement == placement
    if placement == "block":  # pair 1 of a 4-dim block at base theta^-2
        assert pair.plan_fields() == {"base": 2.0**28, "rotary_dim": 4} and pair.thetas == (2.0**-14,)
    elif placement == "opposed":  # the whole head hd + 4, both thetas from its llama3 band
        rope, thetas = llama_rope.opposed_rope(2.0**-14, 68, 2048)
        assert pair.plan_fields() == {"rotary_dim": 4, "rope_parameters": rope} and pair.thetas == tuple(thetas)
    else:
        assert pair.plan_fields() == {} and pair.thetas == (2.0**-14,)


def test_the_ladder_s_frequencies_are_those_the_target_s_engines_compute():
    from ropebridge.frequencies import engine_frequencies
    from ropebridge.targets import llama_rope

    rope, thetas = TARGETS["gpt-neox"].ladder_frequencies(500.0, 32, 96, 4096)
    assert rope is None and (thetas == engine_frequencies(500.0, 32)).all()
    rope, thetas = TARGETS["llama"].ladder_frequencies(500.0, 32, 96, 4096)
    want_rope, want = llama_rope.ladder_rope(500.0, 32, 96, 4096)
    assert rope == want_rope and (thetas == want).all()
    with pytest.raises(ValueError, match="normal range"):
        TARGETS["nemotron"].ladder_frequencies(1e300, 64, 128, 4096)
