"""The one-run GDP-family bound (audit.stats.one_run_gdp, docs/design.md §8.19)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom

from audit.core.mechanism import Mechanism
from audit.stats.one_run import count_correct, fdp_rejects, gdp_power, one_run_verdict
from audit.stats.one_run_gdp import (
    GDP_FAMILY_LABEL,
    fdp_mu_lb,
    one_run_gdp_lower_bound,
    plan_gdp_guesses,
)
from audit.theory import bounds_for


def _canaries(mu: float, m: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """m canaries IN with probability 1/2, scores N(mu, 1) IN and N(0, 1) OUT: exactly mu-GDP
    (the likelihood-ratio test of one Gaussian step, as deterministic batches with T = 1)."""
    rng = np.random.default_rng([seed, 19])
    included = rng.random(m) < 0.5
    return rng.normal(size=m) + mu * included, included


def test_mu_lb_is_a_rejected_claim_and_the_run_below_it() -> None:
    scores, included = _canaries(1.0, 2000, 0)
    count = count_correct(scores, included, 60, 60)
    mu_lb = fdp_mu_lb(2000, count.guesses, count.correct, alpha=0.05)
    assert 0.2 < mu_lb < 1.5  # a real bound from 120 guesses of a 1-GDP mechanism
    for mu in np.linspace(0.0, mu_lb, 7)[1:]:  # every claim up to mu_lb is refuted
        assert fdp_rejects(gdp_power(mu), 2000, count.guesses, count.correct, 0.05)
    # the one-run verdict of the same rule says the same of the claim mu_lb-GDP
    verdict = one_run_verdict(scores, included, gdp_power(mu_lb), 0.05, guesses=(60, 60))
    assert verdict.violated


def test_vectorised_matches_scalar() -> None:
    g, c = np.array([40, 100, 100]), np.array([38, 90, 70])
    many = fdp_mu_lb(1000, g, c, alpha=0.05)
    single = [fdp_mu_lb(1000, int(a), int(b), alpha=0.05) for a, b in zip(g, c, strict=True)]
    np.testing.assert_array_equal(many, single)
    assert fdp_mu_lb(1000, 10, 5, alpha=0.05) == 0.0  # chance-level guesses refute nothing


def test_coverage_at_the_truth() -> None:
    """Over R audits of an exactly 1-GDP mechanism, mu_lb > 1 (a false statement) at most
    binom.ppf(1 - 1e-3, R, alpha) times: a statement false with probability <= alpha exceeds
    that count with probability <= 1e-3. Rule fixed in advance, as the bound requires."""
    reps, alpha = 200, 0.05
    false = 0
    for seed in range(reps):
        scores, included = _canaries(1.0, 1000, seed)
        bound = one_run_gdp_lower_bound(scores, included, alpha=alpha, guesses=(26, 26))
        false += bound.mu_lb > 1.0
    assert false <= binom.ppf(1 - 1e-3, reps, alpha)


def test_strategies_and_record() -> None:
    scores, included = _canaries(1.0, 2000, 3)
    fixed = one_run_gdp_lower_bound(scores, included, guesses=(60, 60))
    assert (fixed.strategy, fixed.candidates, fixed.alpha_per_test) == ("fixed", 1, 0.05)
    assert (fixed.k_plus, fixed.k_minus, fixed.guesses, fixed.m_eval) == (60, 60, 120, 2000)
    bonf = one_run_gdp_lower_bound(scores, included, guesses="bonferroni")
    assert bonf.strategy == "bonferroni" and bonf.alpha_per_test == 0.05 / bonf.candidates
    split = one_run_gdp_lower_bound(scores, included, guesses="split", seed=1)
    assert split.strategy == "split" and split.m_eval == 1000
    record = fixed.to_dict()
    assert record["label"] == GDP_FAMILY_LABEL and record["mu_lb"] == fixed.mu_lb


def test_bad_input_names_the_field() -> None:
    scores, included = _canaries(1.0, 100, 0)
    with pytest.raises(ValueError, match="guesses"):
        one_run_gdp_lower_bound(scores, included, guesses="planed")
    with pytest.raises(ValueError, match="alpha"):
        one_run_gdp_lower_bound(scores, included, alpha=0.7)
    with pytest.raises(ValueError, match="correct"):
        fdp_mu_lb(100, 10, 11, alpha=0.05)


def test_plan_from_the_theory() -> None:
    mechanism = Mechanism(
        sampler="deterministic", sigma=1.0, steps_per_epoch=100, threat_model="isolated"
    )
    plan = plan_gdp_guesses(bounds_for(mechanism).lower, 1000, alpha=0.05)
    assert plan.k_plus + plan.k_minus <= 1000 and plan.k_plus >= 1
    assert 0.0 < plan.expected_mu_lb < 1.0  # a projection below the truth mu = 1
