"""audit.stats.estimates: the Bayesian eps interval and the bootstrap intervals, labelled estimates
(docs/design.md §8.14). Fixed seeds; tolerances derived in comments."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import beta as beta_law

from audit.stats.binary import clopper_pearson_upper, epsilon_from_rates, roc_summary
from audit.stats.estimates import bayesian_epsilon, bootstrap_auroc, bootstrap_tpr_at_fpr


def test_bayesian_median_against_an_independent_monte_carlo() -> None:
    """With FPR tiny and FNR large only the first eps term matters, and the posterior of
    e^eps = (1 - delta - FNR)/FPR has independent Beta factors: its median by a second,
    independent Monte Carlo (scipy's Beta sampler, 400,000 draws) agrees with ours to 1%
    (Monte Carlo error of a median with 2e5 draws: ~0.3% here)."""
    fp, n_out, fn, n_in, delta = 40, 20_000, 18_000, 20_000, 1e-5
    ours = bayesian_epsilon(fp, n_out, fn, n_in, delta=delta, seed=1)
    rng = np.random.default_rng(7)
    fpr = beta_law.rvs(fp + 0.5, n_out - fp + 0.5, size=400_000, random_state=rng)
    tpr = beta_law.rvs(n_in - fn + 0.5, fn + 0.5, size=400_000, random_state=rng)
    reference = np.median(np.log((tpr - delta) / fpr))
    assert abs(ours.epsilon_median - reference) < 0.01 * reference
    assert ours.epsilon_lo < ours.epsilon_median < ours.epsilon_hi
    assert "estimate, not a bound" in ours.label


def test_bayesian_interval_is_narrower_than_the_union_bound_rectangle() -> None:
    """The joint posterior's lower end sits above the Clopper-Pearson rectangle's eps (each
    rate at alpha/2): the rectangle pays for both rates at once (Zanella-Beguelin et al.)."""
    fp, n, fn = 300, 100_000, 90_000
    bayes = bayesian_epsilon(fp, n, fn, n, delta=1e-5, level=0.95)
    rectangle = float(
        epsilon_from_rates(
            clopper_pearson_upper(fp, n, 0.025), clopper_pearson_upper(fn, n, 0.025), 1e-5
        )
    )
    assert bayes.epsilon_lo > rectangle


def test_bayesian_interval_covers_in_repeated_sampling_roughly() -> None:
    """Not a guarantee (a credible interval), but with Jeffreys priors the frequentist coverage
    of the 90% interval is close to 90%: 300 repetitions, true (FPR, FNR) = (0.01, 0.9), eps =
    log(0.1 - 1e-5) - log(0.01); coverage in [0.8, 0.97] (sd of the frequency ~0.017)."""
    rng = np.random.default_rng(3)
    n, truth, covered = 5000, np.log((0.1 - 1e-5) / 0.01), 0
    for r in range(300):
        fp, fn = rng.binomial(n, 0.01), rng.binomial(n, 0.9)
        b = bayesian_epsilon(int(fp), n, int(fn), n, delta=1e-5, level=0.9, draws=20_000, seed=r)
        covered += b.epsilon_lo <= truth <= b.epsilon_hi
    assert 0.8 <= covered / 300 <= 0.97


def test_bootstrap_intervals_contain_the_estimates_of_roc_summary() -> None:
    rng = np.random.default_rng(4)
    scores_in, scores_out = rng.normal(1, 1, 3000), rng.normal(0, 1, 3000)
    roc = roc_summary(scores_in, scores_out)
    auroc = bootstrap_auroc(scores_in, scores_out, reps=200, seed=1)
    assert auroc.estimate == pytest.approx(roc["auroc"], abs=1e-12)
    assert auroc.lo < auroc.estimate < auroc.hi
    # the AUROC's standard error (Hanley-McNeil) is ~0.0085 here: a 95% interval ~0.033 wide
    assert 0.02 < auroc.hi - auroc.lo < 0.05
    for row in roc["tpr_at_fpr"]:
        tpr = bootstrap_tpr_at_fpr(scores_in, scores_out, row["fpr_target"], reps=200, seed=2)
        assert tpr.estimate == pytest.approx(row["tpr"], abs=1e-12)
        assert tpr.lo <= tpr.estimate <= tpr.hi
        assert "estimate, not a bound" in tpr.label


def test_bootstrap_auroc_with_ties_counts_half() -> None:
    """All scores equal: AUROC = 1/2 exactly in every resample."""
    out = bootstrap_auroc(np.zeros(50), np.zeros(60), reps=50)
    assert out.estimate == out.lo == out.hi == 0.5


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: bayesian_epsilon(5, 10, 11, 10, delta=1e-5), "false_negatives"),
        (lambda: bayesian_epsilon(5, 10, 1, 10, delta=1e-5, level=1.0), "level"),
        (lambda: bootstrap_auroc([1.0, np.nan], [0.0]), "scores_in contains NaN"),
        (lambda: bootstrap_tpr_at_fpr([1.0], [0.0], 0.0), "fpr_target"),
        (lambda: bootstrap_auroc([1.0], [0.0], reps=5), "reps"),
    ],
)
def test_bad_input(call, message) -> None:
    with pytest.raises(ValueError, match=message):
        call()

