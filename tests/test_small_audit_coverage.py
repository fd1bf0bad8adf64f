"""Coverage of ``planned_ranks`` (issue 44 item 3): the family of ranks fixed by the trial counts
alone, each joint test at alpha / K, must hold at its stated level for every seed.

Tolerance: a sound statement fails (eps_lb above the truth, or a true claim called violated)
on each data set with probability <= alpha, so over R independent data sets the failures are
stochastically at most Binomial(R, alpha); a test fails only at a count whose binomial p-value
Pr[Binomial(R, alpha) >= count] is below 1e-3 (a sound strategy trips it with probability
< 1e-3). alpha = 0.2 (confidence 0.8) makes the check sensitive with few data sets; the full
figures at 95% are bench/oracle_ratio.py's.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom

from audit.stats.binary import PlannedRanks, epsilon_lower_bound, threshold_strategy
from audit.stats.thresholds import (
    family_epsilon_lower_bound,
    family_ranks,
    family_verdict,
    plan_family,
    planned_epsilon_lower_bound,
)
from audit.theory.curve import TradeOffCurve

ALPHA = 0.2
REPS = 30


def binomial_limit(reps: int, alpha: float, level: float = 1e-3) -> int:
    """The largest failure count whose p-value Pr[Binomial(reps, alpha) >= count] is >= level."""
    counts = np.arange(reps + 1)
    return int(counts[binom.sf(counts - 1, reps, alpha) >= level].max())


def laplace(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The Laplace mechanism of sensitivity 1 at scale 1: exactly 1-DP (delta 0), and the
    likelihood-ratio tails attain TPR = e FPR, so low ranks are near tight."""
    return rng.laplace(1.0, 1.0, n), rng.laplace(0.0, 1.0, n)


def randomized_response(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Randomized response at eps 3 (exactly 3-DP): every score ties with its side's atom; the
    OUT atom at 1 holds about n / (1 + e^3) = 4.7% of the trials, so that rank 16 of 400 falls
    inside it or just past it (where ties decide)."""
    p = np.exp(3.0) / (1 + np.exp(3.0))
    return (rng.random(n) < p).astype(float), (rng.random(n) < 1 - p).astype(float)


def test_family_is_fixed_by_the_counts() -> None:
    assert family_ranks(1000) == (1, 4, 16, 64)
    assert family_ranks(10_000) == (1, 4, 16, 64, 256, 1024)
    assert family_ranks(5) == (1,)
    family = plan_family(300, 1000)
    assert [(r.side, r.rank) for r in family.rules] == [
        ("out", 1), ("out", 4), ("out", 16), ("out", 64), ("in", 1), ("in", 4), ("in", 16)
    ]
    assert family.size == 7 and "alpha / 7" in family.describe()


def test_bound_is_the_best_rule_at_alpha_over_k() -> None:
    rng = np.random.default_rng(5)
    s_in, s_out = rng.normal(1.0, 1.0, 400), rng.normal(0.0, 1.0, 400)
    family = plan_family(400, 400)
    bound, tests = family_epsilon_lower_bound(s_in, s_out, delta=1e-5, alpha=0.05,
                                              optimistic=False)
    each = [planned_epsilon_lower_bound(s_in, s_out, rule, delta=1e-5, alpha=0.05 / family.size,
                                        optimistic=False)[0].epsilon_lb
            for rule in family.rules]
    assert bound.epsilon_lb == max(each) > 0
    assert len(tests) == family.size and bound.alpha == 0.05
    assert bound.strategy == "planned_ranks"
    # the strategy by name gives the same number, for every seed (no random number is drawn)
    for seed in (0, 7):
        same = epsilon_lower_bound(s_in, s_out, delta=1e-5, confidence=0.95,
                                   threshold="planned_ranks", seed=seed)
        assert same.epsilon_lb == bound.epsilon_lb
    assert isinstance(threshold_strategy("planned_ranks"), PlannedRanks)
    with pytest.raises(ValueError, match="planned_ranks"):
        PlannedRanks().epsilon_bound(s_in, s_out, delta=1e-5, plan="rank 3")


@pytest.mark.parametrize(("scores", "truth", "n"), [(laplace, 1.0, 200),
                                                     (randomized_response, 3.0, 400)])
def test_coverage_of_the_bound_and_the_verdict(scores, truth: float, n: int) -> None:
    """True eps ``truth`` at delta 0: eps_lb > truth and "violated" for the true claim each at
    most at rate alpha, within the binomial limit (module docstring). Seeds 2026..: the bound
    draws no random number, so each data set's result is that of every seed."""
    claim = TradeOffCurve.from_privacy_profile(
        [truth], [0.0], sampler="any", threat_model="any", kind="upper", method="true eps-DP",
    )
    rng = np.random.default_rng(2026)
    over, violated = 0, 0
    for _ in range(REPS):
        s_in, s_out = scores(rng, n)
        bound, _ = family_epsilon_lower_bound(s_in, s_out, delta=0.0, alpha=ALPHA,
                                              optimistic=False)
        over += bound.epsilon_lb > truth
        violated += family_verdict(s_in, s_out, claim, alpha=ALPHA)[0].violated
    limit = binomial_limit(REPS, ALPHA)
    assert over <= limit, f"eps_lb above the truth in {over} of {REPS} (limit {limit})"
    assert violated <= limit, f"true claim refuted in {violated} of {REPS} (limit {limit})"


def test_scores_first_default_is_the_family() -> None:
    """audit_scores without a threshold uses planned_ranks: the same number as
    epsilon_lower_bound(threshold="planned_ranks"), every trial tested, no pilot."""
    from audit.report.scores_audit import audit_scores, scores_summary

    rng = np.random.default_rng(11)
    s_in, s_out = rng.normal(1.0, 1.0, 300), rng.normal(0.0, 1.0, 300)
    result = audit_scores(s_in, s_out, delta=1e-5, claim=0.5, estimates=False)
    expected = epsilon_lower_bound(s_in, s_out, delta=1e-5, threshold="planned_ranks")
    assert result.epsilon_lb == expected.epsilon_lb > 0
    assert result.bound.strategy == "planned_ranks" and result.pilot == (0, 0)
    assert result.bound.n_eval_in == result.bound.n_eval_out == 300
    assert result.verdict == "violated"  # eps 0.5 is refuted by these scores
    assert any("trial counts alone" in line for line in scores_summary(result))
