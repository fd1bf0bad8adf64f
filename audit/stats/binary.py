"""Statistics of an audit: trade-off points with Clopper-Pearson bounds, sound epsilon lower bounds.

An attack gives one score per trial (higher = "canary IN"). A threshold t defines the test
"IN iff score >= t", with false-positive rate FPR(t) = Pr[score >= t | OUT] and false-negative
rate FNR(t) = Pr[score < t | IN]. Counting errors on n_out OUT and n_in IN trials gives
binomial counts, bounded one-sidedly with Clopper-Pearson (docs/design.md §8.1):

    FPR_hi = CP_upper(FP, n_out, alpha/2),   FNR_hi = CP_upper(FN, n_in, alpha/2),

so that both hold together with probability >= 1 - alpha (union bound). Any (eps, delta)-DP
mechanism satisfies FNR >= 1 - delta - e^eps FPR and FPR >= 1 - delta - e^eps FNR for every
test, hence with probability >= 1 - alpha

    eps >= eps_lb = max(log((1 - delta - FNR_hi) / FPR_hi), log((1 - delta - FPR_hi) / FNR_hi)).

The threshold must not be chosen on the scores it is evaluated on (that maximum over
thresholds is biased upwards; Nasr et al. 2023, arXiv 2302.07956; jax_privacy's auditing
pitfalls guide). Two sound strategies:

- ``split``: shuffle IN and OUT scores with ``seed``, split each in halves (first half:
  selection, second half: evaluation); pick the threshold that maximises the bound on the
  selection half, and compute the bound at that threshold on the evaluation half only.
- ``multisplit``: K = 11 independent ``split`` bounds (seeds ``seed + 2k``), each at level
  alpha/2, and their median. It holds at level alpha: let X_k = 1{bound_k exceeds the truth},
  Pr[X_k = 1] <= alpha/2 (the splits may be dependent). The median (K odd: the middle value)
  exceeds the truth only if at least (K + 1)/2 >= K/2 bounds do, and by Markov's inequality
  Pr[sum_k X_k >= K/2] <= E[sum_k X_k] / (K/2) <= K (alpha/2) / (K/2) = alpha. (Alone, one
  split is at alpha; the median of K at alpha/2 each trades that factor 2 for far less
  dependence on one random split.)
- ``bonferroni``: a grid of k thresholds fixed before looking at the counts -- order
  statistics of the OUT scores at fixed ranks (low-FPR tail) and of the IN scores at fixed
  ranks (low-FNR tail) -- each bounded at alpha/(2k) per rate. The rate defined by the order
  statistic is bounded conservatively by CP (the true FPR at the r-th largest OUT score is
  Beta(r, n - r + 1), stochastically below the CP upper bound's Beta(r + 1, n - r)); the other
  rate is independent of that threshold, so CP holds conditionally. Tied scores need no
  random tie-breaking: at t = the r-th largest OUT score the count FP = #{OUT >= t} >= r takes in
  every OUT trial tied with t (the IN tail's FN = #{IN <= b} likewise), and CP on that count
  covers Pr[OUT >= t] whatever the ties. Proof: write p_1 < p_2 < ... for the values Pr[OUT >= s]
  of the support points s, N(p) ~ Binomial(n, p) for the OUT trials at or above the point of
  value p, and A(p) = {N(p) <= k} for the largest k with CP_upper(k) < p (Pr[A(p)] <= a, CP's
  own guarantee); the bound fails when t's value p_j has N(p_j) <= k, and then (t being the r-th
  largest) N(p_{j-1}) < r; take j* the first point where k >= r: for j > j*, N(p_j*) <=
  N(p_{j-1}) < r <= k(p_j*), so every failure lies in the one fixed event A(p_j*), of
  probability <= a. No count is random given the scores: the bound holds for every seed.

Each strategy is a frozen dataclass with one protocol (:class:`ThresholdStrategy`: :class:`Split`,
:class:`MultiSplit`, :class:`Bonferroni`, and :class:`Planned`, whose rule is fixed before the
scores are seen, :mod:`audit.stats.thresholds`); :func:`threshold_strategy` maps a spec's name to
one (docs/design.md §8.20).

The default strategy is ``planned`` (:data:`DEFAULT_THRESHOLD`, the spec's and ``audit
simulate``'s); a call without ``plan=`` plans on a pilot of 10% of the trials that the test leaves
out (:class:`Planned`, docs/design/statistics.md §8.3). Every bound takes ``confidence=`` (default
0.95); ``alpha=`` (1 - confidence) is its deprecated spelling (:mod:`audit.core.confidence`).
The Clopper-Pearson bounds, the counts and the records :class:`EpsilonBound` and :class:`Verdict`
live in :mod:`audit.stats.error_rates` (below :mod:`audit.stats.thresholds`, which this module
calls) and are re-exported here.

The naive maximum over all thresholds on all scores is reported beside the bound as
``epsilon_optimistic``, labelled "optimistic, not a bound"; it scans every distinct threshold
(:func:`_naive_maximum`).

Estimates that users of other auditing tools expect (:func:`roc_summary`): the TPR at a fixed
FPR (0.1%, 1%) with a Clopper-Pearson interval, and the AUROC; labelled estimates.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any, ClassVar, Protocol, TypeGuard, overload

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import binom, mannwhitneyu, norm

from audit.core.confidence import significance
from audit.core.names import DEFAULT_THRESHOLD, THRESHOLD_STRATEGIES
from audit.core.validation import check_choice, check_int, check_real
from audit.stats.error_rates import (
    OPTIMISTIC_LABEL,
    PILOT_FRACTION,
    SCORE_REDUCTIONS,
    THRESHOLD_BLOCK,
    EpsilonBound,
    Objective,
    Verdict,
    _as_scores,
    _check_common,
    _check_tradeoff_function,
    _counts,
    _cp_upper_counts,
    _json_float,
    _naive_maximum,
    clopper_pearson_lower,
    clopper_pearson_upper,
    confidence_of,
    epsilon_from_rates,
    evaluate_curve,
    per_trial_scores,
)
from audit.stats.thresholds import (
    Pilot,
    PlannedFamily,
    PlannedThreshold,
    family_epsilon_lower_bound,
    family_verdict,
    plan_family,
    plan_threshold,
    planned_epsilon_lower_bound,
    planned_verdict,
    split_pilot,
    take_pilot,
)

__all__ = [
    "DEFAULT_THRESHOLD",
    "FPR_TARGETS",
    "OPTIMISTIC_LABEL",
    "PILOT_FRACTION",
    "SCORE_REDUCTIONS",
    "STRATEGY_TYPES",
    "THRESHOLD_STRATEGIES",
    "Bonferroni",
    "EmpiricalTradeOff",
    "EpsilonBound",
    "GdpMuEstimate",
    "HeldOutSplits",
    "MultiSplit",
    "Planned",
    "PlannedRanks",
    "Split",
    "ThresholdChoice",
    "ThresholdStrategy",
    "Verdict",
    "bonferroni_ranks",
    "clopper_pearson_lower",
    "clopper_pearson_upper",
    "confidence_of",
    "curve_epsilon",
    "empirical_tradeoff",
    "epsilon_from_rates",
    "epsilon_lower_bound",
    "gdp_mu_estimate",
    "ideal_epsilon_lb",
    "per_trial_scores",
    "roc_summary",
    "split_scores",
    "threshold_strategy",
    "verdict",
]


GDP_LABEL = (
    "estimate, not a bound: assumes a Gaussian trade-off curve "
    "(shuffling and few-step Poisson are not Gaussian)"
)

DEFAULT_GRID_SIZE = 40
"""k, the number of thresholds of the ``bonferroni`` grid (half per tail)."""

MAX_CANDIDATES = 4000
"""Largest number of candidate thresholds scanned per tail when *choosing* a threshold on a
selection half (geometric in rank); the optimistic maximum scans every threshold."""

MULTISPLIT_K = 11
"""K, the number of split bounds whose median ``multisplit`` reports (odd: a middle value)."""



# --------------------------------------------------------------------------- trade-off points


@dataclass(frozen=True)
class EmpiricalTradeOff:
    """Error counts of the tests "IN iff score >= threshold" at every threshold.

    ``thresholds`` ascending; the last is +inf (nothing called IN). ``false_positives[i]`` =
    #{OUT scores >= thresholds[i]}, ``false_negatives[i]`` = #{IN scores < thresholds[i]}.
    """

    thresholds: np.ndarray
    false_positives: np.ndarray
    false_negatives: np.ndarray
    n_in: int
    n_out: int

    @property
    def fpr(self) -> np.ndarray:
        """Empirical false-positive rates (point estimates)."""
        return self.false_positives / max(self.n_out, 1)

    @property
    def fnr(self) -> np.ndarray:
        """Empirical false-negative rates (point estimates)."""
        return self.false_negatives / max(self.n_in, 1)



def empirical_tradeoff(scores_in: ArrayLike, scores_out: ArrayLike) -> EmpiricalTradeOff:
    """FPR and FNR (as counts) at every distinct score used as threshold, and at +inf."""
    sorted_in = _as_scores("scores_in", scores_in)
    sorted_out = _as_scores("scores_out", scores_out)
    thresholds = np.append(np.unique(np.concatenate([sorted_in, sorted_out])), np.inf)
    fp, fn = _counts(thresholds, sorted_in, sorted_out)
    return EmpiricalTradeOff(thresholds, fp, fn, sorted_in.size, sorted_out.size)


def _candidate_thresholds(
    sorted_in: np.ndarray, sorted_out: np.ndarray, limit: int = MAX_CANDIDATES
) -> np.ndarray:
    """Thresholds to scan: every distinct score, or, for large samples, the OUT order
    statistics at ``limit`` geometrically spaced ranks from the top (dense where FPR is
    small) and the IN order statistics likewise from the bottom (dense where FNR is small)."""
    if sorted_in.size + sorted_out.size <= 2 * limit:
        return np.append(np.unique(np.concatenate([sorted_in, sorted_out])), np.inf)
    top = _geometric_ranks(sorted_out.size, limit)
    bottom = _geometric_ranks(sorted_in.size, limit)
    chosen = np.concatenate([sorted_out[sorted_out.size - top], sorted_in[bottom - 1], [np.inf]])
    return np.unique(chosen)


def _geometric_ranks(n: int, count: int, largest: int | None = None) -> np.ndarray:
    """Distinct integer ranks 1..largest (default n), geometrically spaced, at most ``count``."""
    largest = n if largest is None else max(1, min(largest, n))
    return np.unique(np.round(np.geomspace(1, largest, count)).astype(np.int64))


def bonferroni_ranks(n: int, grid_size: int = DEFAULT_GRID_SIZE) -> np.ndarray:
    """The fixed ranks of the ``bonferroni`` grid on one tail: geometric in 1..ceil(n/2).

    Half of the k = ``grid_size`` thresholds sit at these ranks from the top of the OUT
    scores, half at these ranks from the bottom of the IN scores. A function of n only, so
    the grid is fixed before the scores are seen.
    """
    return _geometric_ranks(n, max(1, grid_size // 2), largest=math.ceil(n / 2))


# --------------------------------------------------------------------------- threshold choice


@dataclass(frozen=True)
class ThresholdChoice:
    """A threshold chosen soundly and what it gives (:meth:`ThresholdStrategy.choose`): the
    threshold of "IN iff score >= t", the error counts on the ``n_in`` IN and ``n_out`` OUT
    evaluation scores, their Clopper-Pearson upper bounds at ``alpha_each`` per rate, and the
    objective's ``value`` there."""

    threshold: float
    false_positives: int
    false_negatives: int
    n_in: int
    n_out: int
    alpha_each: float
    fpr_hi: float
    fnr_hi: float
    value: float


_Evaluation = ThresholdChoice  # the record's former private name



def split_scores(scores: ArrayLike, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(selection half, evaluation half) of ``scores`` after a seeded shuffle.

    Convention shared by every ``split`` computation: ``np.random.default_rng(seed)``
    permutes the scores; the first floor(n/2) are the selection half, the rest evaluation.
    Sorted score files (:class:`audit.stats.score_files.SortedScores`) give the same halves, sorted,
    streamed from disk.
    """
    if _is_presorted(scores):
        return scores.halves(seed)
    array = per_trial_scores("scores", scores)  # one per trial: several per trial refused
    order = np.random.default_rng(seed).permutation(array.size)
    half = array.size // 2
    return array[order[:half]], array[order[half:]]


class PresortedScores(Protocol):
    """Scores sorted ascending that stream their own ``split`` halves
    (:class:`audit.stats.score_files.SortedScores`, marked ``presorted``)."""

    presorted: bool

    def halves(self, seed: int) -> tuple[np.ndarray, np.ndarray]: ...


def _is_presorted(scores: object) -> TypeGuard[PresortedScores]:
    return bool(getattr(scores, "presorted", False))


def _sorted(scores: np.ndarray) -> np.ndarray:
    """``scores`` sorted ascending (as they are when already sorted: a sorted score file)."""
    return scores if getattr(scores, "presorted", False) else np.sort(scores)


def _evaluate(
    thresholds: np.ndarray,
    sorted_in: np.ndarray,
    sorted_out: np.ndarray,
    alpha_each: float,
    objective: Objective,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    fp, fn = _counts(thresholds, sorted_in, sorted_out)
    fpr_hi = _cp_upper_counts(fp, sorted_out.size, alpha_each)
    fnr_hi = _cp_upper_counts(fn, sorted_in.size, alpha_each)
    return fp, fn, fpr_hi, fnr_hi, objective(fpr_hi, fnr_hi)


def _pick(thresholds, sorted_in, sorted_out, alpha_each, objective) -> ThresholdChoice:
    fp, fn, fpr_hi, fnr_hi, value = _evaluate(
        thresholds, sorted_in, sorted_out, alpha_each, objective
    )
    i = int(np.argmax(value))
    return ThresholdChoice(
        float(thresholds[i]), int(fp[i]), int(fn[i]), sorted_in.size, sorted_out.size,
        alpha_each, float(fpr_hi[i]), float(fnr_hi[i]), float(value[i]),
    )


def _sound_choice(
    scores_in: ArrayLike, scores_out: ArrayLike, *, alpha: float,
    threshold: str | ThresholdStrategy, seed: int, grid_size: int, objective: Objective,
    plan: object = None,
) -> ThresholdChoice:
    """Choose a threshold soundly with the strategy ``threshold`` (a name or a
    :class:`ThresholdStrategy`; :meth:`ThresholdStrategy.choose`) and evaluate ``objective``
    there (kept for the benches)."""
    strategy = threshold_strategy(threshold, grid_size=grid_size)
    return strategy.choose(
        scores_in, scores_out, alpha=alpha, seed=seed, objective=objective, plan=plan
    )


def _plan_of(plan: object) -> Any:
    """``plan`` if it is a threshold plan (:class:`audit.stats.thresholds.PlannedThreshold`, which
    this module cannot import: it sits above), else the error naming ``plan``."""
    if plan is None or not all(
        callable(getattr(plan, name, None))
        for name in ("threshold_for", "epsilon_bound", "verdict")
    ):
        raise ValueError(
            "threshold='planned' needs plan=: an audit.stats.thresholds.PlannedThreshold fixed "
            "before the scores were "
            f"seen (audit.stats.thresholds.plan_threshold); got plan={plan!r}"
        )
    return plan



# --------------------------------------------------------------------------- epsilon lower bound



def epsilon_lower_bound(
    scores_in: ArrayLike,
    scores_out: ArrayLike,
    *,
    delta: float,
    confidence: float | None = None,
    alpha: float | None = None,
    threshold: str | ThresholdStrategy = DEFAULT_THRESHOLD,
    seed: int = 0,
    grid_size: int = DEFAULT_GRID_SIZE,
    plan: object = None,
) -> EpsilonBound:
    """Sound eps lower bound at ``delta``, at ``confidence`` (docs/design.md §8.2, module
    docstring; alpha below is 1 - confidence).

    With Clopper-Pearson upper bounds FPR_hi, FNR_hi (docs/design.md §8.1) at a threshold chosen
    soundly (§8.3, §8.5), eps_lb = max(log((1 - delta - FNR_hi) / FPR_hi),
    log((1 - delta - FPR_hi) / FNR_hi)), floored at 0 (Kairouz, Oh, Viswanath 2015; Nasr et
    al. 2021, arXiv 2101.04535).

    Args:
        scores_in: one score per IN trial, higher = "canary IN" (array-like; flattened).
        scores_out: one score per OUT trial, on the same scale.
        delta: the delta at which eps is bounded, in [0, 1).
        confidence: the probability that the bound holds, in (0.5, 1) (default 0.95); alpha =
            1 - confidence is spent on the FPR and FNR bounds together.
        alpha: deprecated spelling of 1 - confidence (a DeprecationWarning;
            :func:`audit.core.confidence.significance`): ``alpha=0.05`` and
            ``confidence=0.95`` give bit-identical bounds.
        threshold: ``planned`` (the default, :data:`DEFAULT_THRESHOLD`, as in a spec and
            ``audit simulate``: with ``plan``, or without one planned on a pilot of 10% of the
            trials that the test leaves out, :class:`Planned`), ``split``, ``multisplit``
            (median of 11 splits at alpha/2), ``bonferroni`` (``grid_size`` thresholds at
            alpha/(2k) per rate), or a :class:`ThresholdStrategy` (:func:`threshold_strategy`).
        seed: seeds the ``split`` shuffle and the pilot (IN with ``seed``, OUT with
            ``seed + 1``); an int >= 0.
        grid_size: the number of thresholds of the ``bonferroni`` grid (>= 2).
        plan: with ``threshold="planned"``, the :class:`audit.stats.thresholds.PlannedThreshold`
            fixed before the scores were seen (one test on all scores, alpha/2 per rate);
            None plans on a pilot.

    Returns:
        :class:`EpsilonBound`: ``epsilon_lb``, which holds with probability >= 1 - alpha over
        the trials, with its evidence (threshold, counts and CP bounds on the evaluation set,
        alpha per rate), and ``epsilon_optimistic``, the exact naive maximum over every
        threshold on all scores (optimistic, not a bound).

    Raises:
        ValueError: empty scores or scores containing NaN; fewer than 2 IN or 2 OUT scores with
            ``split`` or ``multisplit``, or too few for a pilot (under 10 a side) with
            ``planned`` and no plan; delta outside [0, 1), alpha outside (0, 0.5); both
            ``confidence`` and ``alpha``; an unknown ``threshold``; a negative seed;
            ``grid_size`` < 2. The message names the argument.
    """
    level = significance(confidence, alpha, where="epsilon_lower_bound")
    strategy = threshold_strategy(threshold, grid_size=grid_size)
    return strategy.epsilon_bound(
        scores_in, scores_out, delta=delta, alpha=level, seed=seed, plan=plan
    )


# --------------------------------------------------------------------------- verdict




@overload
def curve_epsilon(
    curve: Callable[[np.ndarray], np.ndarray], delta: float, *, grid: int = 20_000
) -> float: ...
@overload
def curve_epsilon(curve: None, delta: float, *, grid: int = 20_000) -> None: ...
@overload
def curve_epsilon(
    curve: Callable[[np.ndarray], np.ndarray] | None, delta: float, *, grid: int = 20_000
) -> float | None: ...
def curve_epsilon(
    curve: Callable[[np.ndarray], np.ndarray] | None, delta: float, *, grid: int = 20_000
) -> float | None:
    """The eps at ``delta`` of a trade-off curve f, or None when there is no curve.

    A curve with an ``epsilon`` method (:class:`audit.theory.curve.TradeOffCurve`) answers
    itself (exact for the stored curve; inf where no finite eps reaches ``delta``). For any
    other callable alpha -> beta, the maximum of :func:`epsilon_from_rates` over ``grid``
    geometric alphas in [1e-15, 1]: f is (eps, delta)-DP iff f(alpha) >= 1 - delta - e^eps
    alpha and its symmetric (Dong, Roth, Su 2022, Prop. 2.5), so the maximum over a grid is
    at most the eps of f (its supremum over every alpha).
    """
    if curve is None:
        return None
    epsilon = getattr(curve, "epsilon", None)
    if callable(epsilon):
        return float(np.asarray(epsilon(np.array([delta]))).ravel()[0])
    alphas = np.geomspace(1e-15, 1.0, grid)
    return float(
        epsilon_from_rates(alphas, np.clip(evaluate_curve(curve, alphas), 0.0, 1.0), delta).max()
    )



def verdict(
    scores_in: ArrayLike,
    scores_out: ArrayLike,
    claim: Callable[[np.ndarray], np.ndarray],
    alpha: float | None = None,
    *,
    confidence: float | None = None,
    threshold: str | ThresholdStrategy = DEFAULT_THRESHOLD,
    seed: int = 0,
    grid_size: int = DEFAULT_GRID_SIZE,
    plan: object = None,
) -> Verdict:
    """Test a claimed trade-off curve ``claim`` (f: alpha -> beta, e.g. an audit.theory
    TradeOffCurve) against the scores. The threshold is chosen soundly (as in
    :func:`epsilon_lower_bound`) to maximise f(FPR_hi) - FNR_hi.

    ``violated`` iff FNR_hi < f(FPR_hi): if the claim held, the true FNR would be at least
    f(FPR) >= f(FPR_hi) (f is non-increasing), so with probability >= 1 - alpha the claim is
    false (docs/design.md §9; thresholds §8.3, §8.5).

    Args:
        scores_in: one score per IN trial, higher = "canary IN".
        scores_out: one score per OUT trial, on the same scale.
        claim: the claimed trade-off function, a callable alpha -> beta (vectorised or not)
            with values in [0, 1], non-increasing on [0, 1]; a guarantee, never a curve of
            kind ``approximation``.
        alpha: deprecated spelling of 1 - confidence, the fourth positional argument as before
            (a DeprecationWarning; bit-identical to ``confidence=1 - alpha``).
        confidence: the confidence of a ``violated`` verdict, in (0.5, 1) (default 0.95).
        threshold: a strategy's name or a :class:`ThresholdStrategy`, as in
            :func:`epsilon_lower_bound` (default ``planned``: without ``plan``, planned on a
            pilot of 10% of the trials to refute ``claim`` and tested on the rest).
        seed: seeds the ``split`` shuffle and the pilot (an int >= 0).
        grid_size: the number of thresholds of the ``bonferroni`` grid (>= 2).
        plan: with ``threshold="planned"``, the plan fixed before the scores were seen (None:
            a pilot's).

    Returns:
        :class:`Verdict`: ``violated`` (True: the claim is refuted at confidence 1 - alpha;
        False, "consistent", proves nothing in the claim's favour), with the threshold, the
        counts, FPR_hi, FNR_hi, f(FPR_hi) and the margin f(FPR_hi) - FNR_hi.

    Raises:
        ValueError: ``claim`` not callable, of kind ``approximation``, or not a trade-off
            function (values outside [0, 1] or rising, checked on 1001 points); alpha outside
            (0, 0.5); and the score, threshold, seed and grid errors of
            :func:`epsilon_lower_bound`.
    """
    level = significance(confidence, alpha, where="verdict")
    strategy = threshold_strategy(threshold, grid_size=grid_size)
    return strategy.verdict(scores_in, scores_out, claim, alpha=level, seed=seed, plan=plan)


def _check_claim(claim: Callable[[np.ndarray], np.ndarray]) -> None:
    """Refuse a claim that is not a callable trade-off function, or is an approximation."""
    if not callable(claim):
        raise ValueError(f"claim={claim!r} must be a trade-off curve: a callable alpha -> beta")
    if getattr(claim, "kind", None) == "approximation":
        raise ValueError(
            "claim must be a guarantee; a curve of kind 'approximation' (e.g. Edgeworth) has no "
            "error bound and is never audited as a claim"
        )
    _check_tradeoff_function(claim)


# --------------------------------------------------------------------------- GDP estimate


@dataclass(frozen=True)
class GdpMuEstimate:
    """mu of Gaussian DP read off one trade-off point: mu = Phi^{-1}(1 - FPR) - Phi^{-1}(FNR).

    ``mu`` uses the CP upper bounds (a lower confidence bound on mu *if* the true curve is
    Gaussian), ``mu_point`` the point estimates. Labelled an estimate: the Gaussian shape is
    assumed, not tested (Dong, Roth, Su, Gaussian Differential Privacy).
    """

    mu: float
    mu_point: float
    threshold: float
    strategy: str
    alpha: float
    label: str = GDP_LABEL

    @property
    def confidence(self) -> float:
        """1 - alpha: the confidence of ``mu`` as a lower bound, were the curve Gaussian."""
        return confidence_of(self.alpha)

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["threshold"] = _json_float(self.threshold)
        return out


def _mu(fpr: np.ndarray, fnr: np.ndarray) -> np.ndarray:
    fpr = np.clip(np.asarray(fpr, dtype=float), 1e-300, 1.0)
    fnr = np.clip(np.asarray(fnr, dtype=float), 1e-300, 1.0)
    return np.clip(norm.isf(fpr) - norm.ppf(fnr), 0.0, None)


def gdp_mu_estimate(
    scores_in: ArrayLike,
    scores_out: ArrayLike,
    *,
    confidence: float | None = None,
    alpha: float | None = None,
    threshold: str | ThresholdStrategy = DEFAULT_THRESHOLD,
    seed: int = 0,
    grid_size: int = DEFAULT_GRID_SIZE,
    plan: object = None,
) -> GdpMuEstimate:
    """GDP mu estimate at a soundly chosen threshold (labelled an estimate, see the class).

    ``mu`` = Phi^{-1}(1 - FPR_hi) - Phi^{-1}(FNR_hi) with Clopper-Pearson upper bounds at
    (1 - confidence)/2 per rate (``alpha=`` the deprecated spelling of 1 - confidence); the
    threshold chosen as in :func:`epsilon_lower_bound` (default ``planned``: without ``plan``,
    the threshold maximising mu on a pilot of 10% of the trials, bounded on the rest).
    """
    level = significance(confidence, alpha, where="gdp_mu_estimate")
    strategy = threshold_strategy(threshold, grid_size=grid_size)
    return strategy.gdp_mu(scores_in, scores_out, alpha=level, seed=seed, plan=plan)


# --------------------------------------------------------------------------- the ceiling


def _inverse_curve(
    curve: Callable[[np.ndarray], np.ndarray], betas: np.ndarray, grid: np.ndarray
) -> np.ndarray:
    """f^{-1}(beta) = the FPR at which f reaches ``betas`` (f non-increasing), by interpolation."""
    values = evaluate_curve(curve, grid)
    order = np.argsort(values, kind="stable")
    return np.interp(betas, values[order], grid[order])


def ideal_points(
    curve: Callable[[np.ndarray], np.ndarray],
    trials: int,
    *,
    confidence: float | None = None,
    alpha: float | None = None,
    threshold: str | ThresholdStrategy = DEFAULT_THRESHOLD,
    grid_size: int = DEFAULT_GRID_SIZE,
    quantile: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(FPR_hi, FNR_hi) an auditor would get at each candidate threshold if the scores'
    trade-off were exactly ``curve``, with ``trials`` IN and ``trials`` OUT trials.

    Error counts are their expectations n a and n f(a) (``quantile=None``), or the ``quantile`` of
    Binomial(n, a) and Binomial(n, f(a)) (pessimistic counts for planning). ``split``: n = the
    evaluation half, every threshold (a on a geometric grid down to 1/(10 n)), CP at alpha/2;
    ``planned``: the same with n = trials (a perfect plan). ``bonferroni``: n = trials, the fixed
    grid of :func:`bonferroni_ranks` on each tail, CP at alpha/(2k). alpha = 1 - ``confidence``
    (``alpha=`` its deprecated spelling); the default strategy is :data:`DEFAULT_THRESHOLD`.
    """
    level = significance(confidence, alpha, where="ideal_points")
    strategy = threshold_strategy(threshold, grid_size=grid_size)
    return strategy.ideal_points(curve, trials, alpha=level, quantile=quantile)


def ideal_epsilon_lb(
    curve: Callable[[np.ndarray], np.ndarray],
    trials: int,
    *,
    delta: float,
    confidence: float | None = None,
    alpha: float | None = None,
    threshold: str | ThresholdStrategy = DEFAULT_THRESHOLD,
    grid_size: int = DEFAULT_GRID_SIZE,
    quantile: float | None = None,
) -> float:
    """The ceiling: the eps lower bound an auditor would certify if the attack's trade-off
    curve were exactly ``curve``, with ``trials`` IN and ``trials`` OUT trials and the same
    threshold strategy as :func:`epsilon_lower_bound` (expected error counts, best threshold;
    with ``quantile``, the counts' binomial quantiles instead, as in :func:`ideal_points`).

    E.g. a Gaussian curve of eps 2.75 at delta = 1e-5 (mu = 0.666) with 1e6 trials certifies
    only about 2.06 with ``split``: the CP bound at FPR ~ 1e-4 costs the rest.

    A projection, not an upper bound on what an audit can show: a real audit's eps_lb is a
    maximum over noisy thresholds and exceeds it often (mu = 1.5, 2e4 trials, delta = 1e-5,
    100 audits with exactly this curve: 47% above it with ``split``, 90% with ``bonferroni``;
    tests/test_stats_coverage.py). alpha = 1 - ``confidence`` (``alpha=`` its deprecated
    spelling); the default strategy is :data:`DEFAULT_THRESHOLD` (a perfect plan).
    """
    delta, level = _check_common(delta, significance(confidence, alpha, where="ideal_epsilon_lb"))
    strategy = threshold_strategy(threshold, grid_size=grid_size)
    fpr_hi, fnr_hi = strategy.ideal_points(curve, trials, alpha=level, quantile=quantile)
    return float(epsilon_from_rates(fpr_hi, fnr_hi, delta).max())


# --------------------------------------------------------------------------- threshold strategies


class ThresholdStrategy(abc.ABC):
    """How the threshold of the test "IN iff score >= t" is chosen soundly (docs/design.md §8.3,
    §8.5, §8.12, §8.20): one frozen dataclass per strategy, as jax_privacy's auditing library
    models its threshold strategies; :func:`threshold_strategy` maps a spec's name to one.

    The common protocol: :meth:`choose` picks the threshold and bounds both rates there (a
    :class:`ThresholdChoice`); :meth:`epsilon_bound`, :meth:`verdict` and :meth:`gdp_mu` return
    the records :class:`EpsilonBound`, :class:`Verdict` and :class:`GdpMuEstimate`;
    :meth:`ideal_points` the rates of the ceiling (:func:`ideal_epsilon_lb`). The audit's
    ``seed`` and, for :class:`Planned`, the ``plan`` fixed before the scores were seen are inputs
    of each call, not fields: the strategy a spec names is one object whatever its seed.
    """

    name: ClassVar[str]
    """The spec's name of the strategy (one of :data:`THRESHOLD_STRATEGIES`)."""
    needs_independent_trials: ClassVar[bool]
    """True when the strategy's bound takes every score for an independent trial and has no form
    valid for k dependent canaries per training (:mod:`audit.stats.many_canaries`, §8.17)."""
    needs_plan: ClassVar[bool] = False
    """True when the threshold is a rule fixed before the scores are seen (``plan=``)."""

    @abc.abstractmethod
    def choose(
        self, scores_in: ArrayLike, scores_out: ArrayLike, *, alpha: float, seed: int,
        objective: Objective, plan: object = None,
    ) -> ThresholdChoice:
        """The threshold chosen soundly (to maximise ``objective`` of (FPR_hi, FNR_hi)) and the
        objective at it, the rates bounded on the scores the choice did not see."""

    def epsilon_bound(
        self, scores_in: ArrayLike, scores_out: ArrayLike, *, delta: float, alpha: float = 0.05,
        seed: int = 0, plan: object = None, optimistic: bool = True,
    ) -> EpsilonBound:
        """The sound eps lower bound at the chosen threshold (:func:`epsilon_lower_bound`);
        ``optimistic=False`` skips the naive maximum (``epsilon_optimistic`` is then NaN)."""
        delta, alpha = _check_common(delta, alpha)
        _as_scores("scores_in", scores_in), _as_scores("scores_out", scores_out)

        def objective(fpr_hi: np.ndarray, fnr_hi: np.ndarray) -> np.ndarray:
            return epsilon_from_rates(fpr_hi, fnr_hi, delta)

        chosen = self.choose(
            scores_in, scores_out, alpha=alpha, seed=seed, objective=objective, plan=plan
        )
        return EpsilonBound(
            epsilon_lb=chosen.value,
            epsilon_optimistic=(
                _naive_maximum(scores_in, scores_out, alpha, objective) if optimistic else math.nan
            ),
            threshold=chosen.threshold,
            strategy=self.name,
            delta=delta,
            alpha=alpha,
            n_in=int(np.size(scores_in)),
            n_out=int(np.size(scores_out)),
            false_positives=chosen.false_positives,
            false_negatives=chosen.false_negatives,
            n_eval_in=chosen.n_in,
            n_eval_out=chosen.n_out,
            fpr_hi=chosen.fpr_hi,
            fnr_hi=chosen.fnr_hi,
            alpha_per_rate=chosen.alpha_each,
        )

    def verdict(
        self, scores_in: ArrayLike, scores_out: ArrayLike,
        claim: Callable[[np.ndarray], np.ndarray], *, alpha: float = 0.05, seed: int = 0,
        plan: object = None,
    ) -> Verdict:
        """The verdict on ``claim`` at the threshold chosen to maximise f(FPR_hi) - FNR_hi
        (:func:`verdict`)."""
        _check_claim(claim)
        _, alpha = _check_common(0.0, alpha)

        def objective(fpr_hi: np.ndarray, fnr_hi: np.ndarray) -> np.ndarray:
            return evaluate_curve(claim, fpr_hi) - fnr_hi

        chosen = self.choose(
            scores_in, scores_out, alpha=alpha, seed=seed, objective=objective, plan=plan
        )
        f_value = float(evaluate_curve(claim, np.array([chosen.fpr_hi]))[0])
        return Verdict(
            violated=bool(chosen.fnr_hi < f_value),
            threshold=chosen.threshold,
            strategy=self.name,
            alpha=alpha,
            false_positives=chosen.false_positives,
            false_negatives=chosen.false_negatives,
            n_eval_in=chosen.n_in,
            n_eval_out=chosen.n_out,
            fpr_hi=chosen.fpr_hi,
            fnr_hi=chosen.fnr_hi,
            f_of_fpr_hi=f_value,
            alpha_per_rate=chosen.alpha_each,
        )

    def gdp_mu(
        self, scores_in: ArrayLike, scores_out: ArrayLike, *, alpha: float = 0.05, seed: int = 0,
        plan: object = None,
    ) -> GdpMuEstimate:
        """The GDP mu estimate at the chosen threshold (:func:`gdp_mu_estimate`)."""
        _, alpha = _check_common(0.0, alpha)
        chosen = self.choose(
            scores_in, scores_out, alpha=alpha, seed=seed, objective=_mu, plan=plan
        )
        point = float(
            _mu(
                np.array([chosen.false_positives / max(chosen.n_out, 1)]),
                np.array([chosen.false_negatives / max(chosen.n_in, 1)]),
            )[0]
        )
        return GdpMuEstimate(
            mu=chosen.value, mu_point=point, threshold=chosen.threshold, strategy=self.name,
            alpha=alpha,
        )

    def ideal_points(
        self, curve: Callable[[np.ndarray], np.ndarray], trials: int, *, alpha: float = 0.05,
        quantile: float | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(FPR_hi, FNR_hi) at each threshold the strategy could pick were the scores' curve
        exactly ``curve`` (:func:`ideal_points`)."""
        trials = check_int("trials", trials, minimum=2)
        dense = np.unique(
            np.concatenate(
                [np.geomspace(1e-3 / trials, 0.5, 4000), 1 - np.geomspace(1e-3 / trials, 0.5, 4000)]
            )
        )
        n, fpr, fnr, alpha_each = self._ideal_rates(curve, trials, alpha, dense)
        fnr = np.clip(fnr, 0.0, 1.0)
        if quantile is None:
            fp, fn = n * fpr, n * fnr
        else:
            fp, fn = binom.ppf(quantile, n, fpr), binom.ppf(quantile, n, fnr)
        return clopper_pearson_upper(fp, n, alpha_each), clopper_pearson_upper(fn, n, alpha_each)

    @abc.abstractmethod
    def _ideal_rates(
        self, curve: Callable[[np.ndarray], np.ndarray], trials: int, alpha: float,
        dense: np.ndarray,
    ) -> tuple[int, np.ndarray, np.ndarray, float]:
        """(evaluation trials n, FPRs, FNRs, alpha per rate) of the ceiling's candidates."""


class HeldOutSplits(ThresholdStrategy):
    """Strategies that choose the threshold on a seeded half of the trials and bound the rates on
    the other half (:func:`split_scores`), reporting the median over :meth:`splits`."""

    needs_independent_trials: ClassVar[bool] = False

    @abc.abstractmethod
    def splits(self, seed: int, alpha: float) -> tuple[tuple[int, float], ...]:
        """(seed, alpha) of each split; the reported bound is the median split's."""

    def choose(
        self, scores_in: ArrayLike, scores_out: ArrayLike, *, alpha: float, seed: int,
        objective: Objective, plan: object = None,
    ) -> ThresholdChoice:
        seed = check_int("seed", seed, minimum=0)
        runs = [
            _split_choice(scores_in, scores_out, alpha_k, seed_k, objective)
            for seed_k, alpha_k in self.splits(seed, alpha)
        ]
        return sorted(runs, key=lambda e: e.value)[len(runs) // 2]

    def _ideal_rates(
        self, curve: Callable[[np.ndarray], np.ndarray], trials: int, alpha: float,
        dense: np.ndarray,
    ) -> tuple[int, np.ndarray, np.ndarray, float]:
        # the typical split: the evaluation half, every threshold, CP at each split's alpha / 2
        n = trials - trials // 2
        fpr = dense[dense >= 0.1 / n]
        return n, fpr, evaluate_curve(curve, fpr), self.splits(0, alpha)[0][1] / 2


def _split_choice(
    scores_in: ArrayLike, scores_out: ArrayLike, alpha: float, seed: int, objective: Objective
) -> ThresholdChoice:
    """One split (module docstring): the threshold maximising ``objective`` at alpha/2 per rate
    on the selection halves (IN with ``seed``, OUT with ``seed + 1``), evaluated on the rest."""
    # Every caller (eps bound, verdict, GDP estimate) rejects NaN or empty scores: a NaN
    # sorts above every threshold and would silently count as a correct "IN".
    _as_scores("scores_in", scores_in), _as_scores("scores_out", scores_out)
    select_in, eval_in = split_scores(scores_in, seed)
    select_out, eval_out = split_scores(scores_out, seed + 1)
    if min(select_in.size, select_out.size) < 1:
        raise ValueError(
            "threshold='split' needs at least 2 IN and 2 OUT scores; got "
            f"{np.size(scores_in)} IN, {np.size(scores_out)} OUT"
        )
    sel_in, sel_out = _sorted(select_in), _sorted(select_out)
    chosen = _pick(_candidate_thresholds(sel_in, sel_out), sel_in, sel_out, alpha / 2, objective)
    ev_in, ev_out = _sorted(eval_in), _sorted(eval_out)
    return _pick(np.array([chosen.threshold]), ev_in, ev_out, alpha / 2, objective)


@dataclass(frozen=True)
class Split(HeldOutSplits):
    """``split``: one seeded half of the IN and of the OUT trials selects the threshold, the other
    half bounds both rates at alpha/2 each (module docstring, §8.3). The half and its seeded
    shuffle are fixed (:func:`split_scores`: the sorted score files stream the same halves)."""

    name: ClassVar[str] = "split"

    def splits(self, seed: int, alpha: float) -> tuple[tuple[int, float], ...]:
        return ((seed, alpha),)


@dataclass(frozen=True)
class MultiSplit(HeldOutSplits):
    """``multisplit``: the median of ``repeats`` (odd) independent splits, each at alpha/2, seeds
    ``seed + 2k``: at level alpha by Markov's inequality (module docstring, §8.5)."""

    repeats: int = MULTISPLIT_K
    name: ClassVar[str] = "multisplit"

    def __post_init__(self) -> None:
        repeats = check_int("repeats", self.repeats, minimum=1)
        if repeats % 2 == 0:
            raise ValueError(f"repeats={repeats} must be odd (the median is the middle value)")

    def splits(self, seed: int, alpha: float) -> tuple[tuple[int, float], ...]:
        return tuple((seed + 2 * k, alpha / 2) for k in range(self.repeats))


@dataclass(frozen=True)
class Bonferroni(ThresholdStrategy):
    """``bonferroni``: ``grid_size`` thresholds fixed by the trial counts (order statistics at
    :func:`bonferroni_ranks` on each tail), each rate bounded at alpha / (2 k) (module
    docstring)."""

    grid_size: int = DEFAULT_GRID_SIZE
    name: ClassVar[str] = "bonferroni"
    needs_independent_trials: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_int("grid_size", self.grid_size, minimum=2)

    def choose(
        self, scores_in: ArrayLike, scores_out: ArrayLike, *, alpha: float, seed: int,
        objective: Objective, plan: object = None,
    ) -> ThresholdChoice:
        check_int("seed", seed, minimum=0)
        sorted_in = _as_scores("scores_in", scores_in)
        sorted_out = _as_scores("scores_out", scores_out)
        top = sorted_out[sorted_out.size - bonferroni_ranks(sorted_out.size, self.grid_size)]
        bottom = sorted_in[bonferroni_ranks(sorted_in.size, self.grid_size) - 1]
        # Thresholds just above an IN order statistic: FN counts that score (rank r -> FN >= r).
        grid = np.concatenate([top, np.nextafter(bottom, np.inf)])
        return _pick(grid, sorted_in, sorted_out, alpha / (2 * grid.size), objective)

    def _ideal_rates(
        self, curve: Callable[[np.ndarray], np.ndarray], trials: int, alpha: float,
        dense: np.ndarray,
    ) -> tuple[int, np.ndarray, np.ndarray, float]:
        ranks = bonferroni_ranks(trials, self.grid_size)
        rates = ranks / trials
        fpr = np.concatenate([rates, _inverse_curve(curve, rates, dense)])
        fnr = np.concatenate([evaluate_curve(curve, rates), rates])
        return trials, fpr, fnr, alpha / (2 * (2 * ranks.size))





@dataclass(frozen=True)
class Planned(ThresholdStrategy):
    """``planned``: an order statistic whose rank is fixed before any score is seen, from the
    theory's lower curve and the trial counts, or from a pilot of ``pilot_fraction`` of the
    trials left out of the test; one joint test of both rates on every test trial (§8.12).

    The plan (:class:`audit.stats.thresholds.PlannedThreshold`, made by
    :func:`audit.stats.thresholds.plan_threshold`) is the ``plan=`` input of each call; the eps
    bound and the verdict are its joint tests, :meth:`choose` (the GDP estimate's threshold) its
    threshold with Clopper-Pearson at alpha/2 per rate.

    Without a plan (``plan=None``, what a bare call of :func:`epsilon_lower_bound`,
    :func:`verdict` or :func:`gdp_mu_estimate` has) the plan is made from a pilot, as a spec
    without a theory curve and ``audit simulate`` make it
    (:func:`audit.stats.thresholds.take_pilot`): a seeded random ``pilot_fraction`` of the IN
    trials (seed ``seed``) and of the OUT trials (``seed + 1``) is split off, the rule is planned
    on the pilot's empirical curve, and the test runs on the other trials only. The pilot is
    chosen by position, independently of the values, so the test trials are i.i.d. and
    independent of the plan: the joint test is sound at 1 - alpha exactly as with a plan fixed
    in advance (it spends the pilot's trials instead of a factor in alpha). The GDP estimate's
    threshold is the one maximising its objective on the pilot, bounded on the test trials.
    """

    pilot_fraction: float = PILOT_FRACTION
    name: ClassVar[str] = "planned"
    needs_independent_trials: ClassVar[bool] = True
    needs_plan: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_real(
            "pilot_fraction", self.pilot_fraction, minimum=0.0, maximum=1.0,
            strict_minimum=True, strict_maximum=True,
        )

    def pilot(self, scores_in: ArrayLike, scores_out: ArrayLike, seed: int) -> Pilot:
        """The pilot a call without ``plan=`` plans on and the test trials it leaves
        (:func:`audit.stats.thresholds.take_pilot`, class docstring), or the refusal, naming
        the fixes, when a side is too small for a pilot and a test."""
        seed = check_int("seed", seed, minimum=0)
        self._check_pilot(scores_in, scores_out)
        return take_pilot(scores_in, scores_out, seed, self.pilot_fraction)

    def _check_pilot(self, scores_in: ArrayLike, scores_out: ArrayLike) -> None:
        for side, scores in (("scores_in", scores_in), ("scores_out", scores_out)):
            n = int(np.size(scores))
            k = round(self.pilot_fraction * n)
            if k < 1 or n - k < 1:
                raise ValueError(
                    f"threshold='planned' without plan= plans on a pilot of "
                    f"{self.pilot_fraction:.0%} of each side's trials, left out of the test; "
                    f"{side} has {n} score(s), too few for a pilot and a test. Pass "
                    "threshold='split' (or 'bonferroni'), or plan= (an "
                    "audit.stats.thresholds.PlannedThreshold fixed before the scores were seen)"
                )

    def _pilot_plan(
        self, scores_in: ArrayLike, scores_out: ArrayLike, *, alpha: float, seed: int,
        delta: float | None = None, claim: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> tuple[PlannedThreshold, Pilot]:
        taken = self.pilot(scores_in, scores_out, seed)
        plan = plan_threshold(
            taken.curve, taken.test_in.size, taken.test_out.size, alpha=alpha, delta=delta,
            claim=claim, source="pilot", curve_name=taken.name, pilot=taken.sizes,
        )
        return plan, taken

    def choose(
        self, scores_in: ArrayLike, scores_out: ArrayLike, *, alpha: float, seed: int,
        objective: Objective, plan: object = None,
    ) -> ThresholdChoice:
        check_int("seed", seed, minimum=0)
        sorted_in = _as_scores("scores_in", scores_in)
        sorted_out = _as_scores("scores_out", scores_out)
        if plan is None:  # the threshold best on the pilot, bounded on the test trials
            self._check_pilot(scores_in, scores_out)
            pilot_in, test_in = split_pilot(scores_in, seed, self.pilot_fraction)
            pilot_out, test_out = split_pilot(scores_out, seed + 1, self.pilot_fraction)
            pilot_in, pilot_out = np.sort(pilot_in), np.sort(pilot_out)
            chosen = _pick(
                _candidate_thresholds(pilot_in, pilot_out), pilot_in, pilot_out, alpha / 2,
                objective,
            )
            return _pick(
                np.array([chosen.threshold]), np.sort(test_in), np.sort(test_out), alpha / 2,
                objective,
            )
        t = _plan_of(plan).threshold_for(sorted_in, sorted_out)
        return _pick(np.array([t]), sorted_in, sorted_out, alpha / 2, objective)

    def epsilon_bound(
        self, scores_in: ArrayLike, scores_out: ArrayLike, *, delta: float, alpha: float = 0.05,
        seed: int = 0, plan: object = None, optimistic: bool = True,
    ) -> EpsilonBound:
        """The plan's joint test of both rates
        (:func:`audit.stats.thresholds.planned_epsilon_lower_bound`); without a plan, planned on
        a pilot and tested on the other trials (class docstring): ``n_in``/``n_out`` count
        every trial, ``n_eval_in``/``n_eval_out`` the test's."""
        delta, alpha = _check_common(delta, alpha)
        _as_scores("scores_in", scores_in), _as_scores("scores_out", scores_out)
        if plan is None:
            planned, taken = self._pilot_plan(
                scores_in, scores_out, alpha=alpha, seed=seed, delta=delta
            )
            bound, _ = planned_epsilon_lower_bound(
                taken.test_in, taken.test_out, planned, delta=delta, alpha=alpha, seed=seed,
                optimistic=optimistic,
            )
            return replace(bound, n_in=int(np.size(scores_in)), n_out=int(np.size(scores_out)))
        result: EpsilonBound = _plan_of(plan).epsilon_bound(
            scores_in, scores_out, delta=delta, alpha=alpha, seed=seed, optimistic=optimistic
        )
        return result

    def verdict(
        self, scores_in: ArrayLike, scores_out: ArrayLike,
        claim: Callable[[np.ndarray], np.ndarray], *, alpha: float = 0.05, seed: int = 0,
        plan: object = None,
    ) -> Verdict:
        """The plan's joint test of the claim (:func:`audit.stats.thresholds.planned_verdict`);
        without a plan, planned on a pilot to refute ``claim`` and tested on the other trials."""
        _check_claim(claim)
        _, alpha = _check_common(0.0, alpha)
        if plan is None:
            planned, taken = self._pilot_plan(
                scores_in, scores_out, alpha=alpha, seed=seed, claim=claim
            )
            return planned_verdict(
                taken.test_in, taken.test_out, claim, planned, alpha=alpha, seed=seed
            )[0]
        decision: Verdict = _plan_of(plan).verdict(
            scores_in, scores_out, claim, alpha=alpha, seed=seed
        )
        return decision

    def _ideal_rates(
        self, curve: Callable[[np.ndarray], np.ndarray], trials: int, alpha: float,
        dense: np.ndarray,
    ) -> tuple[int, np.ndarray, np.ndarray, float]:
        # a perfect plan: every trial, one test, CP at alpha / 2 (the joint test's projection
        # is audit.stats.thresholds.plan_threshold's)
        fpr = dense[dense >= 0.1 / trials]
        return trials, fpr, evaluate_curve(curve, fpr), alpha / 2


@dataclass(frozen=True)
class PlannedRanks(ThresholdStrategy):
    """``planned_ranks``: the K rules of :class:`audit.stats.thresholds.PlannedFamily`, order
    statistics at ranks 1, 4, 16, ... (up to an eighth of the trials) on both tails, fixed by
    the trial counts alone, each a joint test at alpha / K (Bonferroni); the eps bound is the
    largest of the K, the verdict "violated" iff one of them refutes the claim
    (:func:`audit.stats.thresholds.family_epsilon_lower_bound`, ``family_verdict``; §8.12).

    For scores without a theory curve: no pilot is taken, every trial is tested, and the price
    is alpha / K instead of a plan. ``plan`` (a :class:`PlannedFamily`) may be given; None
    plans from the counts. :meth:`choose` (the GDP estimate's threshold) takes the best of the
    K rules' thresholds with Clopper-Pearson at alpha / (2K) per rate."""

    name: ClassVar[str] = "planned_ranks"
    needs_independent_trials: ClassVar[bool] = True

    @staticmethod
    def _family(plan: object, n_in: int, n_out: int) -> PlannedFamily:
        if plan is None:
            return plan_family(n_in, n_out)
        if not isinstance(plan, PlannedFamily):
            raise ValueError(
                "threshold='planned_ranks' takes plan=None (planned from the trial counts) or an "
                f"audit.stats.thresholds.PlannedFamily; got plan={plan!r}"
            )
        return plan

    def choose(
        self, scores_in: ArrayLike, scores_out: ArrayLike, *, alpha: float, seed: int,
        objective: Objective, plan: object = None,
    ) -> ThresholdChoice:
        check_int("seed", seed, minimum=0)
        sorted_in = _as_scores("scores_in", scores_in)
        sorted_out = _as_scores("scores_out", scores_out)
        family = self._family(plan, sorted_in.size, sorted_out.size)
        grid = np.array([rule.threshold_for(sorted_in, sorted_out) for rule in family.rules])
        return _pick(grid, sorted_in, sorted_out, alpha / (2 * grid.size), objective)

    def epsilon_bound(
        self, scores_in: ArrayLike, scores_out: ArrayLike, *, delta: float, alpha: float = 0.05,
        seed: int = 0, plan: object = None, optimistic: bool = True,
    ) -> EpsilonBound:
        """The largest of the K joint tests' eps_lb at alpha / K each (class docstring)."""
        check_int("seed", seed, minimum=0)
        family = self._family(plan, int(np.size(scores_in)), int(np.size(scores_out)))
        bound, _ = family_epsilon_lower_bound(
            scores_in, scores_out, family, delta=delta, alpha=alpha, optimistic=optimistic
        )
        return bound

    def verdict(
        self, scores_in: ArrayLike, scores_out: ArrayLike,
        claim: Callable[[np.ndarray], np.ndarray], *, alpha: float = 0.05, seed: int = 0,
        plan: object = None,
    ) -> Verdict:
        """``violated`` iff one of the K joint tests refutes ``claim`` at alpha / K."""
        _check_claim(claim)
        check_int("seed", seed, minimum=0)
        family = self._family(plan, int(np.size(scores_in)), int(np.size(scores_out)))
        return family_verdict(scores_in, scores_out, claim, family, alpha=alpha)[0]

    def _ideal_rates(
        self, curve: Callable[[np.ndarray], np.ndarray], trials: int, alpha: float,
        dense: np.ndarray,
    ) -> tuple[int, np.ndarray, np.ndarray, float]:
        family = plan_family(trials, trials)
        rates = np.array([rule.rank for rule in family.rules if rule.side == "out"]) / trials
        fpr = np.concatenate([rates, _inverse_curve(curve, rates, dense)])
        fnr = np.concatenate([evaluate_curve(curve, rates), rates])
        return trials, fpr, fnr, alpha / (2 * family.size)


STRATEGY_TYPES: dict[str, type[ThresholdStrategy]] = {
    kind.name: kind for kind in (Split, Bonferroni, MultiSplit, Planned, PlannedRanks)
}
"""The strategy of each name, in the order of :data:`THRESHOLD_STRATEGIES`."""


def threshold_strategy(
    name_or_strategy: str | ThresholdStrategy, *, grid_size: int = DEFAULT_GRID_SIZE
) -> ThresholdStrategy:
    """The :class:`ThresholdStrategy` a spec's ``threshold`` names (one of
    :data:`THRESHOLD_STRATEGIES`), or the strategy itself when one is given. ``grid_size`` is the
    grid of a ``bonferroni`` named here. An unknown name is refused with the allowed names and
    the closest one (a ValueError naming ``threshold``)."""
    if isinstance(name_or_strategy, ThresholdStrategy):
        return name_or_strategy
    kind = STRATEGY_TYPES[check_choice("threshold", name_or_strategy, THRESHOLD_STRATEGIES)]
    return Bonferroni(grid_size=grid_size) if kind is Bonferroni else kind()


# --------------------------------------------------------------------------- ROC estimates


def _mann_whitney_u(sorted_in: np.ndarray, sorted_out: np.ndarray) -> float:
    """U of the IN sample: scipy's ``mannwhitneyu`` (ties count 1/2), or for sorted score files
    (``blocks``) the same number counted block by block: U = sum over IN scores x of
    #{OUT < x} + #{OUT = x} / 2, an integer plus a half computed exactly (scipy's float sum of
    ranks, multiples of 1/2 below 2**52, is exact too: the two agree bit for bit)."""
    reader = getattr(sorted_in, "blocks", None)
    if reader is None:
        return float(
            mannwhitneyu(
                sorted_in, sorted_out, alternative="two-sided", method="asymptotic"
            ).statistic
        )
    twice = 0
    for block in reader(THRESHOLD_BLOCK):
        left = np.searchsorted(sorted_out, block, side="left")
        right = np.searchsorted(sorted_out, block, side="right")
        twice += int(left.sum(dtype=np.int64)) + int(right.sum(dtype=np.int64))
    return twice / 2

FPR_TARGETS: tuple[float, ...] = (0.001, 0.01)
"""FPRs at which :func:`roc_summary` reports the TPR (0.1%, 1%)."""

ROC_LABEL = (
    "estimates, not bounds: TPR at an empirical FPR <= target (Clopper-Pearson interval on the "
    "TPR), AUROC"
)


def roc_summary(
    scores_in: ArrayLike,
    scores_out: ArrayLike,
    *,
    confidence: float | None = None,
    alpha: float | None = None,
    fpr_targets: tuple[float, ...] = FPR_TARGETS,
) -> dict[str, object]:
    """TPR at fixed FPRs with Clopper-Pearson intervals, and the AUROC (estimates, labelled).

    For a target phi the threshold t is set from the OUT scores alone: just above the
    (floor(phi n_out) + 1)-th largest OUT score, so the empirical FPR #{OUT >= t}/n_out <= phi.
    Given t, #{IN >= t} is Binomial(n_in, TPR(t)), and the two-sided Clopper-Pearson interval
    [CP_lower(alpha/2), CP_upper(alpha/2)] covers TPR(t) with probability >= 1 - alpha. The
    true FPR at t is near phi but estimated, hence "estimate". AUROC = U / (n_in n_out), U the
    Mann-Whitney statistic (ties count 1/2), from scipy. alpha = 1 - ``confidence`` (default
    0.95; ``alpha=`` its deprecated spelling).
    """
    _, alpha = _check_common(0.0, significance(confidence, alpha, where="roc_summary"))
    sorted_in = _as_scores("scores_in", scores_in)
    sorted_out = _as_scores("scores_out", scores_out)
    rows = []
    for phi in fpr_targets:
        phi = check_real("fpr_targets", phi, minimum=0.0, maximum=1.0, strict_minimum=True)
        k = math.floor(phi * sorted_out.size)
        t = (
            np.inf
            if k >= sorted_out.size
            else float(np.nextafter(sorted_out[sorted_out.size - 1 - k], np.inf))
        )
        fp, fn = _counts(np.array([t]), sorted_in, sorted_out)
        tp = sorted_in.size - int(fn[0])
        rows.append({
            "fpr_target": phi,
            "threshold": _json_float(t),
            "fpr": int(fp[0]) / sorted_out.size,
            "tpr": tp / sorted_in.size,
            "tpr_lo": float(clopper_pearson_lower(tp, sorted_in.size, alpha / 2)),
            "tpr_hi": float(clopper_pearson_upper(tp, sorted_in.size, alpha / 2)),
            "confidence": 1 - alpha,
        })
    u = _mann_whitney_u(sorted_in, sorted_out)
    return {
        "label": ROC_LABEL,
        "auroc": float(u) / (sorted_in.size * sorted_out.size),
        "tpr_at_fpr": rows,
    }
