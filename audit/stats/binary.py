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
  rate is independent of that threshold, so CP holds conditionally.

Each strategy is a frozen dataclass with one protocol (:class:`ThresholdStrategy`: :class:`Split`,
:class:`MultiSplit`, :class:`Bonferroni`, and :class:`Planned`, whose rule is fixed before the
scores are seen, :mod:`audit.stats.thresholds`); :func:`threshold_strategy` maps a spec's name to
one (docs/design.md §8.20).

The naive maximum over all thresholds on all scores is reported beside the bound as
``epsilon_optimistic``, labelled "optimistic, not a bound"; it scans every distinct threshold
(:func:`_naive_maximum`).

Estimates that users of other auditing tools expect (:func:`roc_summary`): the TPR at a fixed
FPR (0.1%, 1%) with a Clopper-Pearson interval, and the AUROC; labelled estimates.
"""

from __future__ import annotations

import abc
import functools
import math
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, Protocol, TypeGuard, cast, overload

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import binom, mannwhitneyu, norm
from statsmodels.stats.proportion import proportion_confint

from audit.core.names import DEFAULT_THRESHOLD, THRESHOLD_STRATEGIES
from audit.core.validation import check_choice, check_int, check_real

__all__ = [
    "DEFAULT_THRESHOLD",
    "FPR_TARGETS",
    "OPTIMISTIC_LABEL",
    "PILOT_FRACTION",
    "STRATEGY_TYPES",
    "THRESHOLD_STRATEGIES",
    "Bonferroni",
    "EmpiricalTradeOff",
    "EpsilonBound",
    "GdpMuEstimate",
    "HeldOutSplits",
    "MultiSplit",
    "Planned",
    "Split",
    "ThresholdChoice",
    "ThresholdStrategy",
    "Verdict",
    "bonferroni_ranks",
    "clopper_pearson_lower",
    "clopper_pearson_upper",
    "curve_epsilon",
    "empirical_tradeoff",
    "epsilon_from_rates",
    "epsilon_lower_bound",
    "gdp_mu_estimate",
    "ideal_epsilon_lb",
    "roc_summary",
    "split_scores",
    "threshold_strategy",
    "verdict",
]

OPTIMISTIC_LABEL = "optimistic, not a bound"
"""Label carried by every naive maximum over thresholds."""

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


# --------------------------------------------------------------------------- Clopper-Pearson


def clopper_pearson_upper(
    count: np.ndarray | float, nobs: np.ndarray | int, alpha: float
) -> np.ndarray:
    """One-sided Clopper-Pearson upper bound: Pr[p <= upper] >= 1 - alpha.

    upper = Beta^{-1}(1 - alpha; count + 1, nobs - count), and 1 when count = nobs.
    Computed as the upper end of statsmodels' two-sided ``proportion_confint(method="beta")``
    at level 1 - 2 alpha, whose ends are exactly the two one-sided 1 - alpha bounds (this
    avoids statsmodels 0.15's easily inverted ``alternative=``). Counts may be real
    (expected counts, used by :func:`ideal_epsilon_lb`).
    """
    alpha = check_real(
        "alpha", alpha, minimum=0.0, maximum=0.5, strict_minimum=True, strict_maximum=True
    )
    count, nobs = np.broadcast_arrays(np.asarray(count, dtype=float), np.asarray(nobs, dtype=float))
    _, upper = proportion_confint(count, np.maximum(nobs, 1.0), alpha=2 * alpha, method="beta")
    upper = np.where(count >= nobs, 1.0, np.asarray(upper, dtype=float))
    return np.where(nobs > 0, upper, 1.0)


def clopper_pearson_lower(
    count: np.ndarray | float, nobs: np.ndarray | int, alpha: float
) -> np.ndarray:
    """One-sided Clopper-Pearson lower bound: Pr[p >= lower] >= 1 - alpha.

    lower = Beta^{-1}(alpha; count, nobs - count + 1), and 0 when count = 0 (see
    :func:`clopper_pearson_upper` for how statsmodels is called).
    """
    alpha = check_real(
        "alpha", alpha, minimum=0.0, maximum=0.5, strict_minimum=True, strict_maximum=True
    )
    count, nobs = np.broadcast_arrays(np.asarray(count, dtype=float), np.asarray(nobs, dtype=float))
    lower, _ = proportion_confint(count, np.maximum(nobs, 1.0), alpha=2 * alpha, method="beta")
    lower = np.where(count <= 0, 0.0, np.asarray(lower, dtype=float))
    return np.where(nobs > 0, lower, 0.0)


TABLE_LIMIT = 200_000
"""Sample sizes up to which CP bounds of all counts 0..n are tabulated once (speed)."""


@functools.lru_cache(maxsize=64)
def _cp_upper_table(nobs: int, alpha: float) -> np.ndarray:
    table = clopper_pearson_upper(np.arange(nobs + 1), nobs, alpha)
    table.setflags(write=False)
    return table


def _cp_upper_counts(counts: np.ndarray, nobs: int, alpha: float) -> np.ndarray:
    """clopper_pearson_upper for integer counts, from a cached table when n is small."""
    if nobs <= TABLE_LIMIT and counts.size > 64:
        return _cp_upper_table(int(nobs), float(alpha))[np.asarray(counts, dtype=np.int64)]
    return clopper_pearson_upper(counts, nobs, alpha)


def epsilon_from_rates(fpr: ArrayLike, fnr: ArrayLike, delta: float) -> np.ndarray:
    """eps = max(log((1 - delta - FNR)/FPR), log((1 - delta - FPR)/FNR)), floored at 0.

    With FPR, FNR upper confidence bounds this is the eps lower bound of docs/design.md §8.2.
    """
    fpr_ = np.asarray(fpr, dtype=float)
    fnr_ = np.asarray(fnr, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.log(np.clip(1.0 - delta - fnr_, 0.0, None)) - np.log(fpr_)
        b = np.log(np.clip(1.0 - delta - fpr_, 0.0, None)) - np.log(fnr_)
    eps = np.fmax(a, b)
    return np.where(np.isnan(eps), 0.0, np.clip(eps, 0.0, None))


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


def _as_scores(name: str, scores: ArrayLike) -> np.ndarray:
    # sorted and checked already (audit.stats.score_files): no copy
    if isinstance(scores, np.ndarray) and getattr(scores, "presorted", False):
        return scores
    array = np.asarray(scores, dtype=float).ravel()
    if array.size == 0:
        raise ValueError(f"{name} is empty; need at least one score")
    if np.isnan(array).any():
        raise ValueError(f"{name} contains NaN; every trial needs a score")
    return np.sort(array)


def _counts(
    thresholds: np.ndarray, sorted_in: np.ndarray, sorted_out: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(FP, FN) at each threshold for the rule "IN iff score >= t"."""
    fp = sorted_out.size - np.searchsorted(sorted_out, thresholds, side="left")
    fn = np.searchsorted(sorted_in, thresholds, side="left")
    return fp, fn


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

# An objective maps (FPR_hi, FNR_hi) arrays to the value that a threshold should maximise.
Objective = Callable[[np.ndarray, np.ndarray], np.ndarray]


def split_scores(scores: ArrayLike, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(selection half, evaluation half) of ``scores`` after a seeded shuffle.

    Convention shared by every ``split`` computation: ``np.random.default_rng(seed)``
    permutes the scores; the first floor(n/2) are the selection half, the rest evaluation.
    Sorted score files (:class:`audit.stats.score_files.SortedScores`) give the same halves, sorted,
    streamed from disk.
    """
    if _is_presorted(scores):
        return scores.halves(seed)
    array = np.asarray(scores, dtype=float).ravel()
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


_LOWER_TABLE_EXACT = 4096
_LOWER_TABLE_GEOMETRIC = 4000


@functools.lru_cache(maxsize=16)
def _cp_upper_lower_table(nobs: int, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """(counts, CP_upper(counts)) at every count up to 4096 and 4000 geometric counts above:
    CP_upper is increasing in the count, so CP_upper(k) >= the table's value at the largest
    tabulated count <= k (a cheap lower bound, within 0.4% above 4096 for n <= 1e7)."""
    counts = np.arange(min(nobs, _LOWER_TABLE_EXACT) + 1)
    if nobs > _LOWER_TABLE_EXACT:
        counts = np.unique(
            np.concatenate(
                [
                    counts,
                    np.round(np.geomspace(_LOWER_TABLE_EXACT, nobs, _LOWER_TABLE_GEOMETRIC)).astype(
                        np.int64
                    ),
                ]
            )
        )
    values = clopper_pearson_upper(counts, nobs, alpha)
    counts.setflags(write=False)
    values.setflags(write=False)
    return counts, values


def _cp_upper_at_most(counts: np.ndarray, nobs: int, alpha: float) -> np.ndarray:
    """A lower bound on clopper_pearson_upper(counts, nobs, alpha), from the table."""
    grid, values = _cp_upper_lower_table(int(nobs), float(alpha))
    return values[np.searchsorted(grid, counts, side="right") - 1]


def _naive_maximum(
    scores_in: ArrayLike,
    scores_out: ArrayLike,
    alpha: float,
    objective: Objective,
    batch: int = 4096,
) -> float:
    """max over every threshold of objective(FPR_hi, FNR_hi) on all scores (optimistic).

    Every objective here (eps bound, verdict margin, GDP mu) is non-increasing in both
    rates, so for a given FN count the best threshold is the highest one with that count:
    an IN score (or +inf). Those n_in + 1 thresholds, block by block (:data:`THRESHOLD_BLOCK`,
    memory bounded whatever n_in), are ranked by an upper bound of the objective (CP bounds
    replaced by :func:`_cp_upper_at_most`), then the exact objective is computed in batches in
    that order until no remaining upper bound of the block beats the best so far: the exact
    maximum over every threshold, without a CP bound per threshold at 1e6 scores.
    """
    sorted_in = _as_scores("scores_in", scores_in)
    sorted_out = _as_scores("scores_out", scores_out)
    a = alpha / 2
    best = -np.inf
    # The thresholds go in blocks of ascending IN scores (sorted score files are read block by
    # block, audit.stats.score_files): the maximum over the blocks of each block's maximum is the
    # same maximum, each threshold's exact objective computed by the same functions.
    for block in _threshold_blocks(sorted_in):
        thresholds = np.unique(block)
        fp, fn = _counts(thresholds, sorted_in, sorted_out)
        with np.errstate(divide="ignore", invalid="ignore"):
            upper = objective(
                _cp_upper_at_most(fp, sorted_out.size, a), _cp_upper_at_most(fn, sorted_in.size, a)
            )
        upper = np.where(np.isnan(upper), np.inf, upper)
        order = np.argsort(-upper, kind="stable")
        for start in range(0, order.size, batch):
            chosen = order[start:start + batch]
            if upper[chosen[0]] <= best:
                break
            exact = objective(
                _cp_upper_counts(fp[chosen], sorted_out.size, a),
                _cp_upper_counts(fn[chosen], sorted_in.size, a),
            )
            best = max(best, float(np.max(exact)))
    return best


THRESHOLD_BLOCK = 1 << 20
"""IN scores taken as thresholds at once by :func:`_naive_maximum`."""


def _threshold_blocks(sorted_in: np.ndarray) -> Iterator[np.ndarray]:
    """The sorted IN scores in blocks of :data:`THRESHOLD_BLOCK` (read from the file for a sorted
    score file, ``blocks``), then [+inf]."""
    reader = getattr(sorted_in, "blocks", None)
    if reader is not None:
        yield from reader(THRESHOLD_BLOCK)
    else:
        for start in range(0, sorted_in.size, THRESHOLD_BLOCK):
            yield sorted_in[start : start + THRESHOLD_BLOCK]
    yield np.array([np.inf])


# --------------------------------------------------------------------------- epsilon lower bound


@dataclass(frozen=True)
class EpsilonBound:
    """A sound eps lower bound at (delta, confidence 1 - alpha), with its evidence.

    ``epsilon_lb`` holds with probability >= 1 - alpha over the trials. ``epsilon_optimistic``
    is the naive maximum over every threshold of the same CP-based bound on all scores, the
    threshold chosen on the scores it is evaluated on: optimistic, not a bound.
    The counts and CP bounds are those of the evaluation set at the chosen threshold
    (the second half for ``split``, all scores for ``bonferroni``).
    """

    epsilon_lb: float
    epsilon_optimistic: float
    threshold: float
    strategy: str
    delta: float
    alpha: float
    n_in: int
    n_out: int
    false_positives: int
    false_negatives: int
    n_eval_in: int
    n_eval_out: int
    fpr_hi: float
    fnr_hi: float
    alpha_per_rate: float
    optimistic_label: str = OPTIMISTIC_LABEL

    @property
    def fpr(self) -> float:
        """Point estimate of the FPR at the chosen threshold (evaluation set)."""
        return self.false_positives / max(self.n_eval_out, 1)

    @property
    def fnr(self) -> float:
        """Point estimate of the FNR at the chosen threshold (evaluation set)."""
        return self.false_negatives / max(self.n_eval_in, 1)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready dict (floats; inf thresholds as the string "inf")."""
        out = asdict(self)
        out["threshold"] = _json_float(self.threshold)
        out["fpr"], out["fnr"] = self.fpr, self.fnr
        return out


def _json_float(value: float) -> float | str:
    return value if math.isfinite(value) else ("inf" if value > 0 else "-inf")


def _check_common(delta: float, alpha: float) -> tuple[float, float]:
    delta = check_real("delta", delta, minimum=0.0, maximum=1.0, strict_maximum=True)
    alpha = check_real(
        "alpha", alpha, minimum=0.0, maximum=0.5, strict_minimum=True, strict_maximum=True
    )
    return delta, alpha


def epsilon_lower_bound(
    scores_in: ArrayLike,
    scores_out: ArrayLike,
    *,
    delta: float,
    alpha: float = 0.05,
    threshold: str | ThresholdStrategy = "split",
    seed: int = 0,
    grid_size: int = DEFAULT_GRID_SIZE,
    plan: object = None,
) -> EpsilonBound:
    """Sound eps lower bound at ``delta``, confidence 1 - alpha (docs/design.md §8.2, module
    docstring).

    With Clopper-Pearson upper bounds FPR_hi, FNR_hi (docs/design.md §8.1) at a threshold chosen
    soundly (§8.3, §8.5), eps_lb = max(log((1 - delta - FNR_hi) / FPR_hi),
    log((1 - delta - FPR_hi) / FNR_hi)), floored at 0 (Kairouz, Oh, Viswanath 2015; Nasr et
    al. 2021, arXiv 2101.04535).

    Args:
        scores_in: one score per IN trial, higher = "canary IN" (array-like; flattened).
        scores_out: one score per OUT trial, on the same scale.
        delta: the delta at which eps is bounded, in [0, 1).
        alpha: 1 - confidence, in (0, 0.5); split equally between the FPR and FNR bounds.
        threshold: ``split``, ``multisplit`` (median of 11 splits at alpha/2), ``bonferroni``
            (``grid_size`` thresholds at alpha/(2k) per rate) or ``planned`` (with ``plan``), or
            a :class:`ThresholdStrategy` (:func:`threshold_strategy`).
        seed: seeds the ``split`` shuffle (IN with ``seed``, OUT with ``seed + 1``); an int >= 0.
        grid_size: the number of thresholds of the ``bonferroni`` grid (>= 2).
        plan: with ``threshold="planned"``, the :class:`audit.stats.thresholds.PlannedThreshold`
            fixed before the scores were seen (one test on all scores, alpha/2 per rate).

    Returns:
        :class:`EpsilonBound`: ``epsilon_lb``, which holds with probability >= 1 - alpha over
        the trials, with its evidence (threshold, counts and CP bounds on the evaluation set,
        alpha per rate), and ``epsilon_optimistic``, the exact naive maximum over every
        threshold on all scores (optimistic, not a bound).

    Raises:
        ValueError: empty scores or scores containing NaN; fewer than 2 IN or 2 OUT scores with
            ``split`` or ``multisplit``; delta outside [0, 1), alpha outside (0, 0.5); an
            unknown ``threshold``; a negative seed; ``grid_size`` < 2. The message names the
            argument.
    """
    strategy = threshold_strategy(threshold, grid_size=grid_size)
    return strategy.epsilon_bound(
        scores_in, scores_out, delta=delta, alpha=alpha, seed=seed, plan=plan
    )


# --------------------------------------------------------------------------- verdict


@dataclass(frozen=True)
class Verdict:
    """Whether the scores refute a claimed trade-off curve f at confidence 1 - alpha.

    ``violated`` iff FNR_hi < f(FPR_hi) at a soundly chosen threshold: if the claim held,
    FNR >= f(FPR) >= f(FPR_hi) > FNR_hi >= FNR with probability >= 1 - alpha, a contradiction.
    """

    violated: bool
    threshold: float
    strategy: str
    alpha: float
    false_positives: int
    false_negatives: int
    n_eval_in: int
    n_eval_out: int
    fpr_hi: float
    fnr_hi: float
    f_of_fpr_hi: float
    alpha_per_rate: float

    @property
    def margin(self) -> float:
        """f(FPR_hi) - FNR_hi; positive means violated."""
        return self.f_of_fpr_hi - self.fnr_hi

    def to_dict(self) -> dict[str, object]:
        """JSON-ready dict, with keys FPR_hi, FNR_hi and f(FPR_hi) as named in the design."""
        out = asdict(self)
        out["threshold"] = _json_float(self.threshold)
        out["FPR_hi"], out["FNR_hi"], out["f(FPR_hi)"] = self.fpr_hi, self.fnr_hi, self.f_of_fpr_hi
        out["margin"] = self.margin
        return out


def evaluate_curve(curve: Callable[[np.ndarray], np.ndarray], alphas: np.ndarray) -> np.ndarray:
    """f(alphas) for any callable alpha -> beta (vectorised if it is, else point by point)."""
    alphas = np.asarray(alphas, dtype=float)
    try:
        values = np.asarray(curve(alphas), dtype=float)
        if values.shape == alphas.shape:
            return values
    except (TypeError, ValueError):
        pass
    pointwise = cast("Callable[[float], float]", curve)  # not vectorised: one alpha at a time
    return np.array([float(pointwise(float(a))) for a in alphas.ravel()]).reshape(alphas.shape)


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


def _check_tradeoff_function(claim: Callable[[np.ndarray], np.ndarray], points: int = 1001) -> None:
    """Refuse a claim that is not a trade-off function on a grid of ``points`` alphas.

    The verdict's soundness uses f(FPR_hi) <= f(FPR): f must map [0, 1] into [0, 1] and be
    non-increasing (to 1e-9), as every trade-off function is (Dong, Roth, Su, Prop. 2.2).
    """
    grid = np.linspace(0.0, 1.0, points)
    values = evaluate_curve(claim, grid)
    if not np.all(np.isfinite(values)) or values.min() < -1e-9 or values.max() > 1 + 1e-9:
        raise ValueError("claim must be a trade-off function with values in [0, 1] on [0, 1]")
    rise = float(np.max(np.diff(values), initial=0.0))
    if rise > 1e-9:
        where = float(grid[int(np.argmax(np.diff(values)))])
        raise ValueError(
            f"claim must be a trade-off function, non-increasing on [0, 1]; it rises by {rise:.3g} "
            f"after alpha = {where:.3g}"
        )


def verdict(
    scores_in: ArrayLike,
    scores_out: ArrayLike,
    claim: Callable[[np.ndarray], np.ndarray],
    alpha: float = 0.05,
    *,
    threshold: str | ThresholdStrategy = "split",
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
        alpha: 1 - confidence, in (0, 0.5).
        threshold: a strategy's name or a :class:`ThresholdStrategy`, as in
            :func:`epsilon_lower_bound`.
        seed: seeds the ``split`` shuffle (an int >= 0).
        grid_size: the number of thresholds of the ``bonferroni`` grid (>= 2).
        plan: with ``threshold="planned"``, the plan fixed before the scores were seen.

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
    strategy = threshold_strategy(threshold, grid_size=grid_size)
    return strategy.verdict(scores_in, scores_out, claim, alpha=alpha, seed=seed, plan=plan)


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
    alpha: float = 0.05,
    threshold: str | ThresholdStrategy = "split",
    seed: int = 0,
    grid_size: int = DEFAULT_GRID_SIZE,
    plan: object = None,
) -> GdpMuEstimate:
    """GDP mu estimate at a soundly chosen threshold (labelled an estimate, see the class)."""
    strategy = threshold_strategy(threshold, grid_size=grid_size)
    return strategy.gdp_mu(scores_in, scores_out, alpha=alpha, seed=seed, plan=plan)


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
    alpha: float = 0.05,
    threshold: str | ThresholdStrategy = "split",
    grid_size: int = DEFAULT_GRID_SIZE,
    quantile: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(FPR_hi, FNR_hi) an auditor would get at each candidate threshold if the scores'
    trade-off were exactly ``curve``, with ``trials`` IN and ``trials`` OUT trials.

    Error counts are their expectations n a and n f(a) (``quantile=None``), or the ``quantile`` of
    Binomial(n, a) and Binomial(n, f(a)) (pessimistic counts for planning). ``split``: n = the
    evaluation half, every threshold (a on a geometric grid down to 1/(10 n)), CP at alpha/2;
    ``planned``: the same with n = trials (a perfect plan). ``bonferroni``: n = trials, the fixed
    grid of :func:`bonferroni_ranks` on each tail, CP at alpha/(2k).
    """
    strategy = threshold_strategy(threshold, grid_size=grid_size)
    return strategy.ideal_points(curve, trials, alpha=alpha, quantile=quantile)


def ideal_epsilon_lb(
    curve: Callable[[np.ndarray], np.ndarray],
    trials: int,
    *,
    delta: float,
    alpha: float = 0.05,
    threshold: str | ThresholdStrategy = "split",
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
    tests/test_stats_coverage.py).
    """
    delta, alpha = _check_common(delta, alpha)
    fpr_hi, fnr_hi = ideal_points(
        curve, trials, alpha=alpha, threshold=threshold, grid_size=grid_size, quantile=quantile
    )
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



PILOT_FRACTION = 0.1
"""Share of the IN and of the OUT trials a ``planned`` pilot takes (and the test leaves out)."""


@dataclass(frozen=True)
class Planned(ThresholdStrategy):
    """``planned``: an order statistic whose rank is fixed before any score is seen, from the
    theory's lower curve and the trial counts, or from a pilot of ``pilot_fraction`` of the
    trials left out of the test; one joint test of both rates on every test trial (§8.12).

    The plan (:class:`audit.stats.thresholds.PlannedThreshold`, made by
    :func:`audit.stats.thresholds.plan_threshold`, which sits above this module) is the ``plan=``
    input of each call; the eps bound and the verdict are its joint tests, :meth:`choose` (the
    GDP estimate's threshold) its threshold with Clopper-Pearson at alpha/2 per rate.
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

    def choose(
        self, scores_in: ArrayLike, scores_out: ArrayLike, *, alpha: float, seed: int,
        objective: Objective, plan: object = None,
    ) -> ThresholdChoice:
        check_int("seed", seed, minimum=0)
        sorted_in = _as_scores("scores_in", scores_in)
        sorted_out = _as_scores("scores_out", scores_out)
        t = _plan_of(plan).threshold_for(sorted_in, sorted_out)
        return _pick(np.array([t]), sorted_in, sorted_out, alpha / 2, objective)

    def epsilon_bound(
        self, scores_in: ArrayLike, scores_out: ArrayLike, *, delta: float, alpha: float = 0.05,
        seed: int = 0, plan: object = None, optimistic: bool = True,
    ) -> EpsilonBound:
        """The plan's joint test of both rates
        (:func:`audit.stats.thresholds.planned_epsilon_lower_bound`)."""
        delta, alpha = _check_common(delta, alpha)
        _as_scores("scores_in", scores_in), _as_scores("scores_out", scores_out)
        bound: EpsilonBound = _plan_of(plan).epsilon_bound(
            scores_in, scores_out, delta=delta, alpha=alpha, seed=seed, optimistic=optimistic
        )
        return bound

    def verdict(
        self, scores_in: ArrayLike, scores_out: ArrayLike,
        claim: Callable[[np.ndarray], np.ndarray], *, alpha: float = 0.05, seed: int = 0,
        plan: object = None,
    ) -> Verdict:
        """The plan's joint test of the claim (:func:`audit.stats.thresholds.planned_verdict`)."""
        _check_claim(claim)
        _, alpha = _check_common(0.0, alpha)
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


STRATEGY_TYPES: dict[str, type[ThresholdStrategy]] = {
    kind.name: kind for kind in (Split, Bonferroni, MultiSplit, Planned)
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
    alpha: float = 0.05,
    fpr_targets: tuple[float, ...] = FPR_TARGETS,
) -> dict[str, object]:
    """TPR at fixed FPRs with Clopper-Pearson intervals, and the AUROC (estimates, labelled).

    For a target phi the threshold t is set from the OUT scores alone: just above the
    (floor(phi n_out) + 1)-th largest OUT score, so the empirical FPR #{OUT >= t}/n_out <= phi.
    Given t, #{IN >= t} is Binomial(n_in, TPR(t)), and the two-sided Clopper-Pearson interval
    [CP_lower(alpha/2), CP_upper(alpha/2)] covers TPR(t) with probability >= 1 - alpha. The
    true FPR at t is near phi but estimated, hence "estimate". AUROC = U / (n_in n_out), U the
    Mann-Whitney statistic (ties count 1/2), from scipy.
    """
    _, alpha = _check_common(0.0, alpha)
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
