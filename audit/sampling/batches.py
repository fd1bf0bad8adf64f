"""Batch draws and their exact laws, shared by the registered samplers (:mod:`audit.sampling`).

The batch samplers of Chua, Ghazi, Kamath, Kumar, Manurangsi, Sinha, Zhang, *Scalable
DP-SGD: Shuffling vs. Poisson Subsampling*, NeurIPS 2024, arXiv 2411.04205, §2
(Algorithms 1-3), drawn for many trials at once: ``sample(rng, trials)`` returns an int32
array ``(trials, total_steps, slots)`` of example indices, ``-1`` in padding slots.
:func:`audit.sampling.factory.make_sampler` builds one by its registered name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from audit.core.mechanism import steps_per_epoch_for
from audit.core.validation import check_int
from audit.sampling.compiled_rows import sorted_rows

__all__ = [
    "INDEX_DTYPE",
    "PADDING",
    "BatchSampler",
    "DeterministicSampler",
    "DynamicShuffleSampler",
    "PersistentShuffleSampler",
    "PoissonSampler",
    "TruncatedPoissonSampler",
    "batch_size_pmf",
    "participation_counts",
    "participation_pmf",
]


PADDING = -1
"""Index stored in a padding slot (a dummy example with zero weight)."""


INDEX_DTYPE = np.int32
"""dtype of the index arrays: int32 halves the memory of a large draw (n < 2**31)."""


@dataclass(frozen=True)
class BatchSampler(ABC):
    """A batch sampler over examples ``0..n-1`` for ``epochs`` epochs of ``n / b`` steps."""

    n: int
    batch_size: int
    epochs: int = 1

    name = "abstract"

    @property
    def steps_per_epoch(self) -> int:
        """T = n / b (:func:`steps_per_epoch_for`)."""
        return steps_per_epoch_for(self.n, self.batch_size)

    @property
    def total_steps(self) -> int:
        """T * E."""
        return self.steps_per_epoch * self.epochs

    def batch_size_law(self) -> tuple[np.ndarray, np.ndarray]:
        """Exact law of the batch size: :func:`batch_size_pmf` (a new sampler overrides it)."""
        return _batch_size_pmf(self)

    def participation_law(self) -> tuple[np.ndarray, np.ndarray]:
        """Exact law of one example's participations: :func:`participation_pmf` (overridable)."""
        return _participation_pmf(self)

    @abstractmethod
    def sample(self, rng: np.random.Generator, trials: int) -> np.ndarray:
        """Batches of ``trials`` independent runs: int32 ``(trials, total_steps, slots)``, -1 =
        padding."""


@dataclass(frozen=True)
class _FixedSizeSampler(BatchSampler):
    """Shared shape logic of the three samplers that use every example once per epoch."""

    def _epoch_orders(self, rng: np.random.Generator, trials: int) -> np.ndarray:
        """Order of examples within each epoch: ``(trials, epochs, n)``."""
        raise NotImplementedError

    def sample(self, rng: np.random.Generator, trials: int) -> np.ndarray:
        trials = check_int("trials", trials, minimum=0)
        orders = self._epoch_orders(rng, trials)
        return orders.reshape(trials, self.total_steps, self.batch_size)


@dataclass(frozen=True)
class DeterministicSampler(_FixedSizeSampler):
    """Batches in index order, the same in every epoch (Chua et al. 2024, §2)."""

    name = "deterministic"

    def _epoch_orders(self, rng: np.random.Generator, trials: int) -> np.ndarray:
        order = np.arange(self.n, dtype=INDEX_DTYPE)
        return np.broadcast_to(order, (trials, self.epochs, self.n)).copy()


@dataclass(frozen=True)
class PersistentShuffleSampler(_FixedSizeSampler):
    """One uniform permutation per trial, reused in every epoch (Chua et al. 2024, Alg. 2)."""

    name = "persistent_shuffle"

    def _epoch_orders(self, rng: np.random.Generator, trials: int) -> np.ndarray:
        perms = _uniform_permutations(rng, trials, self.n)
        return np.broadcast_to(perms[:, None, :], (trials, self.epochs, self.n)).copy()


@dataclass(frozen=True)
class DynamicShuffleSampler(_FixedSizeSampler):
    """A fresh uniform permutation per trial and epoch (Chua et al. 2024, Alg. 2)."""

    name = "dynamic_shuffle"

    def _epoch_orders(self, rng: np.random.Generator, trials: int) -> np.ndarray:
        perms = _uniform_permutations(rng, trials * self.epochs, self.n)
        return perms.reshape(trials, self.epochs, self.n)


@dataclass(frozen=True)
class PoissonSampler(BatchSampler):
    """Each example independently with q = b/n at each of T*E steps (Chua et al. 2024, Alg. 1).

    ``slots`` is the largest batch drawn; smaller batches are padded with -1.
    """

    name = "poisson"

    @property
    def sampling_probability(self) -> float:
        """q = b / n."""
        return self.batch_size / self.n

    def sample(self, rng: np.random.Generator, trials: int) -> np.ndarray:
        trials = check_int("trials", trials, minimum=0)
        sizes = _poisson_batch_sizes(
            rng, trials * self.total_steps, self.n, self.sampling_probability
        )
        rows = _uniform_subsets(rng, sizes, self.n)
        return rows.reshape(trials, self.total_steps, rows.shape[1])


@dataclass(frozen=True)
class TruncatedPoissonSampler(PoissonSampler):
    """Poisson, cut to a uniform subset of size B when larger, padded to exactly B slots.

    Chua et al. (2024), §4 (Algorithm 3, "truncated Poisson"): the batch is a Poisson
    batch S; if |S| > B a uniformly random B-subset of S is kept; every batch is padded
    with weight-0 dummies to exactly B, so the step has a fixed shape.
    """

    max_batch_size: int = 1

    name = "truncated_poisson"

    def sample(self, rng: np.random.Generator, trials: int) -> np.ndarray:
        trials = check_int("trials", trials, minimum=0)
        # A uniform B-subset of a uniform |S|-subset is a uniform B-subset, so truncating
        # the Poisson batch is the same as drawing min(|S|, B) examples uniformly.
        sizes = _poisson_batch_sizes(
            rng, trials * self.total_steps, self.n, self.sampling_probability
        )
        rows = _uniform_subsets(rng, np.minimum(sizes, self.max_batch_size), self.n)
        padded = np.full((rows.shape[0], self.max_batch_size), PADDING, dtype=INDEX_DTYPE)
        padded[:, : rows.shape[1]] = rows
        return padded.reshape(trials, self.total_steps, self.max_batch_size)


def participation_counts(batches: np.ndarray, example: int) -> np.ndarray:
    """Number of steps in which ``example`` appears, per trial: ``(trials,)`` ints."""
    return (batches == example).any(axis=2).sum(axis=1)


def _uniform_permutations(rng: np.random.Generator, rows: int, n: int) -> np.ndarray:
    """``rows`` independent uniform permutations of ``0..n-1``: ``(rows, n)``."""
    perms = np.broadcast_to(np.arange(n, dtype=INDEX_DTYPE), (rows, n)).copy()
    return rng.permuted(perms, axis=1, out=perms)


def _poisson_batch_sizes(rng: np.random.Generator, rows: int, n: int, q: float) -> np.ndarray:
    """|S| ~ Binomial(n, q) for ``rows`` independent Poisson batches."""
    return rng.binomial(n, q, size=rows)


def _uniform_subsets(rng: np.random.Generator, sizes: np.ndarray, n: int) -> np.ndarray:
    """For each row r, a uniformly random ``sizes[r]``-subset of ``0..n-1``.

    A Poisson batch is exactly a Binomial(n, q) size followed by a uniform subset of that
    size, so this plus :func:`_poisson_batch_sizes` draws Bernoulli(q) membership at a cost
    proportional to the batch, not to n. Small batches (slots^2 <= 2n) draw indices with
    replacement and redraw the rows that repeat one (rejection sampling: given its size a
    row is accepted exactly when its indices are distinct, so the accepted set is uniform);
    large batches take the first entries of a uniform permutation.
    Returns ``(rows, slots)`` indices: ascending, then -1 padding; slots = max size.
    """
    rows = sizes.shape[0]
    slots = int(sizes.max()) if rows else 0
    if slots * slots <= 2 * n:
        draws, repeated = _sorted_draws(rng, sizes, n, slots)
        repeats = np.flatnonzero(repeated)
        while repeats.size:
            fresh, again = _sorted_draws(rng, sizes[repeats], n, slots)
            draws[repeats] = fresh
            repeats = repeats[again]
        return draws
    real = np.arange(slots) < sizes[:, None]
    draws = np.where(real, _uniform_permutations(rng, rows, n)[:, :slots], INDEX_DTYPE(n))
    draws.sort(axis=1)
    np.copyto(draws, INDEX_DTYPE(PADDING), where=draws >= n)
    return draws


def _sorted_draws(
    rng: np.random.Generator, sizes: np.ndarray, n: int, slots: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per row, ``sizes[r]`` indices drawn uniformly with replacement (one ``rng.integers``
    call for all rows, in row order), sorted, then padding; and which rows repeat an index
    (:func:`audit.sampling.compiled_rows.sorted_rows`)."""
    draws = rng.integers(0, n, size=int(sizes.sum()), dtype=INDEX_DTYPE)
    return sorted_rows(draws, sizes, n, slots, PADDING)


def batch_size_pmf(sampler: BatchSampler) -> tuple[np.ndarray, np.ndarray]:
    """Exact law of the number of real examples in one batch (the sampler's ``batch_size_law``)."""
    return sampler.batch_size_law()


def participation_pmf(sampler: BatchSampler) -> tuple[np.ndarray, np.ndarray]:
    """Exact law of one example's number of participations (the sampler's ``participation_law``)."""
    return sampler.participation_law()


def _batch_size_pmf(sampler: BatchSampler) -> tuple[np.ndarray, np.ndarray]:
    """Exact law of the number of real examples in one batch: (support, probabilities).

    Fixed-size samplers: always b. Poisson: Binomial(n, q). Truncated Poisson:
    min(Binomial(n, q), B), so P(size = B) = P(Binomial(n, q) >= B).
    """
    from scipy import stats

    if isinstance(sampler, _FixedSizeSampler):
        return np.array([sampler.batch_size]), np.array([1.0])
    assert isinstance(sampler, PoissonSampler)
    law = stats.binom(sampler.n, sampler.sampling_probability)
    if isinstance(sampler, TruncatedPoissonSampler):
        support = np.arange(min(sampler.max_batch_size, sampler.n) + 1)
        pmf = law.pmf(support)
        pmf[-1] = law.sf(support[-1] - 1)
        return support, pmf
    support = np.arange(sampler.n + 1)
    return support, law.pmf(support)


def _participation_pmf(sampler: BatchSampler) -> tuple[np.ndarray, np.ndarray]:
    """Exact law of how many of the T*E steps use one given example: (support, probabilities).

    Fixed-size samplers: exactly E. Poisson: Binomial(T E, q). Truncated Poisson: steps are
    independent and, by symmetry, a given example is in a step's kept batch with probability
    E[min(Binomial(n, q), B)] / n, so Binomial(T E, that probability).
    """
    from scipy import stats

    if isinstance(sampler, _FixedSizeSampler):
        return np.array([sampler.epochs]), np.array([1.0])
    sizes, probabilities = sampler.batch_size_law()
    per_step = float(sizes @ probabilities) / sampler.n
    support = np.arange(sampler.total_steps + 1)
    return support, stats.binom(sampler.total_steps, per_step).pmf(support)
