"""What the accountants see of each sampler: its dp_accounting event, its Gaussian steps, its
random-allocation pair (docs/design.md §3.3, §7).

A sampler's law lives in :mod:`audit.sampling`; how an accountant reads a mechanism of that
sampler is registered here, in :data:`EVENTS`, against the sampler's class
(:class:`audit.sampling.attachments.Attachments`). The adapters (:mod:`audit.accounting.adapters`)
ask :func:`dp_event`, :func:`gaussian_steps` and :func:`random_allocation`; a sampler without an
entry has none of the three (the accountants answer ``Unsupported``, naming it).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from audit.core.mechanism import Mechanism
from audit.sampling.attachments import Attachments
from audit.sampling.balls_and_bins import BallsAndBins
from audit.sampling.base import get_sampler
from audit.sampling.deterministic import Deterministic
from audit.sampling.dynamic_shuffle import DynamicShuffle
from audit.sampling.persistent_shuffle import PersistentShuffle
from audit.sampling.poisson import Poisson
from audit.sampling.sampled_without_replacement import SampledWithoutReplacement
from audit.sampling.truncated_poisson import TruncatedPoisson

__all__ = [
    "EVENTS",
    "GaussianSteps",
    "RandomAllocationPair",
    "SamplerEvents",
    "dp_event",
    "gaussian_steps",
    "random_allocation",
]

GaussianSteps = tuple[str, float, int]
"""``("poisson", q, T E)``: Poisson-subsampled Gaussian steps; ``("gaussian", 1, k)``: k plain
Gaussian steps on the canary."""

RandomAllocationPair = tuple[float, int, int]
"""``(sigma', T, E')``: E' independent rounds of P = (1/T) sum_j N(e_j, sigma'^2 I_T) vs
Q = N(0, sigma'^2 I_T) (Feldman & Shenfeld, arXiv 2502.08202; docs/design.md §6.8)."""


@dataclass(frozen=True)
class SamplerEvents:
    """How the accountants read one sampler's mechanism.

    Attributes:
        dp_event: ``f(mechanism) -> dp_accounting.DpEvent`` (None: no event is known).
        no_event: why there is none, where ``dp_event`` is None (the accountants' reason).
        gaussian_steps: ``f(mechanism) -> GaussianSteps | None``, the run as self-composed
            Gaussian steps, for accountants with only those classes (None: neither).
        random_allocation: ``f(mechanism) -> RandomAllocationPair | None``, where that pair
            dominates the cell's observation (None: it does not).
    """

    dp_event: Callable[[Mechanism], Any] | None = None
    no_event: str = ""
    gaussian_steps: Callable[[Mechanism], GaussianSteps | None] | None = None
    random_allocation: Callable[[Mechanism], RandomAllocationPair | None] | None = None


EVENTS: Attachments[SamplerEvents] = Attachments("accountant events")
"""The accountants' view of each sampler class."""


def dp_event(mechanism: Mechanism) -> Any:
    """The dp_accounting event of ``mechanism``, or a string explaining why none exists."""
    entry = EVENTS.find(mechanism.sampler)
    if entry is None or entry.dp_event is None:
        if entry is not None and entry.no_event:
            return entry.no_event
        return (
            f"sampler {get_sampler(mechanism.sampler).name!r} has no dp_event (no dp_accounting "
            "event is known for it)"
        )
    return entry.dp_event(mechanism)


def gaussian_steps(mechanism: Mechanism) -> GaussianSteps | None:
    """The run as self-composed Gaussian steps (:data:`GaussianSteps`), or None."""
    entry = EVENTS.find(mechanism.sampler)
    return (
        None if entry is None or entry.gaussian_steps is None else entry.gaussian_steps(mechanism)
    )


def random_allocation(mechanism: Mechanism) -> RandomAllocationPair | None:
    """The random-allocation pair that dominates the cell's observation, or None."""
    entry = EVENTS.find(mechanism.sampler)
    return (
        None
        if entry is None or entry.random_allocation is None
        else entry.random_allocation(mechanism)
    )


# -- the built-ins -----------------------------------------------------------------------

SHUFFLE_NO_EVENT = (
    "dp_accounting has no event for shuffled batches (accounting them as Poisson is "
    "the 'poisson-for-shuffle' practice)"
)
BALLS_AND_BINS_NO_EVENT = (
    "dp_accounting has no event for balls-and-bins batches (no random-allocation event; "
    "Chua et al. 2025 account it numerically)"
)


def _deterministic_event(mechanism: Mechanism) -> Any:
    """``GaussianDpEvent(sigma)`` x E (the canary is in one step per epoch)."""
    import dp_accounting

    return dp_accounting.SelfComposedDpEvent(
        dp_accounting.GaussianDpEvent(mechanism.sigma), mechanism.epochs
    )


def _deterministic_steps(mechanism: Mechanism) -> GaussianSteps:
    return "gaussian", 1.0, mechanism.epochs


def _poisson_event(mechanism: Mechanism) -> Any:
    """``PoissonSampledDpEvent(q, GaussianDpEvent(sigma))`` x T*E."""
    import dp_accounting

    step = dp_accounting.PoissonSampledDpEvent(
        mechanism.sampling_probability, dp_accounting.GaussianDpEvent(mechanism.sigma)
    )
    return dp_accounting.SelfComposedDpEvent(step, mechanism.total_steps)


def _poisson_steps(mechanism: Mechanism) -> GaussianSteps:
    return "poisson", mechanism.sampling_probability, mechanism.total_steps


def _truncated_poisson_event(mechanism: Mechanism) -> Any:
    """``TruncatedSubsampledGaussianDpEvent(n, q, B, sigma)`` x T*E."""
    import dp_accounting

    step = dp_accounting.TruncatedSubsampledGaussianDpEvent(
        dataset_size=mechanism.n,
        sampling_probability=mechanism.sampling_probability,
        truncated_batch_size=mechanism.max_batch_size,
        noise_multiplier=mechanism.sigma,
    )
    return dp_accounting.SelfComposedDpEvent(step, mechanism.total_steps)


def _without_replacement_event(mechanism: Mechanism) -> Any:
    """``SampledWithoutReplacementDpEvent(n, b, GaussianDpEvent(sigma / 2))`` x T*E.

    dp_accounting's event is stated for replace-one neighbours (its RDP, Wang, Balle,
    Kasiviswanathan 2019); replacing one example moves the clipped sum by up to 2 C, so the
    inner Gaussian's noise multiplier is sigma / 2 (passing sigma under-reports: docs/design.md
    §6.11).
    """
    import dp_accounting

    if mechanism.n is None or mechanism.batch_size is None:
        raise ValueError(
            "sampler 'sampled_without_replacement' needs n and batch_size for its dp_accounting "
            "event (SampledWithoutReplacementDpEvent(n, b, ...))")
    step = dp_accounting.SampledWithoutReplacementDpEvent(
        source_dataset_size=mechanism.n,
        sample_size=mechanism.batch_size,
        event=dp_accounting.GaussianDpEvent(mechanism.sigma / 2),
    )
    return dp_accounting.SelfComposedDpEvent(step, mechanism.total_steps)


def _persistent_shuffle_pair(mechanism: Mechanism) -> RandomAllocationPair | None:
    """(sigma / sqrt(E), T, 1) for the isolated pair only: the canary's step is the same in
    every epoch, so the epoch mean is sufficient (one round at sigma / sqrt(E));
    adversarial: None (fixed batch sizes reveal the canary's step)."""
    if mechanism.threat_model != "isolated":
        return None
    return mechanism.sigma / math.sqrt(mechanism.epochs), mechanism.steps_per_epoch, 1


def _dynamic_shuffle_pair(mechanism: Mechanism) -> RandomAllocationPair | None:
    """(sigma, T, E) for the isolated pair only (one uniform step per epoch, the others 0
    along u); adversarial: None (fixed batch sizes reveal the canary's step)."""
    if mechanism.threat_model != "isolated":
        return None
    return mechanism.sigma, mechanism.steps_per_epoch, mechanism.epochs


def _balls_and_bins_pair(mechanism: Mechanism) -> RandomAllocationPair:
    """(sigma, T, E), either threat model: (P, Q) of one epoch dominates one epoch of
    balls-and-bins DP-SGD for any co-batch (Chua et al. 2025, §3), epochs independent."""
    return mechanism.sigma, mechanism.steps_per_epoch, mechanism.epochs


for _sampler, _events in {
    Deterministic: SamplerEvents(_deterministic_event, gaussian_steps=_deterministic_steps),
    PersistentShuffle: SamplerEvents(
        no_event=SHUFFLE_NO_EVENT, random_allocation=_persistent_shuffle_pair
    ),
    DynamicShuffle: SamplerEvents(
        no_event=SHUFFLE_NO_EVENT, random_allocation=_dynamic_shuffle_pair
    ),
    Poisson: SamplerEvents(_poisson_event, gaussian_steps=_poisson_steps),
    TruncatedPoisson: SamplerEvents(_truncated_poisson_event),
    SampledWithoutReplacement: SamplerEvents(_without_replacement_event),
    BallsAndBins: SamplerEvents(
        no_event=BALLS_AND_BINS_NO_EVENT, random_allocation=_balls_and_bins_pair
    ),
}.items():
    EVENTS.register(_sampler, _events, replace=True)
