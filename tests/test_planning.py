"""audit.run.planning: do the planned trial counts deliver the planned power?

Each power check repeats a simulated audit R = 40 times at the planned n and counts the
successes H. If the true power is at least the planned 0.9, H is stochastically at least
Binomial(40, 0.9), so H >= 29 fails with probability <= Pr[Bin(40, 0.9) <= 28] = 3.8e-4
(MIN_HITS below is derived from that, not tuned). Seeds are fixed.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from attacks import default_attack, get_attack
from audit.core.mechanism import Mechanism
from audit.run.planning import curve_scores, simulated_power, trials_needed
from audit.stats.binary import (
    clopper_pearson_lower,
    clopper_pearson_upper,
    epsilon_lower_bound,
    verdict,
)
from audit.theory import bounds_for
from audit.theory.curve import TradeOffCurve
from audit.training.simulate import simulate_observations

REPS, POWER, FALSE_ALARM = 40, 0.9, 1e-3
MIN_HITS = max(k for k in range(REPS + 1) if stats.binom.cdf(k - 1, REPS, POWER) <= FALSE_ALARM)
DELTA = 1e-5


def test_min_hits_is_derived():
    assert MIN_HITS == 29


def audits(
    mechanism: Mechanism, trials: int, claim_epsilon: float, threshold: str, goal: str
) -> int:
    """Successes of REPS simulated audits: the real simulator, the default attack,
    audit.stats.binary."""
    attack = get_attack(default_attack(mechanism))
    claim = TradeOffCurve.from_privacy_profile(
        [claim_epsilon], [DELTA], sampler=mechanism.sampler, threat_model=mechanism.threat_model,
        kind="upper", method="claim",
    )
    hits = 0
    for r in range(REPS):
        observations = simulate_observations(mechanism, trials, np.random.default_rng([11, r]))
        s_in, s_out = attack.scores(observations)
        if goal == "violate":
            hits += verdict(s_in, s_out, claim, threshold=threshold, seed=r).violated
        else:
            bound = epsilon_lower_bound(s_in, s_out, delta=DELTA, threshold=threshold, seed=r)
            hits += bound.epsilon_lb >= claim_epsilon
    return hits


@pytest.mark.parametrize(
    ("mechanism", "claim", "threshold"),
    [
        (
            Mechanism("deterministic", sigma=1.0, steps_per_epoch=10, threat_model="adversarial"),
            1.0,
            "split",
        ),
        (
            Mechanism("deterministic", sigma=1.0, steps_per_epoch=10, threat_model="adversarial"),
            1.0,
            "bonferroni",
        ),
        (
            Mechanism("dynamic_shuffle", sigma=0.7, steps_per_epoch=10, threat_model="adversarial"),
            2.0,
            "split",
        ),
        (
            Mechanism("poisson", sigma=1.0, steps_per_epoch=10, epochs=2, threat_model="isolated"),
            1.0,
            "split",
        ),
    ],
    ids=[
        "deterministic-split",
        "deterministic-bonferroni",
        "dynamic_shuffle-split",
        "poisson-split",
    ],
)
def test_planned_trials_refute_the_claim_with_the_planned_power(mechanism, claim, threshold):
    """The runner's verdict (FNR_hi < claim(FPR_hi)) at the planned n, as `audit plan --claim`."""
    plan = trials_needed(bounds_for(mechanism).lower, claim, delta=DELTA, threshold=threshold)
    assert plan.reachable and plan.simulated_power is None  # analytic plan, no simulation
    assert audits(mechanism, plan.trials, claim, threshold, "violate") >= MIN_HITS


def test_certify_plan_is_checked_by_simulation():
    """eps_lb >= target with split: the analytic n falls short (winner's curse of the
    selection half), so the plan raises it until the simulated power reaches 0.9."""
    mechanism = Mechanism(
        "deterministic", sigma=1.0, steps_per_epoch=10, threat_model="adversarial"
    )
    plan = trials_needed(
        bounds_for(mechanism).lower, 1.0, delta=DELTA, goal="certify", threshold="split"
    )  # split named: the default is the spec's, planned (issue 32)
    assert (
        plan.goal == "certify"
        and plan.simulated_power is not None
        and plan.simulated_power >= POWER
    )
    assert plan.trials >= plan.analytic_trials and "checked by simulation" in plan.note
    assert audits(mechanism, plan.trials, 1.0, "split", "certify") >= MIN_HITS


def test_curve_scores_attain_the_curve():
    """At fixed thresholds, the synthetic scores' (FPR, FNR) lie on the curve: the CP box
    (one-sided 1e-4 each end, 12 bounds: false alarm < 1.2e-3) meets f at both corners."""
    curve = TradeOffCurve.from_gdp(1.5, sampler="deterministic", threat_model="adversarial")
    s_in, s_out = curve_scores(curve, 20_000, np.random.default_rng(3))
    n, alpha = s_in.size, 1e-4
    for level in (0.01, 0.1, 0.5):
        fp, fn = (s_out >= -level).sum(), (s_in < -level).sum()
        fpr_lo, fpr_hi = clopper_pearson_lower(fp, n, alpha), clopper_pearson_upper(fp, n, alpha)
        fnr_lo, fnr_hi = clopper_pearson_lower(fn, n, alpha), clopper_pearson_upper(fn, n, alpha)
        assert curve(fpr_hi) <= fnr_hi and curve(fpr_lo) >= fnr_lo


def test_simulated_power_grows_with_trials_and_goal_is_validated():
    curve = TradeOffCurve.from_gdp(2.0, sampler="deterministic", threat_model="adversarial")
    # split named: planned, the default (issue 32), already refutes at 100 trials
    small = simulated_power(curve, 100, 1.0, delta=DELTA, reps=50, threshold="split")
    large = simulated_power(curve, 3000, 1.0, delta=DELTA, reps=50, threshold="split")
    assert small < large and large == 1.0
    with pytest.raises(ValueError, match="goal"):
        simulated_power(curve, 100, 1.0, delta=DELTA, goal="refute")
    with pytest.raises(ValueError, match="goal"):
        trials_needed(curve, 1.0, delta=DELTA, goal="refute")
