"""Whole-curve evidence: a simultaneous confidence band on the attack's trade-off curve, the
verdict it gives against a claimed curve, and a GDP fit over all thresholds (docs/design.md §8.13).

**The band.** Upper bounds FPR_hi(t) and FNR_hi(t) that hold *for every threshold t at once*
with probability >= 1 - alpha, so the empirical trade-off curve is bounded as a whole and any
number of thresholds may be read off it without further correction:

- ``grid`` (default): k thresholds fixed by ranks before any count is seen (the ``bonferroni`` grid
  of :func:`audit.stats.binary.bonferroni_ranks` with k = ``grid_size``: OUT order statistics at
  geometric ranks from the top, just above IN order statistics at geometric ranks from the bottom,
  together covering the whole curve), each rate bounded by Clopper-Pearson at alpha / (2k) (the
  order-statistic argument of §8.3); Bonferroni over the 2k statements. Between grid points the band
  extends by monotonicity: for t_j <= t < t_{j+1}, FPR(t) <= FPR(t_j) <= FPR_hi(t_j) and FNR(t) <=
  FNR(t_{j+1}) <= FNR_hi(t_{j+1}), so the staircase through the grid points bounds the curve at
  every threshold.
- ``dkw``: the Dvoretzky-Kiefer-Wolfowitz inequality with Massart's constant (Massart 1990,
  one-sided form: Pr[sup_t (F(t) - F_n(t)) > e] <= exp(-2 n e^2) for exp(-2 n e^2) <= 1/2):
  FPR_hi(t) = FPR_n(t) + e_out, FNR_hi(t) = FNR_n(t) + e_in at every observed threshold,
  e = sqrt(log(2 / alpha) / (2 n)) (alpha / 2 per rate). Distribution-free and exact over
  every threshold, but additive: weak in the tails where eps evidence sits, strong in the
  body of the curve (shuffling claims are often refuted there).

**The verdict** (:func:`curve_verdict`): the claim f is violated iff some band point lies
strictly below it, FNR_hi(t) < f(FPR_hi(t)): if the claim held, FNR(t) >= f(FPR(t)) >=
f(FPR_hi(t)) at every t (f non-increasing), contradicting the band, which fails with
probability <= alpha. It reports every violating threshold, not one.

**The GDP fit** (:func:`gdp_fit`, an estimate, as jax_privacy's): mu_t = Phi^{-1}(1 - FPR_t) -
Phi^{-1}(FNR_t) at grid thresholds with both error counts >= :data:`MIN_COUNT`, combined by
inverse-variance weights (delta method: Var Phi^{-1}(p_hat) ~ p (1 - p) / (n phi(Phi^{-1}(p))^2));
and ``mu_band``, the smallest mu whose curve G_mu lies below every band point (a lower
confidence bound on mu *if* the true curve is Gaussian). Labelled an estimate: the Gaussian
shape is assumed, not tested (``mu_spread`` shows how far the per-threshold mu_t disagree).

**Refusals** (:class:`NoEvidence`, a ValueError): no band point below the diagonal
FNR = 1 - FPR (null scores: no claim can be refuted and no mu > 0 is supported); the reversed
test (scores negated) has such points while the forward one has none (reversed separation:
the attack's sign is wrong); and, for the GDP fit only, zero errors (a threshold with FP = FN
= 0 separates every trial, so mu is unbounded by the data; the sound eps_lb and the verdict
remain valid there, since Clopper-Pearson bounds zero counts).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import norm

from audit.core.confidence import significance
from audit.core.validation import check_choice, check_int
from audit.stats.binary import (
    _as_scores,
    _check_common,
    _check_tradeoff_function,
    _counts,
    _cp_upper_counts,
    _json_float,
    bonferroni_ranks,
    confidence_of,
    epsilon_from_rates,
    evaluate_curve,
)

__all__ = [
    "BANDS",
    "GDP_FIT_LABEL",
    "CurveVerdict",
    "GdpFit",
    "NoEvidence",
    "TradeOffBand",
    "curve_verdict",
    "gdp_fit",
    "tradeoff_band",
]

BANDS: tuple[str, ...] = ("grid", "dkw")
"""Simultaneous bands: ``grid`` (CP on a rank grid, Bonferroni) or ``dkw`` (DKW-Massart)."""

BAND_GRID_SIZE = 100
"""k, the thresholds of the ``grid`` band (half per tail), covering the whole curve."""

MIN_COUNT = 5
"""Smallest FP and FN count at a threshold the GDP fit uses (the delta method needs counts)."""

GDP_FIT_LABEL = (
    "estimate, not a bound: mu of a Gaussian trade-off curve fitted over all grid thresholds "
    "(assumes the curve is Gaussian; shuffling and few-step Poisson are not)"
)


class NoEvidence(ValueError):
    """The scores carry no evidence for the statement asked (null, reversed or zero errors)."""


@dataclass(frozen=True)
class TradeOffBand:
    """Simultaneous upper bounds on FPR(t) and FNR(t) at every threshold at once (module
    docstring), confidence 1 - alpha; ``thresholds`` ascending, one band point each."""

    method: str
    alpha: float
    n_in: int
    n_out: int
    thresholds: np.ndarray
    false_positives: np.ndarray
    false_negatives: np.ndarray
    fpr_hi: np.ndarray
    fnr_hi: np.ndarray

    @property
    def confidence(self) -> float:
        """1 - alpha: the probability that the band holds at every threshold at once."""
        return confidence_of(self.alpha)

    def epsilon_lower_bound(self, delta: float) -> float:
        """max over the band points of eps(FPR_hi, FNR_hi) (§8.2): sound at 1 - alpha, the band
        being simultaneous."""
        return float(epsilon_from_rates(self.fpr_hi, self.fnr_hi, delta).max(initial=0.0))

    @property
    def has_evidence(self) -> bool:
        """Some band point lies strictly below the diagonal: FPR_hi + FNR_hi < 1."""
        return bool(np.any(self.fpr_hi + self.fnr_hi < 1.0))


def tradeoff_band(
    scores_in: ArrayLike, scores_out: ArrayLike, *, confidence: float | None = None,
    alpha: float | None = None, band: str = "grid", grid_size: int = BAND_GRID_SIZE,
) -> TradeOffBand:
    """The simultaneous band of the module docstring (``grid`` or ``dkw``) at ``confidence``
    (default 0.95; alpha = 1 - confidence in the formulas, ``alpha=`` its deprecated spelling)."""
    return _band(scores_in, scores_out, significance(confidence, alpha, where="tradeoff_band"),
                 band, grid_size)


def _band(
    scores_in: ArrayLike, scores_out: ArrayLike, alpha: float, band: str, grid_size: int
) -> TradeOffBand:
    """:func:`tradeoff_band` at significance ``alpha`` = 1 - confidence."""
    _, alpha = _check_common(0.0, alpha)
    band = check_choice("band", band, BANDS)
    sorted_in = _as_scores("scores_in", scores_in)
    sorted_out = _as_scores("scores_out", scores_out)
    n_in, n_out = sorted_in.size, sorted_out.size
    if band == "grid":
        grid_size = check_int("grid_size", grid_size, minimum=2)
        top = sorted_out[n_out - bonferroni_ranks(n_out, grid_size)]
        bottom = np.nextafter(sorted_in[bonferroni_ranks(n_in, grid_size) - 1], np.inf)
        thresholds = np.unique(np.concatenate([top, bottom]))
        # k counts the thresholds as planned (before deduplication): conservative.
        each = alpha / (2 * (top.size + bottom.size))
        fp, fn = _counts(thresholds, sorted_in, sorted_out)
        fpr_hi = _cp_upper_counts(fp, n_out, each)
        fnr_hi = _cp_upper_counts(fn, n_in, each)
    else:
        thresholds = np.append(np.unique(np.concatenate([sorted_in, sorted_out])), np.inf)
        fp, fn = _counts(thresholds, sorted_in, sorted_out)
        fpr_hi = np.minimum(fp / n_out + math.sqrt(math.log(2 / alpha) / (2 * n_out)), 1.0)
        fnr_hi = np.minimum(fn / n_in + math.sqrt(math.log(2 / alpha) / (2 * n_in)), 1.0)
    return TradeOffBand(
        band,
        alpha,
        n_in,
        n_out,
        thresholds,
        fp,
        fn,
        np.asarray(fpr_hi, dtype=float),
        np.asarray(fnr_hi, dtype=float),
    )


def _band_with_evidence(
    scores_in: ArrayLike, scores_out: ArrayLike, alpha: float, band: str, grid_size: int
) -> TradeOffBand:
    """The band, or :class:`NoEvidence` for null scores or a reversed separation."""
    forward = _band(scores_in, scores_out, alpha, band, grid_size)
    if forward.has_evidence:
        return forward
    reverse = _band(
        -np.asarray(scores_in, dtype=float), -np.asarray(scores_out, dtype=float), alpha, band,
        grid_size,
    )
    if reverse.has_evidence:
        raise NoEvidence(
            "reversed separation: the scores are higher for OUT than for IN trials (the reversed "
            "test is "
            "distinguishable at this confidence, the forward one is not); check the attack's "
            "sign. No number "
            "is given"
        )
    raise NoEvidence(
        f"no evidence: at confidence {1 - alpha:g} the {band} band contains the diagonal FNR = 1 "
        "- FPR at every "
        "threshold (the IN and OUT scores are indistinguishable); no claim can be refuted and no "
        "mu is "
        "supported by these scores"
    )


@dataclass(frozen=True)
class CurveVerdict:
    """A claimed trade-off curve against the simultaneous band (module docstring).

    ``violated`` iff some band point lies below the claim; ``violating`` counts them;
    the worst point (largest margin f(FPR_hi) - FNR_hi) is given with its rates.
    """

    violated: bool
    band: str
    alpha: float
    thresholds: int
    violating: int
    threshold: float
    fpr_hi: float
    fnr_hi: float
    f_of_fpr_hi: float
    epsilon_lb: float
    delta: float

    @property
    def confidence(self) -> float:
        """1 - alpha: the confidence of ``violated`` and of ``epsilon_lb``."""
        return confidence_of(self.alpha)

    @property
    def margin(self) -> float:
        """f(FPR_hi) - FNR_hi at the worst band point; positive means violated."""
        return self.f_of_fpr_hi - self.fnr_hi

    def to_dict(self) -> dict[str, object]:
        return {
            "violated": self.violated,
            "band": self.band,
            "alpha": self.alpha,
            "thresholds": self.thresholds,
            "violating": self.violating,
            "threshold": _json_float(self.threshold),
            "FPR_hi": self.fpr_hi,
            "FNR_hi": self.fnr_hi,
            "f(FPR_hi)": self.f_of_fpr_hi,
            "margin": self.margin,
            "epsilon_lb": self.epsilon_lb,
            "delta": self.delta,
            "label": "sound at confidence 1 - alpha: simultaneous band over every threshold",
        }


def curve_verdict(
    scores_in: ArrayLike,
    scores_out: ArrayLike,
    claim: Callable[[np.ndarray], np.ndarray],
    alpha: float | None = None,
    *,
    confidence: float | None = None,
    delta: float = 1e-5,
    band: str = "grid",
    grid_size: int = BAND_GRID_SIZE,
) -> CurveVerdict:
    """Test ``claim`` (f: alpha -> beta, a trade-off function) against the whole band at once.

    Also returns the band's eps lower bound at ``delta`` (sound: the band is simultaneous).
    ``confidence`` (default 0.95) is the band's; the fourth positional ``alpha`` is its
    deprecated spelling 1 - confidence (a DeprecationWarning, bit-identical results).

    Raises:
        NoEvidence: null scores or reversed separation (module docstring).
        ValueError: ``claim`` not a trade-off function or of kind ``approximation``; bad
            scores, alpha, band or grid_size.
    """
    if not callable(claim):
        raise ValueError(f"claim={claim!r} must be a trade-off curve: a callable alpha -> beta")
    if getattr(claim, "kind", None) == "approximation":
        raise ValueError(
            "claim must be a guarantee; a curve of kind 'approximation' is never audited as a claim"
        )
    _check_tradeoff_function(claim)
    delta, alpha = _check_common(delta, significance(confidence, alpha, where="curve_verdict"))
    evidence = _band_with_evidence(scores_in, scores_out, alpha, band, grid_size)
    f_values = evaluate_curve(claim, evidence.fpr_hi)
    margins = f_values - evidence.fnr_hi
    i = int(np.argmax(margins))
    return CurveVerdict(
        violated=bool(margins[i] > 0),
        band=band,
        alpha=alpha,
        thresholds=int(evidence.thresholds.size),
        violating=int(np.sum(margins > 0)),
        threshold=float(evidence.thresholds[i]),
        fpr_hi=float(evidence.fpr_hi[i]),
        fnr_hi=float(evidence.fnr_hi[i]),
        f_of_fpr_hi=float(f_values[i]),
        epsilon_lb=evidence.epsilon_lower_bound(delta),
        delta=delta,
    )


@dataclass(frozen=True)
class GdpFit:
    """mu of Gaussian DP fitted over all grid thresholds (an estimate; module docstring).

    ``mu``: the inverse-variance weighted mean of the per-threshold mu_t; ``mu_spread``: the
    weighted standard deviation of the mu_t (large: the curve is not Gaussian); ``mu_band``:
    the smallest mu with G_mu below every band point (a lower confidence bound on mu only if
    the curve is Gaussian); ``thresholds``: how many thresholds the fit used.
    """

    mu: float
    mu_spread: float
    mu_band: float
    thresholds: int
    alpha: float
    label: str = GDP_FIT_LABEL

    @property
    def confidence(self) -> float:
        """1 - alpha: the band's confidence behind ``mu_band``."""
        return confidence_of(self.alpha)

    def to_dict(self) -> dict[str, object]:
        return {"mu": self.mu, "mu_spread": self.mu_spread, "mu_band": self.mu_band,
                "thresholds": self.thresholds, "alpha": self.alpha, "label": self.label}


def _probit_mu(fpr: np.ndarray, fnr: np.ndarray) -> np.ndarray:
    """Phi^{-1}(1 - FPR) - Phi^{-1}(FNR), computed as isf / ppf (no 1 - x near 1)."""
    return norm.isf(fpr) - norm.ppf(fnr)


def _probit_variance(p: np.ndarray, n: int) -> np.ndarray:
    """Delta-method variance of Phi^{-1}(p_hat), p_hat = count / n."""
    return p * (1.0 - p) / (n * norm.pdf(norm.ppf(p)) ** 2)


def gdp_fit(
    scores_in: ArrayLike,
    scores_out: ArrayLike,
    *,
    confidence: float | None = None,
    alpha: float | None = None,
    grid_size: int = BAND_GRID_SIZE,
) -> GdpFit:
    """GDP mu over all grid thresholds (labelled an estimate; module docstring); ``mu_band`` at
    ``confidence`` (default 0.95; ``alpha=`` the deprecated spelling of 1 - confidence).

    Raises:
        NoEvidence: null scores, reversed separation, or zero errors (a threshold separates
            every trial: mu unbounded by the data), or fewer than one threshold with both
            counts >= :data:`MIN_COUNT`.
    """
    alpha = significance(confidence, alpha, where="gdp_fit")
    evidence = _band_with_evidence(scores_in, scores_out, alpha, "grid", grid_size)
    fp, fn = evidence.false_positives, evidence.false_negatives
    if np.any((fp == 0) & (fn == 0)):
        raise NoEvidence(
            "zero errors: a threshold separates every IN from every OUT trial, so the Gaussian mu "
            "is unbounded "
            "by these scores; see the sound eps_lb and verdict instead"
        )
    use = (fp >= MIN_COUNT) & (fn >= MIN_COUNT) & (fp < evidence.n_out) & (fn < evidence.n_in)
    if not use.any():
        raise NoEvidence(
            f"zero errors: no threshold has at least {MIN_COUNT} false positives and {MIN_COUNT} "
            "false negatives; "
            "a Gaussian mu cannot be fitted"
        )
    fpr, fnr = fp[use] / evidence.n_out, fn[use] / evidence.n_in
    mu_t = _probit_mu(fpr, fnr)
    weights = 1.0 / (_probit_variance(fpr, evidence.n_out) + _probit_variance(fnr, evidence.n_in))
    mu = float(np.sum(weights * mu_t) / np.sum(weights))
    spread = float(math.sqrt(np.sum(weights * (mu_t - mu) ** 2) / np.sum(weights)))
    mu_band = float(np.clip(_probit_mu(evidence.fpr_hi, evidence.fnr_hi), 0.0, None).max())
    return GdpFit(
        mu=max(mu, 0.0), mu_spread=spread, mu_band=mu_band, thresholds=int(use.sum()), alpha=alpha
    )
