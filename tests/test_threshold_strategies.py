"""Threshold strategies as frozen dataclasses (audit.stats.binary, docs/design.md §8.20) and the
projection of the planned rule by `audit plan` and simulated_power (audit.run.planning).

The power checks repeat a simulated audit R = 40 times at one n and count the successes H. If the
true power is at least the projected 0.9, H is stochastically at least Binomial(40, 0.9), so
H >= 29 fails with probability <= Pr[Bin(40, 0.9) <= 28] = 3.8e-4 (MIN_HITS, derived as in
tests/test_planning.py, not tuned). A projection that overstated the power, e.g. a true power of
0.7, would pass with probability Pr[Bin(40, 0.7) >= 29] = 0.39 only, so the check has teeth;
seeds are fixed.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy import stats

from audit.core.mechanism import Mechanism
from audit.core.names import THRESHOLD_STRATEGIES
from audit.run.planning import (
    claimed_curve,
    pessimistic_epsilon_lb,
    planned_rule,
    simulated_power,
    trials_needed,
)
from audit.run.proof_report import planned_statements
from audit.run.spec import Cell, parse_spec
from audit.stats.binary import (
    STRATEGY_TYPES,
    Bonferroni,
    MultiSplit,
    Planned,
    PlannedRanks,
    Split,
    epsilon_lower_bound,
    threshold_strategy,
    verdict,
)
from audit.stats.many_canaries import DEPENDENT_THRESHOLDS, dependent_epsilon_lower_bound
from audit.stats.thresholds import PLAN_POWER, plan_threshold, planned_projection
from audit.theory import bounds_for
from audit.theory.curve import TradeOffCurve

REPS, POWER, FALSE_ALARM = 40, 0.9, 1e-3
MIN_HITS = max(k for k in range(REPS + 1) if stats.binom.cdf(k - 1, REPS, POWER) <= FALSE_ALARM)
DELTA = 1e-5
MECHANISM = Mechanism("deterministic", sigma=1.0, steps_per_epoch=10, threat_model="adversarial")


def test_min_hits_is_derived() -> None:
    assert MIN_HITS == 29


def test_each_name_parses_to_its_frozen_dataclass() -> None:
    assert tuple(STRATEGY_TYPES) == THRESHOLD_STRATEGIES  # one list of names
    assert threshold_strategy("split") == Split()
    assert threshold_strategy("multisplit") == MultiSplit(repeats=11)
    assert threshold_strategy("bonferroni") == Bonferroni(grid_size=40)
    assert threshold_strategy("bonferroni", grid_size=10) == Bonferroni(grid_size=10)
    assert threshold_strategy("planned") == Planned(pilot_fraction=0.1)
    assert threshold_strategy("planned_ranks") == PlannedRanks()
    for name in THRESHOLD_STRATEGIES:
        strategy = threshold_strategy(name)
        assert strategy.name == name and threshold_strategy(strategy) is strategy
        with pytest.raises(dataclasses.FrozenInstanceError):
            strategy.name_or_field = 1  # type: ignore[attr-defined]
    with pytest.raises(
        ValueError,
        match=r"^threshold='plannd' is not valid; allowed: split, bonferroni, multisplit, "
        r"planned, planned_ranks\. Did you mean 'planned'\?$",
    ):
        threshold_strategy("plannd")


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: MultiSplit(repeats=4), "repeats"),
        (lambda: MultiSplit(repeats=0), "repeats"),
        (lambda: Bonferroni(grid_size=1), "grid_size"),
        (lambda: Planned(pilot_fraction=1.0), "pilot_fraction"),
    ],
)
def test_bad_fields_are_refused_by_name(make, field) -> None:
    with pytest.raises(ValueError, match=field):
        make()


def test_strategy_objects_and_names_give_the_same_records() -> None:
    rng = np.random.default_rng(4)
    s_in, s_out = rng.normal(1.5, 1.0, 600), rng.normal(0.0, 1.0, 500)
    claim = claimed_curve(0.5, DELTA)
    for strategy in (Split(), MultiSplit(), Bonferroni(grid_size=12)):
        grid = getattr(strategy, "grid_size", 40)
        by_name = epsilon_lower_bound(
            s_in, s_out, delta=DELTA, threshold=strategy.name, seed=3, grid_size=grid
        )
        assert strategy.epsilon_bound(s_in, s_out, delta=DELTA, seed=3) == by_name
        assert epsilon_lower_bound(s_in, s_out, delta=DELTA, threshold=strategy, seed=3) == by_name
        assert by_name.strategy == strategy.name
        assert strategy.verdict(s_in, s_out, claim, seed=3) == verdict(
            s_in, s_out, claim, threshold=strategy.name, seed=3, grid_size=grid
        )
    # the bound without its optimistic maximum is the same bound
    lean = Split().epsilon_bound(s_in, s_out, delta=DELTA, seed=3, optimistic=False)
    full = Split().epsilon_bound(s_in, s_out, delta=DELTA, seed=3)
    assert lean.epsilon_lb == full.epsilon_lb and np.isnan(lean.epsilon_optimistic)


def test_dependent_canaries_refuse_what_needs_independent_trials() -> None:
    assert DEPENDENT_THRESHOLDS == ("split", "multisplit")
    assert [n for n in THRESHOLD_STRATEGIES if threshold_strategy(n).needs_independent_trials] == [
        "bonferroni",
        "planned",
        "planned_ranks",
    ]
    rng = np.random.default_rng(5)
    s_in, s_out = rng.normal(1.0, 1.0, 400), rng.normal(0.0, 1.0, 400)
    for refused in ("bonferroni", Planned(), "nonsense"):
        with pytest.raises(ValueError, match="use one of split, multisplit"):
            dependent_epsilon_lower_bound(s_in, s_out, canaries=4, delta=DELTA, threshold=refused)
    spec = {
        "mode": "simulate", "samplers": ["dynamic_shuffle"], "threat_models": ["isolated"],
        "trials_in": 100, "trials_out": 100, "canaries_per_training": 4,
        "training": {"n": 100, "batch_size": 10, "sigma": 1.0},
    }
    for name in ("bonferroni", "planned"):
        with pytest.raises(ValueError, match="needs threshold 'split' or 'multisplit'; got"):
            parse_spec({**spec, "threshold": name})
    assert parse_spec({**spec, "threshold": "multisplit"}).claim.threshold == "multisplit"


def test_the_spec_stores_names_only() -> None:
    spec = {
        "mode": "simulate", "samplers": ["deterministic"], "threat_models": ["isolated"],
        "trials_in": 100, "trials_out": 100, "training": {"sigma": 1.0, "batch_size": 1, "n": 10},
    }
    assert parse_spec(spec).claim.threshold == "planned"
    with pytest.raises(ValueError, match="threshold=Split\\(\\) is not valid; allowed"):
        parse_spec({**spec, "threshold": Split()})


def test_pilot_fraction_is_the_planned_strategys_field() -> None:
    spec = parse_spec(
        {
            "mode": "simulate", "seed": 5, "samplers": ["deterministic"],
            "threat_models": ["isolated"], "trials_in": 400, "trials_out": 400, "claim": 0.5,
            "attacks": ["max"], "training": {"sigma": 1.0, "batch_size": 1, "n": 10},
        }
    )
    rng = np.random.default_rng(1)
    scores = (rng.normal(2.0, 1.0, 400), rng.normal(0.0, 1.0, 400))
    cell = Cell("deterministic", "isolated", "max")  # not the default attack: a pilot plans
    mechanism = spec.mechanism(cell.training)
    lower = bounds_for(mechanism).lower
    claim = claimed_curve(0.5, DELTA)
    *_, statements = planned_statements(
        spec, cell, mechanism, lower, claim, *scores, 0.05, strategy=Planned(pilot_fraction=0.2)
    )
    plan = statements.epsilon_plan
    assert (plan.pilot_in, plan.n_in) == (80, 320) and "a pilot of 20%" in plan.curve


def test_the_projection_is_the_audits_own_plan() -> None:
    """At the planner's own power the projection is the plan's expected value, bit for bit, and
    pessimistic_epsilon_lb of ``planned`` is that plan's value: the same rule the audit uses."""
    lower = bounds_for(MECHANISM).lower
    rule = planned_rule(lower, 300, delta=DELTA)
    assert rule == plan_threshold(lower, 300, 300, alpha=0.05, delta=DELTA, source="given")
    value = planned_projection(lower, rule, alpha=0.05, delta=DELTA, power=PLAN_POWER)
    assert value == rule.expected_value
    assert pessimistic_epsilon_lb(lower, 300, delta=DELTA, threshold="planned") == value
    # a higher power asks for a count further in the tail: a smaller eps_lb
    assert planned_projection(lower, rule, alpha=0.05, delta=DELTA, power=0.99) < value


def test_planned_certify_projection_holds_in_simulated_audits() -> None:
    """eps_lb >= the projected value at power 0.9 in >= 29 of 40 simulated audits that apply the
    planned strategy as the audit does (rule fixed from the curve, joint test per audit)."""
    lower = bounds_for(MECHANISM).lower
    n = 300
    target = pessimistic_epsilon_lb(lower, n, delta=DELTA, threshold="planned", power=POWER)
    hits = simulated_power(
        lower, n, target, delta=DELTA, threshold="planned", goal="certify", reps=REPS, seed=9
    )
    assert round(hits * REPS) >= MIN_HITS


def test_audit_plan_planned_violate_projects_the_planned_verdict() -> None:
    """`audit plan --claim 1 --threshold planned`: the smallest n whose planned verdict refutes
    (1, 1e-5)-DP with projected chance >= 0.9; simulated audits at that n refute it in >= 29
    of 40, and the plan says it projects the planned rule."""
    lower = bounds_for(MECHANISM).lower
    plan = trials_needed(lower, 1.0, delta=DELTA, threshold="planned")
    assert plan.reachable and plan.threshold == "planned" and plan.trials is not None
    assert plan.projection.startswith("planned: the rule the audit plans at n = ")
    assert "joint test" in plan.projection
    hits = simulated_power(
        lower, plan.trials, 1.0, delta=DELTA, threshold="planned", goal="violate", reps=REPS,
        seed=10,
    )
    assert round(hits * REPS) >= MIN_HITS
    rule = planned_rule(lower, plan.trials, claim=claimed_curve(1.0, DELTA))
    assert planned_projection(lower, rule, alpha=0.05, claim=claimed_curve(1.0, DELTA)) >= POWER


def test_simulated_power_of_a_null_curve_stays_at_most_alpha() -> None:
    """Scores with no signal (f(x) = 1 - x) refute a true claim no more often than alpha: with
    40 audits, H ~ Binomial(40, <= 0.05) exceeds 8 with probability <= 5e-4."""
    null = TradeOffCurve.from_gdp(0.0, sampler="deterministic", threat_model="adversarial")
    hits = simulated_power(
        null, 200, 0.5, delta=DELTA, threshold="planned", goal="violate", reps=REPS, seed=11
    )
    assert round(hits * REPS) <= 8
