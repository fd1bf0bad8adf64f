"""``dynamic_shuffle``: a fresh uniform permutation every epoch (Chua et al. 2024, Alg. 2)."""

from __future__ import annotations

from typing import Any

import numpy as np

from audit.sampling.base import (
    OpacusLoader,
    Sampler,
    shuffled_canaries_signal,
    uniform_step_per_epoch,
)
from audit.sampling.batches import BatchSampler, DynamicShuffleSampler
from audit.sampling.persistent_shuffle import SHUFFLE_ATTACKS, SHUFFLE_NO_EVENT

__all__ = ["DynamicShuffle"]


class DynamicShuffle(Sampler):
    """The canary's step is uniform in 0..T-1, independently in each epoch."""

    name = "dynamic_shuffle"
    fixed_size = True
    isolated_needs_dirac = True
    default_attack = SHUFFLE_ATTACKS
    canary_law = "uniform_step_per_epoch"
    theory = "audit.theory.shuffle:shuffle_bounds"
    epsilon_at = "audit.theory.calibration:shuffle_epsilon_at"
    description = "a fresh uniform permutation for every epoch"

    def batch_sampler(self, *, n: int, batch_size: int, epochs: int, max_batch_size: int | None) -> BatchSampler:
        return DynamicShuffleSampler(n=n, batch_size=batch_size, epochs=epochs)

    def opacus_loader(
        self, dataset: Any, *, batch_size: int, epochs: int, generator: Any, rng: np.random.Generator
    ) -> OpacusLoader:
        """``DataLoader(shuffle=True)``: a fresh ``torch.randperm`` from ``generator`` every epoch
        (the common deployed configuration; Opacus accounts it as Poisson, q = 1/T)."""
        from audit.sampling.torch_loaders import index_loader  # torch only when Opacus asks

        return OpacusLoader(index_loader(dataset, batch_size=batch_size, shuffle=True, generator=generator))

    def simulate_canaries(
        self, mechanism: Any, rng: np.random.Generator, y: np.ndarray, canary_in: bool, canaries: int
    ) -> None:
        """k canaries at k distinct positions of each epoch's permutation: dependent steps."""
        shuffled_canaries_signal(mechanism, rng, y, canary_in, canaries, same_every_epoch=False)

    def canary_steps(self, mechanism: Any, rng: np.random.Generator, trials: int) -> np.ndarray:
        return uniform_step_per_epoch(mechanism, rng, trials)

    def random_allocation(self, mechanism: Any) -> tuple[float, int, int] | None:
        """(sigma, T, E) for the isolated pair only (one uniform step per epoch, the others 0
        along u); adversarial: None (fixed batch sizes reveal the canary's step)."""
        if mechanism.threat_model != "isolated":
            return None
        return mechanism.sigma, mechanism.steps_per_epoch, mechanism.epochs

    def dp_event(self, mechanism: Any) -> Any:
        return SHUFFLE_NO_EVENT
