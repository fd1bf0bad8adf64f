"""Poisson subsampling under replace-one adjacency: the subsampled Gaussian pair with signs.

Replace-one neighbours (docs/design.md §11.3) swap the canary for another example:
its clipped gradient g (|g| <= C) becomes g' (|g'| <= C). Under Poisson sampling the slot is
in a step's sum with probability q in both worlds (the same coin), the others' contributions
are the same, so one step, projected on u = (g - g') / |g - g'| with g = C u, g' = -C u, is
the pair (noise multiplier sigma, units of C)

    P = (1 - q) N(0, sigma^2) + q N(1, sigma^2)   vs   Q = (1 - q) N(0, sigma^2) + q N(-1, sigma^2),

composed T E times. It is the pair of dp_accounting's ``NeighboringRelation.REPLACE_ONE`` for
the sampled Gaussian (its ``mu_upper``/``mu_lower`` with sensitivity 1), whose pessimistic
connect-the-dots PLD is the guarantee (``upper``; Zhu, Dong, Wang, *Optimal accounting of
differential privacy via characteristic function*, AISTATS 2022, for the dominating pair).

The achieved curve (``lower``) is that of a pair dominated by P vs Q on a lattice: the exact
Gaussian masses of P and Q on a partition of the line into intervals
(:func:`replace_one_cells`), turned into a lattice pair by
:func:`audit.theory.pld.compose_dominated_pair` (merging and splitting cells: post-processing).
Any partition gives a dominated pair; the partition here follows the loss lattice (edges where
the loss l(y) = log(1 - q + q e^{(2y - 1)/(2 sigma^2)}) - log(1 - q + q e^{(-2y - 1)/(2 sigma^2)}),
increasing in y, crosses k d, found by interpolation), so that the pair is tight. P and Q are
mirror images (y -> -y), so both directions are the same pair.

At q = 1 the pair is N(1, sigma^2) vs N(-1, sigma^2): Gaussian DP with mu = 2 / sigma per step.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from audit.theory.curve import TradeOffCurve
from audit.theory.pld import achieved_curve, compose_dominated_pair, pld_curve
from audit.theory.poisson import DISCRETISATION, lower_discretisation, upper_discretisation

__all__ = [
    "poisson_replace_one_lower",
    "poisson_replace_one_upper",
    "replace_one_cells",
    "replace_one_loss",
]


def replace_one_loss(y: np.ndarray, q: float, sigma: float) -> np.ndarray:
    """l(y) = log P(y) / Q(y) of the replace-one pair (module docstring), stable in both tails."""
    y = np.asarray(y, dtype=float)
    s2 = 2.0 * sigma**2
    with np.errstate(divide="ignore"):
        log_keep = math.log1p(-q) if q < 1 else -math.inf
    up = np.logaddexp(log_keep, math.log(q) + (2 * y - 1) / s2)
    down = np.logaddexp(log_keep, math.log(q) + (-2 * y - 1) / s2)
    return np.asarray(up - down)


def _normal_mass(edges: np.ndarray, mean: float, sigma: float) -> np.ndarray:
    """N(mean, sigma^2) mass of consecutive cells: CDF differences below the mean, survival
    differences above it (accurate in both tails)."""
    from scipy import stats

    z = (edges - mean) / sigma
    mid = 0.5 * (z[1:] + z[:-1])
    below = np.diff(stats.norm.cdf(z))
    above = -np.diff(stats.norm.sf(z))
    return np.maximum(np.where(mid <= 0, below, above), 0.0)


def replace_one_cells(
    q: float, sigma: float, discretisation: float, tail: float = 1e-18
) -> tuple[np.ndarray, np.ndarray]:
    """Exact masses (P, Q) of one step's replace-one pair on a partition of the line.

    The range keeps all but ``tail`` of each component's mass on each side (the rest is
    dropped: the result stays dominated). Edges: where l(y) crosses the lattice k d, from a
    monotone interpolation of l on a fine grid (a partition, so exact placement is not
    needed for validity, only for tightness).
    """
    from scipy import stats

    z = float(stats.norm.isf(tail))
    lo, hi = -1.0 - z * sigma, 1.0 + z * sigma
    grid = np.linspace(lo, hi, 400_001)
    loss = replace_one_loss(grid, q, sigma)
    loss = np.maximum.accumulate(loss)  # monotone already; guard the interpolation
    k = np.arange(math.ceil(loss[0] / discretisation), math.floor(loss[-1] / discretisation) + 1)
    y_lattice = np.interp(k * discretisation, loss, grid)
    edges = np.unique(np.concatenate(([lo, hi], y_lattice[(y_lattice > lo) & (y_lattice < hi)])))
    zero = _normal_mass(edges, 0.0, sigma)
    mass_p = (1 - q) * zero + q * _normal_mass(edges, 1.0, sigma)
    mass_q = (1 - q) * zero + q * _normal_mass(edges, -1.0, sigma)
    return mass_p, mass_q


@functools.lru_cache(maxsize=8)
def _replace_one_pld(q: float, sigma: float, steps: int, discretisation: float):
    from dp_accounting.pld import privacy_loss_distribution as pld_lib
    from dp_accounting.privacy_accountant import NeighboringRelation

    pld = pld_lib.from_gaussian_mechanism(
        standard_deviation=sigma,
        sensitivity=1.0,
        pessimistic_estimate=True,
        value_discretization_interval=discretisation,
        sampling_prob=q,
        neighboring_relation=NeighboringRelation.REPLACE_ONE,
    )
    return pld.self_compose(steps) if steps > 1 else pld


def poisson_replace_one_upper(
    q: float, sigma: float, steps: int, *, threat_model: str = "adversarial",
    discretisation: float = DISCRETISATION,
) -> TradeOffCurve:
    """The guarantee: dp_accounting's pessimistic REPLACE_ONE PLD of the sampled Gaussian."""
    d = upper_discretisation(q, sigma, steps, discretisation)
    return pld_curve(
        _replace_one_pld(q, sigma, steps, d), sampler="poisson", threat_model=threat_model,
        kind="upper",
        method=(f"PLD pessimistic, replace-one (dp_accounting REPLACE_ONE), discretisation "
                f"{d:g}, q = {q:g}, {steps} steps"),
    )


@functools.lru_cache(maxsize=8)
def _replace_one_pair(q: float, sigma: float, steps: int, discretisation: float):
    p, qq = replace_one_cells(q, sigma, discretisation, tail=1e-15 / max(steps, 1))
    return compose_dominated_pair(p, qq, steps, discretisation=discretisation)


def poisson_replace_one_lower(
    q: float, sigma: float, steps: int, *, threat_model: str = "adversarial",
    discretisation: float = DISCRETISATION,
) -> TradeOffCurve:
    """Achieved: the composed dominated lattice pair of the replace-one pair (no rounding
    drift; module docstring)."""
    d = lower_discretisation(q, sigma, steps, discretisation)
    return achieved_curve(
        _replace_one_pair(q, sigma, steps, d), sampler="poisson", threat_model=threat_model,
        kind="lower",
        method=(f"replace-one pair (1-q)N(0)+qN(1) vs (1-q)N(0)+qN(-1), dominated lattice pair, "
                f"discretisation {d:g}, q = {q:g}, {steps} steps"),
    )
