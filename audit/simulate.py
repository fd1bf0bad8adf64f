"""Mechanism-level simulator: all-iterates observations drawn straight from the mechanism's law.

No training: for each trial the canary's participation pattern is drawn from the sampler's
law, Gaussian noise is added, and (adversarial threat model) the co-batch signal. This is
the ideal reference of every training audit, and lets attacks and statistics be validated
at 1e6 trials. Conventions, shared with the engine (docs/design.md §3): observations are
normalised by C (one participation shifts y_t by 1), noise is N(0, sigma^2) per step, the
attacker knows the data and the sampler's law but not its randomness, and the canary is
example 0 (deterministic batching: step 0 of every epoch). Adjacency is zero-out: in the OUT
world the canary still occupies its slot (so batch sizes and the co-batch are distributed
alike) but its gradient is 0.

Per step t (IN / OUT signal before the noise):

- fixed-size samplers, adversarial: the canary's step reads 2 / 1, every other step 0 (the
  b - 1 co-batch examples contribute -1 each and the attacker adds back the known -b);
- fixed-size samplers, isolated: the canary's step reads 1 / 0;
  deterministic: step 0 of every epoch; persistent shuffle: one uniformly random step index,
  the same in every epoch; dynamic shuffle: a uniformly random step in every epoch (exactly
  the law of the canary's position under a uniform permutation);
- Poisson, isolated: 1[canary sampled] ~ Bernoulli(q) / 0;
- truncated Poisson, isolated: 1[canary sampled and kept] / 0; the canary is dropped with
  probability 1 - B/|S| when the batch S overflows B, so per step it is in the sum with
  probability q E[min(1, B / (1 + K))], K ~ Bin(n - 1, q) the others;
- Poisson / truncated Poisson, adversarial: the co-batch examples each contribute -1 and
  their number O_t in the step's sum (K, or what truncation keeps of it) is random and
  unknown to the attacker, who subtracts its expectation: IN 1[canary in sum] - (O_t - E O),
  OUT -(O_t - E O). This only adds variance, so for Poisson the adversarial co-batch is
  *not* the worst case; the isolated pair (whose theory both threat models share) is.

Participation patterns are drawn directly from their law (a uniform step per epoch, a
Bernoulli per step), which is exact and far cheaper than drawing whole batches. The
Bernoulli(q) inclusions are exact at any q (:func:`bernoulli_mask`: geometric gaps for small
q, float64 uniforms otherwise; float32 uniforms, multiples of 2^-24, would raise q by up to
2^-24: 1.3% at q = 1e-6, 19% at 1e-7). Observations are float32 (1e6 trials of 100 steps is
400 MB per side).

The sampler's laws this module draws from (the canary's inclusion probability, the co-batch
moments) live in :mod:`audit.sampler_laws`, which the attacks share; they are re-exported here.
``ideal_epsilon_lb`` (defined in audit.stats, re-exported here) is the ceiling a simulated
audit is compared with: what the same trials would certify if the scores followed the theory
curve exactly.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import binom

from audit.mechanism import Mechanism
from audit.observations import Observations
from audit.one_run import canary_membership
from audit.sampler_laws import (
    canary_inclusion_probability,
    cobatch_mean,
    cobatch_variance,
    other_examples,
)
from audit.sampling import get_sampler
from audit.seeding import seed_sequence
from audit.stats import ideal_epsilon_lb
from audit.validation import check_int

__all__ = [
    "bernoulli_mask",
    "bernoulli_positions",
    "canary_inclusion_probability",
    "cobatch_mean",
    "cobatch_variance",
    "ideal_epsilon_lb",
    "simulate_observations",
    "simulate_one_run_shard",
    "simulate_shard",
]

DTYPE = np.float32

SPARSE_BELOW = 1 / 16
"""Bernoulli(p) draws with p below this are made from geometric gaps (cost ~ the number of
ones), the others from float64 uniforms (cost ~ the number of draws): measured on 1e7 draws,
gaps take 2 ms at p = 0.01 and 50 ms at 0.05, float64 uniforms 80 to 90 ms at any p (as
float32 uniforms compared with p, which are not exact)."""


def _binomial(rng: np.random.Generator, n: int, p: float, shape: tuple[int, int]) -> np.ndarray:
    """Binomial(n, p) draws by inverting the CDF at float64 uniforms (exact to 2^-53).

    K = #{k : F(k) <= u}, found from a guide table (Devroye 1986, §III.2.4: the smallest
    candidate for each of 1024 equal bins of u) and a few vectorised correction passes.
    Several times faster than ``Generator.binomial`` for the small means of co-batch counts.
    The CDF table stops where it reaches 1.0 in float64. int32, filled in chunks.
    """
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
    """Positions (sorted int64) of the ones among ``size`` i.i.d. Bernoulli(p) draws, exact at any p.

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
    batch = int(min(size, expected + 6 * np.sqrt(expected)) + 16)  # usually one batch reaches the end
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


def _simulate_side(mechanism: Mechanism, rng: np.random.Generator, trials: int, canary_in: bool) -> np.ndarray:
    """One side's observations ``(trials, T*E)``."""
    steps = mechanism.total_steps
    y = rng.standard_normal((trials, steps), dtype=DTYPE)
    y *= DTYPE(mechanism.sigma)
    adversarial = mechanism.threat_model == "adversarial"
    sampler = get_sampler(mechanism.sampler)
    if sampler.require_simulator() == "fixed_steps":
        where = sampler.canary_steps(mechanism, rng, trials)
        signal = (1.0 if canary_in else 0.0) + (1.0 if adversarial else 0.0)
        if signal:
            rows = np.arange(trials)[:, None]
            y[rows, where] += DTYPE(signal)
        return y
    if not adversarial:
        if canary_in:
            y += bernoulli_mask(rng, canary_inclusion_probability(mechanism), (trials, steps))
        return y
    # Subsampled (Poisson, truncated Poisson), adversarial: the canary and the co-batch count
    # jointly; the sampler applies its own cut (truncation) to both.
    q = mechanism.sampling_probability
    n_others = other_examples(mechanism)
    sampled = bernoulli_mask(rng, q, (trials, steps))
    others = _binomial(rng, n_others, q, (trials, steps))
    others = sampler.truncate_cobatch(mechanism, rng, sampled, others)
    np.subtract(y, others, out=y, casting="unsafe")
    y += DTYPE(cobatch_mean(mechanism))
    if canary_in:
        y += sampled
    return y


def simulate_observations(mechanism: Mechanism, trials: int, rng: np.random.Generator) -> Observations:
    """``trials`` IN and ``trials`` OUT all-iterates observations of ``mechanism`` (float32).

    The metadata records the source and, for deterministic batching, the canary's steps.
    """
    if not isinstance(mechanism, Mechanism):
        raise ValueError(f"mechanism must be an audit.mechanism.Mechanism, got {type(mechanism).__name__}")
    trials = check_int("trials", trials, minimum=1)
    sampler = get_sampler(mechanism.sampler)
    if mechanism.threat_model == "adversarial" and sampler.require_simulator() == "subsampled":
        other_examples(mechanism)
    y_in = _simulate_side(mechanism, rng, trials, canary_in=True)
    y_out = _simulate_side(mechanism, rng, trials, canary_in=False)
    metadata: dict[str, object] = {"source": "simulate"}
    steps = sampler.fixed_canary_steps(mechanism)
    if steps is not None:
        metadata["canary_steps"] = steps
    return Observations(mechanism=mechanism, y_in=y_in, y_out=y_out, metadata=metadata)


def simulate_shard(
    mechanism: Mechanism, *, seed: int, shard: int, trials: int, cell: str = ""
) -> dict[str, np.ndarray]:
    """One shard of a simulated audit: ``{"y_in", "y_out"}``, each ``(trials, T*E)``.

    Same keys and meaning as the engine's ``run_shard``, so the runner treats train and
    simulate modes alike. The shard's generator is seeded by
    ``audit.seeding.seed_sequence(seed, cell, shard)`` (``seed_sequence(seed, shard)`` when
    ``cell`` is empty), so any shard can be recomputed alone.
    """
    shard = check_int("shard", shard, minimum=0)
    path: tuple[int | str, ...] = (cell, shard) if cell else (shard,)
    rng = np.random.default_rng(seed_sequence(seed, *path))
    observations = simulate_observations(mechanism, trials, rng)
    return {"y_in": observations.y_in, "y_out": observations.y_out}


def simulate_one_run_shard(
    mechanism: Mechanism, *, seed: int, shard: int, trials: int, cell: str, canaries: int, shard_size: int
) -> dict[str, np.ndarray]:
    """One shard of a one-run audit: canaries ``shard * shard_size`` to ``+ trials`` of the m.

    Each canary is IN with the coin of :func:`audit.one_run.canary_membership` and its
    observation follows the sampler's law for one canary (as :func:`simulate_shard` draws
    it), independently of the other canaries': a model of m Dirac canaries on m distinct
    coordinates, each taking a batch slot like any example. (Under shuffling the canaries'
    positions are exactly those of m examples of a uniform permutation only one at a time;
    the joint law, with its slight negative dependence, is not simulated.) Returns
    ``{"y_in": rows of the IN canaries, "y_out": rows of the OUT canaries}`` in canary order.
    """
    shard = check_int("shard", shard, minimum=0)
    included = canary_membership(seed, cell, canaries)[shard * shard_size : shard * shard_size + trials]
    rng = np.random.default_rng(seed_sequence(seed, cell, "one_run", shard))
    n_in = int(included.sum())
    y_in = _simulate_side(mechanism, rng, n_in, canary_in=True) if n_in else None
    y_out = _simulate_side(mechanism, rng, included.size - n_in, canary_in=False) if n_in < included.size else None
    steps = mechanism.total_steps
    return {
        "y_in": y_in if y_in is not None else np.zeros((0, steps), dtype=DTYPE),
        "y_out": y_out if y_out is not None else np.zeros((0, steps), dtype=DTYPE),
    }
