"""``balls_and_bins``: every example in one uniformly random step per epoch, independently.

Chua, Ghazi, Harrison, Leeman, Kamath, Kumar, Manurangsi, Sinha, Zhang, *Balls-and-Bins
Sampling for DP-SGD*, AISTATS 2025, arXiv 2412.16802, §2: in each of the E epochs every
example independently throws a ball into one of the T bins (steps), uniformly at random.

Exact laws (T steps per epoch, n examples):

- a batch's size is Binomial(n, 1/T) (each example lands in that step with probability 1/T);
- one example is used exactly once per epoch, at a step uniform on 0..T-1, independently
  across epochs (so E participations in all, with probability 1);
- the canary's inclusion probability in a given step is 1/T.

The isolated pair (every other example contributes 0 along the canary's direction) observes the
canary in one uniformly random step per epoch: the same law as dynamic shuffling's isolated
observation, i.e. the random-allocation pair of Feldman & Shenfeld (arXiv 2502.08202) composed E
times; its theory is :func:`audit.theory.balls_and_bins.balls_and_bins_bounds`. The adversarial
pair: every other example's step is drawn independently of the canary's, so the crafted co-batch
(each other clipped gradient -C u, docs/design.md §3.4) adds to the isolated observation the centred
counts -(O_t - (n - 1)/T), (O_1, ..., O_T) ~ Multinomial(n - 1, 1/T each) per epoch, whose law does
not depend on the canary: a post-processing of the isolated pair, whose curves it shares
(:mod:`audit.theory.balls_and_bins`). Co-batch moments: O_t ~ Binomial(n - 1, 1/T); known offset (n
- 1)/T per step; the simulator draws the counts exactly per epoch
(:meth:`BallsAndBins.simulate_signal`); the default attack is ``shuffle_isolated_lr`` with the
co-batch's moments (its Gaussian model keeps the epoch sum, where the co-batch cancels).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from audit.core.mechanism import Mechanism, steps_per_epoch_for
from audit.core.validation import check_int
from audit.sampling.base import (
    Sampler,
    near_poisson_slots,
    other_examples,
    uniform_step_per_epoch,
)
from audit.sampling.batches import INDEX_DTYPE, PADDING, BatchSampler

__all__ = ["BallsAndBins", "BallsAndBinsSampler"]


@dataclass(frozen=True)
class BallsAndBinsSampler(BatchSampler):
    """Each example's step uniform on 0..T-1, per epoch, independently (Chua et al. 2025).

    ``sample`` returns int32 ``(trials, T E, slots)`` with ``slots`` the largest batch
    drawn, smaller batches padded with -1 (as Poisson's); within a batch, examples are in
    increasing index order.
    """

    name = "balls_and_bins"

    def sample(self, rng: np.random.Generator, trials: int) -> np.ndarray:
        trials = check_int("trials", trials, minimum=0)
        t, rows, n = self.steps_per_epoch, trials * self.epochs, self.n
        if rows == 0:
            return np.zeros((trials, self.total_steps, 0), dtype=INDEX_DTYPE)
        # One uniform step per example and epoch: O(n) per row. A stable sort of small
        # integer keys is numpy's radix sort (linear), grouping examples by their step.
        key = np.int16 if t <= np.iinfo(np.int16).max else np.int32
        steps = rng.integers(0, t, size=(rows, n), dtype=key)
        order = np.argsort(steps, axis=1, kind="stable")
        flat = steps.astype(np.int64) + t * np.arange(rows, dtype=np.int64)[:, None]
        counts = np.bincount(flat.ravel(), minlength=rows * t).reshape(rows, t)
        starts = np.cumsum(counts, axis=1) - counts
        sorted_steps = np.take_along_axis(steps, order, axis=1).astype(np.int64)
        position = np.arange(n)[None, :] - np.take_along_axis(starts, sorted_steps, axis=1)
        out = np.full((rows, t, int(counts.max())), PADDING, dtype=INDEX_DTYPE)
        out[np.arange(rows)[:, None], sorted_steps, position] = order.astype(INDEX_DTYPE)
        return out.reshape(trials, self.total_steps, out.shape[2])

    def batch_size_law(self) -> tuple[np.ndarray, np.ndarray]:
        """Binomial(n, 1/T)."""
        from scipy import stats  # imported here: scipy.stats takes a second to import

        support = np.arange(self.n + 1)
        return support, stats.binom(self.n, 1.0 / self.steps_per_epoch).pmf(support)

    def participation_law(self) -> tuple[np.ndarray, np.ndarray]:
        """Exactly E (once per epoch)."""
        return np.array([self.epochs]), np.array([1.0])


class BallsAndBins(Sampler):
    """The canary's step is uniform in 0..T-1, independently in each epoch; batch sizes random."""

    name = "balls_and_bins"
    isolated_needs_dirac = True
    canary_law = "uniform_step_per_epoch"
    independent_canaries = True
    description = "each example in one uniformly random step per epoch (Binomial(n, 1/T) batches)"

    def check_parameters(
        self, *, n: int | None, batch_size: int | None, steps_per_epoch: int | None,
        max_batch_size: int | None,
    ) -> int | None:
        """T must be round(n / b) (:func:`steps_per_epoch_for`), the steps the batch draws use
        (b = n / T is the mean size)."""
        if n is not None and batch_size is not None and steps_per_epoch is not None:
            if steps_per_epoch != steps_per_epoch_for(n, batch_size):
                raise ValueError(
                    f"sampler={self.name!r} needs steps_per_epoch = round(n / batch_size); got "
                    f"n={n}, batch_size={batch_size}, steps_per_epoch={steps_per_epoch}"
                )
        return None

    def batch_sampler(
        self, *, n: int, batch_size: int, epochs: int, max_batch_size: int | None
    ) -> BatchSampler:
        return BallsAndBinsSampler(n=n, batch_size=batch_size, epochs=epochs)

    def slots(self, *, n: int, batch_size: int, max_batch_size: int | None) -> int:
        """:func:`audit.sampling.base.near_poisson_slots` (an estimate: the batch is near
        Poisson(b))."""
        return near_poisson_slots(n, batch_size)

    def inclusion_probability(self, mechanism: Mechanism) -> float:
        """1/T: the canary's step is uniform on the T steps of its epoch."""
        return 1.0 / mechanism.steps_per_epoch

    def cobatch_moments(self, mechanism: Mechanism, n_others: int) -> tuple[float, float]:
        """O ~ Binomial(n - 1, 1/T) (each other example in the canary's step w.p. 1/T)."""
        p = 1.0 / mechanism.steps_per_epoch
        return n_others * p, n_others * p * (1 - p)

    def known_offset(self, mechanism: Mechanism) -> float:
        """(n - 1) / T: the expected co-batch count (its randomness adds variance only)."""
        return other_examples(mechanism) / mechanism.steps_per_epoch

    def simulate_signal(
        self, mechanism: Mechanism, rng: np.random.Generator, y: np.ndarray, canary_in: bool
    ) -> None:
        """The canary in one uniform step per epoch (+1 there, IN only); adversarial: minus the
        others' counts, per epoch (O_1, ..., O_T) ~ Multinomial(n - 1, 1/T each) drawn
        independently of the canary's step (``Generator.multinomial``: conditional binomials),
        plus the known offset (n - 1)/T per step. Modifies ``y`` in place."""
        trials, steps, epochs = y.shape[0], mechanism.steps_per_epoch, mechanism.epochs
        where = uniform_step_per_epoch(mechanism, rng, trials)
        if canary_in:
            y[np.arange(trials)[:, None], where] += y.dtype.type(1.0)
        if mechanism.threat_model == "adversarial":
            others = rng.multinomial(
                other_examples(mechanism), np.full(steps, 1.0 / steps), size=(trials, epochs)
            )
            np.subtract(y, others.reshape(trials, steps * epochs), out=y, casting="unsafe")
            y += y.dtype.type(self.known_offset(mechanism))
