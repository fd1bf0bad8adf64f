"""Statistics users of other auditing tools expect: multisplit, TPR at fixed FPR, AUROC, and the
optimistic maximum over every threshold (audit.stats.binary).

Tolerances: a level-alpha procedure fails (a bound above the truth, an interval missing the
truth) in Binomial(R, p <= alpha) of R independent repetitions; a count above
``binom.ppf(0.999, R, alpha)`` has probability < 0.001 for a sound procedure.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom, norm

from audit.run.spec import parse_spec
from audit.stats import binary as stats
from audit.stats.binary import (
    MULTISPLIT_K,
    epsilon_from_rates,
    epsilon_lower_bound,
    roc_summary,
    verdict,
)
from audit.theory.curve import gdp_tradeoff

ALPHA = 0.05


def _gaussian(rng: np.random.Generator, n: int, mu: float) -> tuple[np.ndarray, np.ndarray]:
    return rng.normal(mu, 1.0, n), rng.normal(0.0, 1.0, n)


@pytest.mark.parametrize("n, decimals", [(3000, None), (12_000, None), (12_000, 1)])
def test_optimistic_maximum_scans_every_threshold(n, decimals):
    """Equal to the brute-force maximum over every distinct score (ties included), also
    above 8,000 scores where the old scan used 4,000 candidates per tail."""
    rng = np.random.default_rng(n)
    scores_in, scores_out = _gaussian(rng, n, 1.5)
    if decimals is not None:
        scores_in, scores_out = np.round(scores_in, decimals), np.round(scores_out, decimals)

    def objective(fpr, fnr):
        return epsilon_from_rates(fpr, fnr, 1e-5)

    sorted_in, sorted_out = np.sort(scores_in), np.sort(scores_out)
    every = np.append(np.unique(np.concatenate([sorted_in, sorted_out])), np.inf)
    brute = stats._pick(every, sorted_in, sorted_out, ALPHA / 2, objective).value
    assert stats._naive_maximum(scores_in, scores_out, ALPHA, objective) == pytest.approx(
        brute, abs=1e-12
    )


def test_multisplit_is_the_median_of_splits_at_half_alpha():
    rng = np.random.default_rng(1)
    scores_in, scores_out = _gaussian(rng, 400, 1.0)
    splits = [
        epsilon_lower_bound(
            scores_in, scores_out, delta=1e-5, confidence=1 - ALPHA / 2, threshold="split",
                seed=2 * k
        ).epsilon_lb
        for k in range(MULTISPLIT_K)
    ]
    multi = epsilon_lower_bound(
        scores_in, scores_out, delta=1e-5, confidence=1 - ALPHA, threshold="multisplit", seed=0
    )
    assert multi.epsilon_lb == pytest.approx(float(np.median(splits)))
    assert multi.alpha_per_rate == pytest.approx(ALPHA / 4)
    assert multi.strategy == "multisplit"


def test_multisplit_verdict_coverage():
    """The true Gaussian claim is called violated in <= alpha + slack of 100 audits."""
    rng = np.random.default_rng(7)
    reps, mu = 100, 1.0
    violated = sum(
        verdict(
            *_gaussian(rng, 300, mu), lambda a: gdp_tradeoff(a, mu), confidence=1 - ALPHA,
            threshold="multisplit",
        ).violated
        for _ in range(reps)
    )
    assert violated <= binom.ppf(0.999, reps, ALPHA)


def test_roc_summary_counts_and_auroc():
    rng = np.random.default_rng(3)
    scores_in, scores_out = _gaussian(rng, 3000, 1.0)
    summary = roc_summary(scores_in, scores_out, confidence=1 - ALPHA)
    assert "estimate" in summary["label"]
    pairs = (scores_in[:, None] > scores_out[None, :]).mean() + 0.5 * (
        scores_in[:, None] == scores_out[None, :]
    ).mean()
    assert summary["auroc"] == pytest.approx(pairs, abs=1e-12)
    for row in summary["tpr_at_fpr"]:
        assert row["fpr"] <= row["fpr_target"]
        assert row["tpr_lo"] <= row["tpr"] <= row["tpr_hi"]
        t = row["threshold"]
        assert row["tpr"] == pytest.approx(np.mean(scores_in >= t))
        assert row["fpr"] == pytest.approx(np.mean(scores_out >= t))


def test_tpr_interval_coverage():
    """The CP interval covers the true TPR at the chosen threshold (1 - Phi(t - mu)) in all but
    <= alpha + slack of 300 audits."""
    rng = np.random.default_rng(4)
    reps, mu, missed = 300, 2.0, 0
    for _ in range(reps):
        row = roc_summary(*_gaussian(rng, 2000, mu), confidence=1 - ALPHA, fpr_targets=(0.01,))[
            "tpr_at_fpr"
        ][0]
        truth = norm.sf(row["threshold"] - mu)
        missed += not (row["tpr_lo"] <= truth <= row["tpr_hi"])
    assert missed <= binom.ppf(0.999, reps, ALPHA)


def test_spec_accepts_multisplit():
    spec = {
        "mode": "simulate", "seed": 3, "samplers": ["poisson"], "threat_models": ["isolated"],
        "trials_in": 100, "trials_out": 100, "claim": "poisson", "threshold": "multisplit",
        "training": {"sigma": 0.8, "batch_size": 1, "n": 20, "epochs": 1},
    }
    assert parse_spec(spec).claim.threshold == "multisplit"
    with pytest.raises(ValueError, match="multisplit"):
        parse_spec({**spec, "threshold": "multi"})


def test_summary_cell_has_roc_estimates_and_multisplit_reaches_it():
    from audit.run.spec import Cell
    from audit.run.summary import cell_result

    spec = parse_spec({
        "mode": "simulate", "seed": 5, "samplers": ["deterministic"], "attacks": ["max"],
        "trials_in": 400, "trials_out": 400, "claim": 0.5, "threshold": "multisplit",
        "training": {"sigma": 1.0, "batch_size": 1, "n": 10},
    })
    rng = np.random.default_rng(2)
    scores = (rng.normal(2.0, 1.0, 400), rng.normal(0.0, 1.0, 400))
    entry = cell_result(spec, Cell("deterministic", "adversarial", "max"), *scores, {})
    assert entry.bound.strategy == entry.evidence.strategy == "multisplit"
    assert (
        entry.epsilon_lb
        == epsilon_lower_bound(
            *scores, delta=1e-5, confidence=0.95, threshold="multisplit", seed=5
        ).epsilon_lb
    )
    roc = entry.roc
    assert "estimate" in roc["label"] and 0.5 < roc["auroc"] < 1
    assert [row["fpr_target"] for row in roc["tpr_at_fpr"]] == [0.001, 0.01]


def test_multisplit_bound_coverage_at_the_boundary():
    """Randomized-response scores at eps = 1 (IN: 1 w.p. e/(1+e); OUT: 1 w.p. 1/(1+e)), the
    extremal (1, 0)-DP pair, so the claim is exactly at the boundary: the multisplit bound at
    delta = 0 exceeds eps = 1 in at most binom.ppf(0.999, 200, alpha) = 21 of 200 audits (the
    Markov argument of audit.stats.binary gives Pr <= alpha even for dependent splits). Also each
    split at alpha/2 alone stays within the same slack."""
    from scipy.special import expit

    rng = np.random.default_rng(17)
    reps, n, eps, q = 200, 1000, 1.0, float(expit(1.0))
    over_multi = over_split = 0
    for k in range(reps):
        scores_in, scores_out = (
            (rng.random(n) < q).astype(float),
            (rng.random(n) >= q).astype(float),
        )
        over_multi += (
            epsilon_lower_bound(
                scores_in, scores_out, delta=0.0, confidence=1 - ALPHA, threshold="multisplit",
                    seed=k
            ).epsilon_lb
            > eps
        )
        over_split += (
            epsilon_lower_bound(
                scores_in, scores_out, delta=0.0, confidence=1 - ALPHA / 2, threshold="split",
                    seed=k
            ).epsilon_lb
            > eps
        )
    slack = binom.ppf(0.999, reps, ALPHA)
    assert over_multi <= slack and over_split <= binom.ppf(0.999, reps, ALPHA / 2)
