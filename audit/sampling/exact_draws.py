"""Exact random draws the simulator laws are made of: Bernoulli(p) masks and Binomial(n, p) counts.

Below every sampler's simulator law (:meth:`audit.sampling.Sampler.simulate_signal`) and
re-exported by :mod:`audit.training.simulate`. Exact at any p (docs/design.md §4): float32 uniforms,
multiples of 2^-24, would raise p by up to 2^-24 (19% at p = 1e-7).
"""

from __future__ import annotations

import numpy as np

from audit.core.validation import check_int

__all__ = ["SPARSE_BELOW", "bernoulli_mask", "bernoulli_positions", "binomial_counts"]

SPARSE_BELOW = 1 / 16
"""Bernoulli(p) draws with p below this are made from geometric gaps (cost ~ the number of
ones), the others from float64 uniforms (cost ~ the number of draws), where gaps stop being
the faster (the timings: bench/README.md)."""


def binomial_counts(
    rng: np.random.Generator, n: int, p: float, shape: tuple[int, int]
) -> np.ndarray:
    """Binomial(n, p) draws by inverting the CDF at float64 uniforms (exact to 2^-53).

    K = #{k : F(k) <= u}, found from a guide table (Devroye 1986, §III.2.4: the smallest
    candidate for each of 1024 equal bins of u) and a few vectorised correction passes.
    Several times faster than ``Generator.binomial`` for the small means of co-batch counts.
    The CDF table stops where it reaches 1.0 in float64. int32, filled in chunks.
    """
    from scipy.stats import binom  # imported here: scipy.stats takes a second to import

    cdf = binom.cdf(np.arange(n + 1), n, p)
    top = int(np.searchsorted(cdf, 1.0))  # first index with cdf == 1.0 (or n)
    cdf = np.append(cdf[: min(top, n)], np.inf)  # F(0..K-1), then a sentinel
    bins = 1024
    guide = np.searchsorted(cdf, np.arange(bins) / bins, side="right").astype(np.int32)
    out = np.empty(shape, dtype=np.int32)
    flat = out.reshape(-1)
    chunk = 1 << 22
    for start in range(0, flat.size, chunk):
        u = rng.random(min(flat.size, start + chunk) - start)
        k = guide[(u * bins).astype(np.int32)]
        active = np.flatnonzero(u >= cdf[k])
        while active.size:
            k[active] += 1
            active = active[u[active] >= cdf[k[active]]]
        flat[start : start + k.size] = k
    return out


def bernoulli_positions(rng: np.random.Generator, p: float, size: int) -> np.ndarray:
    """Positions (sorted int64) of the ones among ``size`` i.i.d. Bernoulli(p) draws, exact at any
    p.

    In an i.i.d. Bernoulli(p) sequence the first one's position + 1 and the gaps between
    successive ones are i.i.d. Geometric(p) on {1, 2, ...}, Pr[G > k] = (1 - p)^k, so the
    positions are cumulative sums of geometric gaps, kept while they are below ``size``.
    ``Generator.geometric`` draws G = ceil(-E / log1p(-p)), E ~ Exp(1) (inversion through
    log1p: no 1 - p rounding, so exact to float64 rounding at any p > 0). Gaps are capped at
    size + 1 before summing (NumPy returns INT64_MAX for an astronomically small p, which would
    overflow; any gap that passes the end acts as that cap). Cost ~ size p + 1, whatever size.
    """
    p = float(p)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be a probability in [0, 1], got {p!r}")
    size = check_int("size", size, minimum=0)
    if p == 0.0 or size == 0:
        return np.empty(0, dtype=np.int64)
    expected = size * p
    # usually one batch reaches the end
    batch = int(min(size, expected + 6 * np.sqrt(expected)) + 16)
    parts, last = [], -1
    while last < size:
        positions = last + np.cumsum(np.minimum(rng.geometric(p, batch), size + 1))
        parts.append(positions[positions < size])
        last = int(positions[-1])
    return np.concatenate(parts)


def bernoulli_mask(rng: np.random.Generator, p: float, shape: tuple[int, ...]) -> np.ndarray:
    """Independent Bernoulli(p) indicators, bool of ``shape``, drawn exactly at any p in [0, 1].

    p < :data:`SPARSE_BELOW`: the ones are set at :func:`bernoulli_positions` in the flattened
    array (exact at any p). p >= :data:`SPARSE_BELOW`: float64 uniforms U, multiples of
    2^-53, compared with p: Pr[U < p] = ceil(p 2^53) 2^-53, a relative excess below
    2^-53 / p <= 2^-49, filled in chunks through one reused buffer.
    (float32 uniforms, multiples of 2^-24, raised p by up to 2^-24: 19% at p = 1e-7.)
    """
    p = float(p)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be a probability in [0, 1], got {p!r}")
    out = np.zeros(shape, dtype=bool)
    flat = out.reshape(-1)
    if p < SPARSE_BELOW:
        flat[bernoulli_positions(rng, p, flat.size)] = True
        return out
    chunk = 1 << 18  # a 2 MB float64 buffer, reused: as fast as float32 uniforms (4M: 1.5x slower)
    uniforms = np.empty(min(chunk, flat.size))
    for start in range(0, flat.size, chunk):
        stop = min(flat.size, start + chunk)
        part = uniforms[: stop - start]
        rng.random(out=part)
        np.less(part, p, out=flat[start:stop])
    return out
