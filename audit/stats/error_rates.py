"""Error rates of a threshold test and the records of what they prove: Clopper-Pearson bounds, the
eps of a pair of rates, the naive maximum over thresholds, :class:`EpsilonBound` and
:class:`Verdict` (docs/design.md §8.1, §8.2).

The bottom of :mod:`audit.stats`: :mod:`audit.stats.thresholds` (the planned threshold's joint
test) and :mod:`audit.stats.binary` (the threshold strategies and the public bounds, which plan a
``planned`` threshold from a pilot when no plan is given) both build on it, so ``binary`` can
call the planner without an import cycle. Every name here is re-exported by
:mod:`audit.stats.binary`, where it used to live; import it from there.

Clopper-Pearson (one-sided): with FP false positives among n_out OUT trials,
Pr[FPR <= CP_upper(FP, n_out, a)] >= 1 - a, CP_upper = Beta^{-1}(1 - a; FP + 1, n_out - FP)
(Clopper and Pearson 1934). Any (eps, delta)-DP mechanism has FNR >= 1 - delta - e^eps FPR and
FPR >= 1 - delta - e^eps FNR for every test (Kairouz, Oh, Viswanath 2015), so upper bounds on
both rates give the eps lower bound of :func:`epsilon_from_rates`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from decimal import Decimal
from typing import cast

import numpy as np
from numpy.typing import ArrayLike
from statsmodels.stats.proportion import proportion_confint

from audit.core.validation import check_real

# An objective maps (FPR_hi, FNR_hi) arrays to the value that a threshold should maximise.
Objective = Callable[[np.ndarray, np.ndarray], np.ndarray]

__all__ = [
    "OPTIMISTIC_LABEL",
    "PILOT_FRACTION",
    "SCORE_REDUCTIONS",
    "EpsilonBound",
    "Verdict",
    "clopper_pearson_lower",
    "clopper_pearson_upper",
    "confidence_of",
    "epsilon_from_rates",
    "evaluate_curve",
    "per_trial_scores",
]


def confidence_of(alpha: float) -> float:
    """``1 - alpha`` taken in decimal on alpha's shortest repr (``0.05`` gives exactly ``0.95``),
    the inverse of :func:`audit.core.confidence.significance`: the ``confidence`` a record
    reports beside its ``alpha``."""
    return float(Decimal(1) - Decimal(repr(float(alpha))))


OPTIMISTIC_LABEL = "optimistic, not a bound"
"""Label carried by every naive maximum over thresholds."""


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



SCORE_REDUCTIONS: tuple[str, ...] = ("mean", "max", "min")
"""Rules that reduce several values per trial to the trial's one score (:func:`per_trial_scores`):
the row's mean, largest or smallest value."""


def per_trial_scores(name: str, scores: ArrayLike, reduce: str | None = None) -> np.ndarray:
    """One score per trial, as every statistic here counts them: ``scores`` as a 1-D float array.

    Each trial is one independent training and gives one score; the binomial counts (and every
    bound built on them) are wrong for several values of one training, which are not independent
    (pseudo-replication: the same distribution repeated in 20 columns gave eps_lb > 0 in 27 of 40
    runs at a stated 0.05, issue 41). An array of shape (n,) or (n, 1) is n trials. An array with
    several values per trial (rows = trials, shape (n, k), k > 1, or more axes: each row's values
    taken together) is refused, naming its shape and the fix, unless ``reduce`` says how a row
    becomes its trial's score (:data:`SCORE_REDUCTIONS`: ``"mean"``, ``"max"``, ``"min"``); a 1-D
    array is never reduced.

    Raises:
        ValueError: several values per trial without ``reduce``; an unknown ``reduce``.
    """
    array = np.asarray(scores, dtype=float)
    if reduce is not None and reduce not in SCORE_REDUCTIONS:
        import difflib

        close = difflib.get_close_matches(str(reduce), SCORE_REDUCTIONS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(
            f"reduce={reduce!r} is not one of {', '.join(SCORE_REDUCTIONS)}{hint}"
        )
    if array.ndim <= 1 or (array.ndim == 2 and array.shape[1] == 1):
        return array.ravel()
    rows = array.reshape(array.shape[0], -1)
    if reduce is None:
        raise ValueError(
            f"{name} has shape {array.shape}: {rows.shape[1]} values for each of "
            f"{rows.shape[0]} trials (rows). Every trial must be one independent training with one "
            "score: counting the values as trials would pseudo-replicate and overstate eps. "
            f"Reduce each row to one score first (e.g. {name}.mean(axis=1) or .max(axis=1)), or "
            "pass reduce='mean' | 'max' | 'min' (audit scores --reduce)"
        )
    return np.asarray(getattr(np, reduce)(rows, axis=1), dtype=float)


def _as_scores(name: str, scores: ArrayLike) -> np.ndarray:
    # sorted and checked already (audit.stats.score_files): no copy
    if isinstance(scores, np.ndarray) and getattr(scores, "presorted", False):
        return scores
    array = per_trial_scores(name, scores)
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



@dataclass(frozen=True)
class EpsilonBound:
    """A sound eps lower bound at (delta, confidence 1 - alpha), with its evidence.

    ``epsilon_lb`` holds with probability >= 1 - alpha over the trials. ``epsilon_optimistic``
    is the naive maximum over every threshold of the same CP-based bound on all scores, the
    threshold chosen on the scores it is evaluated on: optimistic, not a bound.
    The counts and CP bounds are those of the evaluation set at the chosen threshold
    (the second half for ``split``, all scores for ``bonferroni``, the test trials for
    ``planned``: every trial with a plan, those the pilot left without one).
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
    def confidence(self) -> float:
        """The probability that ``epsilon_lb`` holds: 1 - alpha (:func:`confidence_of`)."""
        return confidence_of(self.alpha)

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
    def confidence(self) -> float:
        """The confidence of a ``violated`` verdict: 1 - alpha (:func:`confidence_of`)."""
        return confidence_of(self.alpha)

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



PILOT_FRACTION = 0.1
"""Share of the IN and of the OUT trials a ``planned`` pilot takes (and the test leaves out)."""
