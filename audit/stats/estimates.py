"""Labelled estimators users of other auditing tools expect (docs/design.md §8.14): a Bayesian
credible interval for epsilon, and bootstrap intervals for the AUROC and the TPR at a fixed FPR.
Each is an *estimate*, labelled so; only the sound bounds of :mod:`audit.stats.binary`,
:mod:`audit.stats.thresholds` and :mod:`audit.stats.curve_evidence` are called bounds.

**Bayesian epsilon** (Zanella-Beguelin, Wutschitz, Tople, Salem, Ruhle, Paverd, Naseri, Kopf,
Jones, "Bayesian estimation of differential privacy", ICML 2023, arXiv 2206.05199; their
``privacy-estimates`` package). At one threshold the error counts FP of n_out and FN of n_in are
independent binomials; with Jeffreys priors Beta(1/2, 1/2) the posteriors are

    FPR ~ Beta(FP + 1/2, n_out - FP + 1/2),   FNR ~ Beta(FN + 1/2, n_in - FN + 1/2),

independent, and the joint posterior of (FPR, FNR) induces one of
eps = max(log((1 - delta - FNR) / FPR), log((1 - delta - FPR) / FNR)), floored at 0 (§8.2),
sampled by Monte Carlo. The equal-tailed credible interval of eps uses the joint posterior
rather than a rectangle of two marginal intervals, hence narrower than the union-bound
Clopper-Pearson (§8.1). Each Beta is drawn as G1 / (G1 + G2) with G1, G2 independent Gammas, so
both a rate and its complement G2 / (G1 + G2) keep full relative precision (no 1 - x near 1).
A credible interval is a statement about the posterior, not a frequentist bound; at a
threshold chosen on the same counts it inherits the choice's optimism, so it is computed at the
sound bound's own threshold and evaluation counts.

**Bootstrap** (Efron's percentile bootstrap): IN and OUT trials are resampled with replacement,
independently (multinomial counts per trial), ``reps`` times; the AUROC (Mann-Whitney U /
(n_in n_out), ties 1/2) and the TPR at the threshold set from the resampled OUT scores as in
:func:`audit.stats.binary.roc_summary` are recomputed from the counts in O(n) per resample, and the
(1 - level)/2 and (1 + level)/2 quantiles reported.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from numpy.typing import ArrayLike

from audit.core.validation import check_int, check_real
from audit.stats.binary import _as_scores

__all__ = [
    "BAYES_LABEL",
    "BOOTSTRAP_LABEL",
    "BayesianEpsilon",
    "BootstrapInterval",
    "bayesian_epsilon",
    "bootstrap_auroc",
    "bootstrap_tpr_at_fpr",
    "bootstrap_tpr_at_fprs",
]

BAYES_LABEL = (
    "estimate, not a bound: credible interval of eps from the joint Jeffreys posterior of (FPR, "
    "FNR) at one "
    "threshold (Zanella-Beguelin et al. 2023)"
)
BOOTSTRAP_LABEL = (
    "estimate, not a bound: percentile bootstrap interval (IN and OUT trials resampled "
    "independently)"
)

DRAWS = 200_000
"""Posterior draws of the Bayesian interval (Monte Carlo error of a 2.5% quantile: ~ 1e-3
relative)."""

BOOTSTRAP_REPS = 200
"""Bootstrap resamples by default."""


@dataclass(frozen=True)
class BayesianEpsilon:
    """Credible interval [epsilon_lo, epsilon_hi] (equal-tailed, ``level``) and posterior median of
    eps at ``delta`` from the counts at one threshold (an estimate; module docstring)."""

    epsilon_lo: float
    epsilon_median: float
    epsilon_hi: float
    level: float
    delta: float
    false_positives: int
    n_out: int
    false_negatives: int
    n_in: int
    draws: int
    prior: str = "jeffreys"
    label: str = BAYES_LABEL

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _beta_pair(
    rng: np.random.Generator, a: float, b: float, size: int
) -> tuple[np.ndarray, np.ndarray]:
    """(X, 1 - X) for X ~ Beta(a, b), both to full relative precision (Gamma ratio)."""
    g1 = rng.standard_gamma(a, size)
    g2 = rng.standard_gamma(b, size)
    total = g1 + g2
    return g1 / total, g2 / total


def bayesian_epsilon(
    false_positives: int, n_out: int, false_negatives: int, n_in: int, *, delta: float,
    level: float = 0.95, draws: int = DRAWS, seed: int = 0,
) -> BayesianEpsilon:
    """Credible interval of eps from the joint Jeffreys posterior of (FPR, FNR) (module docstring).

    Args:
        false_positives: OUT trials called IN, of ``n_out``.
        n_out: the OUT trials.
        false_negatives: IN trials called OUT, of ``n_in``.
        n_in: the IN trials.
        delta: the delta at which eps is estimated, in [0, 1).
        level: credibility of the equal-tailed interval, in (0, 1).
        draws: Monte Carlo draws (>= 1000); ``seed`` seeds them.
    """
    n_out = check_int("n_out", n_out, minimum=1)
    n_in = check_int("n_in", n_in, minimum=1)
    fp = check_int("false_positives", false_positives, minimum=0, maximum=n_out)
    fn = check_int("false_negatives", false_negatives, minimum=0, maximum=n_in)
    delta = check_real("delta", delta, minimum=0.0, maximum=1.0, strict_maximum=True)
    level = check_real(
        "level", level, minimum=0.0, maximum=1.0, strict_minimum=True, strict_maximum=True
    )
    draws = check_int("draws", draws, minimum=1000)
    rng = np.random.default_rng([seed, 2023])
    fpr, tnr = _beta_pair(rng, fp + 0.5, n_out - fp + 0.5, draws)
    fnr, tpr = _beta_pair(rng, fn + 0.5, n_in - fn + 0.5, draws)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.log(np.clip(tpr - delta, 0.0, None)) - np.log(fpr)
        b = np.log(np.clip(tnr - delta, 0.0, None)) - np.log(fnr)
    eps = np.fmax(a, b)
    eps = np.where(np.isnan(eps), 0.0, np.clip(eps, 0.0, None))
    lo, median, hi = np.quantile(eps, [(1 - level) / 2, 0.5, (1 + level) / 2])
    return BayesianEpsilon(
        float(lo), float(median), float(hi), level, delta, fp, n_out, fn, n_in, draws
    )


@dataclass(frozen=True)
class BootstrapInterval:
    """A percentile bootstrap interval of a statistic (an estimate; module docstring)."""

    statistic: str
    estimate: float
    lo: float
    hi: float
    level: float
    reps: int
    label: str = BOOTSTRAP_LABEL

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _resample_counts(rng: np.random.Generator, n: int) -> np.ndarray:
    """Multinomial(n; 1/n each) counts: how often each trial is drawn in one resample."""
    return np.bincount(rng.integers(0, n, n), minlength=n)


def _check_bootstrap(level: float, reps: int) -> tuple[float, int]:
    level = check_real(
        "level", level, minimum=0.0, maximum=1.0, strict_minimum=True, strict_maximum=True
    )
    reps = check_int("reps", reps, minimum=20)
    return level, reps


def _interval(name: str, estimate: float, values: np.ndarray, level: float) -> BootstrapInterval:
    lo, hi = np.quantile(values, [(1 - level) / 2, (1 + level) / 2])
    return BootstrapInterval(name, float(estimate), float(lo), float(hi), level, int(values.size))


def bootstrap_auroc(
    scores_in: ArrayLike,
    scores_out: ArrayLike,
    *,
    level: float = 0.95,
    reps: int = BOOTSTRAP_REPS,
    seed: int = 0,
) -> BootstrapInterval:
    """Percentile bootstrap interval of the AUROC = U / (n_in n_out), ties counting 1/2.

    Per resample, with OUT weights v (counts) and C their cumulative sums over the sorted OUT
    scores, U* = sum_i w_i (C[#OUT < x_i] + (C[#OUT <= x_i] - C[#OUT < x_i]) / 2): O(n).
    """
    level, reps = _check_bootstrap(level, reps)
    sorted_in = np.asarray(_as_scores("scores_in", scores_in), dtype=float)
    sorted_out = np.asarray(_as_scores("scores_out", scores_out), dtype=float)
    below = np.searchsorted(sorted_out, sorted_in, side="left")
    at_most = np.searchsorted(sorted_out, sorted_in, side="right")
    n_in, n_out = sorted_in.size, sorted_out.size

    def auroc(w: np.ndarray, v: np.ndarray) -> float:
        c = np.concatenate([[0], np.cumsum(v)])
        return float(np.dot(w, c[below] + (c[at_most] - c[below]) / 2) / (n_in * n_out))

    estimate = auroc(np.ones(n_in), np.ones(n_out))
    rng = np.random.default_rng([seed, 2024])
    values = np.array(
        [auroc(_resample_counts(rng, n_in), _resample_counts(rng, n_out)) for _ in range(reps)]
    )
    return _interval("auroc", estimate, values, level)


def bootstrap_tpr_at_fpr(
    scores_in: ArrayLike, scores_out: ArrayLike, fpr_target: float, *, level: float = 0.95,
    reps: int = BOOTSTRAP_REPS, seed: int = 0,
) -> BootstrapInterval:
    """Percentile bootstrap interval of the TPR at the threshold set, as in
    :func:`audit.stats.binary.roc_summary`, just above the (floor(phi n_out) + 1)-th largest OUT
    score (empirical FPR <= phi), recomputed on each resample (threshold and TPR both resampled)."""
    return bootstrap_tpr_at_fprs(
        scores_in, scores_out, (fpr_target,), level=level, reps=reps, seed=seed
    )[0]


def bootstrap_tpr_at_fprs(
    scores_in: ArrayLike, scores_out: ArrayLike, fpr_targets: Sequence[float], *,
    level: float = 0.95, reps: int = BOOTSTRAP_REPS, seed: int = 0,
) -> tuple[BootstrapInterval, ...]:
    """:func:`bootstrap_tpr_at_fpr` at each of ``fpr_targets``, from one set of ``reps``
    resamples: the resamples are the same for every target (drawn from ``default_rng([seed,
    2025])`` whatever the target), so each interval is exactly the one target's call, and the
    resamples are drawn once instead of once per target."""
    level, reps = _check_bootstrap(level, reps)
    phis = [
        check_real("fpr_target", phi, minimum=0.0, maximum=1.0, strict_minimum=True)
        for phi in fpr_targets
    ]
    sorted_in = np.asarray(_as_scores("scores_in", scores_in), dtype=float)
    sorted_out = np.asarray(_as_scores("scores_out", scores_out), dtype=float)
    n_in, n_out = sorted_in.size, sorted_out.size
    ks = [math.floor(phi * n_out) for phi in phis]

    def tprs(w: np.ndarray, v: np.ndarray) -> list[float]:
        # weighted count of OUT scores from the top; the threshold is just above the score at
        # which it first exceeds k (then at most k weighted OUT scores are >= the threshold)
        from_top = np.cumsum(v[::-1])
        out = []
        for k in ks:
            j = int(np.searchsorted(from_top, k, side="right"))
            if j >= n_out:
                # k >= the OUT count: the threshold is +inf (as in roc_summary), nothing called IN
                out.append(0.0)
                continue
            t = np.nextafter(sorted_out[n_out - 1 - j], np.inf)
            start = int(np.searchsorted(sorted_in, t, side="left"))
            out.append(float(np.sum(w[start:])) / n_in)
        return out

    estimates = tprs(np.ones(n_in), np.ones(n_out))
    rng = np.random.default_rng([seed, 2025])
    values = np.array(
        [tprs(_resample_counts(rng, n_in), _resample_counts(rng, n_out)) for _ in range(reps)]
    ).reshape(reps, len(ks))
    return tuple(
        _interval(f"tpr_at_fpr_{phi:g}", estimate, values[:, i], level)
        for i, (phi, estimate) in enumerate(zip(phis, estimates, strict=True))
    )
