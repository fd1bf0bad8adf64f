"""The laws of a sampler that both the simulator and the attacks need, from the mechanism alone.

Per step of an epoch, the probability that the canary's gradient is in the step's sum, and the
first two moments of the number O of co-batch examples in it (the adversarial threat model's
random term). Below both :mod:`audit.simulate` (which draws from these laws) and
:mod:`attacks.likelihood_ratio` (whose score is built on them), so that the attacks do not
import the simulator; :mod:`audit.simulate` re-exports the public names.

Poisson: q = b/n, O ~ Bin(n - 1, q). Truncated Poisson (a uniform B-subset of the sampled set
S when |S| > B): the canary is in the sum with probability q E[min(1, B / (1 + K))],
K ~ Bin(n - 1, q) the others (:func:`audit.theory.truncated_poisson.inclusion_probability`).
Fixed-size samplers: 1/T, and no random co-batch term.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import binom

from audit.mechanism import Mechanism
from audit.theory.truncated_poisson import inclusion_probability  # the one formula

__all__ = [
    "canary_inclusion_probability",
    "cobatch_mean",
    "cobatch_variance",
    "other_examples",
]


def other_examples(mechanism: Mechanism) -> int:
    """n - 1: the examples other than the canary (ValueError without n: their law needs it)."""
    if mechanism.n is None:
        raise ValueError(
            f"sampler={mechanism.sampler!r} with threat_model='adversarial' needs n (or batch_size): "
            "the number of co-batch examples per step is random and its law depends on n"
        )
    return mechanism.n - 1


def _truncated_law(mechanism: Mechanism) -> tuple[np.ndarray, np.ndarray]:
    """(k, Pr[K = k]) for the other examples' Poisson count K ~ Bin(n - 1, q), truncated to mass."""
    n_others = other_examples(mechanism)
    q = mechanism.sampling_probability
    k = np.arange(n_others + 1)
    return k, binom.pmf(k, n_others, q)


def canary_inclusion_probability(mechanism: Mechanism) -> float:
    """Probability that the canary's gradient is in a given step's sum.

    Poisson: q = b/n. Truncated Poisson: q E[min(1, B / (1 + K))], K ~ Bin(n - 1, q)
    (a uniform B-subset of the |S| = 1 + K sampled examples keeps the canary with
    probability B / |S|; :func:`audit.theory.truncated_poisson.inclusion_probability`, whose
    lower curve is built on it). Fixed-size samplers: 1/T (one step per epoch).
    """
    q = mechanism.sampling_probability
    if mechanism.sampler == "truncated_poisson":
        return inclusion_probability(other_examples(mechanism) + 1, q, mechanism.max_batch_size)
    if mechanism.sampler == "poisson":
        return q
    return 1.0 / mechanism.steps_per_epoch


def _cobatch_moments(mechanism: Mechanism) -> tuple[float, float]:
    """(E O, Var O) of the number O of co-batch examples in a step's sum (Poisson samplers)."""
    q = mechanism.sampling_probability
    n_others = other_examples(mechanism)
    if mechanism.sampler == "poisson":
        return n_others * q, n_others * q * (1 - q)
    if mechanism.sampler != "truncated_poisson":
        return 0.0, 0.0
    big_b = mechanism.max_batch_size
    k, pmf = _truncated_law(mechanism)
    # Canary not sampled (1 - q): O = min(K, B). Sampled (q): O = K if 1 + K <= B, else
    # B - 1 with probability B / (1 + K) (canary kept) and B otherwise.
    first = (1 - q) * np.minimum(k, big_b)
    second_moment = (1 - q) * np.minimum(k, big_b) ** 2
    fits = 1 + k <= big_b
    keep = np.minimum(1.0, big_b / (1.0 + k))
    over_mean = keep * (big_b - 1) + (1 - keep) * big_b
    over_square = keep * (big_b - 1) ** 2 + (1 - keep) * big_b**2
    first = first + q * np.where(fits, k, over_mean)
    second_moment = second_moment + q * np.where(fits, k**2, over_square)
    mean = float((pmf * first).sum())
    return mean, float((pmf * second_moment).sum()) - mean**2


def cobatch_mean(mechanism: Mechanism) -> float:
    """E O: expected number of co-batch examples in a step's sum (Poisson samplers)."""
    return _cobatch_moments(mechanism)[0]


def cobatch_variance(mechanism: Mechanism) -> float:
    """Var O: the variance the unknown co-batch count adds to y_t (adversarial Poisson)."""
    return _cobatch_moments(mechanism)[1]
