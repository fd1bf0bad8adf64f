"""The random-allocation pair: sound numerical bounds for multi-epoch isolated shuffling.

One epoch of M rounds; the canary is in one uniformly random round (random allocation of 1
of M; Feldman & Shenfeld, *Privacy amplification by random allocation*, arXiv 2502.08202):
P = (1/M) sum_j N(e_j, sigma^2 I_M) vs Q = N(0, sigma^2 I_M). With X_j = y_j / sigma ~ N(0, 1)
under Q and s = 1 / sigma the likelihood ratio is

    dP/dQ = S / M,   S = sum_j Y_j,   Y_j = exp(s X_j - s^2 / 2),

and under P the canary's round has the size-biased law (log Y~ ~ N(+s^2/2, s^2)). This is
the isolated pair of one epoch of shuffled DP-SGD (van Dijk & Ertan, arXiv 2605.06259) and
the per-epoch pair of balls-and-bins sampling (Chua et al., arXiv 2412.16802). Dynamic
shuffling and balls-and-bins compose it E times; persistent shuffling is one epoch at
sigma / sqrt(E).

**The lattice statistic.** Z_j = min(Y_j, c) rounded to the nearest multiple of h,
Zh_j = h round(Z_j / h), and W = sum_j Zh_j taken modulo n h (a window of n lattice cells
starting at W_lo): a function of the observation. Its laws are computed exactly (up to
floating point): under Q the M-fold FFT power of Zh's lattice law; under P the canary's
cell law P(Zh~ = k h) = E_Q[Y; Zh = k h] (lognormal partial moments in closed form) times
the (M - 1)-fold power. (Not the size-biased law of W: that identity fails after rounding.)

**upper** (a guarantee; dominating pair per direction, composed with dp_accounting):

- remove (P vs Q), loss log(S / M) under P: on the event G (no Y_j > c, the Hoeffding
  event below, W inside the window), S = sum Z_j <= W + slack_rem with
  slack_rem = h/2 + (M - 1)(mu_D + e_mu) + h sqrt((M - 1) ln(1/tau_H) / 2), where
  D_j = Z_j - Zh_j in [-h/2, h/2] has mean mu_D (computed; e_mu bounds its float error) and
  Hoeffding gives P(sum_{j>=2} D_j > (M-1) mu_D + t) <= tau_H. So
  P(loss > t) <= P(log((W + slack_rem)/M) > t) + tau_rem for every t, with
  tau_rem = P_P(some Y > c) + tau_H + P(W outside window) + e_num. The law of
  log((W + slack_rem)/M) rounded *up* onto the PLD lattice {k d}, with mass tau_rem moved
  from its bottom to +infinity (and the top mass above a cut of 1e-12 moved to +infinity),
  stochastically dominates the true loss, so its hockey-stick divergences dominate;
- add (Q vs P), loss log(M / S) under Q: S >= sum Z_j >= W - slack_add on the Hoeffding
  event, slack_add = h sqrt(M ln(1/tau_H) / 2) - M (mu_D - e_mu); losses rounded up, W <=
  slack_add to +infinity, tau_add = tau_H + P(W outside window) + e_num moved likewise.

Error terms (stated in ``method``): the slacks (as loss, slack/M per epoch: about
h sqrt(ln(1/tau_H) / (2M))), the PLD rounding (at most d per epoch), tau per epoch
(composed: at most E tau in delta); the window tails are Chernoff bounds with the exact
MGF of Zh (the upper one after splitting off the terms above a level b, see ``_window``);
e_num bounds floating point in L1: M times the cell-mass error (a Hermite series on narrow
cells, accurate tail differences elsewhere: about 1e-15) plus the FFT error (componentwise
|dF| <= gamma = 10 u log2 n for a unit-mass input, then |d(F^M)| <= M gamma |F|^{M-1},
Parseval: e_fft <= M gamma sqrt(n max law) + gamma sqrt(n) ||law||_2, doubled). Negative
FFT values are clipped to 0.

**lower** (achieved): the pair (law of W under P, under Q) is a post-processing of the
true pair, so composing it E times with
:func:`audit.theory.pld.compose_dominated_pair` gives a curve the true pair attains up to
e_num (cells whose computed mass is below 1e3 times the FFT noise are dropped from P and
Q, which can only lower the pair's divergences).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray
from scipy import fft, special

from audit.core.validation import check_choice, check_int, check_real
from audit.sampling import get_sampler
from audit.theory.curve import TradeOffCurve
from audit.theory.pld import ComposedPair, achieved_curve, compose_dominated_pair, pld_curve

if TYPE_CHECKING:  # dp_accounting imported on use: fast start (docs/design.md §2.7)
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

__all__ = [
    "AllocationLattice",
    "allocation_lattice",
    "random_allocation_curves",
    "random_allocation_plds",
]

FloatArray = NDArray[np.float64]

RA_CANARY_LAW = "uniform_step_per_epoch"
"""The canary law (:attr:`audit.sampling.Sampler.canary_law`) whose isolated pair is the
random-allocation pair: one uniformly random step per epoch (the two shuffles and
balls-and-bins); one epoch at sigma/sqrt(E) where the step repeats every epoch
(:attr:`audit.sampling.Sampler.same_step_every_epoch`: persistent shuffling)."""

TAU_CAP = 1e-11
"""Budget for P(some Y_j > c) under P (fixes the cap c)."""
TAU_HOEFFDING = 1e-11
"""Failure probability of each Hoeffding bound on the rounding errors."""
TAU_WINDOW = 1e-11
"""Budget for each Chernoff tail of W outside the window."""
TOP_CUT = 1e-12
"""Mass at the top of a pessimistic PMF moved to +infinity to keep its range small."""
MAX_CELLS = 2**22
"""Largest FFT window (cells): about 10 s per curve pair on one core."""
MAX_SLACK = 0.05
"""Largest per-epoch loss slack accepted (else ValueError: the lattice would be too coarse)."""
_U = np.finfo(float).eps / 2


@dataclass(frozen=True)
class AllocationLattice:
    """Laws of W = sum_j h round(min(Y_j, c)/h) mod n h under P and Q (module docstring).

    Window cell i is W = (start + i) h. ``tau_*`` and ``numerical`` are the error terms.
    """

    sigma: float
    rounds: int
    h: float
    cap: float
    start: int
    p: FloatArray
    q: FloatArray
    slack_remove: float
    slack_add: float
    tau_cap: float
    tau_window: float
    tau_hoeffding: float
    numerical: float
    noise_floor: float

    @property
    def values(self) -> FloatArray:
        """W at each window cell."""
        return np.asarray((self.start + np.arange(len(self.q))) * self.h, dtype=np.float64)

    @property
    def tau_remove(self) -> float:
        return self.tau_cap + self.tau_hoeffding + self.tau_window + self.numerical

    @property
    def tau_add(self) -> float:
        return self.tau_hoeffding + self.tau_window + self.numerical


def _cell_masses(z: FloatArray, shift: float) -> tuple[FloatArray, float]:
    """Masses of the cells (-inf, z_0), [z_0, z_1), ..., [z_last, inf) under N(shift, 1), and a
    bound on their L1 floating-point error.

    The edges are the same floats for every shift, so the P and Q laws are those of one
    statistic. Narrow cells ((|m| + 3) t <= 0.2, midpoint m, width t = b - a exact by
    Sterbenz) use the series int_{-t/2}^{t/2} phi(m + x) dx
    = phi(m) sum_{k even} He_k(m) t^{k+1} / (2^k (k + 1)!) to k = 6 (relative error a few u;
    the remainder is bounded by twice the k = 8 term with |He_8(m)| <= (|m| + 4)^8); the
    others the difference of the accurate tail (cdf left of 0, sf right of it), whose error is
    a few u times the smaller tail at each edge plus phi at the edge times the rounding of
    z - shift. Cancellation in Phi(b) - Phi(a) over ~1e6 narrow cells would otherwise cost
    ~1e-12 in L1, which the M-fold convolution multiplies by M.
    """
    w = z - shift
    cdf = special.ndtr(np.minimum(w, 0.0))  # accurate where w <= 0
    sf = special.ndtr(-np.maximum(w, 0.0))  # accurate where w >= 0
    small = np.where(w <= 0, cdf, sf)  # the accurate smaller tail at each edge
    left_small = np.concatenate(([0.0], small))
    right_small = np.concatenate((small, [0.0]))
    left_w = np.concatenate(([-np.inf], w))
    right_w = np.concatenate((w, [np.inf]))
    right_tail = left_w >= 0  # both edges right of 0: sf(a) - sf(b)
    left_tail = right_w <= 0  # both left: cdf(b) - cdf(a)
    diff = np.where(
        right_tail, left_small - right_small,
        np.where(left_tail, right_small - left_small, 1.0 - left_small - right_small),
    )
    a = np.concatenate(([-np.inf], z))
    b = np.concatenate((z, [np.inf]))
    finite = np.isfinite(a) & np.isfinite(b)
    t = np.where(finite, b - a, np.inf)
    mid = np.where(finite, (a + b) / 2 - shift, 0.0)
    narrow = finite & ((np.abs(mid) + 3.0) * t <= 0.2)
    m2, t2 = mid * mid, t * t
    he2, he4, he6 = m2 - 1, m2 * m2 - 6 * m2 + 3, m2 * m2 * m2 - 15 * m2 * m2 + 45 * m2 - 15
    with np.errstate(invalid="ignore", over="ignore"):
        phi = np.exp(-m2 / 2) / math.sqrt(2 * math.pi)
        series = phi * t * (1 + t2 * (he2 / 24 + t2 * (he4 / 1920 + t2 * he6 / 322560)))
        remainder = 2 * phi * (np.abs(mid) + 4) ** 8 * t**9 / (256 * 362880.0)
    mass = np.maximum(np.where(narrow, series, diff), 0.0)
    edge_phi = np.exp(-np.minimum(w * w, 1400.0) / 2) / math.sqrt(2 * math.pi)
    edge_err = 8 * _U * (small + edge_phi * (np.abs(z) + abs(shift)))
    diff_err = (np.concatenate(([0.0], edge_err)) + np.concatenate((edge_err, [0.0]))
                + 2 * _U * mass)
    error = float(np.where(narrow, 8 * _U * mass + remainder, diff_err).sum())
    return mass, error


def _cap(sigma: float, rounds: int) -> float:
    """Smallest c with P(Y~ > c) + (M - 1) P(Y > c) <= TAU_CAP (Y~ the size-biased law)."""
    from scipy import optimize  # imported on use: fast start (docs/design.md §2.7)

    s = 1.0 / sigma

    def excess(log_c: float) -> float:
        t = (special.log_ndtr(-(log_c - s * s / 2) / s), special.log_ndtr(-(log_c + s * s / 2) / s))
        total = t[0] if rounds == 1 else np.logaddexp(t[0], math.log(rounds - 1) + t[1])
        return float(total) - math.log(TAU_CAP)

    return math.exp(optimize.brentq(excess, -s * s, 40 * s + 40.0, xtol=1e-10))


def _log_mgf(values: FloatArray, mass: FloatArray, lams: FloatArray) -> FloatArray:
    """log E exp(lam Z) for Z on ``values`` with ``mass``, for each lam (exact sums)."""
    keep = mass > 0
    v, logm = values[keep], np.log(mass[keep])
    return np.array([special.logsumexp(logm + lam * v) for lam in lams])


def _window(values: FloatArray, q: FloatArray, pt: FloatArray, rounds: int) -> tuple[float, float]:
    """(x_lo, x_hi) with P_Q(W < x_lo) <= TAU_WINDOW and P_P(W > x_hi) <= TAU_WINDOW (P's W is
    stochastically larger than Q's, so these bound both laws).

    Lower tail: Chernoff with the exact MGF of Zh. Upper tail: a plain Chernoff bound is
    loose for capped lognormals (one jump of size c is cheap in it), so the cells above a
    level b are "big": with N the number of big terms, W <= sum_j Zh_j 1[small] + N max Zh,
    P(N >= 2) <= (sum_j P(big_j))^2 / 2 <= TAU_WINDOW / 2 fixes b, and on N <= 1,
    P(sum of the small parts > x - max Zh) <= TAU_WINDOW / 2 by Chernoff.
    """
    mean = float(np.dot(values, q))
    var = max(float(np.dot((values - mean) ** 2, q)), 1e-300)
    # the Chernoff bound holds for every lam: scan a grid around the Gaussian optimum
    lam0 = math.sqrt(-2 * math.log(TAU_WINDOW) / (rounds * var))
    grid = lam0 * np.geomspace(1 / 30, 30, 25)
    lq = _log_mgf(values, q, -grid)
    x_lo = float(np.max((rounds * lq - math.log(TAU_WINDOW)) / -grid))
    # big cells: the smallest top block whose union probability (P: the canary's cell law
    # once, Q's M - 1 times) is at most sqrt(TAU_WINDOW)
    tail_q = np.cumsum(q[::-1])[::-1]
    tail_p = np.cumsum(pt[::-1])[::-1]
    union = tail_p + (rounds - 1) * tail_q
    first_big = int(np.argmax(union <= math.sqrt(TAU_WINDOW)))
    if union[first_big] > math.sqrt(TAU_WINDOW):
        first_big = len(q)
    q_small = q.copy()
    p_small = pt.copy()
    q_small[0] += q_small[first_big:].sum()
    p_small[0] += p_small[first_big:].sum()
    q_small[first_big:] = 0.0
    p_small[first_big:] = 0.0
    pos = grid
    lq = _log_mgf(values, q_small, pos)
    lp = _log_mgf(values, p_small, pos)
    log_half = math.log(TAU_WINDOW / 2)
    jump = float(values[-1]) if first_big < len(q) else 0.0
    x_hi = float(np.min((lp + (rounds - 1) * lq - log_half) / pos)) + jump
    return max(x_lo, 0.0), x_hi


def _default_discretisation(sigma: float, rounds: int, compositions: int) -> float:
    sd1 = math.sqrt(math.expm1(1.0 / sigma**2) / rounds)
    return float(min(1e-2, max(1e-6, 0.02 * sd1 / math.sqrt(compositions))))


def _default_h(rounds: int, discretisation: float) -> float:
    return 0.5 * discretisation / math.sqrt(math.log(1.0 / TAU_HOEFFDING) / (2.0 * rounds))


@functools.lru_cache(maxsize=8)
def allocation_lattice(
    sigma: float, rounds: int, h: float, max_cells: int = MAX_CELLS
) -> AllocationLattice:
    """Laws of the lattice statistic W under P and Q, with the error terms (module docstring).

    ``h`` is widened (never narrowed) until the window fits in ``max_cells``; raises
    ValueError when the per-epoch loss slack would exceed ``MAX_SLACK``.
    """
    sigma = check_real("sigma", sigma, minimum=0.0, strict_minimum=True)
    m = check_int("rounds", rounds, minimum=1)
    h = check_real("h", h, minimum=0.0, strict_minimum=True)
    s = 1.0 / sigma
    cap = _cap(sigma, m)
    tau_cap = TAU_CAP
    log_h = math.log(1.0 / TAU_HOEFFDING)
    h = max(h, 1.01 * cap / max_cells)
    if h * (0.5 + math.sqrt(max(m - 1, 1) * log_h / 2)) / m > MAX_SLACK:
        raise _too_coarse(sigma, m, h, max_cells)
    while True:
        top = max(1, round(cap / h))
        k = np.arange(top + 1)
        edges = (k[1:] - 0.5) * h  # cell k = [edge_k, edge_{k+1}); cell top = [edge_top, inf)
        z = (np.log(edges) + s * s / 2) / s  # X-edges: Y = exp(s X - s^2/2)
        q, err_q = _cell_masses(z, 0.0)  # X ~ N(0, 1) under Q
        pt, err_p = _cell_masses(z, s)  # the canary's X ~ N(s, 1) under P (size bias)
        values = np.asarray(k * h, dtype=np.float64)
        x_lo, x_hi = _window(values, q, pt, m)
        start = math.floor(x_lo / h)
        cells = math.ceil(x_hi / h) - start + 1
        if cells <= max_cells:
            break
        h *= 1.1 * cells / max_cells
        if h * (0.5 + math.sqrt(max(m - 1, 1) * log_h / 2)) / m > MAX_SLACK:
            raise _too_coarse(sigma, m, h, max_cells)
    n = fft.next_fast_len(cells, real=True)
    # mean rounding error mu_D = E min(Y, c) - E Zh, with a float-error margin
    e_trunc = special.ndtr(-(math.log(cap) - s * s / 2) / s) - cap * special.ndtr(
        -(math.log(cap) + s * s / 2) / s
    )
    mean_z = float(np.dot(values, q))
    mu_d = (1.0 - e_trunc) - mean_z
    e_mu = 8 * _U + cap * err_q + (math.log2(top + 1) + 4) * _U * mean_z
    # the float X-edges move each Y-edge by a few u relative: |D_j| <= h/2 + e_edge
    e_edge = 8 * _U * cap
    slack_rem = (h / 2 + (m - 1) * (mu_d + e_mu) + h * math.sqrt((m - 1) * log_h / 2)
                 + m * e_edge)
    slack_add = h * math.sqrt(m * log_h / 2) - m * (mu_d - e_mu) + m * e_edge
    if max(slack_rem, slack_add) / m > MAX_SLACK:
        raise _too_coarse(sigma, m, h, max_cells)
    fq = fft.rfft(np.bincount(k % n, weights=q, minlength=n), n)
    fp = fft.rfft(np.bincount(k % n, weights=pt, minlength=n), n)
    power = fq ** (m - 1)
    law_q = fft.irfft(power * fq, n)
    law_p = fft.irfft(power * fp, n)
    index = (start + np.arange(cells)) % n
    law_q, law_p = law_q[index], law_p[index]
    gamma = 10 * _U * math.log2(n)
    e_fft = 2 * (
        m * gamma * math.sqrt(n * max(law_q.max(), law_p.max()))
        + (gamma + 4 * _U * math.log2(m + 1)) * math.sqrt(n) * max(
            float(np.linalg.norm(law_q)), float(np.linalg.norm(law_p))
        )
    )
    numerical = e_fft + m * max(err_q, err_p)
    noise = max(float(-law_q.min()), float(-law_p.min()), gamma * 1e-3 / n, 0.0)
    return AllocationLattice(
        sigma=sigma, rounds=m, h=h, cap=cap, start=start,
        p=np.maximum(law_p, 0.0), q=np.maximum(law_q, 0.0),
        slack_remove=slack_rem, slack_add=slack_add, tau_cap=tau_cap,
        tau_window=2 * TAU_WINDOW, tau_hoeffding=TAU_HOEFFDING, numerical=numerical,
        noise_floor=noise,
    )


def _too_coarse(sigma: float, rounds: int, h: float, max_cells: int) -> ValueError:
    return ValueError(
        f"sigma={sigma:.4g}, rounds={rounds}: the random-allocation lattice would need spacing "
        f"h = {h:.3g} (window of at most {max_cells} cells), a per-epoch loss slack above "
        f"{MAX_SLACK}; use the other bounds"
    )


def _pessimistic_pmf(
    loss: FloatArray, mass: FloatArray, tau: float, d: float
) -> tuple[dict[int, float], float]:
    """Round finite losses up onto {k d}; move ``tau`` from the bottom and the top TOP_CUT
    to +infinity. Returns ({k: mass}, infinity mass)."""
    finite = np.isfinite(loss) & (mass > 0)
    inf_mass = float(mass[~np.isfinite(loss)].sum())
    idx = np.ceil(loss[finite] / d * (1 + 1e-12) + 1e-9).astype(np.int64)
    keys, inverse = np.unique(idx, return_inverse=True)
    masses = np.bincount(inverse, weights=mass[finite])
    below = np.cumsum(masses)
    drop = below <= tau  # whole bins at the bottom
    first = int(drop.sum())
    if first < len(masses):
        masses[first] -= tau - (below[first - 1] if first else 0.0)
    masses[:first] = 0.0
    above = np.cumsum(masses[::-1])[::-1]
    cut = above <= TOP_CUT
    inf_mass += tau + float(masses[cut].sum())
    masses[cut] = 0.0
    keep = masses > 0
    return dict(zip(keys[keep].tolist(), masses[keep].tolist(), strict=True)), min(inf_mass, 1.0)


@dataclass(frozen=True)
class _Plan:
    sigma: float
    compositions: int
    d: float
    h: float


def _plan(
    sigma: float, rounds: int, epochs: int, sampler: str, discretisation: float | None
) -> _Plan:
    persistent = get_sampler(sampler).same_step_every_epoch
    eff = sigma / math.sqrt(epochs) if persistent else sigma
    comps = 1 if persistent else epochs
    if discretisation is None:
        discretisation = _default_discretisation(eff, rounds, comps)
    d = float(discretisation)
    return _Plan(eff, comps, float(d), _default_h(rounds, float(d)))


@functools.lru_cache(maxsize=16)
def random_allocation_plds(
    sigma: float, rounds: int, epochs: int = 1, *, sampler: str = "dynamic_shuffle",
    discretisation: float | None = None, max_cells: int = MAX_CELLS,
) -> tuple[pld_lib.PrivacyLossDistribution, ComposedPair, str]:
    """(pessimistic PLD, composed dominated pair, error statement), both composed."""
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    plan = _plan(sigma, rounds, epochs, sampler, discretisation)
    lat = allocation_lattice(plan.sigma, rounds, plan.h, max_cells)
    d, m = plan.d, rounds
    w = lat.values
    with np.errstate(divide="ignore"):
        loss_rem = np.log(np.maximum(w + lat.slack_remove, lat.h / 2) / m)
        arg = w - lat.slack_add
        loss_add = np.where(arg > 0, np.log(m / np.where(arg > 0, arg, 1.0)), np.inf)
    rem, rem_inf = _pessimistic_pmf(loss_rem, lat.p, lat.tau_remove, d)
    add, add_inf = _pessimistic_pmf(loss_add, lat.q, lat.tau_add, d)
    upper = pld_lib.PrivacyLossDistribution.create_from_rounded_probability(
        rem, rem_inf, d, pessimistic_estimate=True,
        rounded_probability_mass_function_add=add, infinity_mass_add=add_inf, symmetric=False,
    )
    if plan.compositions > 1:
        upper = upper.self_compose(plan.compositions)
    floor = 1e3 * lat.noise_floor
    ok = (lat.p > floor) & (lat.q > floor)
    lower = compose_dominated_pair(lat.p[ok], lat.q[ok], plan.compositions, discretisation=d)
    errors = (
        f"lattice h = {lat.h:.3g}, cap c = {lat.cap:.4g}, window {len(w)} cells; per epoch: "
        f"loss slack {lat.slack_remove / m:.2g} (remove) / {lat.slack_add / m:.2g} (add), "
        f"PLD rounding <= d = {d:.3g}, tails to infinity {lat.tau_remove:.2g} / {lat.tau_add:.2g} "
        f"(cap, Hoeffding, Chernoff window, float error {lat.numerical:.2g})"
    )
    return upper, lower, errors


def random_allocation_curves(
    sigma: float,
    rounds: int,
    epochs: int = 1,
    *,
    sampler: str = "dynamic_shuffle",
    threat_model: str = "isolated",
    discretisation: float | None = None,
    max_cells: int = MAX_CELLS,
) -> tuple[TradeOffCurve, TradeOffCurve]:
    """(upper, lower) trade-off curves of the random-allocation pair (module docstring).

    Args:
        sigma: noise multiplier (> 0).
        rounds: M, the rounds (steps) per epoch (>= 1).
        epochs: E (>= 1): composed E times for ``dynamic_shuffle`` and ``balls_and_bins``;
            one epoch at sigma / sqrt(E) for ``persistent_shuffle``.
        sampler: a registered sampler whose canary law is ``RA_CANARY_LAW`` (one uniformly
            random step per epoch).
        threat_model: only ``isolated`` (the adversarial pair is a different pair).
        discretisation: the PLD loss lattice d (default: 0.02 sd / sqrt(E) within [1e-6, 1e-2], sd
            the one-epoch loss standard deviation sqrt((e^{1/sigma^2} - 1) / M)).
        max_cells: the largest FFT window; smaller is faster and coarser.

    Returns:
        (upper, lower): a guarantee (kind ``upper``) and a curve achieved by a test of the
        true pair (kind ``lower``), errors stated in their ``method``.

    Raises:
        ValueError: bad input, or a lattice too coarse (see :func:`allocation_lattice`).
    """
    sigma = check_real("sigma", sigma, minimum=0.0, strict_minimum=True)
    rounds = check_int("rounds", rounds, minimum=1)
    epochs = check_int("epochs", epochs, minimum=1)
    chosen = get_sampler(sampler)
    if chosen.canary_law != RA_CANARY_LAW:
        raise chosen.missing(
            "random-allocation pair",
            f"its canary law is {chosen.canary_law!r}, not {RA_CANARY_LAW!r}",
        )
    threat_model = check_choice("threat_model", threat_model, ("isolated",))
    if discretisation is not None:
        discretisation = check_real(
            "discretisation", discretisation, minimum=0.0, strict_minimum=True
        )
    max_cells = check_int("max_cells", max_cells, minimum=16)
    return _curves(float(sigma), int(rounds), int(epochs), sampler, discretisation, max_cells)


@functools.lru_cache(maxsize=16)
def _curves(
    sigma: float, rounds: int, epochs: int, sampler: str, discretisation: float | None,
    max_cells: int,
) -> tuple[TradeOffCurve, TradeOffCurve]:
    upper_pld, lower_pld, errors = random_allocation_plds(
        sigma, rounds, epochs, sampler=sampler, discretisation=discretisation,
        max_cells=max_cells,
    )
    persistent = get_sampler(sampler).same_step_every_epoch
    how = "one epoch at sigma/sqrt(E)" if persistent else f"{epochs}-fold PLD composition"
    upper = pld_curve(
        upper_pld, sampler=sampler, threat_model="isolated", kind="upper",
        method=(f"random-allocation pair (M = {rounds}, sigma = {sigma:g}), pessimistic lattice "
                f"PLD, {how}; {errors}"),
    )
    upper.short = "random allocation (numerical)"
    lower = achieved_curve(
        lower_pld, sampler=sampler, threat_model="isolated", kind="lower",
        method=(f"random-allocation pair (M = {rounds}, sigma = {sigma:g}): law of the lattice "
                f"statistic W (a post-processing), dominated lattice PLD, {how}; {errors}"),
    )
    lower.short = "random allocation (lattice test)"
    return upper, lower
