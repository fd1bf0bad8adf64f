"""The laws of a sampler that both the simulator and the attacks need, from the mechanism alone.

Per step of an epoch, the probability that the canary's gradient is in the step's sum, and the
first two moments of the number O of co-batch examples in it (the adversarial threat model's
random term). Below both :mod:`audit.training.simulate` (which draws from these laws) and
:mod:`attacks.likelihood_ratio` (whose score is built on them), so that the attacks do not
import the simulator; both import them from here.

Poisson: q = b/n, O ~ Bin(n - 1, q). Truncated Poisson (a uniform B-subset of the sampled set
S when |S| > B): the canary is in the sum with probability q E[min(1, B / (1 + K))],
K ~ Bin(n - 1, q) the others. Fixed-size samplers: 1/T, and no random co-batch term. Each
law is the registered sampler's (:mod:`audit.sampling`); this module asks the registry.
"""

from __future__ import annotations

from audit.core.mechanism import Mechanism
from audit.sampling import get_sampler, other_examples

__all__ = [
    "canary_inclusion_probability",
    "cobatch_mean",
    "cobatch_variance",
    "other_examples",
]


def canary_inclusion_probability(mechanism: Mechanism) -> float:
    """Probability that the canary's gradient is in a given step's sum (the sampler's law).

    Poisson: q = b/n. Truncated Poisson: q E[min(1, B / (1 + K))], K ~ Bin(n - 1, q)
    (a uniform B-subset of the |S| = 1 + K sampled examples keeps the canary with
    probability B / |S|; :func:`audit.sampling.truncated_poisson.inclusion_probability`, on
    which the truncated lower curve is built). Fixed-size samplers: 1/T (one step per epoch).

    Raises:
        ValueError: the sampler has no such law (naming the sampler and the capability).
    """
    return get_sampler(mechanism.sampler).inclusion_probability(mechanism)


def _cobatch_moments(mechanism: Mechanism) -> tuple[float, float]:
    """(E O, Var O) of the number O of co-batch examples in a step's sum (the sampler's law)."""
    n_others = other_examples(mechanism)
    return get_sampler(mechanism.sampler).cobatch_moments(mechanism, n_others)


def cobatch_mean(mechanism: Mechanism) -> float:
    """E O: expected number of co-batch examples in a step's sum (Poisson samplers)."""
    return _cobatch_moments(mechanism)[0]


def cobatch_variance(mechanism: Mechanism) -> float:
    """Var O: the variance the unknown co-batch count adds to y_t (adversarial Poisson)."""
    return _cobatch_moments(mechanism)[1]
