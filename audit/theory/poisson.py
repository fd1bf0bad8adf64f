"""Poisson subsampling: the subsampled Gaussian mechanism, composed T*E times, via PLDs.

One step is the pair P = (1 - q) N(0, sigma^2) + q N(1, sigma^2) vs Q = N(0, sigma^2) (and
its reverse); both threat models give this pair (docs/design.md §6.2). The guarantee (``upper``) is
dp_accounting's pessimistic connect-the-dots PLD (Doroshenko, Ghazi, Kamath, Kumar,
Manurangsi, *Connect the Dots*, PETS 2022), a dominating pair. The ``lower`` curve is the
T*E-fold composition of a pair *dominated* by the one-step pair, built on the same lattice
by :func:`audit.theory.pld.dominated_lattice_pmf` from exact Gaussian cell masses: it is
achieved by a test (post-process each step, then the likelihood-ratio test), with no
rounding drift.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

import numpy as np

from audit.theory.curve import TradeOffCurve
from audit.theory.pld import ComposedPair, achieved_curve, compose_dominated_pair, pld_curve

if TYPE_CHECKING:  # dp_accounting imported on use: fast start (docs/design.md §2.7)
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

__all__ = [
    "DISCRETISATION",
    "composed_loss_sd",
    "lower_discretisation",
    "poisson_cells",
    "poisson_curves",
    "poisson_lower",
    "poisson_pld",
    "poisson_upper",
    "upper_discretisation",
]

DISCRETISATION = 1e-4
"""Loss discretisation of the PLDs (docs/design.md §6.2: 1e-4 or finer)."""


@functools.lru_cache(maxsize=16)
def poisson_pld(
    q: float, sigma: float, steps: int, discretisation: float = DISCRETISATION
) -> pld_lib.PrivacyLossDistribution:
    """dp_accounting's pessimistic PLD of the Poisson subsampled Gaussian, composed ``steps``
    times."""
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    pld = pld_lib.from_gaussian_mechanism(
        standard_deviation=sigma,
        sensitivity=1.0,
        pessimistic_estimate=True,
        value_discretization_interval=discretisation,
        sampling_prob=q,
    )
    return pld.self_compose(steps) if steps > 1 else pld


def poisson_cells(
    q: float, sigma: float, discretisation: float, tail: float = 1e-18
) -> tuple[np.ndarray, np.ndarray]:
    """Exact masses of one step's pair on the cells {y : k d <= l(y) < (k+1) d}.

    The loss l(y) = log(1 - q + q exp((2y - 1) / (2 sigma^2))) is increasing in y, so the
    cell edges are y(k d) = sigma^2 log((e^{k d} - 1 + q) / q) + 1/2. The range of y keeps
    all but ``tail`` of the mass of P and of Q on each side; the rest is dropped, which can
    only lower the pair's distinguishability (the result stays a dominated pair).
    """
    from scipy import stats

    d = discretisation
    z = float(stats.norm.isf(tail))
    lo, hi = -z * sigma, 1.0 + z * sigma
    l_lo = math.log(1 - q + q * math.exp((2 * lo - 1) / (2 * sigma**2)))
    l_hi = math.log(1 - q + q * math.exp((2 * hi - 1) / (2 * sigma**2)))
    lattice = np.arange(math.ceil(l_lo / d), math.floor(l_hi / d) + 1) * d
    with np.errstate(divide="ignore"):  # q = 1: the lowest lattice loss maps to y = -inf
        y_lattice = sigma**2 * np.log(np.expm1(lattice) / q + 1.0) + 0.5
    edges = np.unique(np.concatenate(([lo, hi], y_lattice[(y_lattice > lo) & (y_lattice < hi)])))
    # differences of the CDF below the mean and of the survival function above it
    mass_q = _normal_mass(edges, 0.0, sigma)
    mass_p = (1 - q) * mass_q + q * _normal_mass(edges, 1.0, sigma)
    return mass_p, mass_q


def _normal_mass(edges: np.ndarray, mean: float, sigma: float) -> np.ndarray:
    """N(mean, sigma^2) mass of consecutive cells, accurate in both tails."""
    from scipy import stats

    z = (edges - mean) / sigma
    mid = 0.5 * (z[1:] + z[:-1])
    lower = np.diff(stats.norm.cdf(z))
    upper = -np.diff(stats.norm.sf(z))
    return np.maximum(np.where(mid <= 0, lower, upper), 0.0)


def composed_loss_sd(q: float, sigma: float, steps: int) -> float:
    """sqrt(T) times the standard deviation of one step's privacy loss under P (quadrature)."""
    from scipy import stats

    y = np.linspace(-12 * sigma, 1 + 12 * sigma, 20_001)
    w_q = stats.norm.pdf(y / sigma)
    w_p = (1 - q) * w_q + q * stats.norm.pdf((y - 1) / sigma)
    with np.errstate(divide="ignore"):  # q = 1: log(1 - q) = -inf, the loss is the Gaussian's
        loss = np.logaddexp(np.log1p(-q), math.log(q) + (2 * y - 1) / (2 * sigma**2))
    mean = float((w_p * loss).sum() / w_p.sum())
    return math.sqrt(steps * float((w_p * (loss - mean) ** 2).sum() / w_p.sum()))


def upper_discretisation(q: float, sigma: float, steps: int, discretisation: float) -> float:
    """``discretisation``, or finer when the composed loss is narrow (small q): at most 1/500
    of its standard deviation (dp_accounting at 1e-4 gives eps 0.0283 instead of 0.0161 for
    q = 1e-5, sigma = 0.8, T = 1e5; at 1.2e-5, 0.0165)."""
    return float(min(discretisation, max(1e-8, composed_loss_sd(q, sigma, steps) / 500)))


def lower_discretisation(q: float, sigma: float, steps: int, discretisation: float) -> float:
    """Lattice spacing for the dominated pair: ``discretisation``, or finer when the composed
    loss is narrow (small q): at most 1/2000 of its standard deviation."""
    return float(min(discretisation, max(1e-9, composed_loss_sd(q, sigma, steps) / 2000)))


@functools.lru_cache(maxsize=16)
def _dominated_pair(q: float, sigma: float, steps: int, discretisation: float) -> ComposedPair:
    p, qq = poisson_cells(q, sigma, discretisation, tail=1e-15 / max(steps, 1))
    return compose_dominated_pair(p, qq, steps, discretisation=discretisation)


def poisson_upper(
    q: float, sigma: float, steps: int, *, threat_model: str = "adversarial",
    discretisation: float = DISCRETISATION,
) -> TradeOffCurve:
    """The guarantee: dp_accounting's pessimistic PLD as a curve."""
    discretisation = upper_discretisation(q, sigma, steps, discretisation)
    return pld_curve(
        poisson_pld(q, sigma, steps, discretisation),
        sampler="poisson",
        threat_model=threat_model,
        kind="upper",
        method=(
            f"PLD pessimistic (dp_accounting connect-the-dots), discretisation {discretisation:g}, "
            f"q = {q:g}, {steps} steps"
        ),
    )


def poisson_lower(
    q: float, sigma: float, steps: int, *, threat_model: str = "adversarial",
    discretisation: float = DISCRETISATION,
) -> TradeOffCurve:
    """Achieved: the composed PLD of a dominated lattice pair (optimistic, no rounding drift)."""
    discretisation = lower_discretisation(q, sigma, steps, discretisation)
    return achieved_curve(
        _dominated_pair(q, sigma, steps, discretisation),
        sampler="poisson",
        threat_model=threat_model,
        kind="lower",
        method=(
            f"PLD optimistic (dominated lattice pair, no rounding drift), discretisation "
            f"{discretisation:g}, q = {q:g}, {steps} steps"
        ),
    )


def poisson_curves(
    q: float,
    sigma: float,
    steps: int,
    *,
    threat_model: str = "adversarial",
    discretisation: float = DISCRETISATION,
) -> tuple[TradeOffCurve, TradeOffCurve]:
    """(upper, lower) trade-off curves of Poisson subsampling (q, sigma) over ``steps`` steps."""
    return (
        poisson_upper(q, sigma, steps, threat_model=threat_model, discretisation=discretisation),
        poisson_lower(q, sigma, steps, threat_model=threat_model, discretisation=discretisation),
    )
