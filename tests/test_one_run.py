"""One-run bounds (audit.stats.one_run): formulas, exact size, coverage and power.

Tolerances. A level-alpha procedure rejects a true claim with probability p <= alpha. Over R
independent repetitions the count of rejections is Binomial(R, p), stochastically below
Binomial(R, alpha); a count above its 0.999 quantile (``binom.ppf(0.999, R, alpha)``) would
happen with probability < 0.001 for a sound procedure, so the tests allow up to that quantile.
Where the law of the number of correct guesses is known exactly (randomized response), the
size Pr[reject] is computed exactly and compared with alpha directly.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit
from scipy.stats import binom

from audit.stats.one_run import (
    _recursion_mass,
    candidate_guesses,
    count_correct,
    eps_delta_power,
    fdp_epsilon_lb,
    fdp_rejects,
    gdp_power,
    make_guesses,
    one_run_epsilon_lb,
    one_run_verdict,
    snj_epsilon_lb,
    snj_p_value,
    tabulated_power,
)
from audit.theory.curve import gdp_epsilon, gdp_tradeoff

ALPHA = 0.05


def _slack(reps: int, alpha: float = ALPHA) -> int:
    return int(binom.ppf(0.999, reps, alpha))


def _gdp_canaries(rng: np.random.Generator, m: int, mu: float) -> tuple[np.ndarray, np.ndarray]:
    included = rng.random(m) < 0.5
    return rng.normal(mu * included, 1.0), included


# --------------------------------------------------------------------------- formulas


def test_snj_p_value_against_the_theorem_written_out():
    m, r, v, eps, delta = 500, 60, 48, 0.7, 1e-4
    q = np.exp(eps) / (1 + np.exp(eps))
    pmf = [binom.pmf(j, r, q) for j in range(r + 1)]
    tail = sum(pmf[v:])
    term = max(sum(pmf[v - i:v]) / i for i in range(1, m + 1) if v - i >= 0)
    term = max(term, max(sum(pmf[0:v]) / i for i in range(v, m + 1)))
    assert float(snj_p_value(m, r, v, eps, delta)) == pytest.approx(
        tail + 2 * m * delta * term, rel=1e-9
    )
    assert float(snj_p_value(m, r, v, eps, 0.0)) == pytest.approx(tail, rel=1e-9)


def test_guesses_top_and_bottom_ties_by_index():
    scores = np.array([0.3, 0.9, 0.1, 0.9, 0.5])
    assert make_guesses(scores, 2, 1).tolist() == [0, 1, -1, 1, 0]
    count = count_correct(scores, [True, True, False, False, True], 2, 1)
    assert (count.guesses, count.correct) == (3, 2)


def test_candidate_grid_depends_on_m_only():
    pairs = candidate_guesses(1000)
    assert pairs[0] == (2, 0) and (500, 0) in pairs and (500, 500) in pairs
    assert all(kp + km <= 1000 for kp, km in pairs)


@pytest.mark.parametrize("m, r, c", [(1000, 100, 80), (1000, 400, 300), (10_000, 500, 480)])
def test_rejection_is_monotone_in_eps(m, r, c):
    """The search returns the end of a rejected run; check that no larger eps is rejected."""
    eps = np.linspace(0.0, 8.0, 801)
    fdp = fdp_rejects(eps_delta_power(eps, 1e-5), m, r, c, ALPHA)
    snj = snj_p_value(m, r, c, eps, 1e-5) <= ALPHA
    for rejected in (fdp, snj):
        assert not np.any(np.diff(rejected.astype(int)) > 0)  # True* then False*
    mu = np.linspace(0.0, 6.0, 601)
    gdp = fdp_rejects(gdp_power(mu), m, r, c, ALPHA)
    assert not np.any(np.diff(gdp.astype(int)) > 0)


def test_tabulated_claims_err_to_the_safe_side():
    """Tabulated inverse powers lie below the exact ones (fewer rejections), within 2%."""
    y = np.concatenate([np.geomspace(1e-9, 0.5, 60), 1 - np.geomspace(1e-6, 0.5, 30)])
    exact = gdp_power(1.3).inverse(y)
    for sides in ("in", "out", "both"):
        tab = tabulated_power(lambda a: gdp_tradeoff(a, 1.3), sides).inverse(y)
        assert np.all(tab <= exact * (1 + 1e-12))
        assert np.all(tab >= 0.98 * exact)
    # An asymmetric claim: f(x) = max(0, 1 - d - e^e x) (one direction of (e, d)-DP only).
    e, d = 1.0, 1e-3
    claim = lambda a: np.maximum(0.0, 1 - d - np.exp(e) * np.asarray(a))  # noqa: E731
    inv_in = np.maximum(0.0, (y - d) * np.exp(-e))  # (1 - f)^{-1}
    inv_out = np.maximum(0.0, 1 - d - np.exp(e) * (1 - y))  # (1 - f^{-1})^{-1}
    assert np.all(tabulated_power(claim, "in").inverse(y) <= inv_in + 1e-15)
    assert np.all(tabulated_power(claim, "out").inverse(y) <= inv_out + 1e-15)
    assert np.all(tabulated_power(claim, "both").inverse(y) <= np.minimum(inv_in, inv_out) + 1e-15)


# --------------------------------------------------------------------------- exact size


@pytest.mark.parametrize("eps, m", [(0.5, 200), (1.0, 1000), (2.0, 1000)])
def test_exact_size_on_randomized_response(eps, m):
    """Randomized response with eps (the extremal eps-DP mechanism), every canary guessed:
    C ~ Binomial(m, e^eps/(1+e^eps)) exactly. The rejection region of the claim (eps, 0) is
    {C >= c*}; its exact probability must be <= alpha for both theorems."""
    q = float(expit(eps))
    c = np.arange(m + 1)
    snj_region = snj_p_value(m, m, 0, eps, 0.0)  # warm-up shape check
    assert float(snj_region) == 1.0
    snj = np.array([float(snj_p_value(m, m, v, eps, 0.0)) <= ALPHA for v in c])
    fdp = fdp_rejects(eps_delta_power(eps, 0.0), m, m, c, ALPHA)
    for region in (snj, fdp):
        c_star = int(np.argmax(region))
        assert region[c_star:].all()
        size = float(binom.sf(c_star - 1, m, q))
        assert size <= ALPHA
        assert size >= ALPHA / 4  # and not trivially conservative: the bound is near tight here


def test_coverage_randomized_response_eps_lb():
    """eps_lb above the true eps in at most alpha of 400 randomized-response runs (+ slack)."""
    rng = np.random.default_rng(13)
    eps, m, reps = 1.0, 1000, 400
    correct = rng.binomial(m, expit(eps), size=reps)
    fdp = fdp_epsilon_lb(m, np.full(reps, m), correct, delta=0.0, alpha=ALPHA)
    snj = np.array([snj_epsilon_lb(m, m, int(v), delta=0.0, alpha=ALPHA) for v in correct[:100]])
    assert np.sum(fdp > eps) <= _slack(reps)
    assert np.sum(snj > eps) <= _slack(100)
    assert np.median(fdp) > 0.7  # tight mechanism: bounds near the truth


# --------------------------------------------------------------------------- Gaussian canaries


def test_coverage_gdp_canaries_and_power():
    """mu-GDP canaries (N(0,1) vs N(mu,1), inclusion 1/2), 25 runs of m = 1000: the true
    claims (mu-GDP, and (eps(delta), delta)) are rejected in <= alpha + slack of the runs
    (end to end through the public functions; the statistical weight is carried by the exact
    and vectorised tests); a claim of mu = 0.5 against mu = 4 is rejected in most runs."""
    rng = np.random.default_rng(2)
    m, reps, delta = 1000, 25, 1e-5
    mu = 1.0
    true_eps = float(gdp_epsilon(delta, mu))
    over_fdp = over_snj = violated = 0
    for _ in range(reps):
        scores, included = _gdp_canaries(rng, m, mu)
        over_fdp += (
            one_run_epsilon_lb(scores, included, delta=delta, method="fdp").epsilon_lb > true_eps
        )
        over_snj += (
            one_run_epsilon_lb(scores, included, delta=delta, method="snj").epsilon_lb > true_eps
        )
        violated += one_run_verdict(scores, included, gdp_power(mu)).violated
    assert max(over_fdp, over_snj, violated) <= _slack(reps)

    caught = 0
    claim = tabulated_power(lambda a: gdp_tradeoff(a, 0.5), "both")
    for _ in range(20):
        scores, included = _gdp_canaries(rng, m, 4.0)
        caught += one_run_verdict(scores, included, claim).violated
    assert caught >= 18


def test_verdict_fixed_rule_coverage_vectorised():
    """The f-DP test of the true mu-GDP claim at a fixed rule (k+, k-) = (50, 50), 2000 runs:
    rejections <= alpha + slack. mu = 3 makes the top/bottom guesses nearly all correct."""
    rng = np.random.default_rng(5)
    m, reps, mu = 400, 2000, 3.0
    included = rng.random((reps, m)) < 0.5
    scores = rng.normal(mu * included, 1.0)
    order = np.argsort(scores, axis=1)
    rows = np.arange(reps)[:, None]
    correct = included[rows, order[:, -50:]].sum(axis=1) + (~included[rows, order[:, :50]]).sum(
        axis=1
    )
    rejected = fdp_rejects(gdp_power(mu), m, 100, correct, ALPHA)
    assert rejected.sum() <= _slack(reps)


def test_split_and_fixed_rules():
    rng = np.random.default_rng(3)
    scores, included = _gdp_canaries(rng, 2000, 2.0)
    split = one_run_epsilon_lb(scores, included, delta=1e-5, guesses="split", seed=4)
    assert (
        split.m_eval == 1000
        and split.strategy == "split"
        and split.alpha_per_test == ALPHA / split.candidates
    )
    fixed = one_run_epsilon_lb(scores, included, delta=1e-5, guesses=(100, 0), method="snj")
    assert (fixed.k_plus, fixed.k_minus, fixed.guesses) == (100, 0, 100) and fixed.candidates == 1
    bonf = one_run_epsilon_lb(scores, included, delta=1e-5)
    assert bonf.alpha_per_test == pytest.approx(ALPHA / bonf.candidates)
    assert 0 < bonf.epsilon_lb < float(gdp_epsilon(1e-5, 2.0))
    assert bonf.to_dict()["accuracy"] == pytest.approx(bonf.correct / bonf.guesses)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"guesses": "bonferonni"}, "guesses"),
        ({"guesses": (0, 0)}, "guesses"),
        ({"guesses": (5,)}, "guesses"),
        ({"method": "steinke"}, "method"),
        ({"delta": 1.0}, "delta"),
    ],
)
def test_bad_input_names_the_field(kwargs, match):
    args = {"delta": 1e-5, **kwargs}
    with pytest.raises(ValueError, match=match):
        one_run_epsilon_lb(np.arange(10.0), np.arange(10) % 2, **args)


def test_bad_canaries():
    with pytest.raises(ValueError, match="included"):
        one_run_epsilon_lb(np.arange(10.0), np.arange(9) % 2, delta=0.0)
    with pytest.raises(ValueError, match="NaN"):
        one_run_verdict(np.array([0.0, np.nan]), [True, False], gdp_power(1.0))
    with pytest.raises(ValueError, match="claim"):
        one_run_verdict(np.arange(4.0), [True, False, True, False], 3.0)


def test_ties_in_first_order_are_broken_against_the_auditor():
    """The report's order (IN canaries first) with tied scores: the top guesses take OUT
    canaries and the bottom guesses IN canaries, so no tie adds a correct guess."""
    from audit.run.summary import canary_scores as _canaries

    scores, included = _canaries(np.zeros(5), np.zeros(5))
    assert count_correct(scores, included, 3, 3).correct == 0
    scores, included = _canaries(np.array([1.0, 0.0]), np.array([1.0, 0.0]))
    count = count_correct(scores, included, 1, 1)
    assert count.correct == 0  # the IN canary at 1.0 ties an OUT one: the OUT one is guessed IN


# --------------------------------------------------------------------------- soundness review


def _lp_min_total_mass(m, r, c, tau, lines):
    """Smallest total probability sum_k Pr[C = k] of any law of C on {0..r} with Pr[C >= c] >= tau
    that satisfies the per-canary constraints h_{i-1} >= g(r_i), i = 1..r, with g the convex
    piecewise-linear (1 - f)^{-1} = max over ``lines`` (slope, intercept) and 0 (an LP: r_i and
    h_i are linear in the law). Every mechanism satisfying the claim has a law in this set."""
    from scipy.optimize import linprog

    k = np.arange(r + 1)
    rows, rhs = [np.where(k >= c, -1.0, 0.0)], [-tau]
    for i in range(1, r + 1):
        r_i = np.where(k >= i, k, 0) / m
        h_prev = np.where(k >= i - 1, r - k, 0) / m
        for slope, intercept in lines:  # slope r_i + intercept <= h_{i-1}
            rows.append(slope * r_i - h_prev)
            rhs.append(-intercept)
    tight = {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10}
    res = linprog(
        np.ones(r + 1),
        A_ub=np.array(rows),
        b_ub=np.array(rhs),
        bounds=(0, None),
        method="highs",
        options=tight,
    )
    return res.fun if res.status == 0 else np.inf


def _lines_power(lines):
    from audit.stats.one_run import ClaimedPower

    def inverse(y):
        y = np.clip(np.asarray(y, dtype=float), 0.0, 1.0)
        return np.maximum(0.0, np.max([s * y + b for s, b in lines], axis=0))

    return ClaimedPower(inverse, "piecewise linear", "both")


@pytest.mark.parametrize(
    "m, r, tau, pieces",
    [
        (20, 20, 0.05, [(1.0, 0.0)]),  # (eps, delta) = (1, 0) written as lines below
        (30, 12, 0.1, [(3.0, 0.02)]),
        (50, 30, 0.05, [(0.5, 0.01)]),
        (40, 40, 0.05, [(1.0, 0.05)]),
        (40, 25, 0.05, [(0.3, 0.1), (1.0, 0.02), (2.5, 1e-3)]),  # a privacy profile: many pieces
    ],
)
def test_fdp_recursion_start_is_the_worst_case(m, r, tau, pieces):
    """The recursion's mass r_0 + h_0 (started at (tau c/m, tau (r - c)/m)) is a lower bound on
    the total mass of *every* law of C allowed by the per-canary f-DP constraints (the LP above,
    which also lets the tail Pr[C >= c] and E[C | C >= c] be anything allowed, and adds the
    constraints for i > c): recursion * m/r <= LP minimum (+ 1e-9: the LP is solved to
    feasibility 1e-10, and its constraints have O(1) coefficients). So a
    rejection (recursion > r/m) proves Pr[C >= c] < tau under the claim, whatever the start.
    It also equals the LP minimum (within 1e-6): the greedy start loses nothing.
    (eps, delta) curves: g(y) = max(0, (y - delta) e^-eps, 1 - delta - e^eps (1 - y)); a curve
    with several (eps_k, delta_k) is the max of all their lines."""
    lines = []
    for eps, delta in pieces:
        lines += [(np.exp(-eps), -delta * np.exp(-eps)), (np.exp(eps), 1.0 - delta - np.exp(eps))]
    power = _lines_power(lines)
    if len(pieces) == 1:  # the same g as the module's closed form
        y = np.linspace(0, 1, 101)
        assert np.allclose(power.inverse(y), eps_delta_power(*pieces[0]).inverse(y), atol=1e-15)
    for c in range(1, r + 1):
        recursion = float(_recursion_mass(power, m, np.array(r), np.array(c), tau)) * m / r
        lp = _lp_min_total_mass(m, r, c, tau, lines)
        assert recursion <= lp + 1e-9
        if recursion < 1.0:  # below the cap r_i <= 1 the two agree
            assert recursion == pytest.approx(lp, rel=1e-6, abs=1e-9)


def test_epsilon_lb_is_a_rejected_claim():
    """The search's soundness needs only that the returned eps is itself rejected (no
    monotonicity): an (eps*, delta)-DP mechanism is (eps', delta)-DP for every eps' >= eps*, so
    {eps_lb > eps*} is contained in {some claim (eps', delta), eps' >= eps*, is rejected by the
    observed C}, and q(v) = inf_{eps' >= eps*} p_{eps'}(v) bounds Pr[C >= v]; with v0 the least v
    where q(v) <= alpha, that event has probability <= Pr[C >= v0] <= q(v0) <= alpha."""
    for m, r, c, delta in [
        (1000, 100, 80, 1e-5),
        (1000, 400, 300, 1e-3),
        (10_000, 500, 480, 1e-5),
        (200, 200, 150, 0.0),
    ]:
        snj = snj_epsilon_lb(m, r, c, delta=delta, alpha=ALPHA)
        assert snj > 0 and float(snj_p_value(m, r, c, snj, delta)) <= ALPHA
        fdp = fdp_epsilon_lb(m, r, c, delta=delta, alpha=ALPHA)
        assert fdp > 0 and fdp_rejects(eps_delta_power(fdp, delta), m, r, c, ALPHA)


def _rr_canaries(rng: np.random.Generator, m: int, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """Randomized response: canary j's score is its bit, flipped with probability 1/(1 + e^eps);
    exactly (eps, 0)-DP in each canary, and tight (the extremal eps-DP pair)."""
    included = rng.random(m) < 0.5
    keep = rng.random(m) < expit(eps)
    return np.where(keep, included, ~included).astype(float), included


@pytest.mark.parametrize(
    "method, guesses, reps",
    [
        ("snj", "bonferroni", 200),
        ("snj", "split", 200),
        ("fdp", "bonferroni", 100),
        ("fdp", "split", 200),
        ("snj", (60, 60), 200),
        ("fdp", (60, 60), 200),
    ],
)
def test_one_run_bound_at_the_boundary_of_the_claim(method, guesses, reps):
    """Randomized response at eps = 1 (m = 200, exactly as private as the claim (1, 0)): the
    bound exceeds eps = 1 in at most binom.ppf(0.999, reps, alpha) of the runs, for each guess
    selection. With ``split`` the rule chosen on the selection half is (50, 50) (every
    evaluation canary guessed; binary scores), so C ~ Binomial(100, e/(1+e)) exactly and the
    rejection rate is near alpha: the sharp case. Bonferroni tests at alpha/G are far below."""
    rng = np.random.default_rng(2026)
    eps = 1.0
    over = sum(
        one_run_epsilon_lb(
            *_rr_canaries(rng, 200, eps), delta=0.0, method=method, guesses=guesses, seed=k
        ).epsilon_lb
        > eps
        for k in range(reps)
    )
    assert over <= _slack(reps)


def _snj_rejects(
    m: int, r: int, correct: np.ndarray, eps: float, delta: float, level: float
) -> np.ndarray:
    values, where = np.unique(correct, return_inverse=True)
    p = np.array([float(snj_p_value(m, r, int(v), eps, delta)) for v in values])
    return (p <= level)[where]


def test_gaussian_canaries_many_runs_each_mode_vectorised():
    """mu-GDP canaries (N(mu b_j, 1), m = 1000, mu = 2), 1000 runs, every Bonferroni candidate
    (k+, k-) at once: the true claims are rejected in at most binom.ppf(0.999, 1000, alpha) = 69
    runs -- mu-GDP through the f-DP recursion at alpha/G, (eps(delta), delta) through SNJ at
    alpha/G, and the fixed rule (100, 100) at alpha for both."""
    rng = np.random.default_rng(11)
    m, reps, mu, delta = 1000, 1000, 2.0, 1e-5
    true_eps = float(gdp_epsilon(delta, mu))
    included = rng.random((reps, m)) < 0.5
    order = np.argsort(rng.normal(mu * included, 1.0), axis=1, kind="stable")
    ranked = np.take_along_axis(included, order, axis=1)  # bits sorted by score, ascending
    top_in = np.cumsum(ranked[:, ::-1], axis=1)  # IN canaries among the k highest
    bottom_out = np.cumsum(~ranked, axis=1)  # OUT canaries among the k lowest

    def correct(kp: int, km: int) -> np.ndarray:
        return (top_in[:, kp - 1] if kp else 0) + (bottom_out[:, km - 1] if km else 0)

    pairs = candidate_guesses(m)
    level = ALPHA / len(pairs)
    fdp_any = np.zeros(reps, dtype=bool)
    snj_any = np.zeros(reps, dtype=bool)
    for kp, km in pairs:
        c = correct(kp, km)
        fdp_any |= fdp_rejects(gdp_power(mu), m, kp + km, c, level)
        snj_any |= _snj_rejects(m, kp + km, c, true_eps, delta, level)
    c = correct(100, 100)
    fdp_fixed = fdp_rejects(gdp_power(mu), m, 200, c, ALPHA)
    snj_fixed = _snj_rejects(m, 200, c, true_eps, delta, ALPHA)
    for rejected in (fdp_any, snj_any, fdp_fixed, snj_fixed):
        assert rejected.sum() <= _slack(reps)


def test_split_pays_for_its_data_dependent_number_of_guesses():
    """With ``split`` the number of evaluation guesses r = k+ + k- is chosen from the output
    (the selection half's scores), while the (eps, delta) theorem of Steinke et al. (delta > 0)
    and the f-DP recursion of Mahloujifar et al. hold for a number of guesses fixed in advance.
    Sound repair: a union over the G_r distinct r the selection can pick -- on {R = r0} the
    guesses agree with a rule that always makes r0 guesses (any fixed rule off that event), so
    Pr[R = r0, reject] <= alpha / G_r. Pure eps-DP (delta = 0) keeps alpha: given the
    output, each guess is right with probability <= e^eps/(1 + e^eps) (Steinke et al.'s
    conditional argument), so C <= Binomial(||T||_1, q) whatever chose ||T||_1; the f-DP
    recursion at delta = 0 rejects only where that binomial tail is < alpha (next test)."""


def test_fdp_at_delta_zero_rejects_only_where_the_binomial_tail_does():
    """The premise of split's pure-DP exemption for the f-DP bound: the recursion with the
    (eps, 0) curve refutes (r, c) only if Pr[Binomial(r, e^eps/(1+e^eps)) >= c] < alpha."""
    for m, r, eps in [(200, 100, 1.0), (1000, 60, 2.0), (1000, 500, 0.5), (50, 50, 3.0)]:
        c = np.arange(r + 1)
        fdp = fdp_rejects(eps_delta_power(eps, 0.0), m, r, c, ALPHA)
        tail = binom.sf(c - 1, r, expit(eps))
        assert np.all(tail[fdp] < ALPHA)
    rng = np.random.default_rng(3)
    scores, included = _gdp_canaries(rng, 2000, 2.0)
    pairs = candidate_guesses(1000)
    g_r = len({kp + km for kp, km in pairs})  # selection and evaluation halves both have 1000
    for method in ("fdp", "snj"):
        split = one_run_epsilon_lb(
            scores, included, delta=1e-5, method=method, guesses="split", seed=4
        )
        assert split.alpha_per_test == pytest.approx(ALPHA / g_r) and split.candidates == g_r
        pure = one_run_epsilon_lb(
            scores, included, delta=0.0, method=method, guesses="split", seed=4
        )
        assert pure.alpha_per_test == ALPHA and pure.candidates == 1
    verdict = one_run_verdict(scores, included, gdp_power(2.0), guesses="split", seed=4)
    assert verdict.alpha_per_test == pytest.approx(ALPHA / g_r) and verdict.candidates == g_r


def test_claimed_power_knows_which_guesses_it_covers():
    """A ClaimedPower is (1 - f)^{-1} for IN guesses, (1 - f^{-1})^{-1} for OUT guesses, the
    concave majorant's inverse for both; using one for a rule whose guesses it does not cover
    would test the wrong curve (unsound for an asymmetric claim), so the verdict refuses it."""
    e, d = 1.0, 1e-3
    claim = lambda a: np.maximum(0.0, 1 - d - np.exp(e) * np.asarray(a))  # noqa: E731
    scores, included = _gdp_canaries(np.random.default_rng(1), 400, 1.0)
    assert tabulated_power(claim, "in").sides == "in" and gdp_power(1.0).sides == "both"
    assert (
        eps_delta_power(1.0, 1e-5).sides == "both"
        and tabulated_power(claim, "both").sides == "both"
    )
    with pytest.raises(ValueError, match="sides"):
        one_run_verdict(scores, included, tabulated_power(claim, "in"), guesses=(20, 20))
    with pytest.raises(ValueError, match="sides"):
        # bonferroni has (k, k) rules
        one_run_verdict(scores, included, tabulated_power(claim, "in"))
    one_run_verdict(scores, included, tabulated_power(claim, "in"), guesses=(20, 0))
    one_run_verdict(scores, included, tabulated_power(claim, "out"), guesses=(0, 20))
