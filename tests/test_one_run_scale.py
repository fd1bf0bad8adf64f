"""One run at scale (issue 44): the fast recursion and SNJ window give the bounds of the full
computations, and their cost is linear in m.

The references below are the full computations as they were before the early exits (every
step of the f-DP recursion for every row; every one of the v windows of the SNJ p-value),
kept here verbatim as the specification. Equality is exact for the f-DP recursion (the fast
one performs the same floating-point operations and stops only where the result can no
longer change) and to 1e-9 relative for the SNJ p-value (window masses from CDF differences
instead of a cumulative sum of pmfs: rounding of order 1e-13 relative, so the bounds, points
of a 1e-4 grid, agree unless a p-value lies within that rounding of alpha; the grid below has
none). Timings belong to bench/one_run_scale.py; here only a structure check at m = 1e5.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from scipy.special import expit
from scipy.stats import binom

from audit.stats.one_run import (
    ClaimedPower,
    _largest_rejected,
    _recursion_mass,
    count_correct,
    eps_delta_power,
    fdp_epsilon_lb,
    gdp_power,
    one_run_epsilon_lb,
    one_run_verdict,
    rule_counts,
    snj_epsilon_lb,
    snj_p_value,
    tabulated_power,
)
from audit.stats.one_run_gdp import fdp_mu_lb, one_run_gdp_lower_bound
from audit.theory.curve import gdp_tradeoff

ALPHA = 0.05


def _reference_mass(power: ClaimedPower, m, guesses, correct, tau):
    """The recursion run to i = 0 on every row (the code before issue 44)."""
    c = np.asarray(correct, dtype=np.int64)
    r_total = np.asarray(guesses, dtype=np.int64)
    c, r_total = np.broadcast_arrays(c, r_total)
    r = tau * c / m
    h = tau * (r_total - c) / m
    for i in range(int(c.max(initial=0)) - 1, -1, -1):
        active = i < c
        h_new = np.where(active, np.maximum(h, power.inverse(r)), h)
        step = np.where(active, i / np.maximum(r_total - i, 1), 0.0)
        r = np.minimum(r + step * (h_new - h), 1.0)
        h = h_new
    return r + h


def _reference_snj(m, guesses, correct, epsilon, delta):
    """Every window of the SNJ p-value summed (the code before issue 44)."""
    r, v = int(guesses), int(correct)
    q = expit(np.asarray(epsilon, dtype=float))
    tail = binom.sf(v - 1, r, q)
    if delta == 0 or v == 0:
        return np.minimum(tail, 1.0)
    window = np.cumsum(binom.pmf(np.arange(v - 1, -1, -1), r, q[..., None]), axis=-1)
    term = np.max(window / np.arange(1, v + 1), axis=-1)
    return np.minimum(tail + 2.0 * m * delta * term, 1.0)


def _reference_lb(claim_of, m, g, c, alpha):
    g, c = np.asarray(g), np.asarray(c)

    def rejects(x):
        mass = _reference_mass(claim_of(x), m, g[:, None], c[:, None], alpha)
        return (mass > g[:, None] / m + 1e-12) & (g[:, None] > 0)

    return _largest_rejected(rejects, rows=g.size)


def _rules(m: int) -> tuple[np.ndarray, np.ndarray]:
    """Rules around the refutation boundary: r guesses at accuracies 0.5-1 (the grid of m's
    bonferroni candidates' sizes)."""
    rs = np.unique(np.clip(np.round(np.geomspace(0.002, 0.5, 6) * m).astype(int), 2, m))
    g, c = [], []
    for r in rs:
        for acc in (0.55, 0.7, 0.85, 0.95, 1.0):
            g.append(r)
            c.append(round(float(acc * r)))
    return np.array(g), np.array(c)


@pytest.mark.parametrize(("m", "delta"), [(200, 1e-5), (1000, 1e-5), (1000, 1e-3), (10_000, 1e-5),
                                          (1000, 0.0)])
def test_fdp_bounds_equal_the_full_recursion(m, delta):
    g, c = _rules(m)
    alpha = ALPHA / 20
    new = np.asarray(fdp_epsilon_lb(m, g, c, delta=delta, alpha=alpha))
    old = _reference_lb(lambda eps: eps_delta_power(eps, delta), m, g, c, alpha)
    assert np.array_equal(new, old)
    assert np.array_equal(np.asarray(fdp_mu_lb(m, g, c, alpha=alpha)),
                          _reference_lb(gdp_power, m, g, c, alpha))


@pytest.mark.parametrize("m", [300, 3000])
def test_recursion_mass_equals_the_full_recursion(m):
    """Without a stop the mass itself (the verdict's ``mass``) is the full recursion's, bit for
    bit, for closed-form and tabulated claims, on every rule (rows stop at different steps)."""
    g, c = _rules(m)
    eps = np.array([0.3, 1.0, 2.0, 4.0])
    power = eps_delta_power(eps[None, :], 1e-5)
    assert np.array_equal(_recursion_mass(power, m, g[:, None], c[:, None], 0.01),
                          _reference_mass(power, m, g[:, None], c[:, None], 0.01))
    table = tabulated_power(lambda a: gdp_tradeoff(a, 1.5), "both")
    assert np.array_equal(_recursion_mass(table, m, g, c, 0.01),
                          _reference_mass(table, m, g, c, 0.01))


@pytest.mark.parametrize(("m", "delta"), [(1000, 1e-5), (1000, 1e-3), (10_000, 1e-5)])
def test_snj_equals_every_window(m, delta):
    g, c = _rules(m)
    eps = np.linspace(0.0, 6.0, 121)
    for r, v in zip(g.tolist(), c.tolist(), strict=True):
        new = snj_p_value(m, r, v, eps, delta)
        old = _reference_snj(m, r, v, eps, delta)
        assert np.allclose(new, old, rtol=1e-9, atol=1e-300)
        assert snj_epsilon_lb(m, r, v, delta=delta, alpha=ALPHA) == float(
            _largest_rejected(lambda e, r=r, v=v: _reference_snj(m, r, v, e, delta) <= ALPHA)[0]
        )


def test_rule_counts_equal_count_correct():
    rng = np.random.default_rng(3)
    scores = np.round(rng.normal(size=500), 1)  # many ties: broken by index in both
    included = rng.random(500) < 0.5
    pairs = [(0, 1), (1, 0), (7, 13), (250, 250), (500, 0), (0, 500)]
    assert rule_counts(scores, included, pairs) == [
        count_correct(scores, included, kp, km) for kp, km in pairs
    ]
    with pytest.raises(ValueError, match="k_plus"):
        rule_counts(scores, included, [(300, 300)])


def test_monotone_in_the_number_correct():
    """More correct guesses never lower a bound (eps: SNJ and f-DP; mu: f-DP)."""
    m, r = 10_000, 400
    c = np.arange(200, 401, 8)
    fdp = np.asarray(fdp_epsilon_lb(m, np.full(c.size, r), c, delta=1e-5, alpha=ALPHA))
    mu = np.asarray(fdp_mu_lb(m, np.full(c.size, r), c, alpha=ALPHA))
    snj = np.array([snj_epsilon_lb(m, r, int(v), delta=1e-5, alpha=ALPHA) for v in c])
    for values in (fdp, mu, snj):
        assert np.all(np.diff(values) >= 0)


def test_one_run_at_1e5_canaries_is_linear_in_memory():
    """m = 1e5 Gaussian canaries (mu = 1): the eps bound (f-DP and SNJ), mu_lb and the verdict
    from the default 20-rule family, with peak Python-allocated memory under 200 bytes a
    canary (an m x m array would need 8e10 bytes; the scores themselves take 8e5)."""
    m = 100_000
    rng = np.random.default_rng(0)
    included = rng.random(m) < 0.5
    scores = rng.normal(1.0 * included, 1.0)
    tracemalloc.start()
    fdp = one_run_epsilon_lb(scores, included, delta=1e-5)
    snj = one_run_epsilon_lb(scores, included, delta=1e-5, method="snj")
    gdp = one_run_gdp_lower_bound(scores, included)
    verdict = one_run_verdict(scores, included, eps_delta_power(1.0, 1e-5))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 200 * m
    assert 0 < snj.epsilon_lb and 0 < fdp.epsilon_lb and 0 < gdp.mu_lb <= 1.0 + 1e-9
    assert verdict.violated  # eps = 1 is far below this 1-GDP mechanism's eps_lb


# --------------------------------------------------------------------------- planning at scale


def test_rule_family_price_is_consistent():
    """The price compares the family's best rule at alpha/G with the planned rules at alpha,
    each computed by the module's own bounds at the same correct counts: recomputed here."""
    from scipy.stats import binom as _binom

    from audit.run.planning import _projected_precision, rule_family_price
    from audit.stats.one_run import candidate_guesses
    from audit.theory.curve import TradeOffCurve

    curve = TradeOffCurve.from_gdp(1.0, sampler="deterministic", threat_model="adversarial")
    m = 5000
    price = rule_family_price(curve, m, delta=1e-5, alpha=ALPHA, power=0.9)
    pairs = candidate_guesses(m)
    assert price.candidates == len(pairs) == 20
    kp, km = price.planned_k_plus, price.planned_k_minus
    p = _projected_precision(curve, m, np.array([max(kp, km)]))[0]
    c = int(_binom.ppf(0.1, kp + km, p))
    assert price.planned_epsilon_lb == fdp_epsilon_lb(m, kp + km, c, delta=1e-5, alpha=ALPHA)
    assert price.cost == pytest.approx(1 - price.family_epsilon_lb / price.planned_epsilon_lb)
    assert 0 < price.family_epsilon_lb and 0 < price.family_mu_lb
    assert "costs" in price.describe()


def test_cli_plan_one_run_at_1e5_canaries(capsys):
    """``audit plan --one-run`` for a target reached near m = 1e5 (1-GDP: deterministic batches,
    sigma 1, one step): the plan, the proposed rule and the family's price, in seconds (the
    scan projects every m of the grid up to the answer)."""
    import re

    from audit.cli import main

    args = ["plan", "--one-run", "--sampler", "deterministic", "--sigma", "1", "--steps", "100",
            "--claim", "2.2"]
    assert main(args) == 0
    text = capsys.readouterr().out
    m = int(re.search(r"about (\d+) canaries", text).group(1))
    assert 5e4 < m <= 1e6
    kp, km = map(int, re.search(r"guesses = \[(\d+), (\d+)\]", text).groups())
    assert 0 < kp + km <= m
    assert f"at m = {m}; the default 20-rule family" in text and "% of eps_lb" in text


def test_report_states_the_family_price():
    """report.md's one-run sentence: the best rule alone at alpha against eps_lb at alpha / G,
    only for a bonferroni family whose price is positive."""
    from types import SimpleNamespace

    from audit.report.one_run import _family_price

    def cell(strategy, candidates, lb, optimistic):
        bound = SimpleNamespace(strategy=strategy, candidates=candidates)
        return SimpleNamespace(bound=bound, epsilon_lb=lb, epsilon_optimistic=optimistic)

    text = _family_price(cell("bonferroni", 20, 1.5, 2.0), lambda x, **_: f"{x:.3f}")
    assert "20-rule family's price" in text and "ε ≥ 2.000" in text and "costs 25%" in text
    assert "not a bound" in text and "audit plan --one-run" in text
    assert _family_price(cell("fixed", 1, 1.5, 1.5), str) == ""
    assert _family_price(cell("bonferroni", 20, 1.5, 1.5), str) == ""
    assert _family_price(cell("split", 5, 1.0, 2.0), str) == ""
