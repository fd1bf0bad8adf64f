"""Mechanism-level simulator: all-iterates observations drawn straight from the mechanism's law.

No training: for each trial Gaussian noise is drawn, then the canary's participation pattern
from the sampler's law and (adversarial threat model) the co-batch signal. This is
the ideal reference of every training audit, and lets attacks and statistics be validated
at 1e6 trials. Conventions, shared with the engine (docs/design.md §3): observations are
normalised by C (one participation shifts y_t by 1), noise is N(0, sigma^2) per step, the
attacker knows the data and the sampler's law but not its randomness, and the canary is
example 0 (deterministic batching: step 0 of every epoch). Adjacency is zero-out: in the OUT
world the canary still occupies its slot (so batch sizes and the co-batch are distributed
alike) but its gradient is 0.

The law is the sampler's own (:meth:`audit.sampling.Sampler.simulate_signal`, in each
sampler's module; this module has no sampler branches): the noise is drawn here, then the
sampler adds its signal. Per step t (IN / OUT signal before the noise), the built-ins:

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
  *not* the worst case; the isolated pair (whose theory both threat models share) is;
- balls-and-bins: the canary in one uniformly random step per epoch (1 / 0 there); with
  ``adversarial``, minus the others' counts (O_1..O_T) ~ Multinomial(n - 1, 1/T each) per
  epoch, drawn independently of the canary's step, plus the known (n - 1)/T per step.

Participation patterns are drawn directly from their law (a uniform step per epoch, a Bernoulli per
step), which is exact and far cheaper than drawing whole batches. The Bernoulli(q) inclusions are
exact at any q (:func:`audit.sampling.exact_draws.bernoulli_mask`: geometric gaps for small q,
float64 uniforms otherwise; float32 uniforms, multiples of 2^-24, would raise q by up to 2^-24: 1.3%
at q = 1e-6, 19% at 1e-7). Observations are float32 (1e6 trials of 100 steps is 400 MB per side).

The sampler's laws this module draws from (the canary's inclusion probability, the co-batch
moments) live in :mod:`audit.sampling.laws`, which the attacks share.
:func:`audit.stats.binary.ideal_epsilon_lb` is the ceiling a simulated audit is compared with:
what the same trials would certify if the scores followed the theory curve exactly.
"""

from __future__ import annotations

import numpy as np

from audit.core.mechanism import Mechanism
from audit.core.observations import Observations
from audit.core.seeding import seed_sequence
from audit.core.validation import check_int
from audit.sampling import get_sampler
from audit.stats.one_run import canary_membership

__all__ = [
    "simulate_observations",
    "simulate_one_run_shard",
    "simulate_shard",
]

DTYPE = np.float32

def _simulate_side(
    mechanism: Mechanism, rng: np.random.Generator, trials: int, canary_in: bool
) -> np.ndarray:
    """One side's observations ``(trials, T*E)``: the noise, then the sampler's own law on it
    (:meth:`audit.sampling.Sampler.simulate_signal`, which refuses a sampler without one)."""
    y = rng.standard_normal((trials, mechanism.total_steps), dtype=DTYPE)
    y *= DTYPE(mechanism.sigma)
    get_sampler(mechanism.sampler).simulate_signal(mechanism, rng, y, canary_in)
    return y


def simulate_observations(
    mechanism: Mechanism, trials: int, rng: np.random.Generator
) -> Observations:
    """``trials`` IN and ``trials`` OUT all-iterates observations of ``mechanism`` (float32).

    The metadata records the source and, for deterministic batching, the canary's steps.
    """
    if not isinstance(mechanism, Mechanism):
        raise ValueError(
            f"mechanism must be an audit.core.mechanism.Mechanism, got {type(mechanism).__name__}"
        )
    trials = check_int("trials", trials, minimum=1)
    sampler = get_sampler(mechanism.sampler)
    y_in = _simulate_side(mechanism, rng, trials, canary_in=True)
    y_out = _simulate_side(mechanism, rng, trials, canary_in=False)
    metadata: dict[str, object] = {"source": "simulate"}
    steps = sampler.fixed_canary_steps(mechanism)
    if steps is not None:
        metadata["canary_steps"] = steps
    return Observations(mechanism=mechanism, y_in=y_in, y_out=y_out, metadata=metadata)


def simulate_shard(
    mechanism: Mechanism,
    *,
    seed: int,
    shard: int,
    trials: int,
    cell: str = "",
    canaries_per_training: int = 1,
) -> dict[str, np.ndarray]:
    """One shard of a simulated audit: ``{"y_in", "y_out"}``, each ``(trials, T*E)``.

    Same keys and meaning as the engine's ``run_shard``, so the runner treats train and
    simulate modes alike. The shard's generator is seeded by
    ``audit.core.seeding.seed_sequence(seed, cell, shard)`` (``seed_sequence(seed, shard)`` when
    ``cell`` is empty), so any shard can be recomputed alone.

    ``canaries_per_training`` = k > 1: each training holds k Dirac canaries on k disjoint
    coordinates, all IN or all OUT, and the arrays have ``trials * k`` rows (training r's
    canaries in rows r k .. r k + k - 1), drawn from the sampler's joint law of the k canaries
    (:meth:`audit.sampling.Sampler.simulate_canaries`, docs/design.md §8.17).
    """
    shard = check_int("shard", shard, minimum=0)
    path: tuple[int | str, ...] = (cell, shard) if cell else (shard,)
    rng = np.random.default_rng(seed_sequence(seed, *path))
    k = check_int("canaries_per_training", canaries_per_training, minimum=1)
    if k > 1:
        trials = check_int("trials", trials, minimum=1)
        sides = {}
        for side, canary_in in (("y_in", True), ("y_out", False)):
            y = rng.standard_normal((trials * k, mechanism.total_steps), dtype=DTYPE)
            y *= DTYPE(mechanism.sigma)
            get_sampler(mechanism.sampler).simulate_canaries(mechanism, rng, y, canary_in, k)
            sides[side] = y
        return sides
    observations = simulate_observations(mechanism, trials, rng)
    y_in, y_out = observations.y_in, observations.y_out
    assert y_in is not None and y_out is not None  # the simulator observes every step
    return {"y_in": y_in, "y_out": y_out}


def simulate_one_run_shard(
    mechanism: Mechanism,
    *,
    seed: int,
    shard: int,
    trials: int,
    cell: str,
    canaries: int,
    shard_size: int,
) -> dict[str, np.ndarray]:
    """One shard of a one-run audit: canaries ``shard * shard_size`` to ``+ trials`` of the m.

    Each canary is IN with the coin of :func:`audit.stats.one_run.canary_membership` and its
    observation follows the sampler's law for one canary (as :func:`simulate_shard` draws
    it), independently of the other canaries': a model of m Dirac canaries on m distinct
    coordinates, each taking a batch slot like any example. (Under shuffling the canaries'
    positions are exactly those of m examples of a uniform permutation only one at a time;
    the joint law, with its slight negative dependence, is not simulated.) Returns
    ``{"y_in": rows of the IN canaries, "y_out": rows of the OUT canaries}`` in canary order.
    """
    shard = check_int("shard", shard, minimum=0)
    included = canary_membership(seed, cell, canaries)[
        shard * shard_size : shard * shard_size + trials
    ]
    rng = np.random.default_rng(seed_sequence(seed, cell, "one_run", shard))
    n_in = int(included.sum())
    y_in = _simulate_side(mechanism, rng, n_in, canary_in=True) if n_in else None
    y_out = (
        _simulate_side(mechanism, rng, included.size - n_in, canary_in=False)
        if n_in < included.size
        else None
    )
    steps = mechanism.total_steps
    return {
        "y_in": y_in if y_in is not None else np.zeros((0, steps), dtype=DTYPE),
        "y_out": y_out if y_out is not None else np.zeros((0, steps), dtype=DTYPE),
    }
