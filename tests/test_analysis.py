"""Pair analysis and bounds, with the numbers from the source material."""

import math

import pytest

from ropebridge import analysis
from ropebridge.frequencies import inv_freq, yarn_correction_range


def test_wavelengths_head_dim_128_base_10000():
    result = analysis.analyse(128, {"rope_theta": 10000.0}, 4096)
    assert result.pairs[0].wavelength == pytest.approx(2 * math.pi)  # fastest: every ~6.3 tokens
    assert result.pairs[-1].wavelength == pytest.approx(54410, rel=1e-3)  # slowest: every ~54k
    # at L = 4096, 18 of the 64 pairs never complete a turn
    assert len(result.pairs) == 64
    assert result.pairs_without_full_turn == list(range(46, 64))
    assert analysis.pairs_without_full_turn(inv_freq(128, {"rope_theta": 10000.0})[0], 4096) == list(range(46, 64))


def test_scaling_effect_per_pair():
    pi = analysis.analyse(128, {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}, 4096)
    assert all(p.scale == pytest.approx(0.25) for p in pi.pairs)
    yarn = analysis.analyse(128, {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                  "original_max_position_embeddings": 4096}, 16384)
    assert yarn.pairs[0].scale == 1.0 and yarn.pairs[-1].scale == pytest.approx(0.25)
    assert yarn.attention_factor == pytest.approx(0.1 * math.log(4) + 1)


def test_yarn_correction_range():
    # fast pairs (>= 32 turns in L) keep, slow pairs (< 1 turn) interpolate
    low, high = yarn_correction_range(128, 10000.0, 4096, 32, 1, truncate=True)
    assert (low, high) == (20, 46)
    # truncated to whole pairs: pair `low` makes >= 32 turns in L, the next < 32; pair `high` < 1, the one before >= 1
    turns = lambda i: 4096 * 10000.0 ** (-2 * i / 128) / (2 * math.pi)  # noqa: E731
    assert turns(20) >= 32 > turns(21)
    assert turns(46) < 1 <= turns(45)
    low, high = yarn_correction_range(128, 10000.0, 4096, 32, 1, truncate=False)
    assert turns(low) == pytest.approx(32, rel=1e-12) and turns(high) == pytest.approx(1, rel=1e-12)


def test_json_dict_has_required_fields():
    d = analysis.analyse(8, {"rope_theta": 100.0}, 10).to_dict()
    assert {"pairs", "pairs_without_full_turn"} <= set(d)
    assert {"index", "inv_freq", "wavelength", "turns_in_context"} <= set(d["pairs"][0])


def test_bad_context():
    with pytest.raises(ValueError, match="context"):
        analysis.analyse(8, {"rope_theta": 100.0}, -5)
