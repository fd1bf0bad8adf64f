"""``deterministic``: batches in index order, the same every epoch (Chua et al. 2024, §2)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from audit.sampling.base import OpacusLoader, Sampler
from audit.sampling.batches import BatchSampler, DeterministicSampler

__all__ = ["Deterministic"]


class Deterministic(Sampler):
    """B_t = {t b, ..., t b + b - 1}: the canary (index 0) is in step 0 of every epoch."""

    name = "deterministic"
    fixed_size = True
    default_attack: ClassVar[dict[str, str] | None] = {"isolated": "known_step", "adversarial": "known_step"}
    canary_law = "known_steps"
    independent_canaries = True
    theory = "audit.theory.bounds:deterministic_bounds"
    epsilon_at = "audit.theory.calibration:deterministic_epsilon_at"
    sigma_closed_form = "audit.theory.calibration:gdp_sigma_for"
    description = "batches in index order, the same in every epoch"

    def batch_sampler(self, *, n: int, batch_size: int, epochs: int, max_batch_size: int | None) -> BatchSampler:
        return DeterministicSampler(n=n, batch_size=batch_size, epochs=epochs)

    def opacus_loader(
        self, dataset: Any, *, batch_size: int, epochs: int, generator: Any, rng: np.random.Generator
    ) -> OpacusLoader:
        """``DataLoader(shuffle=False)``: batches in index order, every epoch."""
        from audit.sampling.torch_loaders import index_loader  # torch only when Opacus asks

        return OpacusLoader(index_loader(dataset, batch_size=batch_size, shuffle=False, generator=generator))

    def canary_steps(self, mechanism: Any, rng: np.random.Generator, trials: int) -> np.ndarray:
        offsets = mechanism.steps_per_epoch * np.arange(mechanism.epochs)
        return np.broadcast_to(offsets, (trials, mechanism.epochs))

    def fixed_canary_steps(self, mechanism: Any) -> list[int] | None:
        return (mechanism.steps_per_epoch * np.arange(mechanism.epochs)).tolist()

    def gaussian_steps(self, mechanism: Any) -> tuple[str, float, int] | None:
        return "gaussian", 1.0, mechanism.epochs

    def dp_event(self, mechanism: Any) -> Any:
        """``GaussianDpEvent(sigma)`` x E (the canary is in one step per epoch)."""
        import dp_accounting

        return dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(mechanism.sigma), mechanism.epochs)
