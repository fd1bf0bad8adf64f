"""The one-run GDP-family bound (audit.stats.one_run_gdp, docs/design.md §8.19)."""

from __future__ import annotations

import numpy as np
import pytest

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
    verdict = one_run_verdict(scores, included, gdp_power(mu_lb), confidence=0.95, guesses=(60, 60))
    assert verdict.violated


def test_vectorised_matches_scalar() -> None:
    g, c = np.array([40, 100, 100]), np.array([38, 90, 70])
    many = fdp_mu_lb(1000, g, c, alpha=0.05)
    single = [fdp_mu_lb(1000, int(a), int(b), alpha=0.05) for a, b in zip(g, c, strict=True)]
    np.testing.assert_array_equal(many, single)
    assert fdp_mu_lb(1000, 10, 5, alpha=0.05) == 0.0  # chance-level guesses refute nothing


def test_recursion_on_the_gaussian_curve_is_the_worst_law() -> None:
    """Soundness for a curve that is not piecewise linear. Tangents of the convex power inverse
    g(y) = Phi(Phi^{-1}(y) - 1) at 80 points lie below g (a weaker claim than 1-GDP), and for
    them the recursion equals the LP minimum over every law of C the per-canary constraints
    allow (tests/test_one_run.py's LP, to 1e-6); the closed-form recursion on g then exceeds
    the tangents' by at most the tangents' largest gap below g (measured: 0.0047), so it sits
    within that of the worst law allowed by a claim weaker than 1-GDP."""
    from scipy.special import ndtr, ndtri
    from scipy.stats import norm
    from test_one_run import _lines_power, _lp_min_total_mass

    from audit.stats.one_run import _recursion_mass

    y0 = np.concatenate([np.geomspace(1e-6, 0.5, 40), 1 - np.geomspace(1e-6, 0.5, 40)[::-1]])
    z = ndtri(y0)
    slopes = norm.pdf(z - 1.0) / norm.pdf(z)
    lines = [
        (float(a), float(ndtr(zi - 1.0) - a * y))
        for a, zi, y in zip(slopes, z, y0, strict=True)
    ]
    tangents, exact = _lines_power(lines), gdp_power(1.0)
    grid = np.linspace(0.0, 1.0, 1001)
    gap = float(np.max(exact.inverse(grid) - tangents.inverse(grid)))
    assert 0.0 <= gap < 0.005
    for m, r, tau in [(40, 40, 0.05), (60, 30, 0.05), (30, 30, 0.2)]:
        for c in range(1, r + 1):
            on_g = float(_recursion_mass(exact, m, np.array(r), np.array(c), tau)) * m / r
            on_t = float(_recursion_mass(tangents, m, np.array(r), np.array(c), tau)) * m / r
            if on_t < 1:
                lp = _lp_min_total_mass(m, r, c, tau, lines)
                assert abs(on_t - lp) <= 1e-6 * max(1.0, lp) + 1e-9
            assert -1e-12 <= on_g - on_t <= gap


def test_closed_form_agrees_with_the_tabulated_curve() -> None:
    """Two paths to the same claim: gdp_power's closed form and the 1-GDP curve tabulated as
    any callable claim is (rounded to its safe side). The fewest correct guesses that refute
    mu-GDP agree, the tabulated path at most one guess more conservative."""
    from audit.stats.one_run import tabulated_power
    from audit.theory.curve import gdp_tradeoff

    m, r = 10_000, 390
    counts = np.arange(r + 1)
    for mu in (0.7, 0.8, 0.9):
        closed = fdp_rejects(gdp_power(mu), m, np.full(r + 1, r), counts, 0.05)
        table = tabulated_power(lambda x, mu=mu: gdp_tradeoff(x, mu), "both")
        tabulated = fdp_rejects(table, m, np.full(r + 1, r), counts, 0.05)
        c_closed, c_table = int(counts[closed].min()), int(counts[tabulated].min())
        assert c_closed <= c_table <= c_closed + 1


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
        one_run_gdp_lower_bound(scores, included, confidence=0.3)
    with pytest.raises(ValueError, match="correct"):
        fdp_mu_lb(100, 10, 11, alpha=0.05)


def test_plan_from_the_theory() -> None:
    mechanism = Mechanism(
        sampler="deterministic", sigma=1.0, steps_per_epoch=100, threat_model="isolated"
    )
    plan = plan_gdp_guesses(bounds_for(mechanism).lower, 1000, alpha=0.05)
    assert plan.k_plus + plan.k_minus <= 1000 and plan.k_plus >= 1
    assert 0.0 < plan.expected_mu_lb < 1.0  # a projection below the truth mu = 1


def test_summary_and_report_label_the_gaussian_estimate() -> None:
    """summary.json's ``gdp_family`` carries the label and ``epsilon_if_gaussian``; the report
    states mu_lb with its confidence everywhere, and the eps of mu_lb-GDP only where the
    theory's curves are Gaussian, called an estimate, never a bound."""
    from dataclasses import replace

    from audit.deployed import one_run_audit
    from audit.report.one_run import one_run_sentence

    scores, included = _canaries(1.0, 2000, 5)
    cell = one_run_audit(scores, included, 8.0, delta=1e-5, guesses=(60, 60)).result
    entry = cell.to_json()["gdp_family"]
    assert entry["label"] == GDP_FAMILY_LABEL and entry["mu_lb"] > 0
    assert entry["epsilon_if_gaussian"] == cell.gdp_epsilon > 0

    def sentence(c: object) -> str:
        head, body = one_run_sentence(c, lambda x, **_: f"{x:.3g}")  # type: ignore[arg-type]
        return head + body

    deployed = sentence(cell)
    assert "μ-GDP claim with μ <" in deployed and "95% confidence" in deployed
    assert "Gaussian, as the theory's" not in deployed  # no Gaussian theory: mu_lb only
    gaussian = replace(
        cell,
        theory_lower_method="Gaussian DP mu = 1 (exact)",
        theory_upper_method="Gaussian DP mu = 1 (exact)",
    )
    text = sentence(gaussian)
    assert "an assumption this audit does not test" in text and "an estimate, not a bound" in text
