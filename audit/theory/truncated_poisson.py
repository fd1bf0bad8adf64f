"""Truncated Poisson: Poisson(q) batches cut to a uniformly random B when larger, padded to B.

Three guarantees (all ``upper``), combined by their pointwise maximum (the maximum of
guarantees is a guarantee):

- coupling with untruncated Poisson (Chua et al. 2024, arXiv 2411.04205, Thm 3.3): the two
  runs differ only when some batch is truncated, within total variation x = T E Pr[Bin(n, q) > B],
  so the curve f(a) = max(0, f_P(a + x) - x) is a guarantee (:func:`coupling_curve`); its
  delta(eps) is at most Thm 3.3's delta_P(eps) + (1 + e^eps) x, and below it where f_P's
  eps-supporting point has FPR < x;
- dp_accounting's ``TruncatedSubsampledGaussianDpEvent`` PLD (Ganesh 2025, arXiv
  2508.15089): a mixture of the sensitivity-1 subsampled Gaussian and, when truncation
  happens, a sensitivity-2 one, composed T E times (pessimistic), taken for the replace-one
  relation: zero-out neighbours are replace-one neighbours (the null record takes the
  canary's slot and, under truncation, displaces others as the canary does), whereas the
  default add/remove analysis is not known to cover them. Its construction in
  dp_accounting is the slow part (pure Python over the loss grid, about 2.5 s per 1e-4
  at sigma = 1), so it uses discretisation 2e-4 by default (pessimistic either way);
- the zero-out count-revealing pair (:mod:`audit.theory.truncated_poisson_zero_out`): per
  step a mixture, over the kept co-batch count, of Poisson-subsampled Gaussians at rates q,
  the truncation-edge rate and 0, sensitivity 1 (zero-out keeps the selection process the
  same in both worlds), composed T E times: far tighter where truncation is frequent.

One achieved curve (``lower``), from a known pair of neighbouring datasets, the isolated
pair: every other example has gradient 0 along the canary direction u, and the attacker
sees each step's noisy sum projected on u. The canary is in a step's sum independently
per step with probability p' = q E[min(1, B / (1 + K))], K ~ Bin(n - 1, q)
(:func:`inclusion_probability`), so each step is exactly the pair
(1 - p') N(0, sigma^2) + p' N(1, sigma^2) vs N(0, sigma^2), composed T E times: the
Poisson lower curve (:func:`audit.theory.poisson.poisson_lower`) with q replaced by p'.
As for Poisson, this pair is a valid pair of neighbouring datasets under both threat-model
labels, so the curve is achieved for both. p' <= q, so it lies above Poisson's curves and
below the guarantee; as B grows, p' -> q and it tends to Poisson's lower curve.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import numpy as np

from audit.sampling.truncated_poisson import inclusion_probability  # the one formula, re-exported
from audit.theory.curve import TradeOffCurve
from audit.theory.pld import pld_curve
from audit.theory.poisson import DISCRETISATION, poisson_lower, poisson_upper
from audit.theory.truncated_poisson_zero_out import zero_out_truncated_upper

if TYPE_CHECKING:  # dp_accounting imported on use: fast start (docs/design.md §2.7)
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

__all__ = [
    "coupling_curve",
    "inclusion_probability",
    "truncated_poisson_lower",
    "truncated_poisson_upper",
    "truncation_probability",
]


def truncation_probability(n: int, q: float, max_batch_size: int) -> float:
    """Pr[Bin(n, q) > B], the chance that one step's Poisson batch is truncated."""
    from scipy import stats

    return float(stats.binom.sf(max_batch_size, n, q))


@functools.lru_cache(maxsize=8)
def _truncated_pld(
    n: int, q: float, max_batch_size: int, sigma: float, steps: int, discretisation: float
) -> pld_lib.PrivacyLossDistribution:
    from dp_accounting.pld import privacy_loss_distribution as pld_lib
    from dp_accounting.privacy_accountant import NeighboringRelation

    # Zero-out neighbours (the canary replaced by a null record that still takes a batch
    # slot) are a special case of REPLACE_ONE, for which dp_accounting's truncated analysis
    # is a guarantee. Under truncation the null record displaces others exactly like the
    # canary, so zero-out is not add/remove here, and the default ADD_OR_REMOVE_ONE PLD is
    # not known to cover it: we take the (looser) replace-one PLD.
    pld = pld_lib.from_truncated_subsampled_gaussian_mechanism(
        dataset_size=n,
        sampling_probability=q,
        truncated_batch_size=max_batch_size,
        noise_multiplier=sigma,
        value_discretization_interval=discretisation,
        neighboring_relation=NeighboringRelation.REPLACE_ONE,
    )
    return pld.self_compose(steps) if steps > 1 else pld


def coupling_curve(untruncated: TradeOffCurve, x: float) -> TradeOffCurve:
    """The guarantee f(a) = max(0, f_P(a + x) - x) of a mechanism within total variation x
    of one with guarantee f_P (Chua et al. 2024, Thm 3.3 coupling, x = T E Pr[Bin > B]).

    Its profile is sup_{a >= 0} (1 - f_P(a + x) + x - e^eps a) = sup_{b >= x} (1 - f_P(b) - e^eps b)
    + (1 + e^eps) x <= delta_P(eps) + (1 + e^eps) x: Thm 3.3's delta where f_P's eps-supporting
    point has FPR b >= x, smaller where it has b < x (the curve, not the formula, is what is
    built). On the head, power(a) = min(1, power_P(a + x) + x): the head vertices (a_i, p_i) of
    f_P move to (a_i - x, p_i + x), exactly (no eps grid).
    """
    a, p = untruncated.head_alphas, untruncated.head_powers
    keep = a > x
    start = float(untruncated.power(np.array([x]))[0]) if x > 0 else float(p[0])
    return TradeOffCurve(
        np.concatenate(([0.0], a[keep] - x)),
        powers=np.minimum(np.concatenate(([start + x], p[keep] + x)), 1.0),
        sampler=untruncated.sampler, threat_model=untruncated.threat_model, kind="upper",
        method=f"coupling: f(a + {x:.3g}) - {x:.3g} of [{untruncated.method}]",
    )


def truncated_poisson_upper(
    n: int,
    q: float,
    max_batch_size: int,
    sigma: float,
    steps: int,
    *,
    threat_model: str = "adversarial",
    discretisation: float = DISCRETISATION,
    reference_delta: float = 1e-5,
    accountant_discretisation: float = 2e-4,
) -> TradeOffCurve:
    """The guarantee for truncated Poisson: max of the coupling bound and dp_accounting's PLD."""
    untruncated = poisson_upper(q, sigma, steps, threat_model=threat_model,
                                discretisation=discretisation)
    p_trunc = truncation_probability(n, q, max_batch_size)
    coupling = coupling_curve(untruncated, steps * p_trunc).relabel(
        sampler="truncated_poisson",
        method=(
            f"coupling with Poisson: f(a) = f_P(a + x) - x, x = T E Pr[Bin(n,q) > B], "
            f"Pr = {p_trunc:.3g} (exact shift of the Poisson guarantee; its delta(eps) is at most "
            f"delta_P(eps) + (1 + e^eps) x)"
        ),
    )
    accountant = pld_curve(
        _truncated_pld(n, q, max_batch_size, sigma, steps, accountant_discretisation),
        sampler="truncated_poisson", threat_model=threat_model, kind="upper",
        method=(f"PLD pessimistic (dp_accounting TruncatedSubsampledGaussian, replace-one), "
                f"discretisation {accountant_discretisation:g}"),
    )
    zero_out = zero_out_truncated_upper(n, q, max_batch_size, sigma, steps,
                                        threat_model=threat_model, discretisation=discretisation)
    eps = {
        "coupling": float(coupling.epsilon(np.array([reference_delta]))[0]),
        "dp_accounting TruncatedSubsampledGaussian PLD": float(
            accountant.epsilon(np.array([reference_delta]))[0]),
        "zero-out count-revealing pair": float(zero_out.epsilon(np.array([reference_delta]))[0]),
    }
    tighter = min(eps, key=lambda name: eps[name])
    listed = "; ".join(f"{name} (eps {value:.4g})" for name, value in eps.items())
    return coupling.maximum(accountant).maximum(
        zero_out, short="coupling + truncated PLD + zero-out pair",
        method=(f"max of the guarantees at delta {reference_delta:g}: {listed}; tighter: "
                f"{tighter}; [{zero_out.method}]"),
    )


def truncated_poisson_lower(
    n: int,
    q: float,
    max_batch_size: int,
    sigma: float,
    steps: int,
    *,
    threat_model: str = "adversarial",
    discretisation: float = DISCRETISATION,
) -> TradeOffCurve:
    """Achieved: the isolated pair, i.e. the Poisson lower curve with q replaced by p'
    = :func:`inclusion_probability` (module docstring)."""
    p_in = inclusion_probability(n, q, max_batch_size)
    curve = poisson_lower(p_in, sigma, steps, threat_model=threat_model,
                          discretisation=discretisation)
    return curve.relabel(
        sampler="truncated_poisson",
        short="isolated pair, Poisson lower curve at q' = p'",
        method=(f"isolated pair: Poisson lower curve with q replaced by the per-step inclusion "
                f"probability p' = q E[min(1, B/(1+K))] = {p_in:.6g} (q = {q:g}, B = "
                f"{max_batch_size}); {curve.method}"),
    )
