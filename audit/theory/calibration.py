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
``shuffle_rounds`` sizes M (and N = b M) for an isolated shuffle with the tighter of that
linear composition and the numerical random-allocation guarantee
(:mod:`audit.theory.random_allocation`), which composes over epochs like sqrt(E).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from audit.core.mechanism import Mechanism
from audit.core.names import KINDS
from audit.core.validation import check_choice, check_int, check_probability, check_real
from audit.sampling import get_sampler, isolation_samplers, validate
from audit.theory.bounds import bounds_for
from audit.theory.curve import gdp_delta
from audit.theory.deterministic import deterministic_curve
from audit.theory.poisson import (
    DISCRETISATION,
    poisson_lower,
    poisson_pld,
    upper_discretisation,
)
from audit.theory.random_allocation import random_allocation_curves, random_allocation_plds
from audit.theory.random_allocation_octave import octave_allocation_upper
from audit.theory.registry import THEORIES
from audit.theory.shuffle import RA_MAX_CELLS
from audit.theory.shuffle_adversarial import shuffle_max_test_lower
from audit.theory.shuffle_isolated import (
    BE_CONSTANTS,
    berry_esseen_applies,
    berry_esseen_curve,
    delta_be,
)

__all__ = [
    "BerryEsseenRounds",
    "ShuffleRounds",
    "berry_esseen_rounds",
    "deterministic_epsilon_at",
    "epsilon_at",
    "gdp_sigma_for",
    "poisson_epsilon_at",
    "shuffle_epsilon_at",
    "shuffle_rounds",
    "sigma_for",
]


def epsilon_at(mechanism: Mechanism, delta: float, bound: str = "upper") -> float:
    """eps at ``delta`` of the mechanism's ``upper`` or ``lower`` bound (inf if none).

    A sampler's theory may register a faster route to the same number (its ``epsilon_at``,
    :class:`audit.theory.registry.SamplerTheory`: no curve object built); otherwise its curve.
    """
    theory = THEORIES.find(mechanism.sampler)
    if theory is None:
        raise get_sampler(mechanism.sampler).missing(
            "calibration", "needs theory: upper/lower trade-off curves"
        )
    fast = theory.epsilon_at
    if fast is not None:
        return float(fast(mechanism, delta, bound))
    curve = getattr(bounds_for(mechanism), bound)
    return math.inf if curve is None else float(curve.epsilon(delta))


def deterministic_epsilon_at(m: Mechanism, delta: float, bound: str = "upper") -> float:
    """Deterministic batches: eps of the exact mu-GDP curve (upper = lower)."""
    return float(deterministic_curve(m.sigma, m.epochs).epsilon(delta))


def poisson_epsilon_at(m: Mechanism, delta: float, bound: str = "upper") -> float:
    """Poisson: eps of the pessimistic PLD (upper) or of the lattice lower curve."""
    if bound == "upper":
        d = upper_discretisation(m.sampling_probability, m.sigma, m.total_steps, DISCRETISATION)
        pld = poisson_pld(m.sampling_probability, m.sigma, m.total_steps, d)
        return float(pld.get_epsilon_for_delta(delta))
    return float(poisson_lower(m.sampling_probability, m.sigma, m.total_steps).epsilon(delta))


def shuffle_epsilon_at(m: Mechanism, delta: float, bound: str = "upper") -> float:
    """Shuffles: eps of the max-test / random-allocation lower, or of the tightest guarantee."""
    ra = _random_allocation(m) if m.threat_model == "isolated" else None
    if bound == "lower":
        curve = shuffle_max_test_lower(
            m.sampler, m.sigma, m.steps_per_epoch, m.epochs, m.threat_model
        )
        # both are achieved by tests of the same pair: the larger eps is achieved
        return max(float(curve.epsilon(delta)), float(ra[1].epsilon(delta)) if ra else 0.0)
    curve = deterministic_curve(m.sigma, m.epochs, sampler=m.sampler, kind="upper")
    if m.threat_model == "isolated":
        be = berry_esseen_curve(m.sigma, m.steps_per_epoch, m.epochs, sampler=m.sampler)
        if be is not None:
            curve = curve.maximum(be)
        if ra is not None:
            curve = curve.maximum(ra[0])
        # the octave lattice's guarantee holds at every sigma (docs/design.md §6.9)
        curve = curve.maximum(octave_allocation_upper(
            m.sigma, m.steps_per_epoch, m.epochs, sampler=m.sampler))
    return float(curve.epsilon(delta))


def gdp_sigma_for(epsilon: float, delta: float, steps_per_epoch: int, epochs: int) -> float:
    """Deterministic batches in closed form: sigma = sqrt(E) / mu, mu solving delta_GDP(eps; mu) =
    delta."""
    from scipy import optimize  # imported on use: fast start (docs/design.md §2.7)

    mu = optimize.brentq(lambda x: float(gdp_delta(epsilon, x)) - delta, 1e-8, 1e3, xtol=1e-14)
    return math.sqrt(epochs) / mu


def _random_allocation(m: Mechanism):
    """The random-allocation (upper, lower) of an isolated shuffle, or None where too coarse."""
    try:
        return random_allocation_curves(
            m.sigma, m.steps_per_epoch, m.epochs, sampler=m.sampler, max_cells=RA_MAX_CELLS
        )
    except ValueError:
        return None


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
        sampler: one of ``audit.core.names.SAMPLERS``.
        steps_per_epoch: T, the steps per epoch; this and the next four are the mechanism, as
            in :func:`audit.theory.bounds.privacy_bounds` (sigma aside).
        epochs: E.
        threat_model: ``adversarial`` or ``isolated`` (docs/design.md §3.4).
        n: the number of examples (as in :func:`audit.theory.bounds.privacy_bounds`).
        max_batch_size: B, required (with n) for ``truncated_poisson``.
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
    from scipy import optimize  # imported on use: fast start (docs/design.md §2.7)

    epsilon = check_real("epsilon", epsilon, minimum=0.0, strict_minimum=True)
    delta = check_probability("delta", delta)
    bound = check_choice(
        "bound", bound, tuple(k for k in KINDS if k not in ("exact", "approximation"))
    )
    base = validate(Mechanism(
        sampler=sampler, sigma=1.0, steps_per_epoch=steps_per_epoch, epochs=epochs,
        threat_model=threat_model, n=n, max_batch_size=max_batch_size,
    ))
    theory = THEORIES.find(base.sampler)
    closed_form = None if theory is None else theory.sigma_closed_form
    if closed_form is not None:
        return float(closed_form(epsilon, delta, steps_per_epoch, epochs))

    def excess(log_sigma: float) -> float:
        return epsilon_at(base.with_(sigma=math.exp(log_sigma)), delta, bound) - epsilon

    # bracket by doubling/halving from the deterministic sigma (each evaluation may build a
    # PLD; below sigma = 0.2 the PLDs grow too large to be worth building)
    start = math.log(gdp_sigma_for(epsilon, delta, 1, epochs))
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


@dataclass(frozen=True)
class ShuffleRounds:
    """Rounds M (and N = b M) an isolated shuffle needs for (epsilon, delta), by each bound.

    ``berry_esseen``: linear composition 1 - (1 - delta_BE)^E <= delta (any epsilon; None
    when out of reach); ``random_allocation``: the numerical guarantee's delta(epsilon) <= delta
    (None when above ``max_rounds`` or its lattice is too coarse). ``rounds`` is the smaller.
    """

    rounds: int | None
    examples: int | None
    batch_size: int
    bound: str | None
    berry_esseen: int | None
    random_allocation: int | None


def _ra_delta(
    sigma: float, rounds: int, epochs: int, sampler: str, epsilon: float, max_cells: int
) -> float:
    try:
        upper, _, _ = random_allocation_plds(
            sigma, rounds, epochs, sampler=sampler, max_cells=max_cells
        )
    except ValueError:
        return math.inf
    return float(upper.get_delta_for_epsilon(epsilon))


def shuffle_rounds(
    sigma: float,
    delta: float,
    epochs: int = 1,
    *,
    epsilon: float = 0.0,
    batch_size: int = 10,
    sampler: str = "dynamic_shuffle",
    constants: str = "shevtsova",
    max_rounds: int = 10**7,
    max_cells: int = RA_MAX_CELLS,
) -> ShuffleRounds:
    """Smallest M for which the tighter guarantee gives (epsilon, delta) (isolated shuffle).

    The random-allocation search doubles M from 2 and bisects (its delta falls with M), each
    step one PLD (about a second at ``max_cells`` = 2^20); persistent shuffling uses one
    epoch at sigma / sqrt(E). Limit: the lattice needs about 50 sqrt(e^{1/sigma^2} - 1) /
    slack cells for a per-epoch loss slack, and the slack must stay well below the composed
    loss spread sqrt(E (e^{1/sigma^2} - 1) / M) / E: for M E beyond about 1e6 at
    delta = 0.01, eps = 0 the bound is too loose to certify the M that suffices (reported as
    None, the Berry-Esseen figure stands).
    """
    sigma = check_real("sigma", sigma, minimum=0.0, strict_minimum=True)
    delta = check_probability("delta", delta)
    epochs = check_int("epochs", epochs, minimum=1)
    epsilon = check_real("epsilon", epsilon, minimum=0.0)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    sampler = check_choice("sampler", sampler, isolation_samplers())
    max_rounds = check_int("max_rounds", max_rounds, minimum=2)
    max_cells = check_int("max_cells", max_cells, minimum=16)
    persistent = get_sampler(sampler).same_step_every_epoch
    try:
        be_sigma, be_epochs = (sigma / math.sqrt(epochs), 1) if persistent else (sigma, epochs)
        be = berry_esseen_rounds(be_sigma, delta, be_epochs, constants=constants).rounds
    except ValueError:
        be = None

    def ok(m: int) -> bool:
        return _ra_delta(sigma, m, epochs, sampler, epsilon, max_cells) <= delta

    ra: int | None = None
    hi = 2
    while hi <= max_rounds and not ok(hi):
        hi *= 2
    if hi <= max_rounds:
        lo = hi // 2
        while hi - lo > max(1, lo // 100):  # 1% resolution, rounded up (safe side)
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if ok(mid) else (mid, hi)
        ra = hi
    found = [(r, name) for r, name in ((be, "berry_esseen"), (ra, "random_allocation")) if r]
    rounds, bound = min(found) if found else (None, None)
    return ShuffleRounds(
        rounds=rounds, examples=None if rounds is None else rounds * batch_size,
        batch_size=batch_size, bound=bound, berry_esseen=be, random_allocation=ra,
    )
