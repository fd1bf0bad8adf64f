"""Many canaries per training: k observations per multi-run training, and when they count as k
trials.

With ``canaries_per_training = k`` every training holds k Dirac canaries on k disjoint
coordinates, all IN or all OUT (docs/design.md §8.17); its shard rows are training-major
(training r's canaries in rows r k .. r k + k - 1), one score per canary.

- Samplers whose canaries are independent (:attr:`audit.sampling.Sampler.independent_canaries`:
  Poisson, balls-and-bins, deterministic): given IN or OUT, the k observations of one training are
  independent and distributed as one canary's, so the k R scores of R trainings are k R i.i.d.
  trials and the usual statistics (Clopper-Pearson, :mod:`audit.stats.binary`) apply unchanged.
- The others (the shuffles: the k canaries take distinct places in one permutation; truncated
  Poisson: they compete for the B slots): the k observations of one training are dependent.
  Clopper-Pearson on k R dependent trials is not valid; the trainings are still i.i.d., so
  each training contributes one [0, 1] variable per rate, the fraction of its k canaries the
  test gets wrong (mean: the per-canary FPR, resp. FNR), and its mean is bounded by betting
  (:func:`betting_upper_bound`, Waudby-Smith & Ramdas 2023: it adapts to the fractions'
  variance, about p (1 - p) / k when the canaries are nearly independent), valid whatever the
  dependence inside a training. The threshold is chosen on half of the *trainings*, by the
  Chernoff-Hoeffding bound (:func:`kl_upper_bound`, cheap for thousands of thresholds), and
  evaluated on the other half by betting (``split``; ``multisplit``: the median of 11 such
  bounds at alpha / 2).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike

from audit.core.confidence import significance
from audit.core.validation import check_int, check_real
from audit.stats.binary import (
    STRATEGY_TYPES,
    EpsilonBound,
    HeldOutSplits,
    ThresholdStrategy,
    Verdict,
    _candidate_thresholds,
    _counts,
    epsilon_from_rates,
    evaluate_curve,
    split_scores,
    threshold_strategy,
)

__all__ = [
    "DEPENDENT_THRESHOLDS",
    "betting_upper_bound",
    "dependent_epsilon_lower_bound",
    "dependent_verdict",
    "kl_upper_bound",
    "training_rows",
]

DEPENDENT_THRESHOLDS: tuple[str, ...] = tuple(
    name for name, kind in STRATEGY_TYPES.items() if not kind.needs_independent_trials
)
"""Threshold strategies for dependent canaries, those without
:attr:`audit.stats.binary.ThresholdStrategy.needs_independent_trials` (``split``,
``multisplit``: the ``bonferroni`` grid's order-statistic argument and the ``planned`` joint
test need independent trials)."""

BISECTION_STEPS = 100


def training_rows(scores: object, canaries: int, name: str = "scores") -> np.ndarray:
    """The scores as ``(trainings, k)``: row r holds training r's k canaries (training-major)."""
    array = np.asarray(scores, dtype=float).ravel()
    k = check_int("canaries_per_training", canaries, minimum=1)
    if array.size == 0 or array.size % k:
        raise ValueError(
            f"{name} has {array.size} scores, not a positive multiple of canaries_per_training={k}"
        )
    if np.isnan(array).any():
        raise ValueError(f"{name} contains NaN; every canary needs a score")
    return array.reshape(-1, k)


def _kl(x: np.ndarray, m: np.ndarray) -> np.ndarray:
    """KL(Bernoulli(x) || Bernoulli(m)) for x <= m, m in (0, 1)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(x > 0, x * np.log(x / m), 0.0)
        b = np.where(x < 1, (1 - x) * np.log((1 - x) / (1 - m)), 0.0)
    return a + b


def kl_upper_bound(mean: np.ndarray | float, n: np.ndarray | int, alpha: float) -> np.ndarray:
    """Upper confidence bound on the mean of n i.i.d. variables in [0, 1] from their average.

    Hoeffding (1963), Thm. 1: Pr[mean_hat <= mu - t] <= exp(-n KL(mu - t || mu)) for any
    [0, 1] variables (the Chernoff bound of the Bernoulli of the same mean, which dominates in
    the convex order), so U = sup{m >= mean_hat : n KL(mean_hat || m) <= log(1/alpha)} satisfies
    Pr[mu > U] <= alpha. Found by bisection, the outer end returned; 1 - alpha^(1/n) at
    mean_hat = 0; 1 when n = 0 or mean_hat = 1.
    """
    alpha = check_real(
        "alpha", alpha, minimum=0.0, maximum=0.5, strict_minimum=True, strict_maximum=True
    )
    mean, n = np.broadcast_arrays(np.asarray(mean, dtype=float), np.asarray(n, dtype=float))
    level = math.log(1.0 / alpha)
    lo, hi = mean.copy(), np.ones_like(mean)
    for _ in range(BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        out = n * _kl(mean, mid) > level
        hi, lo = np.where(out, mid, hi), np.where(out, lo, mid)
    return np.where((n <= 0) | (mean >= 1), 1.0, hi)


MAX_STAKE = 0.75
"""The betting bound's largest stake lambda: each wealth factor 1 + lambda (m - X) >= 1/4 > 0."""


def betting_upper_bound(values: np.ndarray, alpha: float) -> float:
    """Upper confidence bound on the mean of i.i.d. variables in [0, 1] by betting.

    Waudby-Smith & Ramdas (2023, arXiv 2010.09686), the hedged capital process with the
    predictable plug-in stake: for a candidate mean m the wealth
    K(m) = prod_i (1 + lambda_i (m - X_i)) is a non-negative martingale when m is the true
    mean, lambda_i = min(sqrt(2 log(1/alpha) / (n var_{i-1})), 3/4) chosen from X_1..X_{i-1}
    only (var the regularised running variance (1/4 + sum (X_j - mean_j)^2) / (i + 1)); so
    Pr[K(mean) >= 1/alpha] <= alpha (Markov). The stakes do not depend on m, so K(m) grows with
    m and {m : K(m) >= 1/alpha} = [U, 1]: U (found by bisection, the outer end) is the bound.
    """
    x = np.asarray(values, dtype=float).ravel()
    alpha = check_real(
        "alpha", alpha, minimum=0.0, maximum=0.5, strict_minimum=True, strict_maximum=True
    )
    n = x.size
    if n == 0:
        return 1.0
    count = np.arange(1, n + 1)
    means = (0.5 + np.cumsum(x)) / (count + 1)
    previous_means = np.concatenate([[0.5], means[:-1]])
    variances = (0.25 + np.cumsum((x - previous_means) ** 2)) / (count + 1)
    previous_variances = np.concatenate([[0.25], variances[:-1]])
    stakes = np.minimum(np.sqrt(2 * math.log(1 / alpha) / (n * previous_variances)), MAX_STAKE)
    level = math.log(1 / alpha)
    lo, hi = 0.0, 1.0
    if np.sum(np.log1p(stakes * (1.0 - x))) < level:
        return 1.0
    for _ in range(BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        if np.sum(np.log1p(stakes * (mid - x))) >= level:
            hi = mid
        else:
            lo = mid
    return hi


def _rates_hi(threshold: np.ndarray, rows_in: np.ndarray, rows_out: np.ndarray, alpha_each: float):
    """(FP, FN, FPR_hi, FNR_hi) at each threshold: error counts over all canaries, and the
    Chernoff-Hoeffding bounds on the per-training error fractions (R trainings a side)."""
    k = rows_in.shape[1]
    fp, fn = _counts(threshold, np.sort(rows_in.ravel()), np.sort(rows_out.ravel()))
    fpr_hi = kl_upper_bound(fp / (k * rows_out.shape[0]), rows_out.shape[0], alpha_each)
    fnr_hi = kl_upper_bound(fn / (k * rows_in.shape[0]), rows_in.shape[0], alpha_each)
    return fp, fn, fpr_hi, fnr_hi


def _halves(rows: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(selection, evaluation) trainings: :func:`audit.stats.binary.split_scores` of the training
    indices."""
    select, evaluate = split_scores(np.arange(rows.shape[0], dtype=float), seed)
    return rows[select.astype(np.int64)], rows[evaluate.astype(np.int64)]


def _split_choice(rows_in, rows_out, alpha: float, seed: int, objective: Callable) -> tuple:
    """Threshold chosen on half of the trainings, evaluated on the other half (alpha / 2 per
    rate)."""
    select_in, eval_in = _halves(rows_in, seed)
    select_out, eval_out = _halves(rows_out, seed + 1)
    if min(select_in.shape[0], select_out.shape[0]) < 1:
        raise ValueError(
            "threshold='split' with dependent canaries needs at least 2 IN and 2 OUT trainings"
        )
    candidates = _candidate_thresholds(np.sort(select_in.ravel()), np.sort(select_out.ravel()))
    *_, fpr_hi, fnr_hi = _rates_hi(candidates, select_in, select_out, alpha / 2)
    chosen = float(candidates[int(np.argmax(objective(fpr_hi, fnr_hi)))])
    false_positive = (eval_out >= chosen).mean(axis=1)  # per training: the fraction of its canaries
    false_negative = (eval_in < chosen).mean(axis=1)
    fpr_hi = betting_upper_bound(false_positive, alpha / 2)
    fnr_hi = betting_upper_bound(false_negative, alpha / 2)
    value = float(objective(np.array([fpr_hi]), np.array([fnr_hi]))[0])
    fp, fn = int(np.count_nonzero(eval_out >= chosen)), int(np.count_nonzero(eval_in < chosen))
    return chosen, fp, fn, eval_in.size, eval_out.size, fpr_hi, fnr_hi, value


def _dependent_strategy(threshold: object) -> HeldOutSplits:
    """The strategy ``threshold`` names if it has a form for dependent canaries (a split of the
    trainings, :class:`audit.stats.binary.HeldOutSplits`), else the error naming them."""
    try:
        strategy = threshold_strategy(threshold)  # type: ignore[arg-type]  # refused below
    except ValueError:
        strategy = None
    if strategy is None or strategy.needs_independent_trials or not isinstance(
        strategy, HeldOutSplits
    ):
        raise ValueError(
            f"threshold={threshold!r} with canaries_per_training > 1 and a sampler whose canaries "
            "are "
            f"dependent: use one of {', '.join(DEPENDENT_THRESHOLDS)} (docs/design.md §8.17)"
        )
    return strategy


def _choice(
    rows_in, rows_out, *, alpha: float, strategy: HeldOutSplits, seed: int, objective: Callable
) -> tuple:
    """The median of the strategy's splits of the trainings (one for ``split``; 11 at alpha / 2
    for ``multisplit``), with its alpha per rate (each split's alpha / 2)."""
    splits = strategy.splits(seed, alpha)
    runs = [
        _split_choice(rows_in, rows_out, alpha_k, seed_k, objective) for seed_k, alpha_k in splits
    ]
    return (*sorted(runs, key=lambda run: run[-1])[len(runs) // 2], splits[0][1] / 2)


def dependent_epsilon_lower_bound(
    scores_in: ArrayLike, scores_out: ArrayLike, *, canaries: int, delta: float,
    confidence: float | None = None, alpha: float | None = None,
    threshold: str | ThresholdStrategy = "split", seed: int = 0,
) -> EpsilonBound:
    """Sound eps lower bound from k dependent canaries per training (module docstring).

    eps_lb = max(log((1 - delta - FNR_hi) / FPR_hi), log((1 - delta - FPR_hi) / FNR_hi)) as in
    :func:`audit.stats.binary.epsilon_lower_bound`, with FPR_hi, FNR_hi the Chernoff-Hoeffding
    bounds (:func:`kl_upper_bound`) on the per-training error fractions of the evaluation trainings.
    ``epsilon_optimistic``: the maximum of the same bound over every candidate threshold on all
    trainings (optimistic, not a bound). Counts in the result are over canaries.
    ``confidence`` (default 0.95; ``alpha=`` its deprecated spelling 1 - confidence). The
    threshold defaults to ``split``, not the spec's ``planned``: a planned rule needs
    independent trials (:data:`DEPENDENT_THRESHOLDS`).
    """
    alpha = significance(confidence, alpha, where="dependent_epsilon_lower_bound")
    rows_in = training_rows(scores_in, canaries, "scores_in")
    rows_out = training_rows(scores_out, canaries, "scores_out")

    def objective(fpr_hi: np.ndarray, fnr_hi: np.ndarray) -> np.ndarray:
        return epsilon_from_rates(fpr_hi, fnr_hi, delta)

    strategy = _dependent_strategy(threshold)
    chosen, fp, fn, n_in, n_out, fpr_hi, fnr_hi, value, alpha_each = _choice(
        rows_in, rows_out, alpha=alpha, strategy=strategy, seed=seed, objective=objective
    )
    candidates = _candidate_thresholds(np.sort(rows_in.ravel()), np.sort(rows_out.ravel()))
    *_, all_fpr, all_fnr = _rates_hi(candidates, rows_in, rows_out, alpha / 2)
    return EpsilonBound(
        epsilon_lb=value,
        epsilon_optimistic=float(objective(all_fpr, all_fnr).max()),
        threshold=chosen,
        strategy=strategy.name,
        delta=delta,
        alpha=alpha,
        n_in=rows_in.size,
        n_out=rows_out.size,
        false_positives=fp,
        false_negatives=fn,
        n_eval_in=n_in,
        n_eval_out=n_out,
        fpr_hi=fpr_hi,
        fnr_hi=fnr_hi,
        alpha_per_rate=alpha_each,
    )


def dependent_verdict(
    scores_in: ArrayLike,
    scores_out: ArrayLike,
    claim: Callable[[np.ndarray], np.ndarray],
    alpha: float | None = None,
    *,
    confidence: float | None = None,
    canaries: int,
    threshold: str | ThresholdStrategy = "split",
    seed: int = 0,
) -> Verdict:
    """The verdict of :func:`audit.stats.binary.verdict` (violated iff FNR_hi < f(FPR_hi)) with the
    bounds of :func:`dependent_epsilon_lower_bound` (k dependent canaries per training);
    ``confidence`` as there (the fourth positional ``alpha``: its deprecated spelling)."""
    alpha = significance(confidence, alpha, where="dependent_verdict")
    rows_in = training_rows(scores_in, canaries, "scores_in")
    rows_out = training_rows(scores_out, canaries, "scores_out")

    def objective(fpr_hi: np.ndarray, fnr_hi: np.ndarray) -> np.ndarray:
        return evaluate_curve(claim, fpr_hi) - fnr_hi

    strategy = _dependent_strategy(threshold)
    chosen, fp, fn, n_in, n_out, fpr_hi, fnr_hi, _, alpha_each = _choice(
        rows_in, rows_out, alpha=alpha, strategy=strategy, seed=seed, objective=objective
    )
    f_value = float(evaluate_curve(claim, np.array([fpr_hi]))[0])
    return Verdict(
        violated=bool(fnr_hi < f_value), threshold=chosen, strategy=strategy.name, alpha=alpha,
        false_positives=fp, false_negatives=fn, n_eval_in=n_in, n_eval_out=n_out, fpr_hi=fpr_hi,
        fnr_hi=fnr_hi, f_of_fpr_hi=f_value, alpha_per_rate=alpha_each,
    )
