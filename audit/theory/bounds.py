"""One entry point: the theoretical trade-off curves of a mechanism (docs/design.md §6).

``privacy_bounds(sampler, sigma=..., steps_per_epoch=..., ...)`` is the keyword face;
``bounds_for(mechanism)`` the internal one that takes the frozen
:class:`audit.core.mechanism.Mechanism` and is cached, since the runner, the accountant checker
and the simulator ask for the same curves again and again.

| sampler            | upper (guarantee)                          | lower (achieved)               |
|--------------------|--------------------------------------------|--------------------------------|
| deterministic      | exact mu-GDP, mu = sqrt(E)/sigma           | the same (exact)               |
| poisson            | PLD pessimistic                            | PLD of a dominated lattice     |
|                    |                                            | pair                           |
| truncated_poisson  | max(coupling, dp_accounting truncated PLD) | Poisson lower at p' (isolated) |
| shuffles, advers.  | deterministic curve                        | max test (Chua et al. 2024)    |
| shuffles, isolated | max(deterministic, Berry-Esseen, random-   | hull of min(max test on        |
|                    | allocation pessimistic lattice PLD)        | MoG_T(1) vs N(0, I), random-   |
|                    |                                            | allocation lattice test)       |

Isolated shuffles also get ``Bounds.exact``: the exact one-epoch curve from the law of the
likelihood ratio (lattice FFT), composed over epochs for dynamic shuffling, where the
lattice allows it (``notes`` says when not), and ``Bounds.approximation``: the Edgeworth
approximation (:mod:`audit.theory.edgeworth`), kind ``approximation``, never a bound.

Which function gives a sampler's curves is registered with the theory, against the sampler's
class (:data:`audit.theory.registry.THEORIES`); ``bounds_for`` asks that table.
"""

from __future__ import annotations

import functools

from audit.core.mechanism import Mechanism
from audit.sampling import validate
from audit.theory.deterministic import deterministic_curve
from audit.theory.poisson import poisson_curves
from audit.theory.registry import theory_for
from audit.theory.truncated_poisson import truncated_poisson_lower, truncated_poisson_upper
from audit.theory.types import Bounds

__all__ = [
    "Bounds",
    "bounds_for",
    "deterministic_bounds",
    "poisson_bounds",
    "privacy_bounds",
    "truncated_poisson_bounds",
]


@functools.lru_cache(maxsize=64)
def bounds_for(mechanism: Mechanism) -> Bounds:
    """The trade-off curves of a mechanism (cached on the frozen Mechanism).

    Which curve each sampler gets, and why it is a guarantee (``upper``) or achieved
    (``lower``), is the table of docs/design.md §6 (formulas in §6.1 - §6.8).

    Args:
        mechanism: the frozen :class:`audit.core.mechanism.Mechanism` (sampler, sigma, T, E, threat
            model, n, b, B), validated when it was built.

    Returns:
        :class:`Bounds`: ``upper`` (a guarantee: the true curve lies on or above it), ``lower``
        (achieved by a known pair and test: the true curve lies on or below it), ``exact``
        where the curve is known exactly (the same object as both bounds for deterministic
        batches), ``approximation`` (the Edgeworth curve of isolated shuffles, never a bound),
        and ``notes`` saying which curve could not be computed and why; a curve that is not
        available is None.

    Raises:
        ValueError: the sampler has no theory (a sampler registered without one; the message
            names the sampler and the capability). Every field was checked by the Mechanism's
            constructor, and a shuffle curve that cannot be computed is None with a note.
    """
    return theory_for(mechanism.sampler).bounds(mechanism)


def deterministic_bounds(m: Mechanism) -> Bounds:
    """Deterministic batches: the exact mu-GDP curve, mu = sqrt(E)/sigma (§6.1)."""
    exact = deterministic_curve(m.sigma, m.epochs, threat_model=m.threat_model, kind="exact")
    return Bounds(m, exact, exact, exact)


def poisson_bounds(m: Mechanism) -> Bounds:
    """Poisson: PLD pessimistic upper, PLD of a dominated lattice pair lower (§6.2)."""
    upper, lower = poisson_curves(
        m.sampling_probability, m.sigma, m.total_steps, threat_model=m.threat_model
    )
    return Bounds(m, upper, lower)


def truncated_poisson_bounds(m: Mechanism) -> Bounds:
    """Truncated Poisson: max(coupling, dp_accounting truncated PLD) upper, Poisson at p' lower
    (§6.3)."""
    assert m.n is not None and m.max_batch_size is not None  # validated by audit.sampling.validate
    args = (m.n, m.sampling_probability, m.max_batch_size, m.sigma, m.total_steps)
    upper = truncated_poisson_upper(*args, threat_model=m.threat_model)
    lower = truncated_poisson_lower(*args, threat_model=m.threat_model)
    return Bounds(m, upper, lower)


def privacy_bounds(
    sampler: str,
    *,
    sigma: float,
    steps_per_epoch: int,
    epochs: int = 1,
    threat_model: str = "adversarial",
    n: int | None = None,
    max_batch_size: int | None = None,
) -> Bounds:
    """Upper (guarantee) and lower (achieved) trade-off curves for a sampler.

    The keyword face of :func:`bounds_for`: builds the :class:`audit.core.mechanism.Mechanism` and
    returns its curves (docs/design.md §6; conventions of upper/lower/exact in §3.7).

    Args:
        sampler: one of ``audit.core.names.SAMPLERS`` (``deterministic``, ``persistent_shuffle``,
            ``dynamic_shuffle``, ``poisson``, ``truncated_poisson``; docs/design.md §3.3).
        sigma: the noise multiplier (> 0).
        steps_per_epoch: T, the steps per epoch (>= 1).
        epochs: E (>= 1).
        threat_model: ``adversarial`` or ``isolated`` (docs/design.md §3.4).
        n: the number of examples. Poisson samples with q = b/n when n is given
            (b = n / steps_per_epoch), else q = 1/T; n must be a multiple of T.
        max_batch_size: B, required (with n) for ``truncated_poisson``.

    Returns:
        :class:`Bounds` with ``upper``, ``lower``, ``exact``, ``approximation`` and ``notes``,
        as :func:`bounds_for` returns them.

    Raises:
        ValueError: a field out of range or inconsistent (an unknown sampler or threat model,
            sigma <= 0, T or E < 1, n not a multiple of T, a missing n or max_batch_size for
            ``truncated_poisson``); the message names the field and the allowed values.
    """
    mechanism = validate(Mechanism(
        sampler=sampler, sigma=sigma, steps_per_epoch=steps_per_epoch, epochs=epochs,
        threat_model=threat_model, n=n, max_batch_size=max_batch_size,
    ))
    return bounds_for(mechanism)
