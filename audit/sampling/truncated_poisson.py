"""``truncated_poisson``: Poisson cut to a uniform B-subset, padded to B (Chua et al. 2024, §4, Alg.
3)."""

from __future__ import annotations

import numpy as np

from audit.core.mechanism import Mechanism
from audit.sampling.base import Sampler, check_max_batch_size, dataset_size
from audit.sampling.batches import BatchSampler, TruncatedPoissonSampler
from audit.sampling.poisson import simulate_subsampled

__all__ = ["TruncatedPoisson", "inclusion_probability"]


def inclusion_probability(n: int, q: float, max_batch_size: int) -> float:
    """p' = Pr[the canary's gradient is in a given step's sum] = q E[min(1, B / (1 + K))].

    K ~ Bin(n - 1, q) counts the other sampled examples; a uniform B-subset of the
    |S| = 1 + K sampled ones keeps the canary with probability min(1, B / |S|). With
    Bin(n-1, q)(k) / (1 + k) = Bin(n, q)(k + 1) / (n q) the expectation is closed-form:

        p' = q Pr[Bin(n - 1, q) <= B - 1] + (B / n) Pr[Bin(n, q) > B]

    (equivalently E[min(Bin(n, q), B)] / n, by exchangeability of the n examples); both
    terms come from scipy's binomial CDF / survival function, accurate in the tails.
    """
    from scipy import stats  # imported here: scipy.stats takes a second to import

    big_b = max_batch_size
    kept_whole = q * float(stats.binom.cdf(big_b - 1, n - 1, q))
    kept_cut = big_b / n * float(stats.binom.sf(big_b, n, q))
    return min(q, kept_whole + kept_cut)


class TruncatedPoisson(Sampler):
    """Poisson batch S; if |S| > B a uniform B-subset is kept; padded with dummies to B slots."""

    name = "truncated_poisson"
    parameters = ("max_batch_size",)
    canary_law = "independent_steps"
    description = "Poisson, cut to a uniform subset of B when larger, padded to exactly B"

    def check_parameters(
        self, *, n: int | None, batch_size: int | None, steps_per_epoch: int | None,
        max_batch_size: int | None,
    ) -> int | None:
        """B is required (an integer >= 1), and so is n."""
        if max_batch_size is None:
            raise ValueError(
                "max_batch_size is required for sampler='truncated_poisson' (the fixed padded "
                "size B >= 1)"
            )
        big_b = check_max_batch_size(max_batch_size, self.name)
        if n is None:
            raise ValueError("sampler='truncated_poisson' needs n (or batch_size) to be given")
        return big_b

    def batch_sampler(
        self, *, n: int, batch_size: int, epochs: int, max_batch_size: int | None
    ) -> BatchSampler:
        big_b = check_max_batch_size(max_batch_size, self.name)
        return TruncatedPoissonSampler(
            n=n, batch_size=batch_size, epochs=epochs, max_batch_size=big_b
        )

    def slots(self, *, n: int, batch_size: int, max_batch_size: int | None) -> int:
        """B: every batch is padded to exactly B slots."""
        return int(check_max_batch_size(max_batch_size, self.name))

    def inclusion_probability(self, mechanism: Mechanism) -> float:
        """q E[min(1, B / (1 + K))], K ~ Bin(n - 1, q) (:func:`inclusion_probability`)."""
        return inclusion_probability(
            dataset_size(mechanism), mechanism.sampling_probability,
            check_max_batch_size(mechanism.max_batch_size, self.name),
        )

    def cobatch_moments(self, mechanism: Mechanism, n_others: int) -> tuple[float, float]:
        """(E O, Var O) of the co-batch count O after truncation, K ~ Bin(n - 1, q).

        Canary not sampled (1 - q): O = min(K, B). Sampled (q): O = K if 1 + K <= B, else
        B - 1 with probability B / (1 + K) (canary kept) and B otherwise.
        """
        from scipy import stats

        q = mechanism.sampling_probability
        big_b = check_max_batch_size(mechanism.max_batch_size, self.name)
        k = np.arange(n_others + 1)
        pmf = stats.binom.pmf(k, n_others, q)
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

    def known_offset(self, mechanism: Mechanism) -> float:
        """(n-1)/n * E[min(Binomial(n, q), B)]."""
        from scipy import stats

        n, q = dataset_size(mechanism), mechanism.sampling_probability
        big_b = check_max_batch_size(mechanism.max_batch_size, self.name)
        sizes = np.arange(n + 1)
        expected = float(np.sum(np.minimum(sizes, big_b) * stats.binom.pmf(sizes, n, q)))
        return (n - 1) / n * expected

    def truncate_cobatch(
        self,
        mechanism: Mechanism,
        rng: np.random.Generator,
        sampled: np.ndarray,
        others: np.ndarray,
    ) -> np.ndarray:
        """Overflow: a uniform B-subset keeps the canary with probability B/|S|, and B others
        (B - 1 when the canary is kept). float64 U |S| >= B: exact to 2^-53 (B/|S| >= B/n).
        Modifies ``sampled`` in place (the canary dropped) and returns the new co-batch counts.
        """
        big_b = mechanism.max_batch_size
        size = others + sampled
        over = size > big_b
        contested = np.flatnonzero((over & sampled).ravel())
        dropped = rng.random(contested.size) * size.ravel()[contested] >= big_b
        sampled.ravel()[contested[dropped]] = False
        return np.where(over, big_b - sampled, others)

    def simulate_signal(
        self, mechanism: Mechanism, rng: np.random.Generator, y: np.ndarray, canary_in: bool
    ) -> None:
        """Poisson's law cut to B (:func:`audit.sampling.poisson.simulate_subsampled` with
        :meth:`truncate_cobatch`): the canary in a step's sum with probability p' (isolated)."""
        simulate_subsampled(self, mechanism, rng, y, canary_in)
