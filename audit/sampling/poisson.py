"""``poisson``: each example independently with q = b/n at each of T*E steps (Chua et al. 2024, Alg. 1)."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from audit.sampling.base import OpacusLoader, Sampler
from audit.sampling.batches import BatchSampler, PoissonSampler

__all__ = ["Poisson"]


class Poisson(Sampler):
    """Canary in each step with probability q; co-batch count Binomial(n - 1, q)."""

    name = "poisson"
    default_attack: ClassVar[dict[str, str] | None] = {"isolated": "poisson_lr", "adversarial": "poisson_lr"}
    simulator = "subsampled"
    canary_law = "independent_steps"
    theory = "audit.theory.bounds:poisson_bounds"
    epsilon_at = "audit.theory.calibration:poisson_epsilon_at"
    description = "each example independently with probability q = b/n at each step"

    def batch_sampler(self, *, n: int, batch_size: int, epochs: int, max_batch_size: int | None) -> BatchSampler:
        return PoissonSampler(n=n, batch_size=batch_size, epochs=epochs)

    def opacus_loader(
        self, dataset: Any, *, batch_size: int, epochs: int, generator: Any, rng: np.random.Generator
    ) -> OpacusLoader:
        """Opacus's own: ``make_private(poisson_sampling=True)`` replaces the loader of T batches by
        its ``DPDataLoader`` (q = 1 / len(loader) = b/n), drawing from ``generator``."""
        from audit.sampling.torch_loaders import index_loader  # torch only when Opacus asks

        loader = index_loader(dataset, batch_size=batch_size, shuffle=False, generator=generator)
        return OpacusLoader(loader, poisson_sampling=True)

    def slots(self, *, n: int, batch_size: int, max_batch_size: int | None) -> int:
        """b + 6 sqrt(b) + 6 (the largest of millions of Binomial(n, b/n) batches lies below it
        in practice: an estimate), at most n."""
        return min(n, int(batch_size + 6 * math.sqrt(batch_size) + 6))

    def inclusion_probability(self, mechanism: Any) -> float:
        """q = b/n."""
        return mechanism.sampling_probability

    def cobatch_moments(self, mechanism: Any, n_others: int) -> tuple[float, float]:
        """O ~ Binomial(n - 1, q): ((n-1) q, (n-1) q (1-q))."""
        q = mechanism.sampling_probability
        return n_others * q, n_others * q * (1 - q)

    def known_offset(self, mechanism: Any) -> float:
        """(n - 1) q: the expected co-batch count (unknown to the attacker, adds variance only)."""
        return (mechanism.n - 1) * mechanism.sampling_probability

    def gaussian_steps(self, mechanism: Any) -> tuple[str, float, int] | None:
        return "poisson", mechanism.sampling_probability, mechanism.total_steps

    def dp_event(self, mechanism: Any) -> Any:
        """``PoissonSampledDpEvent(q, GaussianDpEvent(sigma))`` x T*E."""
        import dp_accounting

        step = dp_accounting.PoissonSampledDpEvent(
            mechanism.sampling_probability, dp_accounting.GaussianDpEvent(mechanism.sigma)
        )
        return dp_accounting.SelfComposedDpEvent(step, mechanism.total_steps)
