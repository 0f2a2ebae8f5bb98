"""The number formats: half-ulps and unit roundoff from the formats' definitions, against torch's own rounding;
the tolerance per dtype; ``Numerics`` validated on construction."""

import numpy as np
import pytest
import torch

from ropebridge.alibi import slopes
from ropebridge.numerics import DEFAULT_CUTOFF, DTYPES, TOLERANCE, Numerics, half_ulp, plan_tolerance, unit_roundoff


def test_half_ulp():
    assert half_ulp(1.0, "float32") == 2.0**-24
    assert half_ulp(1.5, "bfloat16") == 2.0**-8
    assert half_ulp(0.75, "float16") == 2.0**-12
    assert half_ulp(1e-7, "float16") == 2.0**-25  # subnormal floor
    assert half_ulp(0.0, "float32") == 0.0
    assert half_ulp(float("inf"), "float16") == half_ulp(float("nan"), "float16") == float("inf")


def test_half_ulp_is_frexps_definition_everywhere():
    # the exponent read from the bits equals frexp's floor(log2 |x|), over 80 decades, subnormal float64 included
    import numpy as np

    from ropebridge.numerics import FORMATS

    g = np.random.default_rng(0)
    x = g.standard_normal(20000) * 10.0 ** g.integers(-40, 40, 20000)
    x[:6] = [0.0, 1.0, -2.0**-149, 5e-324, 1e300, 65504.0]
    for dtype, (p, e_min) in FORMATS.items():
        _, e = np.frexp(np.abs(x))
        definition = np.where(x != 0, np.ldexp(1.0, np.maximum(e - 1, e_min) - p), 0.0)
        assert np.array_equal(half_ulp(x, dtype), definition), dtype


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_unit_roundoff_is_half_of_torchs_epsilon(dtype):
    assert unit_roundoff(dtype) == torch.finfo(DTYPES[dtype]).eps / 2


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_rounding_to_the_dtype_stays_within_half_an_ulp_and_reaches_it(dtype):
    # torch's own round-to-nearest, normal and subnormal values alike: never beyond the half-ulp, and at a
    # midpoint between two representable numbers exactly the half-ulp
    g = torch.Generator().manual_seed(0)
    x = torch.randn(20000, generator=g, dtype=torch.float64) * 10.0 ** torch.randint(-8, 5, (20000,), generator=g)
    # (n,) float32 values, finite in the dtype: torch casts float64 to float16 through float32, which would round
    # twice (a model's values reach half precision from float32 anyway)
    x = x[x.abs() < torch.finfo(DTYPES[dtype]).max / 2]
    x = x if dtype == "float32" else x.float().double()
    assert (x.to(DTYPES[dtype]).double() != x).any()  # values that round
    err = (x.to(DTYPES[dtype]).double() - x).abs().numpy()
    assert (err <= half_ulp(x.numpy(), dtype)).all()
    one = torch.tensor(1.0, dtype=DTYPES[dtype])
    above = torch.nextafter(one, torch.tensor(2.0, dtype=DTYPES[dtype])).double()
    mid = (1.0 + float(above)) / 2
    assert abs(float(torch.tensor(mid, dtype=torch.float64).to(DTYPES[dtype])) - mid) == half_ulp(mid, dtype)


def test_the_tolerance_is_fixed_in_half_precision_and_resolves_the_bias_in_float32():
    m = slopes(8).tolist()  # steepest 0.5
    assert plan_tolerance("bfloat16", m, 131072) == TOLERANCE["bfloat16"] == 2.0
    assert plan_tolerance("float32", m, 2048) == TOLERANCE["float32"]
    assert plan_tolerance("float32", m, 65536) == 4 * half_ulp(0.5 * 65536, "float32") == 2.0**-7


def test_numerics_is_validated_once_naming_the_value():
    assert Numerics(0.125, 512, "float16").cutoff == DEFAULT_CUTOFF
    for bad, word in (({"dtype": "float8"}, "dtype"), ({"window": 0}, "window"), ({"scale": -1.0}, "scale"),
                      ({"cutoff": 0.0}, "cutoff")):
        with pytest.raises(ValueError, match=word):
            Numerics(**{"scale": 0.125, "window": 512, "dtype": "float32", **bad})


@pytest.mark.parametrize("bits", [1, 4, 9, 12])
def test_round_significand_is_nearest_with_that_many_bits_and_its_integer_products_are_exact(bits):
    import math

    from ropebridge.numerics import round_significand, significant_bits

    g = np.random.default_rng(bits)
    for x in g.uniform(-1e3, 1e3, 200).tolist() + [2.0**-30 * 3, 1.0, -0.75]:
        r = round_significand(x, bits)
        m, e = math.frexp(x)
        unit = math.ldexp(1.0, e - bits)  # the last kept bit at x's exponent
        assert abs(r - x) <= unit / 2 and r * unit != 0  # nearest, and never 0
        assert (r / unit).is_integer() and significant_bits(np.array(r)) <= bits  # a carry shifts the exponent
        p = np.arange(1, 2 ** (24 - bits), 997, dtype=np.float64)
        assert (np.float32(r) * p.astype(np.float32)).astype(np.float64).tolist() == (r * p).tolist()
    assert round_significand(0.0, 3) == 0.0 and round_significand(2.0**-7 * 5, 3) == 2.0**-7 * 5  # already short
    with pytest.raises(ValueError, match="bits"):
        round_significand(1.0, 0)
