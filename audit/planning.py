"""Planning an audit: how many trials it needs, from the ceiling of audit.stats.

An audit shows a claim "(eps_c, delta)-DP" violated when its sound lower bound exceeds
eps_c. If the best attack's scores had exactly the trade-off curve f (the theory's ``lower``
curve: what a known attack achieves), then with n IN and n OUT trials the error counts at a
threshold with rates (a, f(a)) are Binomial(n, a) and Binomial(n, f(a)), independent. With
probability >= p = ``power`` both lie below their sqrt(p)-quantiles, and then (CP bounds
increase with the count) eps_lb is at least the bound computed at those quantiles. The plan
is the smallest n for which that pessimistic ceiling exceeds eps_c (or reaches a target eps
to certify). Assumptions, stated: the attack attains f; for ``split`` the threshold picked on
the selection half is the best one (the realised choice can only be worse, so real audits
may need somewhat more); for ``bonferroni`` the grid's rates are taken at their expectations.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from audit.mechanism import Mechanism
from audit.stats import DEFAULT_GRID_SIZE, epsilon_from_rates, evaluate_curve, ideal_epsilon_lb
from audit.validation import check_int, check_real

__all__ = ["Plan", "pessimistic_epsilon_lb", "theory_bounds", "trials_needed"]


def pessimistic_epsilon_lb(
    curve: Callable[[np.ndarray], object],
    trials: int,
    *,
    delta: float,
    alpha: float = 0.05,
    power: float = 0.9,
    threshold: str = "split",
    grid_size: int = DEFAULT_GRID_SIZE,
) -> float:
    """eps_lb reached with probability >= ``power`` if the scores follow ``curve`` exactly
    (error counts at their sqrt(power)-quantiles; module docstring)."""
    return ideal_epsilon_lb(
        curve, trials, delta=delta, alpha=alpha, threshold=threshold, grid_size=grid_size, quantile=math.sqrt(power)
    )


@dataclass(frozen=True)
class Plan:
    """Trials (per side: IN and OUT each) to reach eps_lb > ``target_epsilon`` with ``power``."""

    target_epsilon: float
    trials: int | None
    reachable: bool
    curve_epsilon: float
    delta: float
    alpha: float
    power: float
    threshold: str
    note: str

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def trials_needed(
    curve: Callable[[np.ndarray], object],
    target_epsilon: float,
    *,
    delta: float,
    alpha: float = 0.05,
    power: float = 0.9,
    threshold: str = "split",
    grid_size: int = DEFAULT_GRID_SIZE,
    max_trials: int = 10**9,
) -> Plan:
    """Smallest n (IN and OUT trials each, to ~1%) with pessimistic eps_lb > ``target_epsilon``.

    ``curve``'s own eps at delta is the limit as n grows; a target at or above it is
    unreachable (``reachable=False``, ``trials=None``).
    """
    target_epsilon = check_real("claim", target_epsilon, minimum=0.0)
    power = check_real("power", power, minimum=0.0, maximum=1.0, strict_minimum=True, strict_maximum=True)
    max_trials = check_int("max_trials", max_trials, minimum=4)
    limit = _curve_epsilon(curve, delta)
    common = {"target_epsilon": target_epsilon, "curve_epsilon": limit, "delta": delta, "alpha": alpha,
              "power": power, "threshold": threshold}

    def reaches(n: int) -> bool:
        return pessimistic_epsilon_lb(
            curve, n, delta=delta, alpha=alpha, power=power, threshold=threshold, grid_size=grid_size
        ) > target_epsilon

    if target_epsilon >= limit:
        return Plan(trials=None, reachable=False, note=(
            f"the attack's curve has eps = {limit:.4g} at delta = {delta:g}; no number of trials "
            f"certifies more than that, so eps > {target_epsilon:g} cannot be shown"), **common)
    low, high = 2, 16
    while not reaches(high):
        low, high = high, high * 2
        if high > max_trials:
            return Plan(trials=None, reachable=False, note=f"more than max_trials={max_trials} trials needed", **common)
    while high > low * 1.01 + 1:
        mid = (low + high) // 2
        low, high = (low, mid) if reaches(mid) else (mid, high)
    return Plan(trials=int(high), reachable=True, note=(
        "assumes the attack attains the curve and the best threshold is found; "
        "trials are per side (IN and OUT each)"), **common)


def _curve_epsilon(curve: Callable[[np.ndarray], object], delta: float) -> float:
    epsilon = getattr(curve, "epsilon", None)
    if callable(epsilon):
        return float(np.asarray(epsilon(delta)))
    grid = np.geomspace(1e-15, 1.0, 20000)
    return float(epsilon_from_rates(grid, np.clip(evaluate_curve(curve, grid), 0.0, 1.0), delta).max())


def theory_bounds(mechanism: Mechanism) -> tuple[object | None, object | None, str]:
    """(upper, lower, note) from ``audit.theory.bounds_for`` (each a TradeOffCurve or None).

    The note says why both are None when the theory package cannot give them.
    """
    try:
        from audit.theory import bounds_for
    except ImportError as error:
        return None, None, f"audit.theory unavailable ({error})"
    bounds = bounds_for(mechanism)
    return getattr(bounds, "upper", None), getattr(bounds, "lower", None), ""
