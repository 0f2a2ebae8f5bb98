"""How wrong an ALiBi head emulated with RoPE pairs is: a bound, and the measurement that checks it.

The emulation (``emulation`` module): head h gets K extra rotary pairs; pair k carries fixed
q = (-N_k/s, 0) and k = (0, s) (s = 1 unless N is split between q and k for float16) and rotates
at theta_k while every other dim is unrotated. With the logit scale sigma = 1/sqrt(head_dim)
and amplitude A_k = N_k * sigma, the pairs add to the logit of query position i and key j:

    b(i, j) = -sum_k A_k sin(theta_k (i - j))        (exact arithmetic)

which should equal ALiBi's -m d, d = i - j. Two things separate the computed logit from -m d.

1. **Sine approximation** (deterministic). ``e_sin(d) = |m d - sum_k A_k sin(theta_k d)|``. One pair
   with A = m/theta: e_sin = m (d - sin(theta d)/theta) ~ m theta^2 d^3 / 6. K pairs solve
   sum_k A_k theta_k^(2n+1) = m [n = 0], n < K, so the first K odd Taylor terms match and
   e_sin = O(theta^(2K+1) d^(2K+1)). It counts only where the bias still matters: beyond
   D = cutoff/m the exact bias is below -cutoff logits, the key has no softmax weight, and the
   emulated bias stays below it too as long as b is non-increasing in d (theta L < pi/2 for one pair).

2. **Rounding** in the model's dtype, to first order in the unit roundoff. A model computes the
   angles ``fl32(i * fl32(theta))`` in float32, cos/sin in float32 cast to the dtype,
   ``q*cos + rotate_half(q)*sin`` in the dtype, q.k with float32 accumulation (float32 products
   for float32), the result in the dtype, times sigma. Write hu(x) for half an ulp of x in the
   dtype (``2^(max(floor(log2 x), e_min) - p)``: relative 2^-p for normal numbers, an absolute
   floor 2^(e_min - p) for subnormals, 2^-25 in float16). Every rounding site and what its error
   costs the logit (c = cos, s = sin of the angle at i or j; first order, triangle inequality):

   - the stored amplitudes N/s and s: relative hu(x)/x of the whole pair term, ~ (hu/x) m d;
   - the angle: ``|A| (hu32(i theta) + hu32(j theta))`` plus the relative rounding of theta,
     ``|A| d |fl32(theta) - theta| |cos(theta d)|``;
   - the four table entries: ``|A| (t(c_i)|s_j| + t(s_j)|c_i| + t(s_i)|c_j| + t(c_j)|s_i|)`` with
     ``t(x) = hu(x) + 1.25 hu32(x)`` (torch's float32 sin/cos, measured within 1.2 half-ulps, then
     the cast; float32 keeps only the first error), and for cosines near 1 at most ``|1 - c|`` (a
     nearest rounding never moves farther than the representable 1.0);
   - the products of the rotation, ``fl(N/s * c_i)`` etc.: ``sigma (hu(N/s c_i) s |s_j| + …)``;
     they are exact for a factor 1 (k without split);
   - the dot product, as BLAS kernels compute it: 2K fused multiply-adds in float32, each rounding a
     partial sum of the products P1 = N c_i s_j, P2 = N s_i c_j of every pair (bfloat16 and float16
     products are exact in float32 anyway): ``2K sigma hu32(sum |P|)``; the cast of the result and
     the scaling:
     ``hu(|b|/sigma) sigma + hu(|b|)`` (the latter zero when sigma is a power of two).

   P1 and P2 each have size ~ m sqrt(hd) * position: the emulated term is a small difference of
   two large products, so the error grows with the absolute position (~ u m i), not with d. In
   float16 the tables of tiny angles are subnormal: t(sin) >= 2^-25 whatever the angle, so the
   cost A 2^-25 = m 2^-25 / theta grows like 1/theta, while e_sin grows like theta^2: an optimum.

The predicted error of a head is ``max over d in [0, D] of e_sin(d) + e_round(L, L - d)`` (query at
the last position, where every position-dependent term is largest). The tests check it against the same
logits computed with real torch tensors in the dtype (``tests/oracles.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..numerics import Numerics, half_ulp, is_power_of_two, significant_bits

# torch's float32 sin/cos on CPU: measured within 1.2 half-ulps (0.6 ulp) of the float64 value over
# 6M angles in (1e-8, 1.6); tests/emulation/test_error_model.py checks that this machine's torch still meets it.
SINCOS_HALF_ULPS = 1.25


EXACT_TABLE_ANGLE = 2.0**-12  # float32 cos(x) = 1 and sin(x) = x exactly for an exact x <= 2^-12


def exact_angles(theta: float, last_position: float) -> bool:
    """Whether float32 angles p*theta are exact for every integer position p <= last_position: theta a
    power of two (then p*theta only shifts the exponent) and p < 2^24 (p itself exact in float32)."""
    return is_power_of_two(theta) and last_position < 2**24


@dataclass(frozen=True)
class PairSpec:
    """One emulation pair of a head as the error model sees it: frequency and amplitude N (pre-scale), and whether
    it is opposed (q = (0, N/s), k = (s, 0): its first dim carries the query's product, -N sin(theta i))."""

    theta: float
    N: float
    opposed: bool = False


def emulated_bias(pairs: Sequence[PairSpec], scale: float, d: np.ndarray) -> np.ndarray:
    """Exact-arithmetic emulated bias ``-sum_k N_k scale sin(theta_k d)``, float64, shape of ``d``."""
    d = np.asarray(d, dtype=np.float64)
    return -sum(p.N * scale * np.sin(p.theta * d) for p in pairs)


def approximation_error(slope: float, pairs: Sequence[PairSpec], scale: float, d: np.ndarray) -> np.ndarray:
    """``|m d + emulated_bias(d)|`` (the approximation error, no rounding), float64."""
    d = np.asarray(d, dtype=np.float64)
    return np.abs(slope * d + emulated_bias(pairs, scale, d))


def rounding_bound(
    pairs: Sequence[PairSpec], scale: float, i: np.ndarray, j: np.ndarray, dtype: str, split: float = 1.0
) -> np.ndarray:
    """First-order bound of the rounding error of the emulated logit at query i, key j (see module doc)."""
    i, j = np.asarray(i, np.float64), np.asarray(j, np.float64)
    d = i - j
    qa, ka = None, float(split)
    out = np.zeros(np.broadcast(i, j).shape)
    total_p = np.zeros_like(out)

    def tab(x):  # float32 sin/cos, then (unless float32) the cast
        f32 = SINCOS_HALF_ULPS * half_ulp(x, "float32")
        return f32 if dtype == "float32" else half_ulp(x, dtype) + f32

    def tab_cos(x):  # rounding to nearest never moves farther than the representable 1.0
        return np.minimum(tab(x), np.abs(1 - np.abs(x)) + SINCOS_HALF_ULPS * half_ulp(x, "float32"))

    last = float(np.max(np.maximum(i, j)))  # the last position either side reaches
    if _exact_rotation(pairs, dtype, last, split):
        return _exact_rotation_rounding(pairs[0], scale, i, j)
    if _opposed_rotation(pairs, dtype, last, split):
        return _opposed_rounding(pairs, scale, i, j, last)
    for p in pairs:
        qa = abs(p.N) / ka
        a = abs(p.N) * scale
        ci, si, cj, sj = np.cos(p.theta * i), np.sin(p.theta * i), np.cos(p.theta * j), np.sin(p.theta * j)
        term = np.abs(p.N * scale * np.sin(p.theta * d))
        out += term * half_ulp(qa, dtype) / qa
        if ka != 1.0:
            out += term * half_ulp(ka, dtype) / ka
        theta32 = float(np.float32(p.theta))
        exact = exact_angles(theta32, last)
        if not exact:
            out += a * (half_ulp(i * theta32, "float32") + half_ulp(j * theta32, "float32"))
        out += a * d * np.abs(np.cos(p.theta * d)) * abs(theta32 - p.theta)
        if not (exact and dtype == "float32" and theta32 * last <= EXACT_TABLE_ANGLE):
            out += a * (tab_cos(ci) * np.abs(sj) + tab(sj) * np.abs(ci)
                        + tab(si) * np.abs(cj) + tab_cos(cj) * np.abs(si))
        out += scale * ka * (half_ulp(qa * ci, dtype) * np.abs(sj) + half_ulp(qa * si, dtype) * np.abs(cj))
        if ka != 1.0:
            out += scale * qa * (half_ulp(ka * sj, dtype) * np.abs(ci) + half_ulp(ka * cj, dtype) * np.abs(si))
        total_p += np.abs(p.N * ci * sj) + np.abs(p.N * si * cj)
    out += 2 * len(pairs) * scale * half_ulp(total_p, "float32")
    bias = np.abs(emulated_bias(pairs, scale, d))
    if dtype != "float32":
        out += scale * half_ulp(bias / scale, dtype)
    if not is_power_of_two(scale):
        out += half_ulp(bias, dtype) + bias * half_ulp(scale, dtype) / scale
    return out


def _exact_rotation(pairs: Sequence[PairSpec], dtype: str, last: float, split: float) -> bool:
    """The exact-rotation regime: one float32 pair at a power-of-two theta with theta * last <= 2^-12 and no
    split, where angles, cos (= 1) and sin (= p theta) are exact (``_exact_rotation_rounding``)."""
    if dtype != "float32" or len(pairs) != 1 or split != 1.0:
        return False
    theta = float(np.float32(pairs[0].theta))
    return theta == pairs[0].theta and exact_angles(theta, last) and theta * last <= EXACT_TABLE_ANGLE


def _opposed_rotation(pairs: Sequence[PairSpec], dtype: str, last: float, split: float) -> bool:
    """The opposed pairs in float32 (``_opposed_rounding``): a pair at a power-of-two theta with exact angles and
    an opposed pair after it, no split, both with theta * last <= 2^-12 (cos rounds to 1, sin to its angle)."""
    if dtype != "float32" or len(pairs) != 2 or split != 1.0 or [p.opposed for p in pairs] != [False, True]:
        return False
    thetas = [float(np.float32(p.theta)) for p in pairs]
    return (thetas == [p.theta for p in pairs] and exact_angles(thetas[0], last)
            and max(thetas) * last <= EXACT_TABLE_ANGLE)


def _opposed_rounding(pairs: Sequence[PairSpec], scale: float, i: np.ndarray, j: np.ndarray,
                      last: float) -> np.ndarray:
    """The rounding of the opposed pairs, site by site (float32). Pair a: q = (-N_a, 0), k = (0, 1) at a
    power-of-two theta_a (x_p = p theta_a exact); pair b: q = (0, N_b), k = (1, 0), its angles y_p = fl32(p theta_b)
    rounded; K = N theta ~ m sqrt(hd)/2 for each (``pairs.opposed_amplitudes`` gives K_a a short significand, which
    makes both of pair a's products exact). The dot product sums, in the order of the dims, fl(N_a x_j) (a
    product), then fl(N_a x_j - fl(N_b y_i)) ~ K d (on the first two dims the key's and the query's products
    cancel), later fl(. - fl(N_a x_i)) ~ K i (a product and a sum at the query's size) and last the fused
    N_b y_j, whose result is the bias. So, each at most half an ulp of its result: the stored amplitudes
    (relative), pair b's angles (``|A_b| (hu32(i theta_b) + hu32(j theta_b))``), the products ``hu(K j)``,
    ``hu(K i)`` twice, the sums ``hu(K d)`` twice and ``hu(K i)``; then the scale. In logits (times the
    scale). A content dim between the first and the last two dims is summed at the size K d; the sum at the
    query's size, hu(K i), is what rounds that partial sum, whatever it holds."""
    a, b = pairs
    na, nb = float(np.float32(abs(a.N))), float(np.float32(abs(b.N)))
    bias = np.abs(emulated_bias(pairs, scale, i - j))
    out = sum(np.abs(p.N * scale * np.sin(p.theta * (i - j))) * abs(n - abs(p.N)) / abs(p.N)
              for p, n in ((a, na), (b, nb)))
    if not exact_angles(b.theta, last):  # the last position either side reaches
        out = out + nb * scale * (half_ulp(i * b.theta, "float32") + half_ulp(j * b.theta, "float32"))
    k_i, k_d = na * a.theta * i, na * a.theta * np.abs(i - j)
    out = out + scale * (_product_rounding(na, j, a.theta) + _product_rounding(na, i, a.theta)
                         + half_ulp(nb * b.theta * i, "float32") + half_ulp(k_i + k_d, "float32")
                         + 2 * half_ulp(k_d, "float32"))
    if not is_power_of_two(scale):
        out = out + half_ulp(bias, "float32") + bias * half_ulp(scale, "float32") / scale
    return out


def _exact_rotation_rounding(pair: PairSpec, scale: float, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """The rounding of the exact rotation, site by site (float32; x_p = p theta, exact; N > 0 stored as
    q = (-N, 0), k = (0, 1)). The rotation leaves q_x = -N and k = (-x_j, 1) exact (cos = 1, a power-of-two
    theta), so three roundings remain, each at most half an ulp of its result:

    - the stored -N: relative, of the whole term: ``hu(N)/N * m_emulated d``;
    - q_y = fl(-N x_i) (a product): ``hu(N x_i)``, the same for every key of the query;
    - the dot product: fl(N x_j) (a product, exact when fused) and its sum with q_y, fl(N x_j - q_y), whose
      result is the bias itself (``hu(N |x_i - x_j|)``; exact by Sterbenz's lemma where x_j >= x_i / 2);

    then the scale: ``hu(|b|) + |b| hu(scale)/scale`` unless it is a power of two. In logits (times the
    scale). This is the pair's own arithmetic, which ``measure`` reproduces; in a converted model the dot
    product also sums the head's content dims, whose order is the BLAS kernel's."""
    n, theta = abs(pair.N), pair.theta
    stored = float(np.float32(n))  # the q value the checkpoint holds
    bias = np.abs(pair.N * scale * np.sin(theta * (i - j)))
    out = bias * abs(stored - n) / n
    out += scale * (_product_rounding(stored, i, theta) + _product_rounding(stored, j, theta)
                    + _product_rounding(stored, np.abs(i - j), theta))
    if not is_power_of_two(scale):
        out += half_ulp(bias, "float32") + bias * half_ulp(scale, "float32") / scale
    return out


def _product_rounding(n: float, p: np.ndarray, theta: float) -> np.ndarray:
    """Half an ulp of the float32 product ``n * (p theta)`` (p integer, theta a power of two), or 0 where it is
    exact: its significand then needs no more than float32's 24 bits (those of n plus those of p)."""
    p = np.asarray(p, np.float64)
    exact = significant_bits(np.asarray(n)) + significant_bits(p) <= 24
    return np.where(exact, 0.0, half_ulp(n * p * theta, "float32"))


def matter_distance(slope: float, window: int, level: float) -> int:
    """min(L, floor(level/m)): the distances up to which ALiBi's bias -m d stays above -level. With the cutoff:
    D, beyond which a key carries no softmax weight; with the ladder's floor C: W, up to which its bias is exact."""
    ratio = level / slope
    return int(window if ratio >= window else math.floor(ratio))  # (level/m may be inf: compared before floor)


def distance_grid(limit: int, points: int = 2049) -> np.ndarray:
    """Integer distances 0..limit: all of them up to ``points``, else an even grid with both ends."""
    if limit + 1 <= points:
        return np.arange(limit + 1, dtype=np.float64)
    return np.unique(np.round(np.linspace(0, limit, points)))


@dataclass(frozen=True)
class ErrorPrediction:
    """Predicted worst logit error of one head over the window, and its two parts (each at its own worst d)."""

    total: float
    sine: float
    rounding: float


def predict(slope: float, pairs: Sequence[PairSpec], num: Numerics, split: float = 1.0) -> ErrorPrediction:
    """``max over d <= D of e_sin(d) + e_round(L, L - d)`` for one head (module doc), at ``num``'s scale, window,
    dtype and cutoff; ``split`` the k value s. In the exact-rotation regime there is no sine error: float32's
    sin(x) is x itself there, so the rotation is linear in d."""
    scale, window, dtype = num.scale, num.window, num.dtype
    d = distance_grid(matter_distance(slope, window, num.cutoff), 513)  # (n,)
    i = np.unique(np.concatenate([np.linspace(0, window, 33).round(), window - np.arange(4)]))[:, None]  # (m, 1)
    linear = _exact_rotation(pairs, dtype, float(window), split)
    sine = np.zeros_like(d) if linear else approximation_error(slope, pairs, scale, d)  # (n,)
    rounding = rounding_bound(pairs, scale, i, i - d[None, :], dtype, split)  # (m, n)
    rounding = np.where(i - d[None, :] >= 0, rounding, 0.0).max(axis=0)  # worst query position per distance
    return ErrorPrediction(float(np.max(sine + rounding)), float(np.max(sine)), float(np.max(rounding)))
