"""Soundness of the eps lower bounds: coverage, null, the naive maximum, tightness (issue 5 item 5).

Every tolerance is a binomial quantile: over R independent audits a sound bound exceeds the
truth in at most Binomial(R, alpha) of them, so a count above its 0.999-quantile is a
failure a sound implementation shows with probability < 0.001 (the "binomial slack").
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom, norm

from attacks import default_attack, get_attack
from audit.core.mechanism import Mechanism
from audit.run.planning import pessimistic_epsilon_lb
from audit.stats.binary import epsilon_lower_bound
from audit.training.simulate import simulate_observations

SLACK_QUANTILE = 0.999


def flat_top_pair(rng: np.random.Generator, n: int, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """OUT ~ U(0, 1); IN has density 2 e^eps/(1 + e^eps) on (1/2, 1] and 2/(1 + e^eps) below.

    The likelihood ratio is constant on each half, so every threshold in a half gives the
    same (1 - FNR)/FPR: a flat maximum, the hardest case for choosing a threshold on the
    data. Its exact eps at delta = 0 is max(log(2 e^eps/(1 + e^eps)), log((1 + e^eps)/2)).
    """
    s_out = rng.random(n)
    upper = rng.random(n) < math.exp(eps) / (1 + math.exp(eps))
    s_in = np.where(upper, 0.5 + 0.5 * rng.random(n), 0.5 * rng.random(n))
    return s_in, s_out


def flat_top_epsilon(eps: float) -> float:
    return max(math.log(2 * math.exp(eps) / (1 + math.exp(eps))), math.log((1 + math.exp(eps)) / 2))


def allowed(runs: int, alpha: float) -> int:
    return int(binom.ppf(SLACK_QUANTILE, runs, alpha))


@pytest.mark.parametrize("strategy", ["split", "bonferroni"])
def test_coverage_gaussian(strategy, gdp_epsilon):
    # N(mu, 1) vs N(0, 1) has exactly the mu-GDP curve; delta = 1e-3 puts the optimal
    # threshold at moderate rates, where 2000 trials per side nearly reach the truth.
    runs, n, mu, delta, alpha = 300, 2000, 2.0, 1e-3, 0.05
    truth = gdp_epsilon(mu, delta)
    exceed = 0
    for r in range(runs):
        rng = np.random.default_rng(1000 + r)
        bound = epsilon_lower_bound(
            rng.normal(mu, 1, n),
            rng.normal(0, 1, n),
            delta=delta,
            confidence=1 - alpha,
            threshold=strategy,
            seed=r,
        )
        exceed += bound.epsilon_lb > truth
    assert exceed <= allowed(runs, alpha)


@pytest.mark.parametrize("strategy", ["split", "bonferroni"])
def test_coverage_flat_top(strategy):
    runs, n, alpha = 300, 2000, 0.2
    truth = flat_top_epsilon(1.0)
    exceed = 0
    for r in range(runs):
        s_in, s_out = flat_top_pair(np.random.default_rng(2000 + r), n, 1.0)
        exceed += (
            epsilon_lower_bound(
                s_in, s_out, delta=0.0, confidence=1 - alpha, threshold=strategy, seed=r
            ).epsilon_lb
            > truth
        )
    assert exceed <= allowed(runs, alpha)


@pytest.mark.parametrize("strategy", ["split", "bonferroni"])
def test_null_gives_zero(strategy):
    # Identical IN/OUT laws: eps = 0, so eps_lb must be 0 in at least 1 - alpha of the runs.
    runs, n, alpha = 300, 1000, 0.05
    positive = 0
    for r in range(runs):
        rng = np.random.default_rng(3000 + r)
        positive += (
            epsilon_lower_bound(
                rng.normal(size=n),
                rng.normal(size=n),
                delta=0.0,
                confidence=1 - alpha,
                threshold=strategy,
                seed=r,
            ).epsilon_lb
            > 0
        )
    assert positive <= allowed(runs, alpha)


def test_naive_maximum_exceeds_truth():
    # On the flat-top pair the naive maximum over thresholds (Clopper-Pearson at every
    # threshold, threshold chosen on the same scores) exceeds the true eps in about a third
    # of the runs at alpha = 0.2 (measured: 0.33 with n = 2000). A bound at confidence 0.8
    # would exceed it in at most Binomial(600, 0.2) runs, whose 0.999-quantile is 150; the
    # observed count is above it (the test's own error: Binomial(600, 0.33) <= 150 has
    # probability ~ 1e-5). The sound split bound stays within that slack.
    runs, n, alpha = 600, 2000, 0.2
    truth = flat_top_epsilon(1.0)
    naive = sound = 0
    for r in range(runs):
        s_in, s_out = flat_top_pair(np.random.default_rng(4000 + r), n, 1.0)
        bound = epsilon_lower_bound(s_in, s_out, delta=0.0, confidence=1 - alpha, seed=r,
            threshold="split")
        naive += bound.epsilon_optimistic > truth
        sound += bound.epsilon_lb > truth
    assert naive > allowed(runs, alpha)
    assert sound <= allowed(runs, alpha)


# ----------------------------------------------------------------------------- tightness


def max_test_curve(sigma: float, steps: int, low: float = 1.0, high: float = 2.0):
    """Trade-off of the max test "max_t y_t > C" on MoG_T(high) vs MoG_T(low) (Chua et al. 2024):
    Pr[max <= C] = Phi((C - m)/sigma) Phi(C/sigma)^(T-1); FPR = 1 - F_low(C), FNR = F_high(C)."""
    c = np.linspace(-5 * sigma, high + 10 * sigma, 40001)
    log_rest = (steps - 1) * norm.logcdf(c / sigma)
    fpr = -np.expm1(norm.logcdf((c - low) / sigma) + log_rest)
    fnr = np.exp(norm.logcdf((c - high) / sigma) + log_rest)
    order = np.argsort(fpr)
    return lambda a: np.interp(a, fpr[order], fnr[order])


TIGHTNESS_TRIALS = 100_000


@pytest.mark.parametrize(
    ("sampler", "sigma"),
    [("deterministic", 1.1), ("persistent_shuffle", 0.7), ("dynamic_shuffle", 0.7)],
)
def test_tightness_small(sampler, sigma):
    # The attack must reach 90% (the tightness target) of the eps an auditor gets
    # with probability 0.99 if the scores follow the known lower curve exactly (error
    # counts at their 0.995-quantiles, audit.run.planning.pessimistic_epsilon_lb): the count
    # fluctuation is covered by the quantiles, the 10% by the issue's own ratio. The full
    # 1e6-trial measurement is bench/simulate.py.
    steps = 100
    mechanism = Mechanism(sampler, sigma=sigma, steps_per_epoch=steps, threat_model="adversarial")
    if sampler == "deterministic":
        mu = 1 / sigma
        curve = lambda a: norm.cdf(norm.isf(np.asarray(a, dtype=float)) - mu)  # noqa: E731
    else:
        curve = max_test_curve(sigma, steps)
    observations = simulate_observations(mechanism, TIGHTNESS_TRIALS, np.random.default_rng(7))
    s_in, s_out = get_attack(default_attack(mechanism)).scores(observations)
    bound = epsilon_lower_bound(s_in, s_out, delta=1e-5, seed=1, threshold="split")
    reference = pessimistic_epsilon_lb(curve, TIGHTNESS_TRIALS, delta=1e-5, power=0.99)
    assert reference > 1.5
    assert bound.epsilon_lb >= 0.9 * reference
