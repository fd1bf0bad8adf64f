"""audit.stats.binary at its edges: refused inputs, and coverage with atoms, infinities and ties.

- verdict and gdp_mu_estimate refuse NaN or empty scores (a NaN sorts above every threshold
  and would count as a correct "IN": with IN = OUT in law, half the IN scores NaN gave
  "violated");
- the ``bonferroni`` order-statistic argument holds for scores with atoms and +-inf, and the
  eps lower bound covers the truth for discrete (randomised-response) scores;
- ``ideal_epsilon_lb`` ("ceiling") is a projection, not an upper bound: real audits exceed it;
- the verdict refuses a claim that is not a trade-off function.

Fixed seeds throughout; tolerances derived in comments.
"""

from __future__ import annotations

import numpy as np
import pytest

from audit.run.planning import curve_scores
from audit.stats.binary import (
    clopper_pearson_upper,
    epsilon_lower_bound,
    gdp_mu_estimate,
    ideal_epsilon_lb,
    verdict,
)
from audit.theory.curve import TradeOffCurve

# ----------------------------------------------------------------------------- NaN scores


@pytest.mark.parametrize("strategy", ["split", "bonferroni"])
def test_verdict_and_gdp_reject_nan_scores(strategy: str, explicit_claim) -> None:
    rng = np.random.default_rng(0)
    scores_out = rng.normal(size=200)
    scores_in = rng.normal(size=200)  # same law as OUT: no claim can be refuted
    scores_in[:150] = np.nan
    with pytest.raises(ValueError, match="scores_in contains NaN"):
        verdict(scores_in, scores_out, explicit_claim(0.5), confidence=0.95, threshold=strategy)
    with pytest.raises(ValueError, match="scores_in contains NaN"):
        gdp_mu_estimate(scores_in, scores_out, threshold=strategy)
    with pytest.raises(ValueError, match="scores_out contains NaN"):
        verdict(scores_out, scores_in, explicit_claim(0.5), confidence=0.95, threshold=strategy)


def test_verdict_rejects_empty_scores(explicit_claim) -> None:
    with pytest.raises(ValueError, match="scores_in is empty"):
        verdict([], [0.0, 1.0], explicit_claim(1.0), confidence=0.95, threshold="bonferroni")


# ----------------------------------------------------------------------------- atoms, infinities


@pytest.mark.parametrize(
    ("values", "masses"),
    [
        ([0.0, 1.0, 2.0, 3.0, 4.0], [0.03, 0.07, 0.1, 0.2, 0.6]),
        ([0.0, 1.0, np.inf], [0.05, 0.1, 0.85]),
    ],
)
def test_order_statistic_rate_is_covered_with_atoms(
    values: list[float], masses: list[float]
) -> None:
    """The bonferroni IN thresholds are t = nextafter(Y_(r)) (r-th smallest IN score); the
    FNR bound CP_upper(#{Y < t}) must cover Pr[Y < t] with probability >= 1 - a also when
    the law has atoms (ties) or an atom at +inf (t = inf). 20,000 repetitions: the failure
    frequency has sd <= sqrt(0.1 * 0.9 / 20000) = 0.0021; allowed a + 4 sd = 0.1085."""
    a, n, reps = 0.1, 20, 20_000
    values_arr, masses_arr = np.array(values), np.array(masses)
    rng = np.random.default_rng(2)
    sample = np.sort(rng.choice(values_arr, (reps, n), p=masses_arr), axis=1)
    for r in (1, 2, 3, 5, 10):
        t = np.nextafter(sample[:, r - 1], np.inf)
        false_negatives = (sample < t[:, None]).sum(axis=1)
        truth = (masses_arr[None, :] * (values_arr[None, :] < t[:, None])).sum(axis=1)
        failures = np.mean(clopper_pearson_upper(false_negatives, n, a) < truth)
        assert failures <= a + 4 * np.sqrt(a * (1 - a) / reps), (r, failures)


@pytest.mark.parametrize("strategy", ["split", "bonferroni"])
def test_discrete_scores_coverage(strategy: str) -> None:
    """Scores with two atoms (randomised response): OUT ~ Bernoulli(0.2), IN ~ Bernoulli(0.6),
    true eps at delta = 0 is max(log(0.6/0.2), log(0.8/0.4)) = log 3. The bound must exceed
    it in at most alpha = 0.2 of 300 audits: sd sqrt(0.2*0.8/300) = 0.023; allowed 0.2 + 4 sd."""
    alpha, reps, n = 0.2, 300, 100
    truth = np.log(3.0)
    rng = np.random.default_rng(3)
    above = 0
    for r in range(reps):
        scores_in = (rng.random(n) < 0.6).astype(float)
        scores_out = (rng.random(n) < 0.2).astype(float)
        bound = epsilon_lower_bound(
            scores_in, scores_out, delta=0.0, confidence=1 - alpha, threshold=strategy, seed=r
        )
        above += bound.epsilon_lb > truth
    assert above / reps <= alpha + 4 * np.sqrt(alpha * (1 - alpha) / reps)


# ----------------------------------------------------------------------------- the "ceiling"


def test_ceiling_is_a_projection_not_an_upper_bound() -> None:
    """With scores whose curve is exactly mu = 1.5 GDP, real bonferroni audits exceed
    ideal_epsilon_lb in about 90% of cases (measured, 100 audits); with 20 audits, if the
    chance were even 0.5, none exceeding would have probability 1e-6. So the CLI must not
    present it as an upper bound."""
    from audit.cli.simulate import CEILING_LABEL

    curve = TradeOffCurve.from_gdp(
        1.5, sampler="deterministic", threat_model="isolated", kind="exact"
    )
    n = 20_000
    ceiling = ideal_epsilon_lb(curve, n, delta=1e-5, confidence=0.95, threshold="bonferroni")
    bounds = [
        epsilon_lower_bound(*curve_scores(curve, n, np.random.default_rng([7, r])), delta=1e-5,
                            threshold="bonferroni", seed=r).epsilon_lb
        for r in range(20)
    ]
    assert max(bounds) > ceiling
    assert "not a bound" in CEILING_LABEL


@pytest.mark.parametrize(
    ("claim", "message"),
    [
        (lambda a: np.asarray(a) * 0.5, r"non-increasing"),
        (lambda a: 1.5 - np.asarray(a), r"values in \[0, 1\]"),
        (lambda a: np.full_like(np.asarray(a, dtype=float), np.nan), r"values in \[0, 1\]"),
    ],
)
def test_verdict_refuses_a_claim_that_is_not_a_tradeoff_function(claim, message):
    """The verdict's soundness needs f non-increasing into [0, 1]; anything else is refused."""
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match=message):
        verdict(rng.normal(size=100), rng.normal(size=100), claim, threshold="split")
