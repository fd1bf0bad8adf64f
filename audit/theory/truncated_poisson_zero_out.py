"""Truncated Poisson under zero-out adjacency: a dominating pair that reveals the co-batch count.

One step (docs/design.md §6.3): the canary is sampled with probability q, the K ~ Bin(n - 1, q)
others independently; if 1 + K > B a uniformly random B-subset is kept. Under zero-out
(§3.2) the neighbour's null record takes the canary's slot, so the selection process, and with
it the joint law of (I, A') — I = 1[the canary's slot is in the final batch], A' the set of
others kept — is the same in both worlds; only the slot's gradient (g, |g| <= 1, or 0)
differs. Given k = |A'|, A' is a uniformly random k-subset of the others whatever I is
(exchangeability), so the step's observation, f(A') + I g + N(0, sigma^2 I), is a
post-processing (the same kernel in both worlds) of (k, I g + N). Hence the pair

    P = sum_k pi_k  delta_k x [(1 - p_k) N(0, sigma^2) + p_k N(1, sigma^2)],
    Q = sum_k pi_k  delta_k x N(0, sigma^2),

with k revealed, dominates one step for *every* co-batch (adversarial or not): its privacy
loss is the pi-mixture of the Poisson-subsampled Gaussian losses at rate p_k, and T E steps
compose it. Only three rates occur (K ~ Bin(n - 1, q)):

- k <= B - 2: the batch was not truncated, p_k = q; pi = Pr[K <= B - 2];
- k = B - 1: pi = (1 - q) Pr[K = B - 1] + w, w = Pr[I = 1, k = B - 1]
  = q Pr[K = B - 1] + (B / n) Pr[Bin(n, q) > B] (the canary kept by a truncation; with
  Bin(n - 1, q)(K) / (1 + K) = Bin(n, q)(K + 1) / (n q)), and p = w / pi;
- k = B: the canary's slot is not in the batch, p = 0 (no loss).

The mixture of the components' pessimistic PLDs (dp_accounting, connect-the-dots) dominates
the mixture, so the composed PLD is a guarantee. It is the same pair's privacy whatever the
co-batch; the isolated pair (Poisson at p' = sum_k pi_k p_k, :mod:`truncated_poisson`) is
below it, and it tends to the Poisson pair as B grows. What it leaves open: the adversary sees
k only through noisy gradients, so the pair may be loose where truncation is frequent (its
k = B - 1 component); no achieved curve above the isolated one is known.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from audit.theory.curve import TradeOffCurve
from audit.theory.pld import pld_curve

if TYPE_CHECKING:  # dp_accounting imported on use: fast start (docs/design.md §2.7)
    from dp_accounting.pld import pld_pmf
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

__all__ = ["CountMixture", "count_mixture", "zero_out_truncated_pld", "zero_out_truncated_upper"]


@dataclass(frozen=True)
class CountMixture:
    """The rates p_k and weights pi_k of the count-revealing pair (module docstring)."""

    weights: tuple[float, ...]
    rates: tuple[float, ...]

    @property
    def inclusion(self) -> float:
        """sum_k pi_k p_k: the canary's per-step inclusion probability p'."""
        return float(sum(w * r for w, r in zip(self.weights, self.rates, strict=True)))


def count_mixture(n: int, q: float, max_batch_size: int) -> CountMixture:
    """(pi, p) for k <= B - 2, k = B - 1 and k = B (module docstring)."""
    from scipy import stats

    big_b = max_batch_size
    whole = float(stats.binom.cdf(big_b - 2, n - 1, q)) if big_b >= 2 else 0.0
    at = float(stats.binom.pmf(big_b - 1, n - 1, q))
    kept = q * at + big_b / n * float(stats.binom.sf(big_b, n, q))
    edge = (1 - q) * at + kept
    rest = max(0.0, 1.0 - whole - edge)
    edge_rate = kept / edge if edge > 0 else 0.0
    return CountMixture((whole, edge, rest), (q, min(1.0, edge_rate), 0.0))


def _dense(pmf: pld_pmf.PLDPmf) -> tuple[int, np.ndarray, float]:
    dense = pmf.to_dense_pmf()
    return (
        int(dense._lower_loss),
        np.asarray(dense._probs, dtype=float),
        float(dense._infinity_mass),
    )


def _mix(parts: list[tuple[float, pld_pmf.PLDPmf | None]], d: float) -> pld_pmf.DensePLDPmf:
    """The weighted mixture of PMFs on one lattice (None: all mass at loss 0)."""
    from dp_accounting.pld import pld_pmf

    dense = []
    for weight, pmf in parts:
        if weight <= 0:
            continue
        if pmf is None:
            dense.append((weight, 0, np.ones(1), 0.0))
        else:
            lo, probs, inf = _dense(pmf)
            dense.append((weight, lo, probs, inf))
    lo = min(part[1] for part in dense)
    hi = max(part[1] + len(part[2]) for part in dense)
    probs = np.zeros(hi - lo)
    infinity = 0.0
    for weight, start, p, inf in dense:
        probs[start - lo:start - lo + len(p)] += weight * p
        infinity += weight * inf
    return pld_pmf.DensePLDPmf(d, lo, probs, infinity, pessimistic_estimate=True)


@functools.lru_cache(maxsize=8)
def zero_out_truncated_pld(
    n: int, q: float, max_batch_size: int, sigma: float, steps: int, discretisation: float
) -> pld_lib.PrivacyLossDistribution:
    """The pessimistic PLD of the count-revealing pair, composed ``steps`` times."""
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    mix = count_mixture(n, q, max_batch_size)
    remove: list[tuple[float, pld_pmf.PLDPmf | None]] = []
    add: list[tuple[float, pld_pmf.PLDPmf | None]] = []
    for weight, rate in zip(mix.weights, mix.rates, strict=True):
        if rate <= 0:
            remove.append((weight, None))
            add.append((weight, None))
            continue
        pld = pld_lib.from_gaussian_mechanism(
            standard_deviation=sigma, sensitivity=1.0, value_discretization_interval=discretisation,
            pessimistic_estimate=True, sampling_prob=rate,
        )
        remove.append((weight, pld._pmf_remove))
        add.append((weight, pld._pmf_add))
    one = pld_lib.PrivacyLossDistribution(_mix(remove, discretisation), _mix(add, discretisation))
    return one.self_compose(steps) if steps > 1 else one


def zero_out_truncated_upper(
    n: int, q: float, max_batch_size: int, sigma: float, steps: int, *,
    threat_model: str = "adversarial", discretisation: float = 1e-4,
) -> TradeOffCurve:
    """The guarantee of the count-revealing pair (module docstring), kind ``upper``."""
    mix = count_mixture(n, q, max_batch_size)
    parts = ", ".join(
        f"{w:.4g} x rate {r:.4g}" for w, r in zip(mix.weights, mix.rates, strict=True)
    )
    return pld_curve(
        zero_out_truncated_pld(n, q, max_batch_size, sigma, steps, discretisation),
        sampler="truncated_poisson", threat_model=threat_model, kind="upper",
        method=(f"zero-out count-revealing pair: per step the mixture over the kept co-batch "
                f"count k of Poisson-subsampled Gaussians ({parts}), pessimistic PLD "
                f"(dp_accounting, discretisation {discretisation:g}), composed {steps} times"),
    )
