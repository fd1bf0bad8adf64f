"""How often two independent Gaussian draws stored in floating point are exactly equal, and the
tail of the number of such coincidences (docs/design/deployed.md, "Fresh noise: coincidences
counted"; issue 41 item 2).

A continuous N(0, s^2) never repeats a value, but a stored one does: rounded to a float with a
p-bit significand (float32: p = 24, float64: 53, bfloat16: 8, float16: 11), a value v in the
binade [2^e, 2^(e+1)) stands for a cell of width u_e = 2^(e - p + 1), of probability
P(v) ~ f(v) u_e, so two independent draws are equal with probability

    pi_p(s) = sum_v P(v)^2 = 2 sum_e u_e int_{2^e}^{2^(e+1)} f(x)^2 dx,
    int_a^b f^2 = (Phi(b sqrt 2 / s) - Phi(a sqrt 2 / s)) / (2 s sqrt(pi))

(f the N(0, s^2) density; both signs). pi_p(2 s) = pi_p(s): the lattice and the law scale
together, so :func:`equal_draw_probability` takes the largest value over one octave of s, a
bound for any scale (float32: 1.370e-8; with m = 1000 coordinates, 1000 steps and 200 lags,
2e8 pairs, about three equal pairs are expected in a correct float32 training).

A training does not store its draw once rounded: DP-SGD multiplies it by sigma C and divides
the noisy sum by b, each a float rounding. A composition of monotone roundings maps each stored
value back to an interval of the draw no wider than the last cell plus the earlier cells at its
ends: with k roundings before the last, at most (1 + 2 k) times the last cell (a float's cells
change width by at most 2 between neighbouring binades), so the sum of squared probabilities
at most (1 + 2 k) times pi_p. :data:`ROUNDING_ALLOWANCE` = 4 covers the draw, its scaling and
the division (k = 1 after the generator's own rounding; torch's CPU generator, measured: 1.0 to
1.5 times pi_24, bench/findings_levels.py).

The count of equal pairs among N pairs of independent values, each pair of disjoint draws, is a
sum of independent indicators of probability at most pi: stochastically at most
Binomial(N, pi) (:func:`coincidence_tail`). Pairs that share a draw (z_t = z_(t+l) and
z_(t+l) = z_(t+2l)) are not independent; :func:`chained_coincidence_tail` splits a chain of
lag-l pairs into two sets of disjoint pairs (blocks of l steps, alternately) and bounds the
tail by the sum of the two halves' binomial tails. The total count C over N pairs, in which
each draw takes part in at most d pairs, has E[C (C - 1)] <= N^2 pi^2 + 2 d N pi P_max (two
pairs on disjoint draws: pi^2; sharing one draw: sum_v P(v)^3 <= P_max pi, with P_max the
largest cell probability, at most 2^-(p-1) max_u u phi(u) = phi(1) 2^-(p-1) times the same
allowance), so P(C >= c) <= E[C (C - 1)] / (c (c - 1)) (Markov, :func:`total_coincidence_tail`):
the test that sees noise drawn in low precision when the pairs are few.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

__all__ = [
    "CHANCE_WINDOW",
    "FLOAT32_BITS",
    "LATTICE_FORMATS",
    "LATTICE_TOLERANCE",
    "ROUNDING_ALLOWANCE",
    "chained_coincidence_tail",
    "coincidence_tail",
    "equal_draw_bound",
    "equal_draw_probability",
    "largest_cell_bound",
    "lattice_probability",
    "lattice_spacing",
    "on_lattice",
    "total_coincidence_tail",
]

FLOAT32_BITS = 24
"""The significand bits of float32 (23 stored and the implicit one)."""

ROUNDING_ALLOWANCE = 4.0
"""The factor on pi_p for the roundings after the draw (module docstring: (1 + 2 k) = 3 for
k = 1, rounded up to 4)."""

_OCTAVE = np.linspace(0.0, 1.0, 129)


def _equal_draw_probability_at(bits: int, log2_scale: float) -> float:
    """pi_p(s) at s = 2 ** log2_scale (module docstring), binades 2^-90 s .. 2^12 s."""
    s = 2.0**log2_scale
    e = np.arange(-90, 13, dtype=float) + math.floor(log2_scale)
    lo, hi = 2.0**e, 2.0 ** (e + 1)
    mass = stats.norm.sf(lo * math.sqrt(2) / s) - stats.norm.sf(hi * math.sqrt(2) / s)
    return float(2 * np.sum(2.0 ** (e - bits + 1) * mass) / (2 * s * math.sqrt(math.pi)))


def equal_draw_probability(bits: int = FLOAT32_BITS) -> float:
    """The largest pi_p(s) over the scales s (module docstring): the probability that two
    independent N(0, s^2) draws, each rounded once to a ``bits``-bit significand, are equal."""
    if not 2 <= int(bits) <= 64:
        raise ValueError(f"bits: a float's significand bits, 2..64; got {bits}")
    # pi_p is 1-periodic in log2 s and smooth: its maximum over 129 points of an octave, plus
    # 1% (the variation over the octave is 0.2%)
    return 1.01 * max(_equal_draw_probability_at(int(bits), float(t)) for t in _OCTAVE)


def equal_draw_bound(bits: int = FLOAT32_BITS) -> float:
    """:func:`equal_draw_probability` times :data:`ROUNDING_ALLOWANCE`: the probability of equal
    pairs a correct training at ``bits`` or more significand bits stays below."""
    return ROUNDING_ALLOWANCE * equal_draw_probability(bits)


def coincidence_tail(count: int, pairs: int, probability: float) -> float:
    """P(X >= count) for X ~ Binomial(pairs, probability): the p-value of ``count`` equal pairs
    among ``pairs`` pairs of disjoint independent draws (module docstring)."""
    if count <= 0:
        return 1.0
    return float(stats.binom.sf(count - 1, pairs, probability))


def chained_coincidence_tail(count: int, steps: int, lag: int, probability: float) -> float:
    """A bound on P(X >= count) for X the equal pairs (z_t, z_(t+lag)) of one coordinate over
    ``steps`` steps: the pairs split into those with floor(t / lag) even and odd, each a set of
    disjoint pairs (Binomial); X >= count needs one half >= ceil(count / 2)."""
    pairs = max(0, steps - lag)
    if count <= 0 or pairs == 0:
        return 1.0
    t = np.arange(pairs)
    even = int(np.sum((t // lag) % 2 == 0))
    half = (count + 1) // 2
    return min(1.0, coincidence_tail(half, even, probability)
               + coincidence_tail(half, pairs - even, probability))


def largest_cell_bound(bits: int = FLOAT32_BITS) -> float:
    """The largest probability of one stored value (module docstring): a cell near x is at most
    2^-(bits-1) |x| wide, f(x) |x| <= phi(1), times :data:`ROUNDING_ALLOWANCE`."""
    return ROUNDING_ALLOWANCE * float(stats.norm.pdf(1.0)) * 2.0 ** (1 - int(bits))


def total_coincidence_tail(
    count: int, pairs: int, degree: int, probability: float, largest: float
) -> float:
    """A bound on P(C >= count) for C the equal pairs among ``pairs`` pairs of draws, each
    draw in at most ``degree`` pairs (module docstring: the second factorial moment)."""
    if count < 2:
        return 1.0
    moment = pairs**2 * probability**2 + 2 * degree * pairs * probability * largest
    return min(1.0, moment / (count * (count - 1)))


# -- the lattice of a low-precision format (issue 42 item 4) --------------------------------

LATTICE_FORMATS: dict[str, tuple[int, int]] = {"bfloat16": (8, -133), "float16": (11, -24)}
"""The coarse formats noise drawn in low precision lies on: name -> (significand bits p, the
exponent of the smallest spacing: bfloat16's subnormals 2^-133, float16's 2^-24)."""

LATTICE_TOLERANCE = 2.0**-22
"""The relative distance within which a recovered value counts as on a lattice: the value a
training stores went through at most two float32 roundings after the draw (the scaling by
sigma C and the division by b, each at most 2^-24 relative), read back in float64 (2^-53)."""

CHANCE_WINDOW = 2.0**-20
"""The half-width (relative) of the window around each lattice point whose probability
:func:`lattice_probability` sums: the tolerance plus the roundings that moved a float32 draw
into it (each at most 2^-24 relative, at most four of them), rounded up to a power of two."""


def lattice_spacing(x: np.ndarray, fmt: str) -> np.ndarray:
    """The spacing of format ``fmt``'s values in the binade of each |x| (> 0): 2^(e - p + 1)
    for |x| in [2^e, 2^(e+1)), at least the format's subnormal spacing."""
    bits, smallest = LATTICE_FORMATS[fmt]
    _, e = np.frexp(np.abs(x))  # |x| = m 2^e, m in [1/2, 1): the binade [2^(e-1), 2^e)
    return np.ldexp(1.0, np.maximum(e - bits, smallest))


def on_lattice(x: np.ndarray, fmt: str, tolerance: float = LATTICE_TOLERANCE) -> np.ndarray:
    """Booleans: x (nonzero) lies within ``tolerance`` |x| of a value of format ``fmt``
    (``bfloat16``: 8 significand bits, ``float16``: 11); zeros and non-finite values: False."""
    x = np.asarray(x, dtype=np.float64)
    out = np.zeros(x.shape, dtype=bool)
    ok = np.isfinite(x) & (x != 0)
    v = x[ok]
    h = lattice_spacing(v, fmt)
    r = v / h
    out[ok] = np.abs(r - np.rint(r)) * h <= tolerance * np.abs(v)
    return out


def _lattice_probability_at(fmt: str, log2_scale: float, window: float) -> float:
    """P(|X| within ``window`` |L| of a lattice point L) for X ~ N(0, s^2), s = 2^log2_scale:
    sum over the format's values L of 2 window L f(L) (the windows are 2^-20 of L wide, where
    the density is constant to 1e-5), both signs."""
    bits, _ = LATTICE_FORMATS[fmt]
    s = 2.0**log2_scale
    k = np.arange(2 ** (bits - 1), 2**bits, dtype=float)  # the significands of one binade
    total = 0.0
    for e in range(math.floor(log2_scale) - 40, math.floor(log2_scale) + 8):
        lattice = k * 2.0 ** (e - bits + 1)  # the values in [2^e, 2^(e+1))
        total += float(np.sum(2 * window * lattice * stats.norm.pdf(lattice, scale=s)))
    return 2 * total


def lattice_probability(fmt: str, window: float = CHANCE_WINDOW) -> float:
    """The largest probability, over the noise's scale s, that a value of correct Gaussian
    noise stored at float32 precision or finer counts as on format ``fmt``'s lattice
    (:func:`on_lattice`): the probability of the windows of half-width ``window`` |L| around
    the lattice points (:data:`CHANCE_WINDOW` covers the tolerance and the roundings before),
    about 2 window 2^p / (2 ln 2) (bfloat16: 3.5e-4, float16: 2.8e-3).

    Like pi_p (module docstring), it is 1-periodic in log2 s: its largest value over 65 points
    of an octave, plus 1% (the variation over the octave is below 0.1%)."""
    if fmt not in LATTICE_FORMATS:
        raise ValueError(f"fmt: one of {sorted(LATTICE_FORMATS)}; got {fmt!r}")
    return _lattice_probability_cached(fmt, float(window))


_CACHE: dict[tuple[str, float], float] = {}


def _lattice_probability_cached(fmt: str, window: float) -> float:
    key = (fmt, window)
    if key not in _CACHE:
        _CACHE[key] = 1.01 * max(
            _lattice_probability_at(fmt, float(t), window) for t in np.linspace(0.0, 1.0, 65)
        )
    return _CACHE[key]
