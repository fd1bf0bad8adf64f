"""Correct accountants: none may be ``unsound`` on any grid (docs/design.md §11).

The libraries through the harness's built-in adapters (dp_accounting PLD and RDP, Opacus RDP
and PRV, Microsoft's prv-accountant, pld-accounting's random allocation) and two exact closed
forms written here: Gaussian DP for deterministic batches (mu = sqrt(E) / sigma, Dong, Roth,
Su 2022, Cor. 3.3, delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)) and, for the
replace-one relation, mu = 2 sqrt(E) / sigma.
"""

from __future__ import annotations

import math

from audit.accounting.adapters import Unsupported
from audit.core.mechanism import Mechanism

__all__ = ["CORRECT"]


def _gdp_epsilon(mu: float, delta: float) -> float:
    """The smallest eps with delta(eps) <= delta for mu-GDP (bisection)."""
    from scipy.stats import norm

    def profile(eps: float) -> float:  # e^eps Phi(.) in log space: eps reaches 700 at mu = 32
        return float(norm.cdf(-eps / mu + mu / 2)
                     - math.exp(eps + norm.logcdf(-eps / mu - mu / 2)))

    if profile(0.0) <= delta:
        return 0.0
    lo, hi = 0.0, 1.0
    while profile(hi) > delta:
        lo, hi = hi, 2 * hi
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if profile(mid) > delta else (lo, mid)
    return hi


def exact_gdp(mechanism: Mechanism, delta: float) -> float | Unsupported:
    """Deterministic batches, add/remove or zero-out: exactly mu-GDP, mu = sqrt(E) / sigma."""
    if mechanism.sampler != "deterministic":
        return Unsupported("closed form for deterministic batches only")
    return _gdp_epsilon(math.sqrt(mechanism.epochs) / mechanism.sigma, delta)


def exact_gdp_replace_one(mechanism: Mechanism, delta: float) -> float | Unsupported:
    """Deterministic batches, replace-one: mu = 2 sqrt(E) / sigma."""
    if mechanism.sampler != "deterministic":
        return Unsupported("closed form for deterministic batches only")
    return _gdp_epsilon(2 * math.sqrt(mechanism.epochs) / mechanism.sigma, delta)


exact_gdp.adjacency = "zero_out"  # type: ignore[attr-defined]
exact_gdp_replace_one.adjacency = "replace_one"  # type: ignore[attr-defined]

CORRECT: tuple[tuple[str, object, str], ...] = (
    ("dp-accounting-pld", "dp-accounting-pld", "zero_out"),
    ("dp-accounting-rdp", "dp-accounting-rdp", "zero_out"),
    ("opacus-rdp", "opacus-rdp", "zero_out"),
    ("opacus-prv", "opacus-prv", "zero_out"),
    ("prv-accountant", "prv-accountant", "zero_out"),
    ("pld-accounting-random-allocation", "pld-accounting-random-allocation", "zero_out"),
    ("exact_gdp", exact_gdp, "zero_out"),
    ("exact_gdp_replace_one", exact_gdp_replace_one, "replace_one"),
)
"""(name, accountant, the relation its claims are checked under)."""
