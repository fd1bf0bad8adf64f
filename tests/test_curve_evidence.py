"""audit.stats.curve_evidence: the simultaneous band, the whole-curve verdict, the GDP fit and their
refusals (docs/design.md §8.13). Fixed seeds; tolerances derived in comments."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom

from audit.run.planning import curve_scores
from audit.stats.curve_evidence import NoEvidence, curve_verdict, gdp_fit, tradeoff_band
from audit.theory.curve import TradeOffCurve

GDP1 = TradeOffCurve.from_gdp(1.0, sampler="deterministic", threat_model="isolated", kind="exact")


def explicit(eps: float) -> TradeOffCurve:
    return TradeOffCurve.from_privacy_profile(
        [eps],
        [1e-5],
        sampler="poisson",
        threat_model="isolated",
        kind="upper",
        method=f"({eps:g}, 1e-5)-DP",
    )


@pytest.mark.parametrize("band", ["grid", "dkw"])
def test_band_covers_the_true_curve_at_every_threshold_at_once(band: str) -> None:
    """curve_scores(f) gives OUT scores -U and IN scores -A (A with CDF 1 - f), so at threshold
    t the true rates are FPR = -t and FNR = f(-t) (t in [-1, 0]). The band must hold at all of
    its thresholds together in >= 1 - alpha of 300 repetitions: failures <= binom.ppf(1 - 1e-3,
    300, 0.1) = 45 at alpha = 0.1 (exceeded with probability <= 1e-3 by a sound band)."""
    alpha, reps, n = 0.1, 300, 400
    failures = 0
    for r in range(reps):
        scores_in, scores_out = curve_scores(GDP1, n, np.random.default_rng([9, r]))
        b = tradeoff_band(scores_in, scores_out, confidence=1 - alpha, band=band)
        t = np.clip(b.thresholds, -1.0, 0.0)
        true_fpr, true_fnr = -t, GDP1(-t)
        failures += bool(np.any(true_fpr > b.fpr_hi + 1e-12) or np.any(true_fnr > b.fnr_hi + 1e-12))
    assert failures <= binom.ppf(1 - 1e-3, reps, alpha)


def test_curve_verdict_refutes_false_claims_everywhere_and_keeps_the_truth() -> None:
    scores_in, scores_out = curve_scores(GDP1, 20_000, np.random.default_rng(1))
    wrong = curve_verdict(scores_in, scores_out, explicit(1.0))
    assert wrong.violated and wrong.violating > 10 and wrong.margin > 0
    assert wrong.to_dict()["label"].startswith("sound")
    right = curve_verdict(scores_in, scores_out, GDP1)
    assert not right.violated and right.violating == 0
    assert 0 < right.epsilon_lb < GDP1.epsilon(np.array([1e-5]))[0]


def test_gdp_fit_recovers_mu_and_is_labelled_an_estimate() -> None:
    """Gaussian scores N(1, 1) vs N(0, 1), 20,000 a side: the weighted fit's standard error is
    about 0.01 (delta method), so |mu - 1| < 0.05 is > 4 standard errors; mu_band is a lower
    confidence bound for a Gaussian curve, below mu."""
    rng = np.random.default_rng(2)
    fit = gdp_fit(rng.normal(1.0, 1.0, 20_000), rng.normal(0.0, 1.0, 20_000))
    assert abs(fit.mu - 1.0) < 0.05 and fit.mu_band < fit.mu and fit.mu_spread < 0.1
    assert "estimate, not a bound" in fit.label


def test_gdp_fit_spread_flags_a_curve_that_is_not_gaussian() -> None:
    """Randomised response (two atoms): per-threshold mu_t disagree (the curve is piecewise
    linear), unlike a Gaussian pair's."""
    rng = np.random.default_rng(3)
    scores_in = (rng.random(20_000) < 0.6).astype(float) + 0.01 * rng.normal(size=20_000)
    scores_out = (rng.random(20_000) < 0.2).astype(float) + 0.01 * rng.normal(size=20_000)
    assert gdp_fit(scores_in, scores_out).mu_spread > 0.2


@pytest.mark.parametrize(
    ("make", "message", "verdict_refuses"),
    [
        (lambda rng: (rng.normal(size=5000), rng.normal(size=5000)), "no evidence", True),
        (lambda rng: (rng.normal(0, 1, 5000), rng.normal(1, 1, 5000)), "reversed separation", True),
        (lambda rng: (rng.normal(100, 1, 5000), rng.normal(0, 1, 5000)), "zero errors", False),
        (lambda rng: (np.zeros(5000), np.zeros(5000)), "no evidence", True),
    ],
)
def test_refusals(make, message: str, verdict_refuses: bool) -> None:
    """Null scores (also all equal), reversed separation: both refuse; zero errors: the GDP fit
    refuses (mu unbounded by the data) while the verdict, whose Clopper-Pearson bounds hold at
    zero counts, stands."""
    scores_in, scores_out = make(np.random.default_rng(4))
    with pytest.raises(NoEvidence, match=message):
        gdp_fit(scores_in, scores_out)
    if verdict_refuses:
        with pytest.raises(NoEvidence, match=message):
            curve_verdict(scores_in, scores_out, explicit(1.0))
    else:
        assert curve_verdict(scores_in, scores_out, explicit(1.0)).violated


def test_bad_input_names_the_argument() -> None:
    rng = np.random.default_rng(5)
    s = rng.normal(size=100)
    with pytest.raises(ValueError, match="band"):
        tradeoff_band(s, s, band="berk-jones")
    with pytest.raises(ValueError, match="non-increasing"):
        curve_verdict(s + 1, s, lambda a: np.asarray(a) * 0.5)
    with pytest.raises(ValueError, match="scores_in contains NaN"):
        gdp_fit(np.full(10, np.nan), s)
