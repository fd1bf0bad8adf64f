"""Calibration: the noise each sampler needs for a target (eps, delta), and the rounds the
Berry-Esseen shuffle bound needs.

``sigma_for`` inverts eps(sigma) at fixed delta for the chosen bound: ``upper`` (the
guarantee: with this sigma the mechanism is provably (eps, delta)-DP) or ``lower`` (the
known attack: with less noise than this the mechanism is provably *not* (eps, delta)-DP).
This is Chua et al.'s (2024, arXiv 2411.04205) comparison of samplers at equal privacy.
eps(sigma) is non-increasing in sigma for every family here, so bisection on log sigma
applies (Brent's method on log sigma); the result is within relative tolerance ``rtol``,
rounded up for ``upper`` and down for ``lower``.

``berry_esseen_rounds`` finds the smallest M with 1 - (1 - delta_BE(sigma, M))^E <= delta
within the regime sigma >= sqrt(3 / ln M) (see :mod:`audit.theory.shuffle_isolated`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import optimize

from audit.mechanism import Mechanism
from audit.names import KINDS, SHUFFLE_SAMPLERS
from audit.theory.curve import gdp_delta
from audit.theory.deterministic import deterministic_curve
from audit.theory.poisson import (
    DISCRETISATION,
    poisson_lower,
    poisson_pld,
    upper_discretisation,
)
from audit.theory.shuffle_adversarial import shuffle_max_test_lower
from audit.theory.shuffle_isolated import (
    BE_CONSTANTS,
    berry_esseen_applies,
    berry_esseen_curve,
    delta_be,
)
from audit.validation import check_choice, check_int, check_probability, check_real

__all__ = ["BerryEsseenRounds", "berry_esseen_rounds", "epsilon_at", "sigma_for"]


def epsilon_at(mechanism: Mechanism, delta: float, bound: str = "upper") -> float:
    """eps at ``delta`` of the mechanism's ``upper`` or ``lower`` bound (inf if none)."""
    m = mechanism
    if m.sampler == "deterministic":
        return float(deterministic_curve(m.sigma, m.epochs).epsilon(delta))
    if m.sampler == "poisson":
        if bound == "upper":
            d = upper_discretisation(m.sampling_probability, m.sigma, m.total_steps, DISCRETISATION)
            pld = poisson_pld(m.sampling_probability, m.sigma, m.total_steps, d)
            return float(pld.get_epsilon_for_delta(delta))
        return float(poisson_lower(m.sampling_probability, m.sigma, m.total_steps).epsilon(delta))
    if m.sampler in SHUFFLE_SAMPLERS:
        if bound == "lower":
            curve = shuffle_max_test_lower(
                m.sampler, m.sigma, m.steps_per_epoch, m.epochs, m.threat_model
            )
            return float(curve.epsilon(delta))
        curve = deterministic_curve(m.sigma, m.epochs, sampler=m.sampler, kind="upper")
        if m.threat_model == "isolated":
            be = berry_esseen_curve(m.sigma, m.steps_per_epoch, m.epochs, sampler=m.sampler)
            if be is not None:
                curve = curve.maximum(be)
        return float(curve.epsilon(delta))
    from audit.theory.bounds import bounds_for

    curve = getattr(bounds_for(m), bound)
    return math.inf if curve is None else float(curve.epsilon(delta))


def sigma_for(
    epsilon: float,
    delta: float,
    sampler: str,
    *,
    steps_per_epoch: int,
    epochs: int = 1,
    threat_model: str = "adversarial",
    n: int | None = None,
    max_batch_size: int | None = None,
    bound: str = "upper",
    rtol: float = 1e-4,
) -> float:
    """The noise multiplier at which the ``bound`` curve gives exactly (epsilon, delta).

    Deterministic batches: closed form (mu-GDP, mu = sqrt(E)/sigma). Raises ValueError if no
    sigma in ``SIGMA_RANGE`` reaches the target (e.g. a ``lower`` bound that never exceeds it).
    Otherwise eps(sigma) at ``delta`` is inverted by Brent's method on log sigma (eps is
    non-increasing in sigma for every family), bracketed by doubling or halving from the
    deterministic sigma (docs/design.md §6.6; the curves are those of §6).

    Args:
        epsilon: the target eps (> 0).
        delta: the target delta, in (0, 1).
        sampler: one of ``audit.names.SAMPLERS``.
        steps_per_epoch, epochs, threat_model, n, max_batch_size: the mechanism, as in
            :func:`audit.theory.bounds.privacy_bounds` (sigma aside).
        bound: ``upper`` (with the returned sigma the mechanism is provably (epsilon,
            delta)-DP) or ``lower`` (with less noise it is provably not); never ``exact`` or
            ``approximation``.
        rtol: the relative tolerance on sigma.

    Returns:
        sigma, within relative tolerance ``rtol`` of the root and rounded outwards: up for
        ``upper`` (never less noise than the guarantee needs), down for ``lower``.

    Raises:
        ValueError: epsilon <= 0, delta outside (0, 1), ``bound`` not ``upper`` or ``lower``,
            an invalid mechanism field (as :func:`audit.theory.bounds.privacy_bounds`), or no
            sigma in ``SIGMA_RANGE`` reaching (epsilon, delta) for this bound.
    """
    epsilon = check_real("epsilon", epsilon, minimum=0.0, strict_minimum=True)
    delta = check_probability("delta", delta)
    bound = check_choice("bound", bound, tuple(k for k in KINDS if k not in ("exact", "approximation")))
    base = Mechanism(
        sampler=sampler, sigma=1.0, steps_per_epoch=steps_per_epoch, epochs=epochs,
        threat_model=threat_model, n=n, max_batch_size=max_batch_size,
    )
    if sampler == "deterministic":
        mu = optimize.brentq(lambda x: float(gdp_delta(epsilon, x)) - delta, 1e-8, 1e3, xtol=1e-14)
        return math.sqrt(epochs) / mu

    def excess(log_sigma: float) -> float:
        return epsilon_at(base.with_(sigma=math.exp(log_sigma)), delta, bound) - epsilon

    # bracket by doubling/halving from the deterministic sigma (each evaluation may build a
    # PLD; below sigma = 0.2 the PLDs grow too large to be worth building)
    start = math.log(sigma_for(epsilon, delta, "deterministic", steps_per_epoch=1, epochs=epochs))
    lo = hi = start
    floor, cap = math.log(SIGMA_RANGE[0]), math.log(SIGMA_RANGE[1])
    if excess(start) > 0:
        while excess(hi) > 0:
            lo, hi = hi, hi + math.log(2.0)
            if hi > cap:
                raise ValueError(_unreachable(epsilon, delta, sampler, bound))
    else:
        while excess(lo) <= 0:
            lo, hi = lo - math.log(2.0), lo
            if lo < floor:
                raise ValueError(_unreachable(epsilon, delta, sampler, bound))
    root = optimize.brentq(excess, lo, hi, xtol=rtol / 4, rtol=1e-12)
    # round outwards: up for a guarantee, down for an attack's bound
    return math.exp(root + rtol / 2) if bound == "upper" else math.exp(root - rtol / 2)


SIGMA_RANGE = (0.2, 1e4)
"""The noise multipliers sigma_for searches."""


def _unreachable(epsilon: float, delta: float, sampler: str, bound: str) -> str:
    return (
        f"no sigma in [{SIGMA_RANGE[0]}, {SIGMA_RANGE[1]:g}] gives epsilon={epsilon} at "
        f"delta={delta} for sampler={sampler!r} (bound={bound!r})"
    )


@dataclass(frozen=True)
class BerryEsseenRounds:
    """Rounds M (and examples N = b M) for the Berry-Esseen guarantee at (sigma, delta, E)."""

    rounds: int
    examples: int
    batch_size: int
    delta_be: float
    constants: str


def berry_esseen_rounds(
    sigma: float,
    delta: float,
    epochs: int = 1,
    *,
    batch_size: int = 10,
    constants: str = "shevtsova",
) -> BerryEsseenRounds:
    """Smallest M with 1 - (1 - delta_BE(sigma, M))^E <= delta and sigma >= sqrt(3/ln M).

    For E = 1, sigma = 1, delta = 0.01: M = 503,243 with Shevtsova's constants;
    ``constants="van_beek"`` (C = 0.7975) gives M = 1,134,479, van Dijk & Ertan's
    "M ~ 1.14e6, N ~ 1.14e7" (N = b M with b = 10).
    """
    sigma = check_real("sigma", sigma, minimum=0.0, strict_minimum=True)
    delta = check_probability("delta", delta)
    epochs = check_int("epochs", epochs, minimum=1)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    constants = check_choice("constants", constants, tuple(BE_CONSTANTS))
    per_epoch = 1.0 - (1.0 - delta) ** (1.0 / epochs)
    lo = max(2, math.ceil(math.exp(3.0 / sigma**2)))  # regime: M >= e^{3/sigma^2}
    while not berry_esseen_applies(sigma, lo):
        lo += 1
    if delta_be(sigma, lo, constants) <= per_epoch:
        m = lo
    else:
        hi = lo
        while delta_be(sigma, hi, constants) > per_epoch:
            hi *= 2
            if hi > 10**18:
                raise ValueError(f"delta={delta} is out of reach at sigma={sigma}")
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if delta_be(sigma, mid, constants) <= per_epoch:
                hi = mid
            else:
                lo = mid
        m = hi
    return BerryEsseenRounds(
        rounds=m, examples=m * batch_size, batch_size=batch_size,
        delta_be=delta_be(sigma, m, constants), constants=constants,
    )
