"""Reference values for audit.theory computed without audit.theory (issue 11, items 3 and 6).

Nothing here imports the code under test: the references come from dp_accounting's own
accountants and PLDs (Doroshenko et al., *Connect the Dots*, PETS 2022), from closed forms
evaluated with mpmath at 50 digits (Dong, Roth, Su, *Gaussian Differential Privacy*, Cor.
2.13), and from a numerical composition written here for the max-test pair of shuffled
batches (Chua et al., arXiv 2403.17673 and 2411.04205). tests/test_theory_tails.py,
tests/test_theory_crosscheck.py and bench/reference_check.py compare the theory's outputs
(``privacy_bounds``) with these values. Not collected by pytest (no ``test_`` prefix).

Conventions: a privacy profile delta(eps) is the hockey-stick divergence, maximised over
both directions of the pair; a trade-off function f(alpha) is the smallest FNR at FPR alpha.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import mpmath
import numpy as np
from dp_accounting import GaussianDpEvent, PoissonSampledDpEvent, SelfComposedDpEvent
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.pld.pld_privacy_accountant import PLDAccountant
from dp_accounting.privacy_accountant import NeighboringRelation
from dp_accounting.rdp import RdpAccountant
from numpy.typing import NDArray
from scipy import fft as sp_fft
from scipy import stats

FloatArray = NDArray[np.float64]

mpmath.mp.dps = 50

# --------------------------------------------------------------------------------------
# Gaussian DP in closed form, at 50 digits (mpmath), independent of audit's gdp functions
# --------------------------------------------------------------------------------------


def gdp_delta(eps: float, mu: float) -> float:
    """delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) (DRS Cor. 2.13), 50 digits."""
    e, m = mpmath.mpf(eps), mpmath.mpf(mu)
    return float(mpmath.ncdf(-e / m + m / 2) - mpmath.exp(e) * mpmath.ncdf(-e / m - m / 2))


def gdp_epsilon(delta: float, mu: float) -> float:
    """The eps >= 0 with gdp_delta(eps) = delta (bisection in mpmath to 1e-12 in eps)."""
    if gdp_delta(0.0, mu) <= delta:
        return 0.0
    lo, hi = 0.0, 1.0
    while gdp_delta(hi, mu) > delta:
        lo, hi = hi, 2 * hi
    while hi - lo > 1e-12 * max(1.0, hi):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if gdp_delta(mid, mu) > delta else (lo, mid)
    return hi


def gdp_tradeoff(alpha: float, mu: float) -> float:
    """G_mu(alpha) = Phi(Phi^{-1}(1 - alpha) - mu) (DRS Def. 2.7), 50 digits."""
    a = mpmath.mpf(alpha)
    if a <= 0:
        return 1.0
    # Phi^{-1}(1 - a) = -Phi^{-1}(a), by root finding on the mpmath normal CDF
    z = mpmath.findroot(lambda t: mpmath.ncdf(t) - a, float(stats.norm.ppf(float(a))))
    return float(mpmath.ncdf(-z - mpmath.mpf(mu)))


# --------------------------------------------------------------------------------------
# dp_accounting: Poisson subsampled Gaussian (pessimistic / optimistic PLD, RDP)
# --------------------------------------------------------------------------------------


def poisson_event(q: float, sigma: float, steps: int) -> SelfComposedDpEvent:
    """The DpEvent of T Poisson(q) subsampled Gaussian steps with noise multiplier sigma."""
    return SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(sigma)), steps)


@functools.lru_cache(maxsize=32)
def poisson_accountant(q: float, sigma: float, steps: int, d: float = 1e-4) -> PLDAccountant:
    """dp_accounting's PLDAccountant (pessimistic PLD) with the composed event, discretisation d."""
    acc = PLDAccountant(value_discretization_interval=d)
    acc.compose(poisson_event(q, sigma, steps))
    return acc


@functools.lru_cache(maxsize=32)
def poisson_pld(
    q: float, sigma: float, steps: int, d: float = 1e-4, pessimistic: bool = True
) -> pld_lib.PrivacyLossDistribution:
    """dp_accounting's PLD (pessimistic or optimistic rounding) of the composed mechanism."""
    pld = pld_lib.from_gaussian_mechanism(
        standard_deviation=sigma, sensitivity=1.0, pessimistic_estimate=pessimistic,
        value_discretization_interval=d, sampling_prob=q,
        use_connect_dots=pessimistic,  # optimistic: dp_accounting's privacy buckets
    )
    return pld.self_compose(steps) if steps > 1 else pld


@functools.lru_cache(maxsize=64)
def rdp_epsilon(q: float, sigma: float, steps: int, delta: float) -> float:
    """dp_accounting's RDP epsilon (a valid, looser upper bound)."""
    acc = RdpAccountant()
    acc.compose(poisson_event(q, sigma, steps))
    return float(acc.get_epsilon(delta))


@functools.lru_cache(maxsize=16)
def truncated_pld(
    n: int, q: float, max_batch_size: int, sigma: float, steps: int, d: float
) -> pld_lib.PrivacyLossDistribution:
    """dp_accounting's TruncatedSubsampledGaussian PLD (Ganesh 2025), replace-one, composed."""
    pld = pld_lib.from_truncated_subsampled_gaussian_mechanism(
        dataset_size=n, sampling_probability=q, truncated_batch_size=max_batch_size,
        noise_multiplier=sigma, value_discretization_interval=d,
        neighboring_relation=NeighboringRelation.REPLACE_ONE,
    )
    return pld.self_compose(steps) if steps > 1 else pld


# --------------------------------------------------------------------------------------
# A PLD's privacy profile by tail sums, and the trade-off curve its profile certifies
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TailProfile:
    """delta(eps) of one direction of a lattice PLD: inf_mass + S_P(eps) - e^eps S_Q(eps), with
    S_P(eps) = sum_{l_k > eps} p_k and S_Q(eps) = sum_{l_k > eps} p_k e^{-l_k} kept as tail
    sums (accumulated from the top, so a tail of 1e-30 keeps its digits)."""

    losses: FloatArray  # ascending
    tail_p: FloatArray  # tail_p[k] = sum_{j >= k} p_j
    tail_q: FloatArray  # tail_q[k] = sum_{j >= k} p_j e^{-l_j}
    inf_mass: float

    @classmethod
    def from_pmf(cls, pmf: pld_pmf.PLDPmf) -> TailProfile:
        dense = pmf.to_dense_pmf()
        probs = np.asarray(dense._probs, dtype=float)  # dp_accounting has no public accessor
        losses = (np.arange(len(probs)) + dense._lower_loss) * dense._discretization
        # dp_accounting's FFT compositions leave round-off of about +-1e-18 per atom, some
        # entries negative (their total -7.7e-14 for Poisson (0.01, 1, 1000)); they are kept,
        # so that the profile is dp_accounting's own get_delta_for_epsilon
        keep = probs != 0
        probs, losses = probs[keep], losses[keep]
        tail_p = np.cumsum(probs[::-1])[::-1]
        tail_q = np.cumsum((probs * np.exp(-losses))[::-1])[::-1]
        return cls(losses, tail_p, tail_q, float(dense._infinity_mass))

    def delta(self, eps: FloatArray) -> FloatArray:
        eps = np.asarray(eps, dtype=float)
        k = np.searchsorted(self.losses, eps, side="right")  # first loss > eps
        tp = np.append(self.tail_p, 0.0)[k]
        tq = np.append(self.tail_q, 0.0)[k]
        with np.errstate(over="ignore", invalid="ignore"):
            value = self.inf_mass + tp - np.exp(eps) * tq
        return np.maximum(np.nan_to_num(value, nan=0.0), 0.0)

    def epsilon(self, delta: float) -> float:
        """The smallest eps >= 0 with delta(eps) <= delta (inf if the infinity mass exceeds it);
        exact for the lattice law: on (l_i, l_{i+1}) delta = A - e^eps B, solved for eps."""
        if self.inf_mass > delta:
            return math.inf
        if self.delta(np.array([0.0]))[0] <= delta:
            return 0.0
        tail_p1 = np.append(self.tail_p[1:], 0.0)  # sums over losses > losses[i]
        tail_q1 = np.append(self.tail_q[1:], 0.0)
        with np.errstate(over="ignore", invalid="ignore"):
            at = self.inf_mass + tail_p1 - np.exp(self.losses) * tail_q1  # delta(losses[i])
        i = int(np.nonzero((at > delta) & (self.losses >= 0))[0][-1]) if np.any(
            (at > delta) & (self.losses >= 0)) else -1
        if i < 0:  # the root lies in [0, first positive loss)
            j = int(np.searchsorted(self.losses, 0.0, side="right"))
            return float(math.log((self.inf_mass + self.tail_p[j] - delta) / self.tail_q[j]))
        return float(math.log((self.inf_mass + tail_p1[i] - delta) / tail_q1[i]))


def pld_epsilon(profiles: list[TailProfile], delta: float) -> float:
    """eps(delta) of a PLD: the larger of its directions' (dp_accounting's convention)."""
    return max(p.epsilon(delta) for p in profiles)


def pld_profiles(pld: pld_lib.PrivacyLossDistribution) -> list[TailProfile]:
    """The tail profiles of both directions (one if the PLD is symmetric)."""
    pmfs = [pld._pmf_remove] if pld._symmetric else [pld._pmf_remove, pld._pmf_add]
    return [TailProfile.from_pmf(p) for p in pmfs]


def _candidate_eps(profiles: list[TailProfile]) -> FloatArray:
    """Every eps >= 0 where sup_eps of a supporting line of max_i delta_i can be attained.

    On an interval between consecutive lattice losses each delta_i(eps) = A_i - e^eps B_i with
    A_i, B_i fixed, so each line 1 - delta_i(eps) - e^eps a (and e^-eps (1 - delta_i - a)) is
    monotone in eps there; the line of max_i delta_i = min of such lines can peak only at a
    lattice loss, at 0, or where two directions cross (e^eps = (A_1 - A_2) / (B_1 - B_2)).
    """
    grid = np.union1d(np.concatenate([p.losses for p in profiles]), [0.0])
    grid = grid[grid >= 0.0]
    points = [grid]
    if len(profiles) == 2:
        coef = []
        for p in profiles:
            j = np.searchsorted(p.losses, grid, side="right")
            coef.append((p.inf_mass + np.append(p.tail_p, 0.0)[j], np.append(p.tail_q, 0.0)[j]))
        (a1, b1), (a2, b2) = coef
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = (a1 - a2) / (b1 - b2)
            cross = np.log(np.where(ratio > 0, ratio, np.nan))
        nxt = np.append(grid[1:], np.inf)
        inside = (cross > grid) & (cross < nxt)
        points.append(cross[inside])
    return np.unique(np.concatenate(points))


def certified_gap(
    profiles: list[TailProfile], alpha: FloatArray, extra: float = 0.0
) -> FloatArray:
    """1 - F(alpha), F the trade-off curve that the profile delta(eps) = max_i delta_i(eps) +
    extra (1 + e^eps), eps >= 0, certifies (DRS Prop. 2.12):

        F(a) = max(0, sup_eps 1 - delta(eps) - e^eps a, sup_eps e^-eps (1 - delta(eps) - a)).

    ``extra`` = T E Pr[Bin(n, q) > B] gives the truncated-Poisson coupling profile (Chua et
    al. 2024, Thm 3.3). The suprema are exact: taken over :func:`_candidate_eps`. Returned as
    1 - F = min over eps of delta(eps) + e^eps a (and of 1 - e^-eps (1 - delta - a)), so a
    tail of 1e-30 keeps its digits.
    """
    eps = _candidate_eps(profiles)
    delta = np.max([p.delta(eps) for p in profiles], axis=0) + extra * (1.0 + np.exp(eps))
    out = np.empty(len(alpha))
    for i, a in enumerate(np.asarray(alpha, dtype=float)):
        with np.errstate(over="ignore"):
            first = np.min(delta + np.exp(eps) * a)
            second = np.min(1.0 - np.exp(-eps) * (1.0 - delta - a))
        out[i] = min(first, second, 1.0)
    return out


# --------------------------------------------------------------------------------------
# The max-test pair of shuffled batches (Chua et al. 2024), composed by our own FFT
# --------------------------------------------------------------------------------------

MAX_TEST_MEANS: dict[str, tuple[float, float]] = {"adversarial": (2.0, 1.0), "isolated": (1.0, 0.0)}
"""Mean of the canary's step under P and under Q; every other step has mean 0."""


def _log_max_cdf(x: FloatArray, mean: float, sigma: float, steps: int) -> FloatArray:
    """log Pr[max_t y_t <= x], one of ``steps`` coordinates N(mean, sigma^2), the rest N(0,
    sigma^2)."""
    return stats.norm.logcdf((x - mean) / sigma) + (steps - 1) * stats.norm.logcdf(x / sigma)


def _log_max_pdf(x: FloatArray, mean: float, sigma: float, steps: int) -> FloatArray:
    """log of the density of the max: d/dx [Phi((x-m)/s) Phi(x/s)^(T-1)]."""
    a = stats.norm.logpdf((x - mean) / sigma) + (steps - 1) * stats.norm.logcdf(x / sigma)
    if steps == 1:
        return a - math.log(sigma)
    b = (math.log(steps - 1) + stats.norm.logcdf((x - mean) / sigma)
         + (steps - 2) * stats.norm.logcdf(x / sigma) + stats.norm.logpdf(x / sigma))
    return np.logaddexp(a, b) - math.log(sigma)


def _cell_masses(edges: FloatArray, mean: float, sigma: float, steps: int) -> FloatArray:
    """Masses of (-inf, e_0], (e_0, e_1], ..., (e_last, inf) under the law of the max, each
    from the CDF below the median and from the survival function above (no cancellation)."""
    log_cdf = _log_max_cdf(edges, mean, sigma, steps)
    cdf = np.exp(log_cdf)
    sf = -np.expm1(log_cdf)
    inner = np.where(cdf[1:] < 0.5, np.diff(cdf), -np.diff(sf))
    return np.maximum(np.concatenate(([cdf[0]], inner, [sf[-1]])), 0.0)


@dataclass(frozen=True)
class ComposedLaw:
    """The top part (losses > 0) of a composed lattice loss law, as tail sums from the top:
    delta(eps) = inf_mass + sum_{l > eps} w (1 - e^{eps - l}) for eps >= 0, and its inverse."""

    losses: FloatArray  # ascending lattice losses > 0
    tail_p: FloatArray  # sum of weights at losses >= losses[i]
    tail_q: FloatArray  # sum of weights e^{-l} at losses >= losses[i]
    inf_mass: float

    def delta(self, eps: float) -> float:
        j = int(np.searchsorted(self.losses, eps, side="right"))
        if j >= len(self.losses):
            return self.inf_mass
        return self.inf_mass + max(float(self.tail_p[j] - math.exp(eps) * self.tail_q[j]), 0.0)

    def epsilon(self, delta: float) -> float:
        """The smallest eps >= 0 with delta(eps) <= delta (exact for the lattice law)."""
        if self.inf_mass > delta:
            return math.inf
        at = self.inf_mass + self.tail_p - np.exp(self.losses) * np.append(self.tail_q[1:], 0.0)
        # at[i] = delta(losses[i]) (losses strictly above losses[i] count)
        above = np.nonzero(at > delta)[0]
        if above.size == 0:
            return 0.0 if self.delta(0.0) <= delta else float(
                math.log((self.inf_mass + self.tail_p[0] - delta) / self.tail_q[0]))
        i = int(above[-1])
        if i + 1 >= len(self.losses):
            return math.inf
        return float(math.log((self.inf_mass + self.tail_p[i + 1] - delta) / self.tail_q[i + 1]))


def _compose(
    losses: FloatArray, weights: FloatArray, inf_mass: float, times: int, d: float, rounding: str
) -> ComposedLaw:
    """The ``times``-fold composition of a loss law (weights under the upper distribution),
    each loss rounded to the lattice {k d} ``up`` or ``down``, by FFT (numpy), top part kept."""
    k = (np.ceil(losses / d) if rounding == "up" else np.floor(losses / d)).astype(np.int64)
    k0 = int(k.min())
    h = np.bincount(k - k0, weights=weights)
    size = (len(h) - 1) * times + 1
    n_fft = sp_fft.next_fast_len(size, real=True)
    law = sp_fft.irfft(sp_fft.rfft(h, n_fft) ** times, n_fft)[:size]
    grid = (np.arange(size) + times * k0) * d
    top = grid > 0
    grid, law = grid[top], law[top]
    tail_p = np.cumsum(law[::-1])[::-1]
    tail_q = np.cumsum((law * np.exp(-grid))[::-1])[::-1]
    return ComposedLaw(grid, tail_p, tail_q, 1.0 - (1.0 - inf_mass) ** times)


@dataclass(frozen=True)
class MaxPairBracket:
    """A bracket of the E-fold composed max-test pair: composed laws of both directions,
    losses rounded down (``lo``: delta and eps can only be below the pair's) and up (``hi``)."""

    lo: tuple[ComposedLaw, ...]
    hi: tuple[ComposedLaw, ...]

    def delta(self, eps: float) -> tuple[float, float]:
        return (max(law.delta(eps) for law in self.lo), max(law.delta(eps) for law in self.hi))

    def epsilon(self, delta: float) -> tuple[float, float]:
        return (max(law.epsilon(delta) for law in self.lo),
                max(law.epsilon(delta) for law in self.hi))


@functools.lru_cache(maxsize=8)
def max_pair_bracket(
    sigma: float, steps: int, epochs: int, threat_model: str,
    cells: int = 2_000_001, d: float = 1e-5,
) -> MaxPairBracket:
    """Bracket delta(eps) and eps(delta) (eps >= 0) of the per-epoch max pair (P: canary mean
    m_p; Q: mean m_q; the other T - 1 steps N(0, sigma^2)) composed ``epochs`` times, both
    directions.

    Lower end: the pair of the max's masses on ``cells`` fine x-cells (a post-processing of
    the max, so dominated by it), each cell's loss log(P/Q) rounded *down* to the lattice
    {k d}: every step's loss only falls, so the composed delta can only fall.
    Upper end: each x in a cell is given the largest pointwise loss log f_P(x)/f_Q(x) over the
    cell (the loss is checked to be monotone in x, so an edge value), rounded *up*, and the
    mass outside the x-range goes to loss +inf: every step's loss only rises, so the composed
    delta = E_P[(1 - e^{eps - sum l})_+] can only rise. The bracket's width is the measure of
    its accuracy (about 1e-4 in eps at the defaults for E = 5).
    """
    m_p, m_q = MAX_TEST_MEANS[threat_model]
    lo_x = sigma * stats.norm.ppf(1e-40 ** (1.0 / steps)) + min(m_q, 0.0)
    hi_x = max(m_p, m_q) + sigma * stats.norm.isf(1e-30 / steps)
    edges = np.linspace(lo_x, hi_x, cells)
    pl = _log_max_pdf(edges, m_p, sigma, steps) - _log_max_pdf(edges, m_q, sigma, steps)
    if not np.all(np.diff(pl) >= -1e-12):
        raise AssertionError("the max pair's likelihood ratio is not monotone on the grid")
    mp = _cell_masses(edges, m_p, sigma, steps)
    mq = _cell_masses(edges, m_q, sigma, steps)
    ok = (mp > 0) & (mq > 0)
    cell_loss = np.log(mp[ok]) - np.log(mq[ok])
    lo = (_compose(cell_loss, mp[ok], 0.0, epochs, d, "down"),  # remove: P vs Q
          _compose(-cell_loss, mq[ok], 0.0, epochs, d, "down"))  # add: Q vs P
    # cell i is (edges[i-1], edges[i]] (cell 0 = (-inf, e_0], last = (e_last, inf)); the loss
    # rises with x, so on cell i it is at most pl[i] (remove) and -l at most -pl[i-1] (add);
    # the unbounded end cells go to +inf
    hi = (_compose(pl, mp[:-1], float(mp[-1]), epochs, d, "up"),
          _compose(-pl, mq[1:], float(mq[0]), epochs, d, "up"))
    return MaxPairBracket(lo, hi)


@functools.lru_cache(maxsize=16)
def _threshold_tails(sigma: float, steps: int, threat_model: str) -> tuple[FloatArray, FloatArray]:
    m_p, m_q = MAX_TEST_MEANS[threat_model]
    c = np.linspace(m_q - 2 * sigma, max(m_p, m_q) + sigma * stats.norm.isf(1e-18 / steps),
                    400_001)
    return (-np.expm1(_log_max_cdf(c, m_p, sigma, steps)),
            -np.expm1(_log_max_cdf(c, m_q, sigma, steps)))


def max_test_threshold_delta(eps: float, sigma: float, steps: int, threat_model: str) -> float:
    """sup_C (Pr_P[max > C] - e^eps Pr_Q[max > C]) over 4e5 thresholds C (one epoch).

    Each threshold is a test of the pair, so this is achieved: a lower end for the one-epoch
    max pair's delta (and for the mechanism's).
    """
    sf_p, sf_q = _threshold_tails(sigma, steps, threat_model)
    return float(max(np.max(sf_p - math.exp(eps) * sf_q), 0.0))


@functools.lru_cache(maxsize=16)
def _max_densities(sigma: float, steps: int, threat_model: str) -> tuple[FloatArray, ...]:
    m_p, m_q = MAX_TEST_MEANS[threat_model]
    x = np.linspace(m_q - 4 - 6 * sigma, max(m_p, m_q) + 12 * sigma, 400_001)
    return x, np.exp(_log_max_pdf(x, m_p, sigma, steps)), np.exp(_log_max_pdf(x, m_q, sigma, steps))


def max_pair_one_epoch_delta(eps: float, sigma: float, steps: int, threat_model: str) -> float:
    """delta(eps) of the one-epoch max pair, the integral of (f_P - e^eps f_Q)_+ (both
    directions), by the trapezoid rule on 4e5 points (relative error about 1e-9 here): the
    most any test of the max can achieve."""
    x, fp, fq = _max_densities(sigma, steps, threat_model)
    e = math.exp(eps)
    return float(max(np.trapezoid(np.maximum(fp - e * fq, 0.0), x),
                     np.trapezoid(np.maximum(fq - e * fp, 0.0), x)))
