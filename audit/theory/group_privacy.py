"""Group privacy: what a row-level claim says about a person who holds k rows.

DP-SGD's accountant bounds what one *row* can change. When one person holds k rows (a user with
several records, offline augmentation stored as rows, exact copies), the unit the claim protects
is not the person, and the person's epsilon is larger. Two statements, both upper bounds:

* **Generic** (any (eps, delta)-DP mechanism; Dwork and Roth 2014, Theorem 2.2 and its
  (eps, delta) form, Vadhan 2017 Lemma 2.2): a group of k is
  (k eps, k e^{(k-1) eps} delta)-DP. :func:`group_epsilon_generic` gives that pair.
* **Poisson-subsampled Gaussian** (the DP-SGD step an accountant composes): removing the
  person's k rows removes J of them from a step's batch, J ~ Binomial(k, q), and moves the
  noisy clipped sum by at most J C (J clipped gradients, at worst collinear); one step is then
  the mixture pair sum_j Bin(j; k, q) N(j, sigma^2) vs N(0, sigma^2) in units of C (the group
  version of the subsampled Gaussian pair; Ganesh 2024, "Tight group-level DP guarantees for
  DP-SGD with sampling"; Schuchardt et al. 2024, "Unified mechanism-specific amplification by
  subsampling and group privacy amplification"), composed over the steps with dp_accounting's
  pessimistic PLD of the mixture-of-Gaussians mechanism
  (``from_mixture_gaussian_mechanism``). :func:`group_epsilon_poisson` gives the person's
  epsilon at the same delta, usually far below k eps.

Under add/remove adjacency of the person (all k rows in or out), as the accountants state it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import stats

from audit.core.validation import check_int, check_probability, check_real

__all__ = ["GroupEpsilon", "group_epsilon_generic", "group_epsilon_poisson"]


@dataclass(frozen=True)
class GroupEpsilon:
    """A person's (epsilon, delta) when the person holds ``k`` rows, and how it was obtained.

    Attributes:
        k: rows per person.
        epsilon: the person's epsilon at ``delta`` (an upper bound).
        delta: the delta it holds at.
        method: the theorem or computation (generic group privacy, or the mixture PLD).
    """

    k: int
    epsilon: float
    delta: float
    method: str


def group_epsilon_generic(epsilon: float, delta: float, k: int) -> GroupEpsilon:
    """(k eps, k e^{(k-1) eps} delta): group privacy of any (eps, delta)-DP mechanism.

    The delta is computed in log space (``log k + (k - 1) eps + log delta``) and capped at 1;
    a delta of 1 says the generic bound proves nothing at this k.
    """
    epsilon = check_real("epsilon", epsilon, minimum=0.0)
    delta = check_probability("delta", delta, open_interval=False)
    k = check_int("k", k, minimum=1)
    if delta == 0:
        group_delta = 0.0
    else:
        log_delta = math.log(k) + (k - 1) * epsilon + math.log(delta)
        group_delta = 1.0 if log_delta >= 0 else math.exp(log_delta)
    return GroupEpsilon(
        k, k * epsilon, group_delta,
        f"group privacy of (eps, delta)-DP: (k eps, k e^((k-1) eps) delta), k = {k}")


def group_epsilon_poisson(
    sigma: float, q: float, steps: int, k: int, delta: float,
    discretisation: float = 1e-3,
) -> GroupEpsilon:
    """The person's epsilon at ``delta`` for ``steps`` Poisson-subsampled Gaussian steps (noise
    multiplier ``sigma``, sampling rate ``q``) when the person holds ``k`` rows: the mixture PLD
    of the module docstring (pessimistic, connect-the-dots), an upper bound. ``k = 1`` is the
    row-level accountant's number.

    Cost: one mixture PLD of k + 1 components, composed by repeated squaring (``steps`` up to
    1e5 in a few seconds at the default discretisation 1e-3, which the pessimistic rounding keeps
    an upper bound).
    """
    sigma = check_real("sigma", sigma, minimum=0.0, strict_minimum=True)
    q = check_probability("q", q, open_interval=False)
    steps = check_int("steps", steps, minimum=1)
    k = check_int("k", k, minimum=1)
    delta = check_probability("delta", delta)
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    sensitivities = list(range(k + 1))
    weights = [float(w) for w in stats.binom.pmf(sensitivities, k, q)]
    pld = pld_lib.from_mixture_gaussian_mechanism(
        standard_deviation=sigma,
        sensitivities=[float(s) for s in sensitivities],
        sampling_probs=weights,
        pessimistic_estimate=True,
        value_discretization_interval=discretisation,
    )
    composed = pld.self_compose(steps) if steps > 1 else pld
    epsilon = float(composed.get_epsilon_for_delta(delta))
    return GroupEpsilon(
        k, epsilon, delta,
        f"mixture PLD of the Poisson-subsampled Gaussian for a group of k = {k} rows "
        f"(J ~ Binomial(k, q) rows in a batch, shift J C; sigma = {sigma:g}, q = {q:g}, "
        f"{steps} steps, dp_accounting pessimistic, discretisation {discretisation:g})",
    )
