"""``poisson``: each example independently with q = b/n at each of T*E steps (Chua et al. 2024, Alg.
1)."""

from __future__ import annotations

import numpy as np

from audit.core.mechanism import Mechanism
from audit.sampling.base import Sampler, near_poisson_slots, other_examples
from audit.sampling.batches import BatchSampler, PoissonSampler
from audit.sampling.exact_draws import bernoulli_mask, binomial_counts

__all__ = ["Poisson", "simulate_subsampled"]


def simulate_subsampled(
    sampler: Sampler, mechanism: Mechanism, rng: np.random.Generator, y: np.ndarray, canary_in: bool
) -> None:
    """The simulator law of the subsampled samplers (Poisson, truncated Poisson), added to ``y``.

    Isolated: IN adds 1[canary in the step's sum] ~ Bernoulli(p) per step, p the sampler's
    inclusion probability; OUT adds nothing. Adversarial: the canary's sampling
    S_t ~ Bernoulli(q) and the others' count K_t ~ Binomial(n - 1, q) per step, jointly cut
    by the sampler's own truncation (:meth:`Sampler.truncate_cobatch`) to O_t; y_t gets
    -O_t + E O (the attacker's add-back), and S_t when IN. Both draws exact at any q
    (:mod:`audit.sampling.exact_draws`). Modifies ``y`` in place.
    """
    shape = y.shape
    if mechanism.threat_model != "adversarial":
        if canary_in:
            y += bernoulli_mask(rng, sampler.inclusion_probability(mechanism), shape)
        return
    q = mechanism.sampling_probability
    n_others = other_examples(mechanism)
    sampled = bernoulli_mask(rng, q, shape)
    others = binomial_counts(rng, n_others, q, shape)
    others = sampler.truncate_cobatch(mechanism, rng, sampled, others)
    np.subtract(y, others, out=y, casting="unsafe")
    y += y.dtype.type(sampler.cobatch_moments(mechanism, n_others)[0])
    if canary_in:
        y += sampled


class Poisson(Sampler):
    """Canary in each step with probability q; co-batch count Binomial(n - 1, q)."""

    name = "poisson"
    canary_law = "independent_steps"
    independent_canaries = True
    description = "each example independently with probability q = b/n at each step"

    def batch_sampler(
        self, *, n: int, batch_size: int, epochs: int, max_batch_size: int | None
    ) -> BatchSampler:
        return PoissonSampler(n=n, batch_size=batch_size, epochs=epochs)

    def slots(self, *, n: int, batch_size: int, max_batch_size: int | None) -> int:
        """:func:`audit.sampling.base.near_poisson_slots` (an estimate: the batch is near
        Poisson(b))."""
        return near_poisson_slots(n, batch_size)

    def inclusion_probability(self, mechanism: Mechanism) -> float:
        """q = b/n."""
        return mechanism.sampling_probability

    def cobatch_moments(self, mechanism: Mechanism, n_others: int) -> tuple[float, float]:
        """O ~ Binomial(n - 1, q): ((n-1) q, (n-1) q (1-q))."""
        q = mechanism.sampling_probability
        return n_others * q, n_others * q * (1 - q)

    def known_offset(self, mechanism: Mechanism) -> float:
        """(n - 1) q: the expected co-batch count (unknown to the attacker, adds variance only)."""
        return other_examples(mechanism) * mechanism.sampling_probability

    def simulate_signal(
        self, mechanism: Mechanism, rng: np.random.Generator, y: np.ndarray, canary_in: bool
    ) -> None:
        """Bernoulli(q) per step; adversarial: minus the Binomial(n - 1, q) others, centred
        (:func:`simulate_subsampled`)."""
        simulate_subsampled(self, mechanism, rng, y, canary_in)
