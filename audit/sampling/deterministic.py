"""``deterministic``: batches in index order, the same every epoch (Chua et al. 2024, §2)."""

from __future__ import annotations

import numpy as np

from audit.core.mechanism import Mechanism
from audit.sampling.base import Sampler
from audit.sampling.batches import BatchSampler, DeterministicSampler

__all__ = ["Deterministic"]


class Deterministic(Sampler):
    """B_t = {t b, ..., t b + b - 1}: the canary (index 0) is in step 0 of every epoch."""

    name = "deterministic"
    fixed_size = True
    canary_law = "known_steps"
    independent_canaries = True
    description = "batches in index order, the same in every epoch"

    def batch_sampler(
        self, *, n: int, batch_size: int, epochs: int, max_batch_size: int | None
    ) -> BatchSampler:
        return DeterministicSampler(n=n, batch_size=batch_size, epochs=epochs)

    def canary_steps(
        self, mechanism: Mechanism, rng: np.random.Generator, trials: int
    ) -> np.ndarray:
        offsets = mechanism.steps_per_epoch * np.arange(mechanism.epochs)
        return np.broadcast_to(offsets, (trials, mechanism.epochs))

    def fixed_canary_steps(self, mechanism: Mechanism) -> list[int] | None:
        return (mechanism.steps_per_epoch * np.arange(mechanism.epochs)).tolist()
