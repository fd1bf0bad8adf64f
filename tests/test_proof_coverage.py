"""Coverage of the new sound statements at reduced size (issue 22; bench/proof_coverage.py runs
>= 500 repetitions per regime and every strategy).

Scores follow a known curve exactly (audit.run.planning.curve_scores), so the truth is exact. The
regime is the one where coverage is tight: the (1, 0)-DP curve of randomised response, on
whose linear part every test has TPR = e FPR exactly, so a bound's chance to exceed the truth
is its test's size at the boundary. Tolerance: with R repetitions a statement that fails with
probability at most alpha exceeds binom.ppf(1 - 1e-3, R, alpha) failures with probability at
most 1e-3 (the binomial tail), so a count above it refutes soundness at level 1e-3.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import binom

from audit.run.planning import curve_scores
from audit.stats.binary import curve_epsilon
from audit.stats.curve_evidence import NoEvidence, curve_verdict
from audit.stats.thresholds import plan_threshold, planned_epsilon_lower_bound, planned_verdict
from audit.theory.curve import TradeOffCurve

ALPHA, DELTA, REPS, N = 0.1, 1e-5, 150, 500
PURE = TradeOffCurve.from_privacy_profile([1.0], [0.0], sampler="poisson", threat_model="isolated",
                                          kind="upper", method="(1, 0)-DP")


def test_new_statements_cover_the_truth_at_least_1_minus_alpha_of_the_time() -> None:
    truth = curve_epsilon(PURE, DELTA)
    eps_plan = plan_threshold(PURE, N, N, alpha=ALPHA, delta=DELTA)
    claim_plan = plan_threshold(PURE, N, N, alpha=ALPHA, claim=PURE)
    failures = {"planned eps": 0, "planned verdict": 0, "band eps": 0, "band verdict": 0}
    for r in range(REPS):
        scores_in, scores_out = curve_scores(PURE, N, np.random.default_rng([31, r]))
        bound, _ = planned_epsilon_lower_bound(
            scores_in, scores_out, eps_plan, delta=DELTA, alpha=ALPHA, seed=r, optimistic=False
        )
        failures["planned eps"] += bound.epsilon_lb > truth
        failures["planned verdict"] += planned_verdict(
            scores_in, scores_out, PURE, claim_plan, alpha=ALPHA, seed=r
        )[0].violated
        try:
            result = curve_verdict(scores_in, scores_out, PURE, confidence=1 - ALPHA, delta=DELTA)
        except NoEvidence:
            continue
        failures["band eps"] += result.epsilon_lb > truth
        failures["band verdict"] += result.violated
    allowed = binom.ppf(1 - 1e-3, REPS, ALPHA)
    assert all(count <= allowed for count in failures.values()), (failures, allowed)
