"""``sampled_without_replacement``: at every step a batch of exactly b examples, drawn uniformly
without replacement, independently of the other steps.

The fixed-size independent batches of Lebeda, Regehr, Kamath, Steinke, *Avoiding Pitfalls for
Privacy Accounting of Subsampled Mechanisms under Composition*, 2024 (arXiv 2405.20769; their
"sampling without replacement", dp_accounting's ``SampledWithoutReplacementDpEvent``). What a
``torch.utils.data.RandomSampler``-free loop that calls ``random.sample(range(n), b)`` at each
step does. Users also say ``fixed_size``, ``without_replacement`` or ``wor``
(:data:`audit.core.names.SAMPLER_ALIASES`).

Exact laws (n examples, batch size b, q = b/n, T = round(n / b) steps per epoch, E epochs):

- every batch has exactly b distinct examples, a uniformly random b-subset of the n;
- the batches of different steps are independent;
- one example is in a given step's batch with probability q = C(n-1, b-1) / C(n, b) = b/n,
  independently across steps: its participations are Binomial(T E, q);
- given that the canary is in a step's batch, the other b - 1 are a uniform (b-1)-subset of the
  n - 1 others; given that it is not, b of them: the co-batch count is O = b - S, S the canary's
  inclusion, so the co-batch *reveals* the canary's inclusion (unlike Poisson's, whose count is
  independent of it).

The simulator's law (zero-out adjacency: the OUT canary keeps its slot, with gradient 0; the
attacker adds back b per step, :meth:`SampledWithoutReplacement.known_offset`):

- isolated (the others contribute 0 along the canary's direction): IN ``S_t``, OUT 0,
  S_t ~ Bernoulli(q) i.i.d.: exactly Poisson's observation;
- adversarial (every other example contributes -1, docs/design.md §3.4): the step's sum is
  ``S_t x - (b - S_t)``, x = 1 IN, 0 OUT; after the add-back, IN ``2 S_t``, OUT ``S_t``.

Its theory (the three adjacencies) is :mod:`audit.theory.sampled_without_replacement`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from audit.core.mechanism import Mechanism
from audit.core.validation import check_int
from audit.sampling.base import Sampler, batch_size_of
from audit.sampling.batches import INDEX_DTYPE, BatchSampler, _uniform_subsets
from audit.sampling.exact_draws import bernoulli_mask

__all__ = ["SampledWithoutReplacement", "SampledWithoutReplacementSampler"]

NAME = "sampled_without_replacement"


@dataclass(frozen=True)
class SampledWithoutReplacementSampler(BatchSampler):
    """A uniform b-subset of 0..n-1 at each of the T E steps, independently (Lebeda et al. 2024).

    ``sample`` returns int32 ``(trials, T E, b)``, each row in increasing index order, no
    padding. The subsets are drawn by :func:`audit.sampling.batches._uniform_subsets` (as
    Poisson's, with every size b): rejection of index draws with a repeat where b^2 <= 2n, the
    first b entries of a uniform permutation otherwise; both give a uniform b-subset.
    """

    name = NAME

    def sample(self, rng: np.random.Generator, trials: int) -> np.ndarray:
        trials = check_int("trials", trials, minimum=0)
        rows = trials * self.total_steps
        if rows == 0:
            return np.zeros((trials, self.total_steps, self.batch_size), dtype=INDEX_DTYPE)
        subsets = _uniform_subsets(rng, np.full(rows, self.batch_size, dtype=np.int64), self.n)
        return subsets.astype(INDEX_DTYPE, copy=False).reshape(
            trials, self.total_steps, self.batch_size
        )

    def batch_size_law(self) -> tuple[np.ndarray, np.ndarray]:
        """Exactly b."""
        return np.array([self.batch_size]), np.array([1.0])

    def participation_law(self) -> tuple[np.ndarray, np.ndarray]:
        """Binomial(T E, b/n): one Bernoulli(b/n) inclusion per step, independent steps."""
        from scipy import stats  # imported here: scipy.stats takes a second to import

        support = np.arange(self.total_steps + 1)
        return support, stats.binom(self.total_steps, self.batch_size / self.n).pmf(support)


class SampledWithoutReplacement(Sampler):
    """b examples drawn without replacement at each step, independently of the other steps."""

    name = NAME
    canary_law = "independent_steps"
    adversarial_worst = True
    description = (
        "a uniform b-subset (without replacement) at each step, independently; fixed batch size b"
    )

    def batch_sampler(
        self, *, n: int, batch_size: int, epochs: int, max_batch_size: int | None
    ) -> BatchSampler:
        return SampledWithoutReplacementSampler(n=n, batch_size=batch_size, epochs=epochs)

    def slots(self, *, n: int, batch_size: int, max_batch_size: int | None) -> int:
        """b, exactly (every batch is full)."""
        return int(batch_size)

    def inclusion_probability(self, mechanism: Mechanism) -> float:
        """q = b/n (C(n-1, b-1) / C(n, b))."""
        return mechanism.sampling_probability

    def cobatch_moments(self, mechanism: Mechanism, n_others: int) -> tuple[float, float]:
        """O = b - S, S ~ Bernoulli(q) the canary's inclusion: (b - q, q (1 - q))."""
        q = mechanism.sampling_probability
        return batch_size_of(mechanism) - q, q * (1.0 - q)

    def known_offset(self, mechanism: Mechanism) -> float:
        """b: every batch holds exactly b examples (the canary's slot included, IN and OUT)."""
        return float(batch_size_of(mechanism))

    def simulate_signal(
        self, mechanism: Mechanism, rng: np.random.Generator, y: np.ndarray, canary_in: bool
    ) -> None:
        """S_t ~ Bernoulli(q) i.i.d. per step (exact at any q,
        :func:`audit.sampling.exact_draws.bernoulli_mask`). Isolated: IN adds S_t, OUT nothing.
        Adversarial: IN adds 2 S_t, OUT S_t (the b - S_t others at -1 each, plus the add-back b).
        Modifies ``y`` in place."""
        adversarial = mechanism.threat_model == "adversarial"
        if not canary_in and not adversarial:
            return
        sampled = bernoulli_mask(rng, mechanism.sampling_probability, y.shape)
        weight = (1.0 if canary_in else 0.0) + (1.0 if adversarial else 0.0)
        if weight == 1.0:
            y += sampled
        else:
            y += y.dtype.type(weight) * sampled
