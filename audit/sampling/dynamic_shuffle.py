"""``dynamic_shuffle``: a fresh uniform permutation every epoch (Chua et al. 2024, Alg. 2)."""

from __future__ import annotations

import numpy as np

from audit.core.mechanism import Mechanism
from audit.sampling.base import Sampler, shuffled_canaries_signal, uniform_step_per_epoch
from audit.sampling.batches import BatchSampler, DynamicShuffleSampler

__all__ = ["DynamicShuffle"]


class DynamicShuffle(Sampler):
    """The canary's step is uniform in 0..T-1, independently in each epoch."""

    name = "dynamic_shuffle"
    fixed_size = True
    isolated_needs_dirac = True
    adversarial_worst = True
    canary_law = "uniform_step_per_epoch"
    description = "a fresh uniform permutation for every epoch"

    def batch_sampler(
        self, *, n: int, batch_size: int, epochs: int, max_batch_size: int | None
    ) -> BatchSampler:
        return DynamicShuffleSampler(n=n, batch_size=batch_size, epochs=epochs)

    def simulate_canaries(
        self,
        mechanism: Mechanism,
        rng: np.random.Generator,
        y: np.ndarray,
        canary_in: bool,
        canaries: int,
    ) -> None:
        """k canaries at k distinct positions of each epoch's permutation: dependent steps."""
        shuffled_canaries_signal(mechanism, rng, y, canary_in, canaries, same_every_epoch=False)

    def canary_steps(
        self, mechanism: Mechanism, rng: np.random.Generator, trials: int
    ) -> np.ndarray:
        return uniform_step_per_epoch(mechanism, rng, trials)
