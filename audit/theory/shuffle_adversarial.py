"""Shuffled batches: lower bounds from the max test (Chua et al., ICML 2024, arXiv 2403.17673;
NeurIPS 2024, arXiv 2411.04205, Thms 3.5 and 3.8).

One epoch of T steps, the canary in one uniformly random step. After removing what the
attacker knows, the per-step observations y_t ~ N(s_t, sigma^2) form the pair

- adversarial (every other example contributes -1): P = MoG_T(2) vs Q = MoG_T(1), shifted;
  under mean m for the canary's step and 0 elsewhere, Pr[max_t y_t <= C] is
  F_m(C) = Phi((C - m)/sigma) Phi(C/sigma)^(T-1), with m = 2 (P) and 1 (Q);
- isolated: P = MoG_T(1) vs Q = N(0, I_T): m = 1 (P) and Q's law Phi(C/sigma)^T.

The test "max_t y_t > C" has FPR 1 - F_Q(C) and FNR F_P(C), so for every C
delta(eps) >= (1 - F_P(C)) - e^eps (1 - F_Q(C)) (docs/design.md §6.4). Persistent shuffling over E
epochs puts the canary at the same step every epoch, so summing each step over epochs is
sufficient: one epoch with sigma / sqrt(E). Dynamic shuffling draws fresh positions, so E
epochs compose the 1-D pair (law of the per-epoch max under P, under Q) E times; the
composition is the PLD of a dominated lattice pair (:mod:`audit.theory.pld`), i.e. an
optimistic estimate that is still achieved by a test.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numpy.typing import NDArray

# Phi = ndtr, Phi^{-1} = ndtri, log Phi = log_ndtr: scipy.stats.norm's own kernels, the same
# numbers bit for bit, without importing scipy.stats (a second at start; docs/design.md §2.7).
from scipy import special

from audit.sampling import get_sampler
from audit.theory.curve import TradeOffCurve
from audit.theory.pld import ComposedPair, achieved_curve, compose_dominated_pair

__all__ = [
    "max_test_cdf",
    "max_test_curve",
    "max_test_delta",
    "max_test_points",
    "shuffle_max_test_lower",
]

FloatArray = NDArray[np.float64]

PAIRS: dict[str, tuple[float, float]] = {"adversarial": (2.0, 1.0), "isolated": (1.0, 0.0)}
"""Signal of the canary's step under P and under Q, per threat model (others at 0)."""


def max_test_cdf(
    c: FloatArray, mean: float, sigma: float, steps: int
) -> tuple[FloatArray, FloatArray]:
    """(log Pr[max <= c], log Pr[max > c]) when one of ``steps`` coordinates has ``mean``.

    Pr[max <= c] = Phi((c - mean)/sigma) Phi(c/sigma)^(steps - 1) (``mean = 0``: all null).
    """
    c = np.asarray(c, dtype=float)
    log_cdf = special.log_ndtr((c - mean) / sigma) + (steps - 1) * special.log_ndtr(c / sigma)
    log_sf = np.log(-np.expm1(np.minimum(log_cdf, -1e-300)))
    return log_cdf, log_sf


def _grid(m_p: float, m_q: float, sigma: float, steps: int, size: int) -> FloatArray:
    """Thresholds C from where Pr_P[max <= C] ~ 1e-16 up to where Pr_Q[max > C] ~ 1e-17."""
    lo = sigma * special.ndtri(math.exp(math.log(1e-16) / steps)) + min(m_q, 0.0) - sigma
    hi = max(m_p, m_q) + sigma * (-special.ndtri(1e-17 / steps) + 1.0)
    return np.linspace(lo, hi, size)


def max_test_points(
    sigma: float, steps: int, threat_model: str = "adversarial", size: int = 20_001
) -> tuple[FloatArray, FloatArray]:
    """(FPR, FNR) of the max test at ``size`` thresholds."""
    m_p, m_q = PAIRS[threat_model]
    c = _grid(m_p, m_q, sigma, steps, size)
    log_cdf_p, _ = max_test_cdf(c, m_p, sigma, steps)
    _, log_sf_q = max_test_cdf(c, m_q, sigma, steps)
    return np.exp(log_sf_q), np.exp(log_cdf_p)


def max_test_delta(
    eps: float, sigma: float, steps: int, threat_model: str = "adversarial"
) -> tuple[float, float]:
    """max_C (1 - F_P(C)) - e^eps (1 - F_Q(C)) and the best C (grid, then Brent refinement)."""
    from scipy import optimize  # imported on use: fast start (docs/design.md §2.7)

    m_p, m_q = PAIRS[threat_model]

    def gap(c: float) -> float:
        _, sf_p = max_test_cdf(np.array([c]), m_p, sigma, steps)
        _, sf_q = max_test_cdf(np.array([c]), m_q, sigma, steps)
        return float(np.exp(sf_p[0]) - math.exp(eps) * np.exp(sf_q[0]))

    c = _grid(m_p, m_q, sigma, steps, 4001)
    _, sf_p = max_test_cdf(c, m_p, sigma, steps)
    _, sf_q = max_test_cdf(c, m_q, sigma, steps)
    values = np.exp(sf_p) - math.exp(eps) * np.exp(sf_q)
    i = int(np.argmax(values))
    lo, hi = c[max(i - 1, 0)], c[min(i + 1, len(c) - 1)]
    res = optimize.minimize_scalar(lambda x: -gap(x), bounds=(lo, hi), method="bounded",
                                   options={"xatol": 1e-10})
    best_c, best = (
        (float(res.x), -float(res.fun))
        if -res.fun >= values[i]
        else (float(c[i]), float(values[i]))
    )
    return max(best, 0.0), best_c


def max_test_curve(
    sigma: float, steps: int, *, sampler: str, threat_model: str = "adversarial",
    size: int = 20_001, method: str | None = None,
) -> TradeOffCurve:
    """The (symmetrised, convexified) ROC of the one-epoch max test: a ``lower`` curve."""
    fpr, fnr = max_test_points(sigma, steps, threat_model, size)
    return TradeOffCurve.from_points(
        fpr,
        fnr,
        sampler=sampler,
        threat_model=threat_model,
        kind="lower",
        method=method
        or f"max test, one epoch, T = {steps}, sigma = {sigma:.6g}, {size} thresholds",
    )


def _max_cells(
    sigma: float, steps: int, threat_model: str, size: int
) -> tuple[FloatArray, FloatArray]:
    """Masses of the per-epoch max under P and Q on ``size`` threshold cells (plus tails)."""
    m_p, m_q = PAIRS[threat_model]
    c = _grid(m_p, m_q, sigma, steps, size)
    out = []
    for m in (m_p, m_q):
        log_cdf, log_sf = max_test_cdf(c, m, sigma, steps)
        cdf, sf = np.exp(log_cdf), np.exp(log_sf)
        mid = np.diff(np.where(cdf < 0.5, cdf, 1 - sf))
        mid = np.where(cdf[1:] < 0.5, np.diff(cdf), -np.diff(sf))
        out.append(np.maximum(np.concatenate(([cdf[0]], mid, [sf[-1]])), 0.0))
    return out[0], out[1]


@functools.lru_cache(maxsize=16)
def _dynamic_pld(sigma: float, steps: int, epochs: int, threat_model: str, size: int,
                 discretisation: float) -> ComposedPair:
    p, q = _max_cells(sigma, steps, threat_model, size)
    return compose_dominated_pair(p, q, epochs, discretisation=discretisation)


@functools.lru_cache(maxsize=16)
def shuffle_max_test_lower(
    sampler: str, sigma: float, steps: int, epochs: int, threat_model: str,
    discretisation: float = 1e-4, size: int = 20_001,
) -> TradeOffCurve:
    """The max-test lower bound for ``persistent_shuffle`` or ``dynamic_shuffle`` (and any
    sampler whose canary is in one uniformly random step per epoch): one epoch at
    sigma/sqrt(E) where the step repeats every epoch (``same_step_every_epoch``), else E-fold."""
    if get_sampler(sampler).same_step_every_epoch or epochs == 1:
        eff = sigma / math.sqrt(epochs)
        return max_test_curve(
            eff, steps, sampler=sampler, threat_model=threat_model, size=size,
            method=(
                (f"max test (Chua et al. 2024), persistent = one epoch at sigma/sqrt(E) = {eff:.6g}"
                 if epochs > 1 else f"max test (Chua et al. 2024), one epoch at sigma = {eff:.6g}")
                + f", T = {steps}, {size} thresholds"
            ),
        )
    pld = _dynamic_pld(sigma, steps, epochs, threat_model, size // 4, discretisation)
    return achieved_curve(
        pld, sampler=sampler, threat_model=threat_model, kind="lower",
        method=(f"max test per epoch (Chua et al. 2024), E = {epochs}-fold PLD composition, "
                f"dominated lattice pair (optimistic), discretisation {discretisation:g}, "
                f"T = {steps}, {size // 4} cells"),
    )
