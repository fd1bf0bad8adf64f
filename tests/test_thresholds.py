"""audit.stats.thresholds: the planned threshold and its joint test (docs/design.md §8.12).

Fixed seeds throughout; every tolerance is derived in a comment. Coverage at reduced size is
in tests/test_proof_coverage.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate
from scipy.stats import beta as beta_law
from scipy.stats import binom

from audit.run.planning import curve_scores
from audit.stats.binary import epsilon_lower_bound, verdict
from audit.stats.thresholds import (
    PlannedThreshold,
    joint_p_value,
    pilot_curve,
    plan_threshold,
    planned_epsilon_lower_bound,
    split_pilot,
)
from audit.theory.curve import TradeOffCurve

GDP1 = TradeOffCurve.from_gdp(1.0, sampler="deterministic", threat_model="isolated", kind="exact")


def test_p_value_bounds_the_integral_from_above() -> None:
    """The right Riemann sum on the quantile scale is an upper bound on the exact p-value
    (adaptive quadrature, relative error <= 1e-8), and within 1% of it."""
    n, r, s = 5000, 20, 40
    exact, _ = integrate.quad(
        lambda u: binom.sf(s - 1, n, min(1.0, np.e * u)) * beta_law.pdf(u, r, n - r + 1),
        0,
        1,
        points=[r / n],
        limit=200,
        epsabs=1e-13,
        epsrel=1e-10,
    )
    bound = float(joint_p_value(s, n, r, n, lambda u: np.e * u))
    assert exact <= bound <= exact * 1.01 + 1e-6


def test_joint_test_level_at_the_null_boundary() -> None:
    """At the boundary of the claim (TPR = e^eps U + delta exactly) the test rejects with
    probability at most alpha. 4000 draws of (U, S): if the true rejection rate were alpha =
    0.05, the count exceeds binom.ppf(1 - 1e-3, 4000, 0.05) with probability <= 1e-3. The
    rate must also be near alpha (>= 0.03: binom.cdf of that count at 0.05 is < 1e-6), or the
    test would be needlessly conservative."""
    rng = np.random.default_rng(11)
    n, r, eps, delta, alpha, reps = 4000, 30, 1.0, 1e-5, 0.05, 4000
    u = rng.beta(r, n - r + 1, reps)
    s = rng.binomial(n, np.minimum(np.exp(eps) * u + delta, 1.0))
    p = joint_p_value(s, n, r, n, lambda v: np.exp(eps) * v + delta)
    rejected = int(np.sum(p <= alpha))
    assert rejected <= binom.ppf(1 - 1e-3, reps, alpha)
    assert rejected >= 0.03 * reps


def test_planned_bound_on_gaussian_scores_is_stronger_than_split() -> None:
    """1-GDP scores, 2000 a side, 10 seeds: the planned joint test certifies more than split
    in median (the planned ceiling is about 2.3 against split's 1.5 here)."""
    plan = plan_threshold(GDP1, 2000, 2000, alpha=0.05, delta=1e-5, source="theory")
    planned, split = [], []
    for r in range(10):
        scores_in, scores_out = curve_scores(GDP1, 2000, np.random.default_rng([5, r]))
        # through audit.stats.binary, with the optimistic maximum, which includes the plan's rank
        if r == 0:
            bound = epsilon_lower_bound(
                scores_in, scores_out, delta=1e-5, threshold="planned", plan=plan, seed=r
            )
            assert bound.epsilon_optimistic >= bound.epsilon_lb
        else:
            bound, _ = planned_epsilon_lower_bound(
                scores_in, scores_out, plan, delta=1e-5, seed=r, optimistic=False
            )
        planned.append(bound.epsilon_lb)
        split.append(
            epsilon_lower_bound(
                scores_in, scores_out, delta=1e-5, threshold="split", seed=r
            ).epsilon_lb
        )
    assert np.median(planned) > np.median(split)
    assert max(planned) < GDP1.epsilon(np.array([1e-5]))[0]


def test_ties_are_counted_against_the_claim_and_the_bound_covers() -> None:
    """Scores with two atoms (randomised response: OUT ~ Bernoulli(0.2), IN ~ Bernoulli(0.6),
    true eps at delta = 0: log 3): the planned rule counts no score tied with its order
    statistic (no random tie-break; per-seed coverage is tests/test_tie_coverage.py). 200
    audits of 200 a side at alpha = 0.2: the bound may exceed log 3 in at most
    binom.ppf(1 - 1e-3, 200, 0.2) = 58 audits (probability <= 1e-3 for a sound bound)."""
    rr = TradeOffCurve.from_privacy_profile(
        [np.log(3.0)],
        [0.0],
        sampler="poisson",
        threat_model="isolated",
        kind="upper",
        method="randomised response",
    )
    plan = plan_threshold(rr, 200, 200, alpha=0.2, delta=0.0)
    rng = np.random.default_rng(3)
    above = 0
    for r in range(200):
        scores_in = (rng.random(200) < 0.6).astype(float)
        scores_out = (rng.random(200) < 0.2).astype(float)
        bound, _ = planned_epsilon_lower_bound(
            scores_in, scores_out, plan, delta=0.0, alpha=0.2, seed=r, optimistic=False
        )
        above += bound.epsilon_lb > np.log(3.0)
    assert above <= binom.ppf(1 - 1e-3, 200, 0.2)


def test_planned_verdict_refutes_a_false_claim_and_keeps_a_true_one() -> None:
    rng = np.random.default_rng(8)
    scores_in, scores_out = curve_scores(GDP1, 5000, rng)
    false_claim = TradeOffCurve.from_privacy_profile(
        [1.0],
        [1e-5],
        sampler="poisson",
        threat_model="isolated",
        kind="upper",
        method="(1, 1e-5)-DP",
    )
    plan = plan_threshold(GDP1, 5000, 5000, alpha=0.05, claim=false_claim)
    assert verdict(scores_in, scores_out, false_claim, threshold="planned", plan=plan).violated
    plan_true = plan_threshold(GDP1, 5000, 5000, alpha=0.05, claim=GDP1)
    assert not verdict(scores_in, scores_out, GDP1, threshold="planned", plan=plan_true).violated


def test_plan_prefers_the_low_fpr_tail_for_gaussian_scores_and_says_so() -> None:
    plan = plan_threshold(
        GDP1, 2000, 2000, alpha=0.05, delta=1e-5, source="theory", curve_name="1-GDP"
    )
    assert plan.side == "out" and 1 <= plan.rank <= 40
    text = plan.describe()
    assert "1-GDP" in text and "theory" in text and f"{plan.rank}-th largest" in text
    assert plan.to_dict()["planned_rate"] == plan.rank / 2000


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda s: epsilon_lower_bound(s[0][:4], s[1][:4], delta=1e-5, threshold="planned"),
            r"too few for a pilot and a test. Pass threshold='split'.*or plan=",
        ),
        (lambda s: verdict(*s, GDP1, threshold="planned", plan="rank 3"), r"needs plan="),
        (
            lambda s: epsilon_lower_bound(
                *s,
                delta=1e-5,
                threshold="planned",
                plan=plan_threshold(GDP1, 50, 50, alpha=0.05, delta=1e-5),
            ),
            r"planned for 50 IN and 50 OUT",
        ),
        (
            lambda s: plan_threshold(GDP1, 10, 10, alpha=0.05),
            r"exactly one of delta= .* and claim=",
        ),
        (lambda s: plan_threshold(GDP1, 10, 10, alpha=0.05, delta=1e-5, source="guess"), r"source"),
    ],
)
def test_planned_refuses_bad_input(call, message) -> None:
    rng = np.random.default_rng(0)
    scores = (rng.normal(1, 1, 100), rng.normal(0, 1, 100))
    with pytest.raises(ValueError, match=message):
        call(scores)


def test_pilot_is_a_disjoint_random_subset_and_its_curve_a_tradeoff_function() -> None:
    scores = np.arange(1000.0)
    pilot, test = split_pilot(scores, seed=4)
    assert pilot.size == 100 and test.size == 900
    assert np.array_equal(np.sort(np.concatenate([pilot, test])), scores)
    rng = np.random.default_rng(1)
    curve = pilot_curve(rng.normal(1, 1, 500), rng.normal(0, 1, 500))
    grid = np.linspace(0, 1, 1001)
    values = curve(grid)
    assert values[0] == 1.0 and values[-1] == 0.0 and np.all(np.diff(values) <= 0)
    plan = plan_threshold(curve, 900, 900, alpha=0.05, delta=1e-5, source="pilot", pilot=(100, 100))
    assert isinstance(plan, PlannedThreshold) and plan.pilot_in == 100
    assert "left out of the test" in plan.describe()
