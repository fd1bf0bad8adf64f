"""``persistent_shuffle``: one uniform permutation per run, reused every epoch (Chua et al. 2024,
Alg. 2)."""

from __future__ import annotations

import numpy as np

from audit.core.mechanism import Mechanism
from audit.sampling.base import Sampler, shuffled_canaries_signal, uniform_step_per_epoch
from audit.sampling.batches import BatchSampler, PersistentShuffleSampler

__all__ = ["PersistentShuffle"]


class PersistentShuffle(Sampler):
    """The canary's step is uniform in 0..T-1, the same in every epoch."""

    name = "persistent_shuffle"
    fixed_size = True
    isolated_needs_dirac = True
    adversarial_worst = True
    canary_law = "uniform_step_per_epoch"
    same_step_every_epoch = True
    description = "one uniform permutation per run, reused in every epoch"

    def batch_sampler(
        self, *, n: int, batch_size: int, epochs: int, max_batch_size: int | None
    ) -> BatchSampler:
        return PersistentShuffleSampler(n=n, batch_size=batch_size, epochs=epochs)

    def simulate_canaries(
        self,
        mechanism: Mechanism,
        rng: np.random.Generator,
        y: np.ndarray,
        canary_in: bool,
        canaries: int,
    ) -> None:
        """k canaries at k distinct positions of one permutation, the same every epoch: dependent
        steps."""
        shuffled_canaries_signal(mechanism, rng, y, canary_in, canaries, same_every_epoch=True)

    def canary_steps(
        self, mechanism: Mechanism, rng: np.random.Generator, trials: int
    ) -> np.ndarray:
        return uniform_step_per_epoch(mechanism, rng, trials, same_every_epoch=True)
