"""The strategy object: only a name of STRATEGY_NAMES, the ladder's options refused elsewhere, a base in words."""

from types import SimpleNamespace

import pytest

from ropebridge.emulation.strategy import STRATEGY_NAMES, Strategy, base_words, refuse_ladder_options


def test_a_strategy_is_named_from_the_one_list_of_names():
    assert STRATEGY_NAMES[0] == "ladder"  # the default first (--strategy's help lists it first)
    with pytest.raises(ValueError, match="'guess' is not one of STRATEGY_NAMES"):
        Strategy("guess", print, print, str)


@pytest.mark.parametrize("given", [{"floor": 40.0}, {"advantage": 5.0}, {"calibration_text": "text"}])
def test_the_ladder_s_options_are_refused_by_the_others(given):
    request = SimpleNamespace(**{"floor": None, "advantage": None, "calibration_text": None, **given})
    with pytest.raises(ValueError, match="are for --strategy ladder"):
        refuse_ladder_options(request)
    refuse_ladder_options(SimpleNamespace(floor=None, advantage=None, calibration_text=None))


def test_a_base_in_words():
    assert base_words(SimpleNamespace(base=370.3456789, rotary_dim=32)) == "RoPE base 370.346, rotary dim 32"
