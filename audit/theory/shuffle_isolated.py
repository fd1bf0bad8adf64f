"""Shuffled batches, isolated pair: Berry-Esseen guarantee and the exact one-epoch curve.

One epoch of M = T rounds; the canary (the only signal along its direction) is in one
uniformly random round: P = MoG_M(1) vs Q = N(0, sigma^2 I_M) (docs/design.md §6.5). With
X_j = y_j / sigma ~ N(0, 1) under Q, the likelihood ratio is

    L = dP/dQ = (1/M) sum_j Y_j,   Y_j = exp(X_j / sigma - 1 / (2 sigma^2)),

a mean of M i.i.d. lognormals: log Y ~ N(-s^2/2, s^2) with s = 1/sigma, so E Y = 1,
Var Y = v = e^{s^2} - 1, and rho = E|Y - 1|^3 (closed form in :func:`lognormal_moments`).
Under P the canary's round has Y~ = e^{s^2} Y (size bias), independent of the others.

**Berry-Esseen guarantee** (derived here; the constants are stated). The optimal test
rejects for L > 1, so TV(P, Q) = Q(S <= M) - P(S <= M) with S = sum_j Y_j, and
f(a) >= 1 - a - TV for every trade-off curve. Berry-Esseen for the i.i.d. sum under Q,
|Q(S <= x) - Phi((x - M)/sqrt(M v))| <= C_1 rho / (v^{3/2} sqrt(M)), and for the
non-identical sum under P (mean M + v, variance s_P^2 = (e^{2 s^2} + M - 1) v),
|P(S <= x) - Phi((x - M - v)/s_P)| <= C_2 (e^{3 s^2} + M - 1) rho / s_P^3, give

    TV <= delta_BE = Phi(v / s_P) - 1/2 + C_1 rho / (v^{3/2} sqrt(M))
                     + C_2 (e^{3 s^2} + M - 1) rho / s_P^3.

Constants: C_1 = 0.4748 (Shevtsova 2011, i.i.d.) and C_2 = 0.5600 (Shevtsova 2010,
non-identical); ``constants="van_beek"`` uses C = 0.7975 for both (van Beek 1972), which
reproduces van Dijk & Ertan's (arXiv 2605.06259) M ~ 1.13e6 at sigma = 1, delta = 0.01
(ours: 5.0e5). The bound holds for every M, but it is only *applied* in the paper's regime
sigma >= sqrt(3 / ln M) (i.e. e^{3 s^2} <= M, where the canary's own round does not
dominate rho); outside, this module returns no Berry-Esseen curve. E epochs of dynamic
shuffling compose (0, delta)-DP: f^{(x)E}(a) >= (1 - delta_BE)^E - a; persistent shuffling
is one epoch at sigma / sqrt(E).

**Exact curve** (one epoch). L = S/M and dP/dQ = S/M, so under P the law of S is the
size-biased law s/M dQ_S(s): the whole curve follows from the law of S under Q, computed
on a lattice of spacing h by FFT (M-fold power of the characteristic function of Y rounded
to the nearest lattice point). Tests "S > s" give the vertices
alpha = Q(S > s), beta = P(S <= s). Limits: a lattice of at most 2^22 points, and Y capped
at the lattice top moving at most 1e-12 of Q-mass (else ValueError: no exact curve; this
excludes small sigma, about sigma < 0.45 at M = 10); the curve's error is O(h^2) (h = 0.005
gives 1e-7 in TV at M = 10, sigma = 1) plus the moved mass (stated in ``method``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy import fft

from audit.sampling import get_sampler
from audit.theory.curve import TradeOffCurve
from audit.theory.pld import achieved_curve, compose_dominated_pair

__all__ = [
    "BE_CONSTANTS",
    "ExactLattice",
    "berry_esseen_applies",
    "berry_esseen_curve",
    "delta_be",
    "isolated_exact_curve",
    "isolated_exact_lattice",
    "lognormal_moments",
]

FloatArray = NDArray[np.float64]

BE_CONSTANTS: dict[str, tuple[float, float]] = {
    "shevtsova": (0.4748, 0.5600),
    "van_beek": (0.7975, 0.7975),
}
"""Berry-Esseen constants (i.i.d., non-identical): Shevtsova 2011 / 2010; van Beek 1972."""

MAX_LATTICE = 2**22
"""Largest FFT lattice for the exact curve."""

MAX_TAIL = 1e-12
"""Largest Q-mass the exact curve may move by capping Y at the lattice top."""


def lognormal_moments(sigma: float) -> tuple[float, float]:
    """(v, rho) = (Var Y, E|Y - 1|^3) for Y = exp(X/sigma - 1/(2 sigma^2)), X ~ N(0, 1).

    With log Y ~ N(m, s^2), m = -s^2/2, s = 1/sigma: E Y^k = e^{k m + k^2 s^2 / 2} and
    E[Y^k; Y < 1] = E Y^k Phi(-(m + k s^2)/s). Then E|Y - 1|^3 = E(Y - 1)^3 + 2 E[(1 - Y)^3; Y < 1]
    with E(Y - 1)^3 = e^{3 s^2} - 3 e^{s^2} + 2.
    """
    from scipy import stats

    s = 1.0 / sigma
    m = -(s**2) / 2
    v = math.expm1(s**2)

    def partial(k: int) -> float:  # E[Y^k; Y < 1]
        return math.exp(k * m + k * k * s * s / 2) * stats.norm.cdf(-(m + k * s * s) / s)

    low = partial(0) - 3 * partial(1) + 3 * partial(2) - partial(3)  # E[(1 - Y)^3; Y < 1]
    third = math.exp(3 * s**2) - 3 * math.exp(s**2) + 2
    return v, third + 2 * low


def berry_esseen_applies(sigma: float, rounds: int) -> bool:
    """The paper's regime sigma >= sqrt(3 / ln M)."""
    return rounds > 1 and sigma >= math.sqrt(3.0 / math.log(rounds))


def delta_be(sigma: float, rounds: int, constants: str = "shevtsova") -> float:
    """delta_BE(sigma, M) >= TV(MoG_M(1), N(0, I_M)) (module docstring; not capped at 1)."""
    from scipy import stats

    c1, c2 = BE_CONSTANTS[constants]
    m = float(rounds)
    v, rho = lognormal_moments(sigma)
    s2 = 1.0 / sigma**2
    s_p = math.sqrt((math.exp(2 * s2) + m - 1) * v)
    gauss = stats.norm.cdf(v / s_p) - 0.5
    under_q = c1 * rho / (v**1.5 * math.sqrt(m))
    under_p = c2 * (math.exp(3 * s2) + m - 1) * rho / s_p**3
    return float(gauss + under_q + under_p)


def berry_esseen_curve(
    sigma: float, rounds: int, epochs: int = 1, *, sampler: str = "dynamic_shuffle",
    constants: str = "shevtsova",
) -> TradeOffCurve | None:
    """f(a) >= max(0, (1 - delta_BE)^E - a), or None outside sigma_eff >= sqrt(3/ln M).

    Persistent shuffling: one epoch at sigma / sqrt(E); dynamic: E-fold composition.
    """
    persistent = get_sampler(sampler).same_step_every_epoch
    eff = sigma / math.sqrt(epochs) if persistent else sigma
    if not berry_esseen_applies(eff, rounds):
        return None
    d = delta_be(eff, rounds, constants)
    k = 1 if persistent else epochs
    top = (1.0 - d) ** k if d < 1 else 0.0
    c1, c2 = BE_CONSTANTS[constants]
    return TradeOffCurve(
        [0.0, top],
        [top, 0.0],
        sampler=sampler,
        threat_model="isolated",
        kind="upper",
        symmetric=True,
        short="Berry-Esseen",
        method=(
            f"Berry-Esseen, delta_BE = {d:.4g} (C = {c1}, {c2}), M = {rounds}, "
            f"{'one epoch at sigma/sqrt(E)' if persistent else f'(1 - delta_BE)^E, E = {epochs}'}"
        ),
    )


@dataclass(frozen=True)
class ExactLattice:
    """The law of S = sum_j Y_j on the lattice s_k = k h, under Q and under P."""

    s: FloatArray
    q: FloatArray
    p: FloatArray
    h: float
    tail: float

    def total_variation(self) -> float:
        """TV(P, Q) = sum (p - q)_+."""
        return float(np.maximum(self.p - self.q, 0.0).sum())


@functools.lru_cache(maxsize=2)
def isolated_exact_lattice(sigma: float, rounds: int, h: float | None = None) -> ExactLattice:
    """Law of S under Q (M-fold FFT power of Y's lattice law) and under P (size bias).

    ``h`` defaults to 0.005, widened for large M so that the lattice has at most 2^21 points.
    """
    from scipy import stats

    m = rounds
    v, _ = lognormal_moments(sigma)
    s_needed = m + 14 * math.sqrt(m * v) + 10
    if h is None:
        y_full = min(math.exp(9.0 / sigma - 0.5 / sigma**2), 5000.0)
        h = max(0.005, 1.1 * (s_needed + y_full) / 2**21)
    y_room = MAX_LATTICE * h - s_needed
    if y_room < 20:
        raise ValueError(
            f"rounds={rounds} is too large for the exact isolated-shuffle curve at sigma={sigma} "
            f"(lattice of {MAX_LATTICE} points, spacing {h}); use the bounds instead"
        )
    x_max = 9.0  # N(0, 1) tail beyond 9: 1.1e-19
    y_max = min(math.exp(x_max / sigma - 0.5 / sigma**2), y_room, 2**21 * h)
    x_cap = sigma * math.log(y_max) + 0.5 / sigma
    tail = float(m * stats.norm.sf(x_cap))
    if tail > MAX_TAIL:
        raise ValueError(
            f"sigma={sigma:.4g} is too small for the exact isolated-shuffle curve with M={rounds}: "
            f"the lattice would cap Y and move Q-mass {tail:.2g} > {MAX_TAIL:g}; use the bounds"
        )
    k = np.arange(int(y_max / h) + 1)
    edges_y = (np.arange(len(k) + 1) - 0.5) * h
    with np.errstate(divide="ignore"):
        edges_x = sigma * np.log(np.maximum(edges_y, 0.0)) + 0.5 / sigma
    cdf = stats.norm.cdf(edges_x)
    pmf = np.diff(cdf)
    pmf[-1] += stats.norm.sf(edges_x[-1])  # cap: the tail goes to the top lattice point
    n_fft = fft.next_fast_len(int(y_max / h) + int(s_needed / h) + 2, real=True)
    law = fft.irfft(fft.rfft(pmf, n_fft) ** m, n_fft)
    law = np.maximum(law, 0.0)
    law /= law.sum()
    s = np.arange(n_fft) * h
    p = law * s / m
    p /= p.sum()
    return ExactLattice(s=s, q=law, p=p, h=h, tail=tail)


def _lattice_vertices(lat: ExactLattice) -> tuple[FloatArray, FloatArray]:
    keep = (lat.q > 0) | (lat.p > 0)
    q, p = lat.q[keep][::-1], lat.p[keep][::-1]  # descending s = descending likelihood ratio
    alpha = np.concatenate(([0.0], np.cumsum(q)))
    beta = np.concatenate(([1.0], 1.0 - np.cumsum(p)))
    return alpha, beta


@functools.lru_cache(maxsize=16)
def isolated_exact_curve(
    sigma: float, rounds: int, epochs: int = 1, *, sampler: str = "dynamic_shuffle",
    h: float | None = None, discretisation: float = 1e-4,
) -> TradeOffCurve:
    """The exact isolated-pair curve (one epoch; persistent at sigma/sqrt(E); dynamic composed)."""
    persistent = get_sampler(sampler).same_step_every_epoch
    eff = sigma / math.sqrt(epochs) if persistent else sigma
    lat = isolated_exact_lattice(eff, rounds, h)
    err = f"lattice h = {lat.h:.3g} (error O(h^2)), tail mass moved {lat.tail:.2g}"
    if persistent or epochs == 1:
        a, b = _lattice_vertices(lat)
        return TradeOffCurve(
            a, b, sampler=sampler, threat_model="isolated", kind="exact",
            method=(f"exact isolated pair via law of S (FFT), M = {rounds}, "
                    f"sigma_eff = {eff:.6g}, {err}"),
        )
    keep = (lat.q > 0) & (lat.p > 0)
    pld = compose_dominated_pair(lat.p[keep], lat.q[keep], epochs, discretisation=discretisation)
    return achieved_curve(
        pld, sampler=sampler, threat_model="isolated", kind="exact",
        method=(f"exact isolated pair via law of S (FFT), M = {rounds}, {err}; E = {epochs}-fold "
                f"PLD composition (dominated lattice, discretisation {discretisation:g})"),
    )
