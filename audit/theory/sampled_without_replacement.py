"""Sampling without replacement (fixed-size batches drawn independently at each step): its curves.

The sampler (:mod:`audit.sampling.sampled_without_replacement`): at each of the K = T E steps a
uniformly random b-subset of the n examples, independently across steps; q = b/n. Lebeda,
Regehr, Kamath, Steinke, *Avoiding Pitfalls for Privacy Accounting of Subsampled Mechanisms under
Composition*, 2024 (arXiv 2405.20769), show that it can be far less private than Poisson
subsampling at the same q (their example: eps ~ 1 for Poisson, > 10 without replacement), because
the fixed batch size ties the others' participation to the canary's. Noise N(0, sigma^2) per
step, everything in units of the clipping norm C (docs/design.md §3).

**The per-step pair.** Draw a uniform b-subset R of the n - 1 others and a uniform r in R: the
batch is R when the canary is out (probability 1 - q) and R - {r} + {canary} when it is in (a
coupling with the exact laws). With g_j the others' clipped gradients (|g_j| <= 1) and s_R their
sum over R, one step's noisy sum is s_R + Z (out) or s_R - g_r + x + Z (in), x the canary's
gradient. Given (R, r), which both worlds share, the step is the pair

    (1 - q) N(0, sigma^2 I) + q N(x - g, sigma^2 I)   vs   the same with x' (or N(0) alone)

translated by s_R. Per adjacency (x, x' the canary's two gradients, |x|, |x'| <= 1):

- ``zero_out`` (x' = 0; the canary keeps its slot, so both worlds draw the same batches):
  P = (1 - q) N(0) + q N(a), Q = (1 - q) N(0) + q N(a - x), a = x - g.
- ``add_remove`` (the canary removed: the other world draws b of the n - 1 others, i.e. R):
  P = (1 - q) N(0) + q N(x - g), Q = N(0), |x - g| <= 2: Poisson's pair at sensitivity 2
  (one example in, another out: b is fixed). Needs b < n.
- ``replace_one`` (x' any): P = (1 - q) N(0) + q N(x - g), Q = (1 - q) N(0) + q N(x' - g).

**Upper curves (guarantees).**

- ``zero_out`` and ``replace_one``: the *revealed-inclusion* pair. Reveal (R, r) and the
  canary's inclusion S ~ Bernoulli(q): the pair becomes "with probability 1 - q identical, with
  probability q the Gaussian pair N(x - g) vs N(x' - g)", i.e. N(Delta) vs N(0) after a rotation
  and translation, Delta = |x - x'| <= 1 (zero-out) or 2 (replace-one). Every per-step pair above
  is a post-processing of it (forget S, R, r), the mixture over (R, r) only lowers every hockey-
  stick divergence (joint convexity), and the steps compose adaptively (Dong, Roth & Su 2022,
  Thm 3.2; Zhu, Dong & Wang 2022, dominating pairs), so its K-fold composition is a guarantee
  for any co-batch, adaptive included. Composed, the number k ~ Binomial(K, q) of inclusions is
  revealed and the rest is Gaussian with mu_k = Delta sqrt(k) / sigma, so its privacy profile is
  exact in closed form:

      delta(eps) = sum_k Binomial(k; K, q) delta_G(eps; mu_k),
      delta_G(eps; mu) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)  (DRS Cor. 2.13);

  the pair is symmetric (the same profile in both orders). The curve is the envelope of its
  supporting lines at a grid of eps (below the true curve: still a guarantee); the binomial's
  tails beyond 1e-30 are added to delta whole (delta_G <= 1).
- ``zero_out`` and ``replace_one``, besides: dp_accounting's RDP of
  ``SampledWithoutReplacementDpEvent(n, b, GaussianDpEvent(sigma / 2))`` under ``REPLACE_ONE``
  (Wang, Balle & Kasiviswanathan 2019, subsampled RDP without replacement), converted to
  (eps, delta) pairs at 200 deltas from 0.5 to 1e-300 (each a guarantee, their envelope too).
  Their bound compares the subsample holding the canary with the one holding the example it
  pushed out, replace-one neighbours whose clipped sums differ by up to 2 C: the Gaussian's
  noise multiplier per unit of that sensitivity is sigma / 2 (zero-out pairs are replace-one
  pairs, so it holds there too). With sigma instead, the bound is *below* the achieved W pair
  (q = 0.01, sigma = 1, 1e4 steps, delta 1e-5: 13.15 against W's 32.0; per step at order 2,
  5.4e-4 against W's Renyi divergence 2.9e-3): an accountant that passes the noise multiplier
  as is under-reports. The upper curve is the pointwise maximum of the two guarantees (the
  revealed pair is the tighter at large q, the RDP bound at small q: q = 0.001, sigma = 1, 1e5
  steps, delta 1e-5: 100.8 against 21.0).
- ``add_remove``: Poisson's pessimistic PLD (:func:`audit.theory.poisson.poisson_upper`) at
  sensitivity 2, i.e. noise sigma / 2 (both orders): (q N(2) + (1 - q) N(0), N(0)) dominates
  every pair (q N(a) + (1 - q) N(0), N(0)), |a| <= 2 (Zhu, Dong & Wang 2022, Poisson subsampling
  of the Gaussian pair N(2) vs N(0)), and the mixture over (R, r) and adaptive composition as
  above.

**Lower curves (achieved: the true curve lies on or below them).** Each is the K-fold
composition of an explicit pair of datasets with non-adaptive gradients, computed as
:func:`audit.theory.poisson.poisson_lower` is (a dominated lattice pair of exact Gaussian cell
masses, every numerical error on the safe side, :mod:`audit.theory.pld`); where two pairs are
named the curve is the convex hull of the minimum of their curves (the mechanism's curve lies
below each, so below this; its eps(delta) is the larger of the two):

- ``zero_out``, adversarial: the harness's crafted co-batch (x = u, every other g = -u): the
  step's sum after the add-back of b is 2 S (IN) vs S (OUT), the pair
  W = (1 - q) N(0) + q N(2)  vs  (1 - q) N(0) + q N(1), hulled with Poisson's pair (the
  co-batch g = 0).
- ``zero_out``, isolated (the others contribute 0 along the canary's direction): the canary's
  inclusions are i.i.d. Bernoulli(q) across steps (the batches are independent and
  Pr[canary in a uniform b-subset] = b/n) and nothing else moves its coordinate, so the
  observation has exactly Poisson's law: the curves are **Poisson's** (upper and lower), relabelled.
- ``add_remove``: adversarial, x = u and every g = -u: (1 - q) N(0) + q N(2) vs N(0), Poisson's
  lower at sigma / 2 (so upper and lower agree to the discretisation); isolated (g = 0):
  Poisson's curves at sigma.
- ``replace_one``: x = u, x' = -u with g = 0: (1 - q) N(0) + q N(1) vs (1 - q) N(0) + q N(-1),
  hulled with Poisson's pair at sigma / 2 (adversarial: g = -u, x' = -u) or sigma (isolated:
  x' = 0). The isolated upper is the revealed pair at Delta = 2 too.

**Against Poisson.** Under zero-out with the adversarial threat model (the harness's default),
W loses Poisson's hiding: at large y its privacy loss tends to the unsubsampled Gaussian loss of
N(2) vs N(1), with no log q term, so for small sigma the lower curve here lies far below Poisson's
upper curve: a Poisson accountant applied to this sampler is refuted (e.g. q = 0.01, sigma = 0.6,
1000 steps, delta 1e-5: Poisson's upper eps 7.43, here [42.0, 50.6]; docs/design.md §6.11). Under
add/remove it is Poisson at half the noise, and under replace-one the pair at +-1 does the same
(Lebeda et al. 2024, §6: eps ~ 1 for Poisson vs > 10 without replacement). Under zero-out with
the isolated threat model it is exactly Poisson.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy import special

from audit.core.mechanism import Mechanism
from audit.core.names import ADJACENCIES
from audit.core.validation import check_choice, check_int, check_real
from audit.sampling import validate
from audit.theory.curve import TradeOffCurve
from audit.theory.pld import achieved_curve, compose_dominated_pair
from audit.theory.poisson import DISCRETISATION, poisson_lower, poisson_upper
from audit.theory.types import Bounds

__all__ = [
    "SAMPLER",
    "EpsilonBracket",
    "mixture_pair_cells",
    "mixture_pair_lower",
    "rdp_epsilon",
    "rdp_upper",
    "revealed_delta",
    "revealed_epsilon",
    "revealed_upper",
    "sampled_without_replacement_bounds",
    "sampled_without_replacement_bounds_for",
    "sampled_without_replacement_bracket",
    "sampled_without_replacement_epsilon_at",
]

SAMPLER = "sampled_without_replacement"
FloatArray = NDArray[np.float64]

BINOMIAL_TAIL = 1e-30
"""Binomial mass left out on each side of the revealed pair's sum (added to delta whole)."""

MAX_CELLS = 2_000_000
"""Most cells of the fine grid of y a lower pair is discretised on (memory: a few arrays)."""


# --------------------------------------------------------------------------------------
# The revealed-inclusion pair: the guarantee under zero-out and replace-one
# --------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def _binomial_support(q: float, steps: int) -> tuple[np.ndarray, np.ndarray, float]:
    """(k, Binomial(k; steps, q)) over the support kept, and the mass left out (both tails)."""
    from scipy import stats  # imported here: scipy.stats takes a second to import

    law = stats.binom(steps, q)
    # scipy's binom.isf returns n at tiny tails: search the survival function itself, over a
    # window of 60 standard deviations (+100) about the mean, where each tail is below 1e-30
    mean, width = steps * q, 60 * math.sqrt(steps * q * (1 - q)) + 100
    window = np.arange(max(0, math.floor(mean - width)), min(steps, math.ceil(mean + width)) + 1)
    below = window[law.cdf(window - 1) < BINOMIAL_TAIL]
    above = window[law.sf(window) < BINOMIAL_TAIL]
    lo = int(below.max()) if below.size else 0
    hi = int(above.min()) if above.size else steps
    k = np.arange(lo, hi + 1)
    left_out = float(law.cdf(lo - 1) + law.sf(hi)) if steps else 0.0
    return k, law.pmf(k), left_out


def _gaussian_delta(eps: FloatArray, mu: FloatArray) -> FloatArray:
    """delta_G(eps; mu) for a grid of eps (columns) and mu (rows); 0 where mu = 0."""
    e = eps[None, :]
    m = np.where(mu > 0, mu, 1.0)[:, None]
    with np.errstate(over="ignore"):
        out = special.ndtr(-e / m + m / 2) - np.exp(e + special.log_ndtr(-e / m - m / 2))
    return np.where(mu[:, None] > 0, np.maximum(out, 0.0), 0.0)


def revealed_delta(eps: object, q: float, sigma: float, steps: int, delta_shift: float = 1.0
                   ) -> FloatArray:
    """delta(eps) of the revealed-inclusion pair composed ``steps`` times (module docstring):
    sum_k Binomial(k; steps, q) delta_G(eps; delta_shift sqrt(k) / sigma), plus the binomial mass
    left out (at most 2e-30), vectorised over ``eps`` (eps >= 0)."""
    e = np.atleast_1d(np.asarray(eps, dtype=float))
    k, w, left_out = _binomial_support(q, steps)
    mu = delta_shift * np.sqrt(k) / sigma
    out = np.zeros(e.shape)
    chunk = max(1, 4_000_000 // max(1, len(k)))
    for start in range(0, len(e), chunk):
        part = e[start : start + chunk]
        out[start : start + chunk] = w @ _gaussian_delta(part, mu)
    return np.minimum(out + left_out, 1.0)


def revealed_epsilon(delta: float, q: float, sigma: float, steps: int,
                     delta_shift: float = 1.0) -> float:
    """The smallest eps >= 0 with :func:`revealed_delta` <= ``delta``, to 1e-9 relative (the
    bracket's upper end: a guarantee); inf if none below 700."""
    def above(e: float) -> bool:
        return float(revealed_delta(e, q, sigma, steps, delta_shift)[0]) > delta

    if not above(0.0):
        return 0.0
    lo, hi = 0.0, 1.0
    while above(hi):
        lo, hi = hi, 2 * hi
        if hi > 700:
            return math.inf
    while hi - lo > 1e-9 * max(hi, 1e-3):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if above(mid) else (lo, mid)
    return hi


@functools.lru_cache(maxsize=16)
def revealed_upper(
    q: float, sigma: float, steps: int, *, delta_shift: float = 1.0,
    threat_model: str = "adversarial", grid_size: int = 3000,
) -> TradeOffCurve:
    """The guarantee of the revealed-inclusion pair (shift ``delta_shift``: 1 zero-out, 2
    replace-one) composed ``steps`` times: the envelope of its supporting lines
    beta >= 1 - delta(eps) - e^eps alpha at ``grid_size`` eps from 0 to where delta < 1e-290."""
    top = min(revealed_epsilon(1e-290, q, sigma, steps, delta_shift), 700.0)
    body = min(revealed_epsilon(1e-12, q, sigma, steps, delta_shift), top)
    eps = np.unique(np.concatenate((
        np.linspace(0.0, body, grid_size), np.linspace(body, top, grid_size // 5),
    )))
    delta = revealed_delta(eps, q, sigma, steps, delta_shift)
    return TradeOffCurve.from_privacy_profile(
        eps, delta, sampler=SAMPLER, threat_model=threat_model, kind="upper",
        method=(
            f"revealed-inclusion pair, shift {delta_shift:g}: sum over k ~ Binomial({steps}, "
            f"{q:g}) of Gaussian DP mu = {delta_shift:g} sqrt(k)/sigma (closed form), "
            f"{len(eps)} supporting lines"
        ),
    )


RDP_DELTAS = 10.0 ** -np.linspace(0.3, 300.0, 200)
"""The deltas at which the RDP guarantee is converted to (eps, delta) pairs."""


@functools.lru_cache(maxsize=16)
def _rdp_accountant(n: int, batch_size: int, sigma: float, steps: int) -> object:
    """dp_accounting's RDP accountant of ``steps`` subsampled Gaussians without replacement
    under REPLACE_ONE, noise multiplier sigma / 2 (module docstring)."""
    import dp_accounting
    from dp_accounting import rdp

    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.SampledWithoutReplacementDpEvent(
            n, batch_size, dp_accounting.GaussianDpEvent(sigma / 2)
        ),
        steps,
    )
    accountant = rdp.RdpAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE
    )
    accountant.compose(event)
    return accountant


def rdp_epsilon(delta: float, n: int, batch_size: int, sigma: float, steps: int) -> float:
    """eps at ``delta`` of dp_accounting's RDP guarantee (replace-one, noise sigma / 2)."""
    return float(_rdp_accountant(n, batch_size, sigma, steps).get_epsilon(delta))  # type: ignore[attr-defined]


@functools.lru_cache(maxsize=16)
def rdp_upper(
    n: int, batch_size: int, sigma: float, steps: int, *, threat_model: str = "adversarial"
) -> TradeOffCurve:
    """The RDP guarantee as a curve: the envelope of its (eps, delta) pairs at
    :data:`RDP_DELTAS`."""
    eps = np.array([rdp_epsilon(float(d), n, batch_size, sigma, steps) for d in RDP_DELTAS])
    finite = np.isfinite(eps)
    return TradeOffCurve.from_privacy_profile(
        eps[finite], RDP_DELTAS[finite], sampler=SAMPLER, threat_model=threat_model,
        kind="upper",
        method=(
            f"dp_accounting RDP, SampledWithoutReplacementDpEvent(n = {n}, b = {batch_size}, "
            f"Gaussian sigma/2 = {sigma / 2:g}) under replace-one, {steps} steps, "
            f"{int(finite.sum())} (eps, delta) pairs"
        ),
    )


def _population(m: Mechanism) -> tuple[int, int]:
    """(n, b) of the mechanism; without them q = 1/T, as (T, 1)."""
    if m.n is not None and m.batch_size is not None:
        return m.n, m.batch_size
    return m.steps_per_epoch, 1


# --------------------------------------------------------------------------------------
# Explicit pairs of mixtures: the achieved (lower) curves
# --------------------------------------------------------------------------------------


def _normal_mass(edges: FloatArray, mean: float, sigma: float) -> FloatArray:
    """N(mean, sigma^2) mass of consecutive cells, accurate in both tails."""
    z = (edges - mean) / sigma
    mid = 0.5 * (z[1:] + z[:-1])
    below = np.diff(special.ndtr(z))
    above = -np.diff(special.ndtr(-z))
    return np.maximum(np.where(mid <= 0, below, above), 0.0)


def mixture_pair_cells(
    q: float, shift_p: float, shift_q: float, sigma: float, discretisation: float,
    tail: float = 1e-18,
) -> tuple[FloatArray, FloatArray]:
    """Exact masses of P = (1-q) N(0, s^2) + q N(shift_p, s^2) and Q = (1-q) N(0, s^2) +
    q N(shift_q, s^2) on a fine grid of intervals of y.

    The privacy loss of such a pair need not be monotone in y (W's dips below 0 then rises),
    so the cells are intervals of y, narrow enough that the loss moves by at most about
    ``discretisation`` across one (its slope is at most (max - min of the means) / s^2), at
    most :data:`MAX_CELLS`. Quantising y is a post-processing and the range keeps all but
    ``tail`` of each component's mass on each side: the cell pair is dominated by the true one.
    """
    from scipy import stats

    means = (0.0, shift_p, shift_q)
    z = float(stats.norm.isf(tail))
    lo, hi = min(means) - z * sigma, max(means) + z * sigma
    slope = max(max(means) - min(means), 1e-12) / sigma**2
    cells = int(min(MAX_CELLS, max(1000, math.ceil((hi - lo) * slope / discretisation))))
    edges = np.linspace(lo, hi, cells + 1)
    base = _normal_mass(edges, 0.0, sigma)
    p = (1 - q) * base + q * _normal_mass(edges, shift_p, sigma)
    qq = (1 - q) * base + q * _normal_mass(edges, shift_q, sigma)
    return p, qq


def _loss_sd(p: FloatArray, q: FloatArray) -> float:
    """Standard deviation of the cell pair's privacy loss under P."""
    ok = (p > 0) & (q > 0)
    loss = np.log(p[ok]) - np.log(q[ok])
    w = p[ok] / p[ok].sum()
    mean = float(w @ loss)
    return math.sqrt(float(w @ (loss - mean) ** 2))


@functools.lru_cache(maxsize=16)
def mixture_pair_lower(
    q: float, shift_p: float, shift_q: float, sigma: float, steps: int, *,
    threat_model: str = "adversarial", discretisation: float = DISCRETISATION,
) -> TradeOffCurve:
    """The curve achieved by the pair of :func:`mixture_pair_cells` composed ``steps`` times
    (both orders), as :func:`audit.theory.poisson.poisson_lower` is: the lattice spacing is
    ``discretisation`` or finer, at most 1/2000 of the composed loss's standard deviation."""
    coarse_p, coarse_q = mixture_pair_cells(q, shift_p, shift_q, sigma, 1e-2)
    sd = math.sqrt(steps) * _loss_sd(coarse_p, coarse_q)
    d = float(min(discretisation, max(1e-9, sd / 2000)))
    p, qq = mixture_pair_cells(q, shift_p, shift_q, sigma, d, tail=1e-15 / max(steps, 1))
    composed = compose_dominated_pair(p, qq, steps, discretisation=d)
    return achieved_curve(
        composed, sampler=SAMPLER, threat_model=threat_model, kind="lower",
        method=(
            f"PLD optimistic of the pair (1-q) N(0) + q N({shift_p:g}) vs (1-q) N(0) + "
            f"q N({shift_q:g}) (dominated lattice pair), discretisation {d:g}, q = {q:g}, "
            f"{steps} steps"
        ),
    )


def _hull_of_minimum(curves: list[TradeOffCurve], *, threat_model: str, method: str,
                     short: str) -> TradeOffCurve:
    """conv(min of the curves): the mechanism's curve lies below each achieved curve, so below
    this; its privacy profile is the maximum of theirs. Head powers are kept as stored."""
    alphas, powers = [], []
    for c in curves:
        head = len(c.head_alphas)
        alphas += [c.head_alphas, c.alphas[head:]]
        powers += [c.head_powers, 1.0 - c.betas[head:]]
    return TradeOffCurve(
        np.concatenate(alphas), powers=np.concatenate(powers), sampler=SAMPLER,
        threat_model=threat_model, kind="lower", method=method, symmetric=True, short=short,
    )


# --------------------------------------------------------------------------------------
# The curves per adjacency
# --------------------------------------------------------------------------------------


def _poisson_pair(q: float, sigma: float, steps: int, threat: str,
                  ) -> tuple[TradeOffCurve, TradeOffCurve]:
    """Poisson's (upper, lower) at (q, sigma), relabelled for this sampler."""
    up = poisson_upper(q, sigma, steps, threat_model=threat)
    low = poisson_lower(q, sigma, steps, threat_model=threat)
    return up.relabel(sampler=SAMPLER), low.relabel(sampler=SAMPLER)


def sampled_without_replacement_bounds_for(m: Mechanism, adjacency: str = "zero_out") -> Bounds:
    """Upper (guarantee) and lower (achieved) curves under ``adjacency`` (module docstring).

    Args:
        m: a mechanism with ``sampler="sampled_without_replacement"`` and n, b (q = b/n; the
            run has ``m.total_steps`` steps).
        adjacency: ``zero_out`` (the harness's), ``add_remove`` or ``replace_one``
            (:data:`audit.core.names.ADJACENCIES`).

    Raises:
        ValueError: an unknown adjacency (naming the allowed ones), or ``add_remove`` with b = n
            (the world without the canary cannot draw b of its n - 1 examples).
    """
    adjacency = check_choice("adjacency", adjacency, ADJACENCIES)
    q, sigma, steps, threat = m.sampling_probability, m.sigma, m.total_steps, m.threat_model
    note = f"adjacency {adjacency}"
    if adjacency == "zero_out" and threat == "isolated":
        upper, lower = _poisson_pair(q, sigma, steps, threat)
        why = ("; sampled without replacement, zero-out, isolated: the canary's inclusions are "
               "i.i.d. Bernoulli(b/n), exactly Poisson's observation")
        return Bounds(m, upper.relabel(method=upper.method + why),
                      lower.relabel(method=lower.method + why), None, (note,))
    if adjacency == "add_remove":
        if m.batch_size is not None and m.n is not None and m.batch_size >= m.n:
            raise ValueError(
                f"adjacency='add_remove' with sampler={SAMPLER!r} needs batch_size < n (the "
                f"world without the canary draws b of n - 1 examples); got n={m.n}, "
                f"batch_size={m.batch_size}"
            )
        scale = 2.0 if threat == "adversarial" else 1.0
        upper, lower = _poisson_pair(q, sigma / scale, steps, threat)
        why = (f"; sampled without replacement, add/remove: Poisson's pair at sensitivity "
               f"{scale:g} (noise sigma/{scale:g})")
        return Bounds(m, upper.relabel(method=upper.method + why),
                      lower.relabel(method=lower.method + why), None, (note,))
    shift = 1.0 if adjacency == "zero_out" else 2.0
    revealed = revealed_upper(q, sigma, steps, delta_shift=shift, threat_model=threat)
    rdp_curve = rdp_upper(*_population(m), sigma, steps, threat_model=threat)
    upper = revealed.maximum(
        rdp_curve, method=f"max of [{revealed.method}] and [{rdp_curve.method}]",
        short="revealed pair + RDP",
    )
    if adjacency == "zero_out":  # adversarial
        explicit = mixture_pair_lower(q, 2.0, 1.0, sigma, steps, threat_model=threat)
        poisson = _poisson_pair(q, sigma, steps, threat)[1]
        short = "W pair and Poisson pair"
    else:  # replace_one
        explicit = mixture_pair_lower(q, 1.0, -1.0, sigma, steps, threat_model=threat)
        poisson = _poisson_pair(q, sigma / (2.0 if threat == "adversarial" else 1.0), steps,
                                threat)[1]
        short = "+-1 pair and Poisson pair"
    lower = _hull_of_minimum(
        [explicit, poisson], threat_model=threat, short=short,
        method=f"hull of min([{explicit.method}], [{poisson.method}])",
    )
    return Bounds(m, upper, lower, None, (note,))


def sampled_without_replacement_bounds(m: Mechanism) -> Bounds:
    """The registered curves (:data:`audit.theory.registry.THEORIES`): zero-out adjacency, the
    harness's (:func:`sampled_without_replacement_bounds_for`)."""
    return sampled_without_replacement_bounds_for(m, "zero_out")


def sampled_without_replacement_epsilon_at(m: Mechanism, delta: float, bound: str = "upper",
                                           adjacency: str = "zero_out") -> float:
    """eps at ``delta`` of the upper or lower bound. The upper of zero-out (adversarial) and
    replace-one: the smaller of the revealed pair's eps (bisection on its closed form) and the
    RDP guarantee's (both guarantees; no curve built); the rest read off the curves."""
    shift = {"zero_out": 1.0, "replace_one": 2.0}.get(adjacency)
    if bound == "upper" and shift is not None and not (
        adjacency == "zero_out" and m.threat_model == "isolated"
    ):
        return min(
            revealed_epsilon(delta, m.sampling_probability, m.sigma, m.total_steps, shift),
            rdp_epsilon(delta, *_population(m), m.sigma, m.total_steps),
        )
    curve = getattr(sampled_without_replacement_bounds_for(m, adjacency), bound)
    return math.inf if curve is None else float(curve.epsilon(delta))


@dataclass(frozen=True)
class EpsilonBracket:
    """The proven bracket of eps at ``delta``: the mechanism's eps lies in [lower, upper].

    ``lower`` is achieved by the explicit pair named in ``lower_method``, ``upper`` is a
    guarantee (``upper_method``), under ``adjacency`` and ``threat_model``.
    """

    lower: float
    upper: float
    delta: float
    adjacency: str
    threat_model: str
    lower_method: str
    upper_method: str


def sampled_without_replacement_bracket(
    n: int, batch_size: int, sigma: float, steps: int, delta: float, *,
    adjacency: str = "zero_out", threat_model: str = "adversarial",
) -> EpsilonBracket:
    """(lower, upper) eps at ``delta`` of ``steps`` steps of batches of ``batch_size`` drawn
    without replacement from ``n`` examples, noise multiplier ``sigma``.

    Raises:
        ValueError: a field out of range (naming it), an unknown adjacency or threat model.
    """
    n = check_int("n", n, minimum=1)
    batch_size = check_int("batch_size", batch_size, minimum=1, maximum=n)
    steps = check_int("steps", steps, minimum=1)
    delta = check_real("delta", delta, minimum=0.0, maximum=1.0, strict_minimum=True,
                       strict_maximum=True)
    m = validate(Mechanism(SAMPLER, sigma=sigma, steps_per_epoch=steps, epochs=1,
                           threat_model=threat_model, n=n, batch_size=batch_size))
    bounds = sampled_without_replacement_bounds_for(m, adjacency)
    assert bounds.upper is not None and bounds.lower is not None
    return EpsilonBracket(
        lower=float(bounds.lower.epsilon(delta)),
        upper=sampled_without_replacement_epsilon_at(m, delta, "upper", adjacency),
        delta=delta, adjacency=adjacency, threat_model=threat_model,
        lower_method=bounds.lower.method, upper_method=bounds.upper.method,
    )
