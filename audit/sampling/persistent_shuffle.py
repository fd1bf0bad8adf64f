"""``persistent_shuffle``: one uniform permutation per run, reused every epoch (Chua et al. 2024, Alg. 2)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from audit.sampling.base import (
    OpacusLoader,
    Sampler,
    shuffled_canaries_signal,
    uniform_step_per_epoch,
)
from audit.sampling.batches import BatchSampler, PersistentShuffleSampler

__all__ = ["PersistentShuffle"]

SHUFFLE_ATTACKS = {"isolated": "shuffle_isolated_lr", "adversarial": "shuffle_adversarial_lr"}
SHUFFLE_NO_EVENT = (
    "dp_accounting has no event for shuffled batches (accounting them as Poisson is "
    "the 'poisson-for-shuffle' practice)"
)


class PersistentShuffle(Sampler):
    """The canary's step is uniform in 0..T-1, the same in every epoch."""

    name = "persistent_shuffle"
    fixed_size = True
    isolated_needs_dirac = True
    default_attack = SHUFFLE_ATTACKS
    canary_law = "uniform_step_per_epoch"
    same_step_every_epoch = True
    theory = "audit.theory.shuffle:shuffle_bounds"
    epsilon_at = "audit.theory.calibration:shuffle_epsilon_at"
    description = "one uniform permutation per run, reused in every epoch"

    def batch_sampler(self, *, n: int, batch_size: int, epochs: int, max_batch_size: int | None) -> BatchSampler:
        return PersistentShuffleSampler(n=n, batch_size=batch_size, epochs=epochs)

    def opacus_loader(
        self, dataset: Any, *, batch_size: int, epochs: int, generator: Any, rng: np.random.Generator
    ) -> OpacusLoader:
        """One uniform permutation ``rng.permutation(n)`` per training, cut into consecutive
        batches of b, the same in every epoch (a sequential loader over rows permuted once).
        The same law as :class:`PersistentShuffleSampler`'s draws, drawn as the plug-in always
        drew it, so that earlier Opacus audits reproduce bit for bit."""
        from audit.sampling.torch_loaders import (  # torch only when Opacus asks
            EpochBatches,
            batch_loader,
        )

        n = len(dataset)
        batches = rng.permutation(n).reshape(-1, batch_size)  # n = b T (fixed size)
        return OpacusLoader(batch_loader(dataset, EpochBatches(lambda: batches, len(batches)), generator=generator))

    def simulate_canaries(
        self, mechanism: Any, rng: np.random.Generator, y: np.ndarray, canary_in: bool, canaries: int
    ) -> None:
        """k canaries at k distinct positions of one permutation, the same every epoch: dependent steps."""
        shuffled_canaries_signal(mechanism, rng, y, canary_in, canaries, same_every_epoch=True)

    def canary_steps(self, mechanism: Any, rng: np.random.Generator, trials: int) -> np.ndarray:
        return uniform_step_per_epoch(mechanism, rng, trials, same_every_epoch=True)

    def random_allocation(self, mechanism: Any) -> tuple[float, int, int] | None:
        """(sigma / sqrt(E), T, 1) for the isolated pair only: the canary's step is the same in
        every epoch, so the epoch mean is sufficient (one round at sigma / sqrt(E));
        adversarial: None (fixed batch sizes reveal the canary's step)."""
        if mechanism.threat_model != "isolated":
            return None
        return mechanism.sigma / math.sqrt(mechanism.epochs), mechanism.steps_per_epoch, 1

    def dp_event(self, mechanism: Any) -> Any:
        return SHUFFLE_NO_EVENT
