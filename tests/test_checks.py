"""Validation helpers: values normalised once, every refusal naming the key and the value."""

import math

import pytest

from ropebridge import _checks


def test_numbers_are_normalised_and_non_finite_ones_refused():
    assert _checks.number("x", "2.5") == 2.5 and _checks.positive_int("n", 4.0) == 4
    for bad in (math.nan, math.inf, "x", None, True):
        with pytest.raises(ValueError, match="x"):
            _checks.number("x", bad)


@pytest.mark.parametrize("call, match", [
    (lambda: _checks.positive("theta", 0.0), "theta must be > 0, got 0.0"),
    (lambda: _checks.at_least("floor", -1, 0.0), "floor"),
    (lambda: _checks.positive_int("rotary_dim", 6.5), "rotary_dim"),
    (lambda: _checks.positive_int("rotary_dim", 6, even=False) and _checks.positive_int("rotary_dim", 7, even=True),
     "rotary_dim"),
    (lambda: _checks.non_negative_int("seed", -1), "seed"),
    (lambda: _checks.choice("dtype", "float8", ("float32",)), "dtype"),
    (lambda: _checks.require({}, "rope_theta", "default rope"), "rope_theta"),
])
def test_each_refusal_names_what_is_wrong(call, match):
    with pytest.raises(ValueError, match=match):
        call()
