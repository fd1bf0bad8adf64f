"""Cross-checks with an anchor: the harness's bounds against jax_privacy's ``auditing`` module on
the same scores, where the two scopes overlap (issue 34 item 7).

jax_privacy (DeepMind, Apache-2.0; version 2.0.0, ``jax_privacy.auditing.CanaryScoreAuditor``)
computes from held-in / held-out canary scores: a Clopper-Pearson eps lower bound
(``epsilon_clopper_pearson``), Steinke-Nasr-Jagielski's one-run bound (``epsilon_one_run``),
Mahloujifar et al.'s f-DP one-run bound with the Gaussian curve (``epsilon_one_run_fdp``) and a
GDP eps estimate (``epsilon_from_gdp``). Where the scopes overlap:

- **Clopper-Pearson at a given threshold.** Both test "IN iff score >= t", bound FPR and FNR
  one-sidedly at alpha/2 each (union bound) and take
  eps = max(log((1 - delta - FNR_hi) / FPR_hi), log((1 - delta - FPR_hi) / FNR_hi)) (jax's
  ``one_sided=False``). Both quantiles are scipy's exact Beta quantile (statsmodels calls
  ``scipy.stats.beta.ppf``), so they agree to float rounding: rtol 1e-9 leaves 10^6 ulps for
  the logs.
- **split.** The two libraries split the trials with different random permutations, so their
  ``Split`` bounds differ by design. What is compared is each step on the harness's halves
  (:func:`audit.stats.binary.split_scores`): the evaluation bound equals jax's ``Explicit``
  bound at the harness's threshold on the evaluation halves (rtol 1e-9, as above), and the
  harness's threshold attains the maximum of jax's bound over every distinct threshold on the
  selection halves (rtol 1e-9).
- **Steinke-Nasr-Jagielski.** A threshold t is the one-run rule (k+, 0) with k+ = #{scores >= t}
  on m = n_in + n_out canaries. The p-value is the same binomial expression in both (compared
  at rtol 1e-9, and against an mpmath evaluation at 50 digits); the eps bound differs only by
  the search: jax's brentq (xtol 1e-6) finds the crossing p(eps) = alpha, the harness reports
  the last rejected point of nested grids whose final step is 50/100/100/50 = 1e-4, so
  jax - 1e-4 - 1e-6 <= harness <= jax + 1e-6.
- **f-DP, Gaussian family.** jax's ``epsilon_one_run_fdp`` runs the recursion on the Gaussian
  curve G_{1/sigma(eps, delta)}, sigma(eps, delta) the noise of an (eps, delta)-DP Gaussian
  mechanism (dp_accounting, tol 1e-12); the harness's :func:`one_run_gdp_lower_bound` runs the
  same recursion on G_mu. So mu_jax = 1 / sigma(eps_jax, delta) is jax's mu bound, and
  mu_jax - 1e-4 - 1e-5 <= mu_lb <= mu_jax + 1e-5 (the harness's final grid step 1e-4 in mu; 1e-5
  covers jax's eps tolerance 1e-6 times d mu / d eps < 10 here).
- **GDP estimate.** jax's ``epsilon_from_gdp`` takes the largest |mu| = |Phi^{-1}(1 - FPR_hi) -
  Phi^{-1}(FNR_hi)| over its thresholds (Bonferroni over 2n bounds) and converts mu to eps at
  delta (Dong-Roth-Su Cor. 2.13). With binary scores there is a single interior threshold
  (n = 3 thresholds, per-rate level alpha/6), where the harness's route -- Clopper-Pearson,
  :func:`audit.stats.binary.gdp_mu_estimate`'s mu, :func:`audit.theory.curve.gdp_epsilon` --
  must give the same eps: 1e-7 absolute (jax's brentq at eps_tol 1e-10, the harness's 100
  bisections).

Out of scope on purpose: jax's ``Bonferroni`` (all its Pareto thresholds at alpha / M, M data
dependent) against the harness's ``bonferroni`` (a fixed 40-rank grid): different tests, no
common value. Skipped unless jax_privacy is installed (the ``crosscheck`` extra).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

auditing = pytest.importorskip("jax_privacy.auditing")
dp_accounting = pytest.importorskip("dp_accounting")

from audit.stats.binary import (  # noqa: E402
    Bonferroni,
    bonferroni_ranks,
    clopper_pearson_upper,
    epsilon_from_rates,
    epsilon_lower_bound,
    gdp_mu_estimate,
    split_scores,
)
from audit.stats.one_run import one_run_epsilon_lb, snj_epsilon_lb, snj_p_value  # noqa: E402
from audit.stats.one_run_gdp import one_run_gdp_lower_bound  # noqa: E402
from audit.theory.curve import gdp_epsilon  # noqa: E402

ALPHA = 0.05
EXACT = 1e-9
"""Relative tolerance where both sides evaluate the same closed form with scipy (see above)."""
GRID_STEP = 1e-4
"""The harness's final search step in eps or mu (nested grids 101, 101, 51 on [0, 50])."""


def _gaussian_scores(mu: float, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(mu, 1.0, n), rng.normal(0.0, 1.0, n)


def _harness_cp(scores_in: np.ndarray, scores_out: np.ndarray, t: float, delta: float) -> float:
    """The harness's bound at the fixed threshold t: CP at alpha/2 per rate, both tests."""
    fp = int(np.sum(scores_out >= t))
    fn = int(np.sum(scores_in < t))
    fpr_hi = clopper_pearson_upper(fp, scores_out.size, ALPHA / 2)
    fnr_hi = clopper_pearson_upper(fn, scores_in.size, ALPHA / 2)
    return float(epsilon_from_rates(fpr_hi, fnr_hi, delta))


def _jax_cp(scores_in: np.ndarray, scores_out: np.ndarray, t: float, delta: float) -> float:
    auditor = auditing.CanaryScoreAuditor(scores_in, scores_out)
    return float(
        auditor.epsilon_clopper_pearson(
            ALPHA, delta, one_sided=False, threshold_strategy=auditing.Explicit(t)
        )
    )


@pytest.mark.parametrize("delta", [0.0, 1e-5, 1e-2])
def test_clopper_pearson_at_a_given_threshold_matches(delta: float) -> None:
    """Same counts, same CP quantiles, same formula: equal to float rounding (rtol 1e-9). The
    thresholds cover both tests (low t: the reverse test log((1 - delta - FPR_hi) / FNR_hi)
    wins; high t: the forward one) and a count of 0."""
    scores_in, scores_out = _gaussian_scores(2.0, 500, seed=1)
    for t in (-1.5, 0.5, 1.0, 2.5, 3.0, 5.0):
        ours, theirs = (
            _harness_cp(scores_in, scores_out, t, delta),
            _jax_cp(scores_in, scores_out, t, delta),
        )
        assert ours == pytest.approx(theirs, rel=EXACT, abs=1e-12), (t, ours, theirs)


def test_clopper_pearson_against_mpmath() -> None:
    """An independent evaluation: the CP upper bound solved at 40 digits with mpmath
    (I_x(k + 1, n - k) = 1 - alpha/2, the regularised incomplete Beta, by bisection), then the eps
    formula; the harness and jax both agree with it to rtol 1e-9."""
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 40
    scores_in, scores_out = _gaussian_scores(2.0, 500, seed=1)
    t, delta = 2.5, 1e-5
    fp, fn, n = int(np.sum(scores_out >= t)), int(np.sum(scores_in < t)), 500

    def cp_upper(k: int) -> object:
        # bisection on the regularised incomplete Beta, increasing in x: 140 halvings < 1e-42
        lo, hi, target = mpmath.mpf(0), mpmath.mpf(1), 1 - mpmath.mpf(ALPHA) / 2
        for _ in range(140):
            mid = (lo + hi) / 2
            if mpmath.betainc(k + 1, n - k, 0, mid, regularized=True) < target:
                lo = mid
            else:
                hi = mid
        return hi

    fpr_hi, fnr_hi = cp_upper(fp), cp_upper(fn)
    exact = max(
        mpmath.log((1 - delta - fnr_hi) / fpr_hi), mpmath.log((1 - delta - fpr_hi) / fnr_hi)
    )
    assert _harness_cp(scores_in, scores_out, t, delta) == pytest.approx(float(exact), rel=EXACT)
    assert _jax_cp(scores_in, scores_out, t, delta) == pytest.approx(float(exact), rel=EXACT)


def test_split_steps_match_on_the_harness_halves() -> None:
    """The harness's ``split`` bound is jax's ``Explicit`` bound at the harness's threshold on
    the harness's evaluation halves, and that threshold maximises jax's bound over every
    distinct threshold on the selection halves (rtol 1e-9 both: same formula, same counts)."""
    scores_in, scores_out = _gaussian_scores(2.0, 400, seed=2)
    delta, seed = 1e-5, 3
    bound = epsilon_lower_bound(
        scores_in, scores_out, delta=delta, confidence=1 - ALPHA, threshold="split", seed=seed
    )
    select_in, eval_in = split_scores(scores_in, seed)
    select_out, eval_out = split_scores(scores_out, seed + 1)
    assert bound.epsilon_lb > 1.0  # an informative case, not 0 = 0
    assert bound.epsilon_lb == pytest.approx(
        _jax_cp(eval_in, eval_out, bound.threshold, delta), rel=EXACT
    )
    candidates = np.unique(np.concatenate([select_in, select_out]))
    best = max(_jax_cp(select_in, select_out, float(t), delta) for t in candidates)
    assert _jax_cp(select_in, select_out, bound.threshold, delta) == pytest.approx(best, rel=EXACT)


# (m, guesses, correct): small and large m, all guesses right, and a large 2 m delta.
COUNTS = [(200, 20, 18), (1000, 50, 50), (1000, 100, 90), (10_000, 300, 250)]


@pytest.mark.parametrize("delta", [0.0, 1e-5, 1e-3])
@pytest.mark.parametrize(("m", "guesses", "correct"), COUNTS)
def test_snj_p_value_matches(m: int, guesses: int, correct: int, delta: float) -> None:
    """Pr[W >= v] + 2 m delta max_i Pr[v - i <= W < v] / i, W ~ Bin(r, e^eps / (1 + e^eps)):
    jax takes differences of binomial tails, the harness sums the pmf; both double precision
    on probabilities >= 1e-4 here, so rtol 1e-9."""
    private = getattr(auditing, "_one_run_p_value", None)
    if private is None:
        pytest.skip("this jax_privacy has no _one_run_p_value")
    for eps in (0.0, 0.5, 1.0, 2.0, 3.0):
        ours = float(snj_p_value(m, guesses, correct, eps, delta))
        assert ours == pytest.approx(private(m, guesses, correct, eps, delta), rel=EXACT)


def test_snj_p_value_against_mpmath() -> None:
    """The p-value from the binomial sums at 50 digits (mpmath), as an independent check of
    both implementations' formula (Steinke-Nasr-Jagielski 2023, Thm. 5.2): rtol 1e-9."""
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 50
    m, r, v, eps, delta = 1000, 100, 90, mpmath.mpf(1), mpmath.mpf("1e-5")
    q = mpmath.e**eps / (1 + mpmath.e**eps)
    pmf = [mpmath.binomial(r, k) * q**k * (1 - q) ** (r - k) for k in range(r + 1)]
    tail = mpmath.fsum(pmf[v:])
    term = max(mpmath.fsum(pmf[v - i : v]) / i for i in range(1, v + 1))
    exact = float(min(tail + 2 * m * delta * term, 1))
    assert float(snj_p_value(m, r, v, 1.0, 1e-5)) == pytest.approx(exact, rel=EXACT)
    assert auditing._one_run_p_value(m, r, v, 1.0, 1e-5) == pytest.approx(exact, rel=EXACT)


def _one_run_canaries(m: int, mu: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    included = rng.random(m) < 0.5
    return rng.normal(0.0, 1.0, m) + mu * included, included


@pytest.mark.parametrize("delta", [1e-5, 1e-3])
def test_snj_epsilon_bound_matches(delta: float) -> None:
    """jax's ``epsilon_one_run`` at an explicit threshold against the harness's
    ``one_run_epsilon_lb`` with the same rule (k+, 0) fixed in advance, and against
    ``snj_epsilon_lb`` on the counts: jax's brentq root (xtol 1e-6) is the crossing, the
    harness's the last rejected grid point below it (final step 1e-4). (jax refuses delta = 0
    here; the p-values at delta = 0 are compared above.)"""
    scores, included = _one_run_canaries(2000, 3.0, seed=5)
    auditor = auditing.CanaryScoreAuditor(scores[included], scores[~included])
    for t in (2.0, 3.0, 4.0):
        theirs = float(
            auditor.epsilon_one_run(ALPHA, delta, threshold_strategy=auditing.Explicit(t))
        )
        k_plus = int(np.sum(scores >= t))
        ours = one_run_epsilon_lb(
            scores, included, delta=delta, confidence=1 - ALPHA, guesses=(k_plus, 0), method="snj"
        )
        assert ours.alpha_per_test == ALPHA and ours.guesses == k_plus
        assert ours.correct == int(np.sum(scores[included] >= t))
        assert theirs > 0.3  # an informative bound, not 0 = 0
        assert theirs - GRID_STEP - 1e-6 <= ours.epsilon_lb <= theirs + 1e-6, (t, ours, theirs)
        assert ours.epsilon_lb == snj_epsilon_lb(
            scores.size, ours.guesses, ours.correct, delta=delta, alpha=ALPHA
        )


def test_fdp_gaussian_family_matches() -> None:
    """jax's ``epsilon_one_run_fdp`` (the recursion on G_{1/sigma(eps, delta)}) read as a mu
    bound, against the harness's ``one_run_gdp_lower_bound`` with the same rule (k+, 0)."""
    delta = 1e-5
    scores, included = _one_run_canaries(2000, 2.0, seed=6)
    auditor = auditing.CanaryScoreAuditor(scores[included], scores[~included])
    for t in (1.5, 2.5, 3.5):
        eps_jax = float(
            auditor.epsilon_one_run_fdp(ALPHA, delta, threshold_strategy=auditing.Explicit(t))
        )
        mu_jax = 1.0 / dp_accounting.get_sigma_gaussian(eps_jax, delta)
        ours = one_run_gdp_lower_bound(
            scores, included, confidence=1 - ALPHA, guesses=(int(np.sum(scores >= t)), 0)
        )
        assert mu_jax > 0.2
        assert mu_jax - GRID_STEP - 1e-5 <= ours.mu_lb <= mu_jax + 1e-5, (t, ours.mu_lb, mu_jax)
        # and the eps of mu_lb-GDP at delta (the harness's epsilon_if_gaussian) below jax's eps
        assert float(gdp_epsilon(delta, ours.mu_lb)) <= eps_jax + 1e-5


@pytest.mark.parametrize("delta", [1e-5, 1e-3])
def test_gdp_estimate_matches_on_binary_scores(delta: float) -> None:
    """Binary scores (a label-only attack): one interior threshold. jax: 3 thresholds, CP at
    significance / 6 per rate, max |mu|, eps of mu-GDP at delta. The harness: its
    ``bonferroni`` GDP estimate lands on the same interior threshold; at jax's per-rate level its
    mu and :func:`gdp_epsilon` give jax's eps to 1e-7."""
    rng = np.random.default_rng(7)
    n = 2000
    scores_in = (rng.random(n) < 0.8).astype(float)  # TPR 0.8
    scores_out = (rng.random(n) < 0.1).astype(float)  # FPR 0.1
    significance = ALPHA
    theirs = float(
        auditing.CanaryScoreAuditor(scores_in, scores_out).epsilon_from_gdp(
            significance, delta, eps_tol=1e-10
        )
    )
    per_rate = significance / 6
    fpr_hi = float(clopper_pearson_upper(int(scores_out.sum()), n, per_rate))
    fnr_hi = float(clopper_pearson_upper(int(n - scores_in.sum()), n, per_rate))
    mu = float(norm.isf(fpr_hi) - norm.ppf(fnr_hi))
    assert float(gdp_epsilon(delta, mu)) == pytest.approx(theirs, abs=1e-7)
    # the public estimate computes that mu at its own Bonferroni level alpha / (2 G)
    grid = 10
    estimate = gdp_mu_estimate(
        scores_in, scores_out, confidence=1 - ALPHA, threshold=Bonferroni(grid)
    )
    alpha_each = ALPHA / (2 * 2 * bonferroni_ranks(n, grid).size)
    fpr_b = float(clopper_pearson_upper(int(scores_out.sum()), n, alpha_each))
    fnr_b = float(clopper_pearson_upper(int(n - scores_in.sum()), n, alpha_each))
    assert estimate.mu == pytest.approx(float(norm.isf(fpr_b) - norm.ppf(fnr_b)), rel=EXACT)
