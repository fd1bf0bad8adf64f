"""Shuffled batches, isolated pair: Edgeworth approximations (one epoch and many epochs).

These are *approximations*, not bounds: every curve here has kind ``approximation``; it is
drawn and reported as such and is never a guarantee, a lower bound or a claim.

**The pair** (van Dijk and Ertan, arXiv 2605.06259; :mod:`audit.theory.shuffle_isolated`).
One epoch of M rounds: the likelihood ratio is L = S / M with S = sum_j Y_j,
Y_j = exp(X_j / sigma - 1 / (2 sigma^2)). Under H0 (Q: all X_j ~ N(0, 1)) the Y_j are i.i.d.
lognormal, log Y ~ N(-s^2/2, s^2), s = 1 / sigma; under H1 (P: one X_j shifted by 1/sigma)
that Y is size-biased, Y~ = w Y in law, w = e^{s^2}, independent of the other M - 1.

**Cumulants in closed form.** E Y^k = w^{k(k-1)/2}, so the cumulants kappa_r of Y follow
from the moment-cumulant recursion kappa_n = m_n - sum_{k<n} C(n-1, k-1) kappa_k m_{n-k}
(kappa_1 = 1, kappa_2 = w - 1, kappa_3 = (w - 1)^2 (w + 2), ...); the size-biased Y~ = w Y
has kappa_r(Y~) = w^r kappa_r. The sum S has cumulants K_r = M kappa_r under H0 and
K_r = (M - 1 + w^r) kappa_r under H1. The recursion runs in 60-digit decimal arithmetic
(the standard library's :mod:`decimal`), since for large sigma the cumulants are tiny
differences of O(1) moments.

**Edgeworth expansion** (Hall, *The Bootstrap and Edgeworth Expansion*, 1992, §2.2;
Petrov, *Sums of Independent Random Variables*, 1975, Ch. VI). With Z = (S - K_1)/sqrt(K_2)
and standardised cumulants lambda_r = K_r / K_2^{r/2} = O(M^{1 - r/2}),

    P(Z <= z) = Phi(z) - phi(z) sum_{j>=1} sum_{n} c_{j,n} He_{n-1}(z),

where the order-j term (size M^{-j/2}) collects, over multisets {r_i} of integers >= 3 with
sum (r_i - 2) = j, the products prod (lambda_r / r!)^{m_r} / m_r! at Hermite index
n = sum r_i (the formal expansion of exp(sum_r lambda_r (it)^r / r!) e^{-t^2/2}; He_n are
the probabilists' Hermite polynomials). Two terms (j <= 2):

    F(z) = Phi(z) - phi(z) [lambda_3/6 He_2(z) + lambda_4/24 He_3(z) + lambda_3^2/72 He_5(z)].

For i.i.d. summands with a non-lattice law satisfying Cramer's condition (Y has a density)
and finite moments of every order, the two-term expansion's error is O(M^{-3/2}) uniformly
in z (Petrov, Thm VI.4 with k = 4; Hall, Thm 2.3); the H1 sum differs from an i.i.d. sum in
one summand, which only changes the cumulants above (Petrov's non-identical version). The
constant is not explicit: the error is the third term (computed by
:func:`edgeworth_term`) plus O(M^{-2}); the tests use that.

**The approximate one-epoch curve.** The LR test rejects for large S: the vertices are
alpha(s) = Q(S > s) (the upper tail computed as Phi(-z) + phi(z) sum ..., where it lives)
and beta(s) = P(S <= s), both from the Edgeworth CDFs.

**Many epochs** (the paper's Corollary 5.3, derived here). Per epoch, the privacy loss
ell = log L = log(1 + (S - M)/M) has, under H0, mean -v/(2M) + O(M^{-2}) and variance
v/M + O(M^{-2}) with v = Var Y = e^{1/sigma^2} - 1 (delta method; under H1 the mean is
+v/(2M)). E epochs of dynamic shuffling add E independent copies, so for E = c_M^2 M with
c_M -> 0 the E-fold loss is asymptotically N(-/+ mu^2/2, mu^2) with

    mu = sqrt(E (e^{1/sigma^2} - 1) / M) = c_M sqrt(e^{1/sigma^2} - 1),

i.e. the E-fold curve tends to G_mu (mu-GDP, Dong, Roth, Su 2022) and to the diagonal as
c_M -> 0, with separation sup_a (1 - a - G_mu(a)) = 2 Phi(mu/2) - 1 ~ mu / sqrt(2 pi): of
order mu_1 sqrt(E) with the one-epoch mu_1 = sqrt((e^{1/sigma^2} - 1)/M) (Poisson
subsampling with q = 1/M over E M steps has the same limit, Bu et al. 2020's CLT).
"""

from __future__ import annotations

import functools
import math
from decimal import Decimal, localcontext

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import special

from audit.core.validation import check_choice, check_int, check_real
from audit.sampling import get_sampler
from audit.theory.curve import TradeOffCurve
from audit.theory.pld import achieved_curve, compose_dominated_pair

__all__ = [
    "edgeworth_cdf",
    "edgeworth_curve",
    "edgeworth_term",
    "lognormal_cumulants",
    "multi_epoch_curve",
    "multi_epoch_mu",
    "multi_epoch_separation",
    "sum_cumulants",
]

FloatArray = NDArray[np.float64]

HYPOTHESES: tuple[str, ...] = ("H0", "H1")
"""H0: all rounds null (Q = N(0, I_M)); H1: the canary in one round (P = MoG_M(1))."""


@functools.lru_cache(maxsize=64)
def lognormal_cumulants(sigma: float, order: int = 6) -> tuple[float, ...]:
    """(kappa_1, ..., kappa_order) of Y = exp(X/sigma - 1/(2 sigma^2)), X ~ N(0, 1).

    From E Y^k = w^{k(k-1)/2}, w = e^{1/sigma^2}, by the moment-cumulant recursion in
    60-digit decimal arithmetic (module docstring).
    """
    sigma = check_real("sigma", sigma, minimum=0.0, strict_minimum=True)
    order = check_int("order", order, minimum=1)
    with localcontext() as ctx:
        ctx.prec = 60
        w = (Decimal(1) / (Decimal(sigma) ** 2)).exp()
        moments = [Decimal(1)] + [w ** (k * (k - 1) // 2) for k in range(1, order + 1)]
        kappa = [Decimal(0)] * (order + 1)
        for n in range(1, order + 1):
            kappa[n] = moments[n] - sum(
                math.comb(n - 1, k - 1) * kappa[k] * moments[n - k] for k in range(1, n)
            )
        out = tuple(float(k) for k in kappa[1:])
    if not all(math.isfinite(k) for k in out):
        raise ValueError(
            f"sigma={sigma:g} is too small for the Edgeworth approximation: the cumulants of "
            f"order <= {order} of Y overflow a float"
        )
    return out


def sum_cumulants(sigma: float, rounds: int, hypothesis: str, order: int = 6) -> tuple[float, ...]:
    """(K_1, ..., K_order) of S = sum_j Y_j: M kappa_r (H0) or (M - 1 + w^r) kappa_r (H1)."""
    rounds = check_int("rounds", rounds, minimum=1)
    hypothesis = check_choice("hypothesis", hypothesis, HYPOTHESES)
    kappa = lognormal_cumulants(sigma, order)
    if hypothesis == "H0":
        return tuple(rounds * k for k in kappa)
    s2 = 1.0 / sigma**2
    return tuple((rounds - 1 + math.exp(r * s2)) * k for r, k in enumerate(kappa, start=1))


def _partitions(j: int, smallest: int = 1) -> list[list[int]]:
    """Multisets of positive integers (non-decreasing lists, parts >= smallest) summing to j."""
    if j == 0:
        return [[]]
    out: list[list[int]] = []
    for first in range(smallest, j + 1):
        out.extend([first, *rest] for rest in _partitions(j - first, first))
    return out


def _hermite(n: int, z: FloatArray) -> FloatArray:
    """Probabilists' Hermite polynomial He_n(z) (recursion He_{k+1} = z He_k - k He_{k-1})."""
    prev, cur = np.ones_like(z), z.copy()
    if n == 0:
        return prev
    for k in range(1, n):
        prev, cur = cur, z * cur - k * prev
    return cur


def edgeworth_term(z: ArrayLike, lambdas: dict[int, float], j: int) -> FloatArray:
    """The order-j correction to the CDF, -phi(z) sum_n c_{j,n} He_{n-1}(z) (module docstring).

    ``lambdas`` maps r >= 3 to the standardised cumulant lambda_r; order j needs r <= j + 2.
    """
    from scipy import stats

    z = np.asarray(z, dtype=float)
    coeffs: dict[int, float] = {}
    for parts in _partitions(j):  # each part p is one factor lambda_{p+2}
        c, n = 1.0, 0
        for p in set(parts):
            m = parts.count(p)
            r = p + 2
            c *= (lambdas[r] / math.factorial(r)) ** m / math.factorial(m)
            n += r * m
        coeffs[n] = coeffs.get(n, 0.0) + c
    total = sum(c * _hermite(n - 1, z) for n, c in coeffs.items())
    return -stats.norm.pdf(z) * total


def _standardised(cumulants: tuple[float, ...]) -> tuple[float, float, dict[int, float]]:
    mean, var = cumulants[0], cumulants[1]
    sd = math.sqrt(var)
    return mean, sd, {r: cumulants[r - 1] / sd**r for r in range(3, len(cumulants) + 1)}


def edgeworth_cdf(
    s: ArrayLike, sigma: float, rounds: int, hypothesis: str = "H0", *, terms: int = 2
) -> tuple[FloatArray, FloatArray]:
    """(P(S <= s), P(S > s)) under ``hypothesis`` from the ``terms``-term Edgeworth expansion.

    The upper tail is Phi(-z) minus the same corrections (computed where it lives). Values
    are not clipped: a truncated expansion may leave [0, 1] far in the tails.
    """
    terms = check_int("terms", terms, minimum=0)
    mean, sd, lambdas = _standardised(sum_cumulants(sigma, rounds, hypothesis, terms + 2))
    z = (np.asarray(s, dtype=float) - mean) / sd
    corr = sum((edgeworth_term(z, lambdas, j) for j in range(1, terms + 1)), np.zeros_like(z))
    return special.ndtr(z) + corr, special.ndtr(-z) - corr


def _curve_grid(sigma: float, rounds: int, size: int) -> FloatArray:
    m0, sd0, _ = _standardised(sum_cumulants(sigma, rounds, "H0", 2))
    m1, sd1, _ = _standardised(sum_cumulants(sigma, rounds, "H1", 2))
    return np.linspace(min(m0 - 10 * sd0, m1 - 10 * sd1), max(m0 + 10 * sd0, m1 + 10 * sd1), size)


def _edgeworth_cells(
    sigma: float, rounds: int, terms: int, size: int
) -> tuple[FloatArray, FloatArray]:
    """Cell masses (P, Q) of S: Q from the Edgeworth CDF under H0 on the grid cells (negative
    masses set to 0), P = Q size-biased, p_k = q_k s_k / M (the exact identity dP_S/dQ_S =
    s/M applied to the approximation), both renormalised."""
    s = _curve_grid(sigma, rounds, size)
    cdf, sf = edgeworth_cdf(s, sigma, rounds, "H0", terms=terms)
    mid = np.where(cdf[1:] < 0.5, np.diff(cdf), -np.diff(sf))
    q = np.maximum(mid, 0.0)
    centre = np.maximum((s[1:] + s[:-1]) / 2, 0.0)
    p = q * centre / rounds
    return p / p.sum(), q / q.sum()


@functools.lru_cache(maxsize=16)
def edgeworth_curve(
    sigma: float, rounds: int, epochs: int = 1, *, sampler: str = "dynamic_shuffle",
    terms: int = 2, size: int = 4001, discretisation: float = 1e-4,
) -> TradeOffCurve:
    """The Edgeworth approximation of the isolated pair's curve: kind ``approximation``.

    One epoch: vertices (Q(S > s), P(S <= s)) at ``size`` thresholds s (module docstring).
    Persistent shuffling: one epoch at sigma / sqrt(E). Dynamic shuffling, E > 1: the
    Edgeworth law of S under H0 on ``size`` cells and its size-biased twin under H1
    (:func:`_edgeworth_cells`), composed E times as a PLD
    (:func:`audit.theory.pld.compose_dominated_pair`).
    """
    sigma = check_real("sigma", sigma, minimum=0.0, strict_minimum=True)
    rounds = check_int("rounds", rounds, minimum=1)
    epochs = check_int("epochs", epochs, minimum=1)
    persistent = get_sampler(sampler).same_step_every_epoch
    eff = sigma / math.sqrt(epochs) if persistent else sigma
    what = f"{terms}-term Edgeworth expansion of the law of S, M = {rounds}"
    if persistent or epochs == 1:
        s = _curve_grid(eff, rounds, size)
        _, alpha = edgeworth_cdf(s, eff, rounds, "H0", terms=terms)
        beta, _ = edgeworth_cdf(s, eff, rounds, "H1", terms=terms)
        return TradeOffCurve(
            np.clip(alpha, 0.0, 1.0), np.clip(beta, 0.0, 1.0), sampler=sampler,
            threat_model="isolated", kind="approximation", short="Edgeworth",
            method=(f"{what}, sigma_eff = {eff:.6g}, {size} thresholds "
                    f"(approximation, error O(M^-3/2), not a bound)"),
        )
    p, q = _edgeworth_cells(sigma, rounds, terms, size)
    keep = (p > 0) & (q > 0)
    pld = compose_dominated_pair(p[keep], q[keep], epochs, discretisation=discretisation)
    return achieved_curve(
        pld, sampler=sampler, threat_model="isolated", kind="approximation",
        method=(f"{what}, sigma = {sigma:.6g}, {size} cells, E = {epochs}-fold PLD composition "
                f"(discretisation {discretisation:g}; approximation, not a bound)"),
    ).relabel(short="Edgeworth")


def multi_epoch_mu(sigma: float, rounds: int, epochs: int) -> float:
    """mu = sqrt(E (e^{1/sigma^2} - 1) / M): the E-fold curve tends to G_mu (Cor. 5.3)."""
    sigma = check_real("sigma", sigma, minimum=0.0, strict_minimum=True)
    rounds = check_int("rounds", rounds, minimum=1)
    epochs = check_int("epochs", epochs, minimum=1)
    return math.sqrt(epochs * math.expm1(1.0 / sigma**2) / rounds)


def multi_epoch_separation(sigma: float, rounds: int, epochs: int) -> float:
    """sup_a (1 - a - G_mu(a)) = 2 Phi(mu/2) - 1 at mu = :func:`multi_epoch_mu` (~ mu/sqrt(2
    pi))."""
    mu = multi_epoch_mu(sigma, rounds, epochs)
    return float(special.erf(mu / (2 * math.sqrt(2.0))))


def multi_epoch_curve(
    sigma: float, rounds: int, epochs: int, *, sampler: str = "dynamic_shuffle"
) -> TradeOffCurve:
    """G_mu, mu = :func:`multi_epoch_mu`: the E = c^2 M limit, kind ``approximation``."""
    mu = multi_epoch_mu(sigma, rounds, epochs)
    return TradeOffCurve.from_gdp(
        mu, sampler=sampler, threat_model="isolated", kind="approximation",
        method=(f"Gaussian limit E = c^2 M (Cor. 5.3), mu = sqrt(E (e^(1/sigma^2) - 1) / M) = "
                f"{mu:.4g}, M = {rounds}, E = {epochs} (approximation, not a bound)"),
    ).relabel(short="Gaussian limit")
