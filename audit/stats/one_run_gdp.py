"""One run within the Gaussian family: the strongest mu-GDP claim one run's canaries refute.

The f-DP recursion of Mahloujifar, Melis, Chaudhuri (*Auditing f-Differential Privacy in One
Run*, ICML 2025, arXiv 2410.22235; :mod:`audit.stats.one_run`, docs/design.md §8.10) refutes a
claimed trade-off curve f from the number C of correct guesses of a rule fixed in advance. Run
on the Gaussian curves G_mu (Dong, Roth, Su, *Gaussian Differential Privacy*, JRSS-B 2022) it
gives

    mu_lb = sup{mu : the recursion refutes mu-GDP at level alpha},

the end of the run of refuted mu (nested grids, as for eps). What it proves, and what not:

- **Sound, no assumption**: with probability >= 1 - alpha, the mechanism is not mu-GDP for any
  mu < mu_lb (each refutation is the recursion's, valid for every mechanism satisfying the
  claim, and G_mu' >= G_mu for mu' <= mu, so a mechanism that is mu'-GDP is mu-GDP for every
  mu >= mu' and the run argument of §8.9 applies). A claim stated as mu-GDP (a GDP accountant,
  Opacus' ``gdp``) with mu < mu_lb is refuted.
- **eps at delta, if the curve is Gaussian**: eps_gdp = eps of mu_lb-GDP at delta (DRS Cor.
  2.13) would bound the mechanism's eps at delta were its trade-off curve Gaussian. The theory
  says deterministic batches with Gaussian noise have exactly G_{sqrt(E)/sigma}, but the audit
  tests an implementation, whose curve has that shape only if the implementation is right: a
  bug that changes the shape (a mechanism that is exactly (2, 0)-DP, randomised response at
  eps0 = 2, gives mu_lb ~ 0.7 from 1e4 canaries, i.e. eps_gdp ~ 3) makes eps_gdp exceed the
  truth. So eps_gdp is an estimate under an assumption the audit does not test, never called a
  bound; the sound eps bound stays the (eps, delta) recursion's (§8.10). The report prints it
  only for cells whose theory curves are Gaussian, and summary.json names it
  ``epsilon_if_gaussian``.

Why the family is worth having: at delta = 1e-5 a point of the (eps, delta) curve near the true
eps needs an FPR resolved near 1e-4 or below, which m = 1e4 canaries cannot resolve (§8.16: the
(eps, delta) bound stops near 2.3 for mu = 1, theory 4.38), while the Gaussian curve is refuted
through guesses of moderate precision. This is how the one-run literature reports empirical
privacy for Gaussian mechanisms (Mahloujifar et al.'s experiments; Nasr et al., *Tight Auditing
of Differentially Private Machine Learning*, USENIX Security 2023, convert through mu-GDP).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
from numpy.typing import ArrayLike

from audit.core.confidence import significance
from audit.core.validation import check_int, check_real
from audit.stats.one_run import (
    GuessCount,
    OneRunTest,
    _as_canaries,
    _parse_guesses,
    choose_rule,
    gdp_power,
    largest_refuted_claim,
)
from audit.stats.thresholds import GUESS_QUANTILES, projected_rules

__all__ = [
    "GDP_FAMILY_LABEL",
    "OneRunGdpBound",
    "PlannedGdpGuesses",
    "fdp_mu_lb",
    "one_run_gdp_lower_bound",
    "plan_gdp_guesses",
]

GDP_FAMILY_LABEL = (
    "GDP family: every mu-GDP claim with mu < mu_lb is refuted at 1 - alpha (sound for any "
    "mechanism); the eps of mu_lb-GDP at delta is an estimate that assumes the implementation's "
    "trade-off curve is exactly Gaussian (not tested by the audit), not a bound on eps"
)


def fdp_mu_lb(
    m: int, guesses: ArrayLike, correct: ArrayLike, *, alpha: float
) -> np.ndarray | float:
    """Largest mu whose mu-GDP curve the f-DP recursion refutes at level alpha from ``correct``
    of ``guesses`` on m canaries (vectorised over rules; nested grids on [0, 50], step 1e-4 at
    the end, as :func:`audit.stats.one_run.fdp_epsilon_lb`)."""
    return largest_refuted_claim(gdp_power, m, guesses, correct, alpha=alpha)


@dataclass(frozen=True)
class OneRunGdpBound(OneRunTest):
    """The strongest mu-GDP claim one run refutes (module docstring): with probability
    >= 1 - alpha the mechanism is not mu-GDP for any mu < ``mu_lb``. ``label`` says that the
    eps of mu_lb-GDP at a delta is an estimate under the Gaussian-shape assumption, not a
    bound."""

    mu_lb: float
    label: str = GDP_FAMILY_LABEL

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def one_run_gdp_lower_bound(
    scores: object,
    included: object,
    *,
    confidence: float | None = None,
    alpha: float | None = None,
    guesses: str | Sequence[int] = "bonferroni",
    seed: int = 0,
) -> OneRunGdpBound:
    """mu_lb from one run's canary scores: ``guesses`` a pair fixed in advance (e.g. from
    :func:`plan_gdp_guesses`), ``"bonferroni"`` or ``"split"``, chosen soundly as for the eps
    bound (:func:`audit.stats.one_run.choose_rule`; the recursion needs r fixed in advance).
    ``confidence`` (default 0.95): the probability that mu_lb holds; ``alpha=`` its deprecated
    spelling 1 - confidence (a DeprecationWarning, the same numbers). Cost: one sort of the
    scores and one early-stopping recursion search per candidate rule
    (:func:`audit.stats.one_run.largest_refuted_claim`), memory O(m): about 0.2 s at m = 1e6."""
    alpha = significance(confidence, alpha, where="one_run_gdp_lower_bound")
    s, b = _as_canaries(scores, included)
    alpha = check_real(
        "alpha", alpha, minimum=0.0, maximum=0.5, strict_minimum=True, strict_maximum=True
    )
    seed = check_int("seed", seed, minimum=0)
    rule = _parse_guesses(guesses)

    def bounds(m: int, counts: list[GuessCount], level: float) -> list[float]:
        g = np.array([c.guesses for c in counts])
        v = np.array([c.correct for c in counts])
        return [float(x) for x in np.atleast_1d(fdp_mu_lb(m, g, v, alpha=level))]

    chosen = choose_rule(s, b, rule, bounds, alpha=alpha, seed=seed, fixed_r=True)
    return OneRunGdpBound(
        strategy=chosen.strategy,
        alpha=alpha,
        canaries=int(s.size),
        alpha_per_test=chosen.alpha_per_test,
        candidates=chosen.candidates,
        mu_lb=chosen.value,
        m_eval=chosen.count.m,
        k_plus=chosen.count.k_plus,
        k_minus=chosen.count.k_minus,
        guesses=chosen.count.guesses,
        correct=chosen.count.correct,
    )


@dataclass(frozen=True)
class PlannedGdpGuesses:
    """A one-run rule (k+, k-) fixed before the scores are seen, maximising the projected mu_lb
    were the canaries' scores to follow the planning curve ``curve``."""

    k_plus: int
    k_minus: int
    canaries: int
    curve: str
    expected_mu_lb: float

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def plan_gdp_guesses(
    curve: Callable[[np.ndarray], np.ndarray],
    m: int,
    *,
    alpha: float,
    curve_name: str | None = None,
) -> PlannedGdpGuesses:
    """The rule (k, 0) or (k, k) maximising mu_lb averaged over the quantiles
    :data:`audit.stats.thresholds.GUESS_QUANTILES` of its projected correct count (the projection
    of :func:`audit.stats.thresholds.plan_guesses`, with mu_lb in place of eps_lb; a projection:
    the rule's soundness does not depend on it). Cost: one early-stopping recursion search
    over the 5 x (up to 48) projected rules, independent of m but for the counts' size: about
    0.04 s from m = 1e3 to 1e5 (docs/design.md §8.21)."""
    m = check_int("m", m, minimum=4)
    rules, guesses, correct = projected_rules(curve, m)
    mu = np.asarray(
        fdp_mu_lb(m, np.tile(guesses, len(GUESS_QUANTILES)), correct.ravel(), alpha=alpha)
    )
    projected = mu.reshape(correct.shape).mean(axis=0)
    i = int(np.argmax(projected))
    name = curve_name or getattr(curve, "label", None) or "the given curve"
    return PlannedGdpGuesses(
        k_plus=rules[i][0], k_minus=rules[i][1], canaries=m, curve=str(name),
        expected_mu_lb=float(projected[i]),
    )
