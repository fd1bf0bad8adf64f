"""Deterministic (cyclic) batches: the canary is in exactly one known batch per epoch.

Each epoch releases y = 1{canary} + N(0, sigma^2) at the canary's known step (the other
steps carry no information about it in either threat model), so E epochs are the E-fold
composition of the Gaussian mechanism with sensitivity 1: exactly mu-GDP with
mu = sqrt(E) / sigma (Dong, Roth, Su, *Gaussian Differential Privacy*, Cor. 3.3), and
f(a) = Phi(Phi^{-1}(1 - a) - mu), delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)
(docs/design.md §6.1). The same curve is a valid (if loose) guarantee for both shuffles: shuffling
is never less private than deterministic batches with the same sigma, T, E (Chua et al. 2024,
arXiv 2411.04205).
"""

from __future__ import annotations

import math

from audit.theory.curve import TradeOffCurve

__all__ = ["deterministic_curve", "deterministic_mu"]


def deterministic_mu(sigma: float, epochs: int = 1) -> float:
    """mu = sqrt(E) / sigma."""
    return math.sqrt(epochs) / sigma


def deterministic_curve(
    sigma: float,
    epochs: int = 1,
    *,
    sampler: str = "deterministic",
    threat_model: str = "adversarial",
    kind: str = "exact",
) -> TradeOffCurve:
    """The exact mu-GDP curve of deterministic batches (``kind='upper'`` when used as a
    guarantee for another sampler: shuffles, balls-and-bins)."""
    mu = deterministic_mu(sigma, epochs)
    if kind == "exact":
        method = f"Gaussian DP mu = sqrt(E)/sigma = {mu:.6g} (exact, closed form)"
    else:
        method = (
            f"deterministic-batch Gaussian DP mu = sqrt(E)/sigma = {mu:.6g} "
            "(shuffling is never less private; closed form)"
        )
    curve = TradeOffCurve.from_gdp(
        mu, sampler=sampler, threat_model=threat_model, kind=kind, method=method
    )
    return curve.relabel(short="Gaussian DP" if kind == "exact" else "deterministic GDP")
