"""One default threshold (issue 32 item 4) and confidence= beside the deprecated alpha= (issue 34
item 3) across the public statistics.

- The Python functions default to the spec's and ``audit simulate``'s threshold
  (:data:`audit.core.names.DEFAULT_THRESHOLD`, ``planned``); without a plan they plan on a pilot
  of 10% of the trials that the test leaves out.
- Every public function that took ``alpha=`` (1 - confidence) takes ``confidence=``; ``alpha=``
  still works, warns (DeprecationWarning), and gives bit-identical results (dataclass ==) to
  ``confidence=1 - alpha``; a positional alpha (verdicts' fourth argument) likewise.
"""

from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pytest

from audit.core.names import DEFAULT_THRESHOLD
from audit.stats import (
    binary,
    curve_evidence,
    many_canaries,
    one_run,
    one_run_gdp,
    sequential,
    sequential_audit,
)


def _gdp(mu: float):
    from scipy.stats import norm

    return lambda a: norm.cdf(norm.isf(np.asarray(a, dtype=float)) - mu)


def _scores(n: int = 400, mu: float = 1.5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(mu, 1.0, n), rng.normal(0.0, 1.0, n)


# ----------------------------------------------------------------------------- one default


def test_python_default_is_the_specs_and_simulates():
    from audit.cli.simulate import add_arguments
    from audit.run.spec import ClaimSection

    spec_default = {f.name: f.default for f in dataclasses.fields(ClaimSection)}["threshold"]
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    required = ["--sampler", "poisson", "--sigma", "1", "--steps", "10"]
    simulate_default = parser.parse_args(required).threshold
    assert spec_default == simulate_default == DEFAULT_THRESHOLD == "planned"
    for fn in (binary.epsilon_lower_bound, binary.verdict, binary.gdp_mu_estimate,
               binary.ideal_points, binary.ideal_epsilon_lb):
        assert inspect.signature(fn).parameters["threshold"].default == DEFAULT_THRESHOLD, fn


def test_planned_default_plans_on_a_pilot_left_out_of_the_test():
    """A bare call: strategy planned, n_in/n_out every trial, the test on the 90% the pilot left
    (round(0.1 n) trials a side go to the pilot), the same as planning on take_pilot by hand."""
    from audit.stats.thresholds import plan_threshold, planned_epsilon_lower_bound, take_pilot

    s_in, s_out = _scores(1000)
    bound = binary.epsilon_lower_bound(s_in, s_out, delta=1e-5, seed=3)
    assert bound.strategy == "planned" and (bound.n_in, bound.n_out) == (1000, 1000)
    assert (bound.n_eval_in, bound.n_eval_out) == (900, 900)
    taken = take_pilot(s_in, s_out, 3)
    plan = plan_threshold(taken.curve, 900, 900, alpha=0.05, delta=1e-5, source="pilot",
                          curve_name=taken.name, pilot=taken.sizes)
    by_hand, _ = planned_epsilon_lower_bound(taken.test_in, taken.test_out, plan, delta=1e-5,
                                             alpha=0.05, seed=3)
    assert bound.epsilon_lb == by_hand.epsilon_lb > 0
    decision = binary.verdict(s_in, s_out, _gdp(0.5), seed=3)
    assert decision.strategy == "planned" and decision.violated  # mu 1.5 scores, mu 0.5 claim
    assert decision.n_eval_in == 900
    gdp = binary.gdp_mu_estimate(s_in, s_out, seed=3)
    assert gdp.strategy == "planned" and 0 < gdp.mu < gdp.mu_point + 1e-12


def test_planned_default_refuses_too_few_scores_naming_the_fixes():
    with pytest.raises(ValueError, match=r"too few for a pilot.*threshold='split'.*plan="):
        binary.epsilon_lower_bound([1.0, 2.0, 3.0, 4.0], [0.0, 1.0, 2.0, 3.0], delta=1e-5)


# ----------------------------------------------------------------------------- confidence=


def _pair(call, **fixed):
    """(result with confidence=0.95, result with alpha=0.05, warnings raised by the latter)."""
    new = call(confidence=0.95, **fixed)
    with pytest.warns(DeprecationWarning, match=r"alpha=\.\.\.\) means 1 - confidence"):
        old = call(alpha=0.05, **fixed)
    return new, old


S_IN, S_OUT = _scores()
CLAIM = _gdp(0.5)
CANARY_SCORES = np.random.default_rng(1).normal(0.0, 1.0, 400)
INCLUDED = np.random.default_rng(2).random(400) < 0.5
CANARY_SCORES[INCLUDED] += 2.0
ROWS = np.random.default_rng(3).normal(0.0, 1.0, (200, 4))

CALLS = {
    "epsilon_lower_bound": lambda **k: binary.epsilon_lower_bound(
        S_IN, S_OUT, delta=1e-5, threshold="split", **k),
    "epsilon_lower_bound/planned": lambda **k: binary.epsilon_lower_bound(
        S_IN, S_OUT, delta=1e-5, **k),
    "verdict": lambda **k: binary.verdict(S_IN, S_OUT, CLAIM, threshold="split", **k),
    "gdp_mu_estimate": lambda **k: binary.gdp_mu_estimate(S_IN, S_OUT, threshold="split", **k),
    "ideal_points": lambda **k: binary.ideal_points(CLAIM, 1000, threshold="split", **k),
    "ideal_epsilon_lb": lambda **k: binary.ideal_epsilon_lb(CLAIM, 1000, delta=1e-5, **k),
    "roc_summary": lambda **k: binary.roc_summary(S_IN, S_OUT, **k),
    "tradeoff_band": lambda **k: curve_evidence.tradeoff_band(S_IN, S_OUT, **k),
    "curve_verdict": lambda **k: curve_evidence.curve_verdict(S_IN, S_OUT, CLAIM, **k),
    "gdp_fit": lambda **k: curve_evidence.gdp_fit(S_IN, S_OUT, **k),
    "one_run_epsilon_lb": lambda **k: one_run.one_run_epsilon_lb(
        CANARY_SCORES, INCLUDED, delta=1e-5, **k),
    "one_run_verdict": lambda **k: one_run.one_run_verdict(CANARY_SCORES, INCLUDED, CLAIM, **k),
    "one_run_gdp_lower_bound": lambda **k: one_run_gdp.one_run_gdp_lower_bound(
        CANARY_SCORES, INCLUDED, **k),
    "dependent_epsilon_lower_bound": lambda **k: many_canaries.dependent_epsilon_lower_bound(
        ROWS + 1.0, ROWS[::-1], canaries=4, delta=1e-5, **k),
    "dependent_verdict": lambda **k: many_canaries.dependent_verdict(
        ROWS + 1.0, ROWS[::-1], CLAIM, canaries=4, **k),
    "plan_sequential_test": lambda **k: sequential.plan_sequential_test(S_IN, S_OUT, CLAIM, **k),
    "sequential_outcome": lambda **k: sequential_audit.sequential_outcome(
        S_IN, S_OUT, CLAIM, shard_size=50, delta=1e-5, **k),
}


def _same(a: object, b: object) -> bool:
    """Equal bit for bit: arrays by np.array_equal, records field by field."""
    if isinstance(a, tuple):
        return all(_same(x, y) for x, y in zip(a, b, strict=True))
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return type(a) is type(b) and all(
            _same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a)
        )
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return bool(a == b)


@pytest.mark.parametrize("name", list(CALLS))
def test_alpha_still_works_warns_and_is_bit_identical(name):
    new, old = _pair(CALLS[name])
    assert _same(new, old), name
    confidence = getattr(new, "confidence", None)
    if confidence is not None:
        assert confidence == 0.95


POSITIONAL = {
    "verdict": lambda *a, **k: binary.verdict(S_IN, S_OUT, CLAIM, *a, threshold="split", **k),
    "curve_verdict": lambda *a, **k: curve_evidence.curve_verdict(S_IN, S_OUT, CLAIM, *a, **k),
    "one_run_verdict": lambda *a, **k: one_run.one_run_verdict(
        CANARY_SCORES, INCLUDED, CLAIM, *a, **k),
    "dependent_verdict": lambda *a, **k: many_canaries.dependent_verdict(
        ROWS + 1.0, ROWS[::-1], CLAIM, *a, canaries=4, **k),
}


@pytest.mark.parametrize("name", list(POSITIONAL))
def test_a_positional_alpha_still_works(name):
    """The verdicts' fourth positional argument is still alpha (1 - confidence), deprecated."""
    with pytest.warns(DeprecationWarning):
        old = POSITIONAL[name](0.05)
    assert old == POSITIONAL[name](confidence=0.95)


def test_both_spellings_are_refused():
    with pytest.raises(ValueError, match="not both"):
        binary.epsilon_lower_bound(S_IN, S_OUT, delta=1e-5, alpha=0.05, confidence=0.95)
    with pytest.raises(ValueError, match="confidence"):
        binary.epsilon_lower_bound(S_IN, S_OUT, delta=1e-5, confidence=1.5)
