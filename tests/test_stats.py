"""audit.stats.binary: Clopper-Pearson against scipy, trade-off counts, eps bounds, verdicts, the
ceiling."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import optimize
from scipy.stats import binomtest, norm

from audit.stats.binary import (
    OPTIMISTIC_LABEL,
    bonferroni_ranks,
    clopper_pearson_lower,
    clopper_pearson_upper,
    empirical_tradeoff,
    epsilon_from_rates,
    epsilon_lower_bound,
    gdp_mu_estimate,
    ideal_epsilon_lb,
    split_scores,
    verdict,
)


def gaussian_curve(mu: float):
    """G_mu(a) = Phi(Phi^{-1}(1 - a) - mu), the trade-off of N(0, 1) vs N(mu, 1)."""
    return lambda a: norm.cdf(norm.isf(np.asarray(a, dtype=float)) - mu)


# ----------------------------------------------------------------------------- Clopper-Pearson


@pytest.mark.parametrize("nobs", [1, 7, 100, 2500])
@pytest.mark.parametrize("alpha", [0.01, 0.05, 0.2])
def test_clopper_pearson_matches_scipy_one_sided(nobs, alpha):
    counts = sorted({0, 1, nobs // 3, nobs // 2, nobs - 1, nobs})
    upper = clopper_pearson_upper(np.array(counts), nobs, alpha)
    lower = clopper_pearson_lower(np.array(counts), nobs, alpha)
    for k, up, low in zip(counts, upper, lower, strict=True):
        # scipy: alternative="less" gives the one-sided interval [0, upper].
        ref_up = (
            binomtest(k, nobs, alternative="less").proportion_ci(1 - alpha, method="exact").high
        )
        ref_low = (
            binomtest(k, nobs, alternative="greater").proportion_ci(1 - alpha, method="exact").low
        )
        assert up == pytest.approx(ref_up, abs=1e-10)
        assert low == pytest.approx(ref_low, abs=1e-10)


def test_clopper_pearson_edges_and_order():
    assert clopper_pearson_upper(5, 5, 0.05) == 1.0
    assert clopper_pearson_lower(0, 5, 0.05) == 0.0
    assert clopper_pearson_upper(0, 10, 0.05) == pytest.approx(1 - 0.05 ** (1 / 10))
    k = np.arange(0, 51)
    up, low = clopper_pearson_upper(k, 50, 0.05), clopper_pearson_lower(k, 50, 0.05)
    assert np.all(low <= k / 50) and np.all(k / 50 <= up) and np.all(np.diff(up) > 0)
    with pytest.raises(ValueError, match="alpha"):
        clopper_pearson_upper(1, 10, 0.7)


def test_clopper_pearson_covers_at_its_level():
    # The one-sided bound misses p with probability <= alpha; over 4000 binomial draws the
    # number of misses is <= Binomial(4000, 0.05)'s 0.999-quantile (241).
    rng = np.random.default_rng(3)
    p, n = 0.03, 400
    counts = rng.binomial(n, p, size=4000)
    misses = int((clopper_pearson_upper(counts, n, 0.05) < p).sum())
    assert misses <= 241


# ----------------------------------------------------------------------------- trade-off


def test_empirical_tradeoff_counts_match_brute_force():
    rng = np.random.default_rng(0)
    s_in = rng.integers(0, 6, size=40).astype(float)  # ties on purpose
    s_out = rng.integers(-2, 4, size=30).astype(float)
    points = empirical_tradeoff(s_in, s_out)
    assert points.thresholds[-1] == np.inf
    for t, fp, fn in zip(
        points.thresholds, points.false_positives, points.false_negatives, strict=True
    ):
        assert fp == int((s_out >= t).sum())
        assert fn == int((s_in < t).sum())
    assert points.fpr[0] == 1.0 and points.fnr[0] == 0.0
    assert points.fpr[-1] == 0.0 and points.fnr[-1] == 1.0


def test_epsilon_from_rates_formula():
    eps = epsilon_from_rates(np.array([0.01, 0.5]), np.array([0.5, 0.5]), 0.0)
    assert eps[0] == pytest.approx(math.log(0.5 / 0.01))
    assert eps[1] == 0.0  # no separation -> floored at 0
    # Second direction: small FNR.
    assert epsilon_from_rates(0.5, 0.01, 1e-3) == pytest.approx(math.log((1 - 1e-3 - 0.5) / 0.01))


# ----------------------------------------------------------------------------- eps bound


def test_epsilon_lower_bound_fields_and_reproducibility(gdp_epsilon):
    rng = np.random.default_rng(1)
    s_in, s_out = rng.normal(2.0, 1, 5000), rng.normal(0, 1, 5000)
    a = epsilon_lower_bound(s_in, s_out, delta=1e-5, seed=4, threshold="split")
    b = epsilon_lower_bound(s_in, s_out, delta=1e-5, seed=4, threshold="split")
    assert a == b
    assert a.strategy == "split" and a.n_eval_in == 2500 and a.n_eval_out == 2500
    assert 0 < a.epsilon_lb <= gdp_epsilon(2.0, 1e-5)
    assert a.epsilon_optimistic >= a.epsilon_lb * 0.9
    assert a.optimistic_label == OPTIMISTIC_LABEL == "optimistic, not a bound"
    assert a.alpha_per_rate == 0.025
    d = a.to_dict()
    json.dumps(d)
    for key in (
        "epsilon_lb",
        "epsilon_optimistic",
        "threshold",
        "fpr_hi",
        "fnr_hi",
        "false_positives",
        "strategy",
    ):
        assert key in d
    c = epsilon_lower_bound(s_in, s_out, delta=1e-5, threshold="bonferroni")
    assert c.n_eval_in == 5000 and 0 < c.epsilon_lb <= gdp_epsilon(2.0, 1e-5)


def test_epsilon_lower_bound_evidence_is_consistent():
    rng = np.random.default_rng(2)
    s_in, s_out = rng.normal(1.5, 1, 3000), rng.normal(0, 1, 3000)
    for strategy in ("split", "bonferroni"):
        bound = epsilon_lower_bound(s_in, s_out, delta=1e-5, threshold=strategy)
        assert bound.fpr_hi == pytest.approx(
            float(
                clopper_pearson_upper(bound.false_positives, bound.n_eval_out, bound.alpha_per_rate)
            )
        )
        assert bound.epsilon_lb == pytest.approx(
            float(epsilon_from_rates(bound.fpr_hi, bound.fnr_hi, 1e-5))
        )


def test_split_convention():
    scores = np.arange(11.0)
    select, evaluate = split_scores(scores, 3)
    assert select.size == 5 and evaluate.size == 6
    assert sorted(np.concatenate([select, evaluate])) == list(scores)
    order = np.random.default_rng(3).permutation(11)
    assert list(select) == list(scores[order[:5]])


def test_bonferroni_grid_is_fixed_by_n():
    ranks = bonferroni_ranks(10_000, 40)
    assert ranks[0] == 1 and ranks[-1] == 5000 and ranks.size <= 20  # rounding merges small ranks
    assert np.array_equal(ranks, bonferroni_ranks(10_000, 40))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"delta": -0.1}, "delta"),
        ({"delta": 1e-5, "alpha": 0.0}, "alpha"),
        ({"delta": 1e-5, "threshold": "splitt"}, "Did you mean 'split'"),
        ({"delta": 1e-5, "seed": -1}, "seed"),
    ],
)
def test_epsilon_lower_bound_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        epsilon_lower_bound([1.0, 2.0, 3.0], [0.0, 1.0, 2.0], **kwargs)


def test_bad_scores():
    with pytest.raises(ValueError, match="scores_in is empty"):
        epsilon_lower_bound([], [1.0, 2.0], delta=1e-5, threshold="split")
    with pytest.raises(ValueError, match="NaN"):
        epsilon_lower_bound([1.0, np.nan], [1.0, 2.0], delta=1e-5, threshold="split")


# ----------------------------------------------------------------------------- verdict


def test_verdict_detects_a_false_claim_and_accepts_a_true_one():
    rng = np.random.default_rng(5)
    s_in, s_out = rng.normal(2.0, 1, 20000), rng.normal(0, 1, 20000)
    # claims mu = 1, truth mu = 2
    false_claim = verdict(s_in, s_out, gaussian_curve(1.0), threshold="split")
    assert false_claim.violated and false_claim.fnr_hi < false_claim.f_of_fpr_hi
    assert false_claim.margin > 0
    d = false_claim.to_dict()
    json.dumps(d)
    for key in (
        "violated",
        "threshold",
        "false_positives",
        "false_negatives",
        "FPR_hi",
        "FNR_hi",
        "f(FPR_hi)",
        "strategy",
    ):
        assert key in d
    true_claim = verdict(s_in, s_out, gaussian_curve(2.0), threshold="split")
    assert not true_claim.violated
    assert verdict(s_in, s_out, gaussian_curve(1.0), threshold="bonferroni").violated
    with pytest.raises(ValueError, match="callable"):
        verdict(s_in, s_out, 3.0, threshold="split")


def test_verdict_accepts_a_scalar_only_callable():
    rng = np.random.default_rng(6)
    s_in, s_out = rng.normal(2.0, 1, 4000), rng.normal(0, 1, 4000)

    def scalar_only(a: float) -> float:
        return float(norm.cdf(norm.isf(float(a)) - 1.0))  # float(array) raises TypeError

    assert verdict(s_in, s_out, scalar_only, threshold="split") == verdict(s_in, s_out,
        gaussian_curve(1.0), threshold="split")


# ----------------------------------------------------------------------------- GDP, ceiling


def test_gdp_mu_is_labelled_estimate():
    rng = np.random.default_rng(7)
    s_in, s_out = rng.normal(1.0, 1, 20000), rng.normal(0, 1, 20000)
    estimate = gdp_mu_estimate(s_in, s_out, threshold="split")
    assert "estimate" in estimate.label and "not a bound" in estimate.label
    # mu_point at one threshold with 10^4 evaluation trials per side: standard error about
    # sqrt(2 / 10^4) / phi(.) ~ 0.03 near the middle; 0.15 is > 4 standard errors.
    assert estimate.mu_point == pytest.approx(1.0, abs=0.15)
    assert estimate.mu <= estimate.mu_point + 1e-12


def test_ideal_epsilon_lb_reference_value(gdp_epsilon):
    # REFERENCE (issue 5): 1e6 trials, Gaussian curve of eps 2.75 at delta 1e-5 -> about 2.0.
    mu = optimize.brentq(lambda m: gdp_epsilon(m, 1e-5) - 2.75, 0.1, 3.0)
    ceiling = ideal_epsilon_lb(gaussian_curve(mu), 1_000_000, delta=1e-5, confidence=0.95,
        threshold="split")
    assert ceiling == pytest.approx(2.06, abs=0.03)
    bonf = ideal_epsilon_lb(
        gaussian_curve(mu), 1_000_000, delta=1e-5, confidence=0.95, threshold="bonferroni"
    )
    assert 1.9 < bonf < 2.75
    # More trials -> closer to the curve's eps, never above it.
    values = [
        ideal_epsilon_lb(gaussian_curve(mu), n, delta=1e-5, threshold="split") for n in (10**4,
            10**5, 10**6, 10**7)
    ]
    assert all(np.diff(values) > 0) and values[-1] < 2.75
