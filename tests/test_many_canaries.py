"""Many canaries per training (docs/design.md §8.17): the spec key, the simulator's joint laws,
the engine's k Dirac canaries, and the statistics for dependent canaries.

Coverage tests count, over R independent repetitions, the statements that fail; a valid level-
alpha statement fails Binomial(R, <= alpha) times, and the test allows up to the 0.999 quantile
of Binomial(R, alpha) (a valid method fails the test with probability < 0.001; fixed seeds).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom

from audit.core.mechanism import Mechanism
from audit.report import run_audit
from audit.run.spec import parse_spec
from audit.sampling import canaries_independent
from audit.stats.binary import clopper_pearson_upper, epsilon_lower_bound
from audit.stats.many_canaries import (
    betting_upper_bound,
    dependent_epsilon_lower_bound,
    kl_upper_bound,
    training_rows,
)
from audit.training.simulate import simulate_shard
from tests.conftest import spec_toml

BASE = {
    "mode": "simulate", "samplers": ["poisson"], "threat_models": ["isolated"], "trials_in": 100,
    "trials_out": 100, "training": {"n": 100, "batch_size": 10, "sigma": 1.0},
}


def test_spec_key_is_validated_with_named_errors():
    assert parse_spec(BASE).evidence.canaries_per_training == 1
    assert parse_spec({**BASE, "canaries_per_training": 8}).evidence.canaries_per_training == 8
    for value, match in (
        (0, "canaries_per_training"),
        ("4", "canaries_per_training"),
        (2.0, "canaries_per_training"),
        (100, "need k < n"),
    ):
        with pytest.raises(ValueError, match=match):
            parse_spec({**BASE, "canaries_per_training": value})
    with pytest.raises(ValueError, match="threat_models = \\['isolated'\\]"):
        parse_spec({**BASE, "canaries_per_training": 4, "threat_models": ["adversarial"]})
    with pytest.raises(ValueError, match="canary = 'dirac'"):
        parse_spec({**BASE, "mode": "train", "canaries_per_training": 4, "canary": "input",
                    "training": {**BASE["training"], "lr": 0.5}})
    with pytest.raises(ValueError, match="no joint law"):
        parse_spec({**BASE, "canaries_per_training": 4, "samplers": ["truncated_poisson"],
                    "training": {**BASE["training"], "max_batch_size": 20}})
    with pytest.raises(ValueError, match="'split' or 'multisplit'"):
        parse_spec(
            {
                **BASE,
                "canaries_per_training": 4,
                "samplers": ["dynamic_shuffle"],
                "threshold": "bonferroni",
            }
        )


def test_one_canary_keeps_every_shard_hash():
    assert (
        parse_spec(BASE).shard_hash()
        == parse_spec({**BASE, "canaries_per_training": 1}).shard_hash()
    )
    assert (
        parse_spec(BASE).shard_hash()
        != parse_spec({**BASE, "canaries_per_training": 2}).shard_hash()
    )


def test_which_samplers_make_independent_canaries():
    assert [
        s for s in ("poisson", "balls_and_bins", "deterministic") if canaries_independent(s)
    ] == ["poisson", "balls_and_bins", "deterministic"]
    assert not any(
        canaries_independent(s)
        for s in ("dynamic_shuffle", "persistent_shuffle", "truncated_poisson")
    )


@pytest.mark.parametrize("sampler", ["dynamic_shuffle", "persistent_shuffle"])
def test_simulated_shuffle_canaries_take_distinct_steps(sampler):
    mechanism = Mechanism(
        sampler=sampler, sigma=1e-3, epochs=3, threat_model="isolated", n=12, batch_size=1
    )
    arrays = simulate_shard(mechanism, seed=4, shard=0, trials=2000, canaries_per_training=5)
    y_in = np.round(arrays["y_in"]).reshape(2000, 5, 3, 12)
    assert np.all(np.round(arrays["y_out"]) == 0)
    assert np.all(y_in.sum(axis=3) == 1)  # one step per epoch
    steps = y_in.argmax(axis=3)  # (trials, canaries, epochs)
    for epoch in range(3):
        assert all(len(set(row)) == 5 for row in steps[:, :, epoch])  # b = 1: distinct steps
    if sampler == "persistent_shuffle":
        assert np.all(steps[:, :, 0][:, :, None] == steps)
    # each canary's step is uniform on the 12 steps (chi-square, 11 dof: 0.999 quantile 31.3)
    counts = np.bincount(steps[:, 2, 0], minlength=12)
    assert np.sum((counts - 2000 / 12) ** 2 / (2000 / 12)) < 31.3


def test_simulated_poisson_canaries_are_rows_of_the_one_canary_law():
    mechanism = Mechanism(
        sampler="poisson", sigma=1e-3, epochs=1, threat_model="isolated", n=100, batch_size=10
    )
    arrays = simulate_shard(mechanism, seed=4, shard=0, trials=3000, canaries_per_training=4)
    assert arrays["y_in"].shape == (12000, 10)
    hits = np.round(arrays["y_in"])
    # 120,000 Bernoulli(0.1) participations: mean within 4.4 standard deviations
    assert abs(hits.mean() - 0.1) < 4.4 * np.sqrt(0.09 / hits.size)


def test_engine_trains_k_dirac_canaries():
    from audit.training.trials import TrainingConfig, run_shard

    config = TrainingConfig(
        dataset="digits",
        model="logistic",
        sampler="deterministic",
        threat_model="isolated",
        canary="dirac",
        sigma=1e-3,
        batch_size=10,
        n=100,
        epochs=2,
        lr=0.5,
        clip=1.0,
    )
    arrays = run_shard(config, seed=1, shard=0, trials=6, canaries_per_training=4)
    assert arrays["y_in"].shape == (24, 20) and arrays["final_in"].shape == (24,)
    expected = np.zeros(20)
    expected[[0, 10]] = 1  # every canary's known step rolled first in each epoch
    assert np.allclose(arrays["y_in"], expected, atol=0.02)
    assert np.allclose(arrays["y_out"], 0, atol=0.02)
    one = run_shard(config, seed=1, shard=0, trials=6)
    # canary 0: the same training
    assert np.array_equal(one["y_in"], arrays["y_in"].reshape(6, 4, 20)[:, 0])


def test_kl_upper_bound():
    assert kl_upper_bound(0.0, 100, 0.05) == pytest.approx(1 - 0.05 ** (1 / 100), rel=1e-12)
    counts = np.arange(0, 40)
    kl = kl_upper_bound(counts / 200, 200, 0.05)
    assert np.all(np.diff(kl) > 0)
    # Chernoff: above the exact bound
    assert np.all(kl >= clopper_pearson_upper(counts, 200, 0.05) - 1e-12)
    assert kl_upper_bound(1.0, 10, 0.05) == 1.0
    with pytest.raises(ValueError, match="multiple of canaries_per_training"):
        training_rows(np.zeros(10), 3)


def test_dependent_bound_holds_where_clopper_pearson_on_dependent_canaries_fails():
    # No privacy loss at all (IN and OUT scores from the same law: eps = 0), k = 10 canaries per
    # training perfectly dependent (one score copied 10 times). Any eps_lb > 0 is a false
    # statement. Clopper-Pearson on the 10 R "trials" makes it far more often than alpha; the
    # per-training bound holds.
    alpha, repetitions, trainings, k = 0.1, 150, 60, 10
    rng = np.random.default_rng(9)
    naive = dependent = 0
    for seed in range(repetitions):
        scores_in = np.repeat(rng.normal(size=trainings), k)
        scores_out = np.repeat(rng.normal(size=trainings), k)
        naive += (
            epsilon_lower_bound(
                scores_in, scores_out, delta=1e-5, confidence=1 - alpha, seed=seed,
                    threshold="split"
            ).epsilon_lb
            > 0
        )
        dependent += dependent_epsilon_lower_bound(
            scores_in, scores_out, canaries=k, delta=1e-5, confidence=1 - alpha,
                seed=seed).epsilon_lb > 0
    tolerated = int(binom.ppf(0.999, repetitions, alpha))
    assert dependent <= tolerated, dependent
    assert naive > tolerated, naive


@pytest.mark.parametrize("sampler", ["poisson", "dynamic_shuffle"])
def test_runner_audits_k_canaries_per_training(tmp_path, sampler):
    keys = {
        **BASE,
        "samplers": [sampler],
        "canaries_per_training": 4,
        "shard_size": 50,
        "attacks": ["default"],
        "claim": "sampler",
        "training": {"n": 100, "batch_size": 10, "sigma": 1.0},
    }
    if sampler != "poisson":  # dependent canaries: the planned default is refused, split is allowed
        keys["threshold"] = "split"
    (tmp_path / "audit.toml").write_text(spec_toml(keys))
    cell = run_audit(tmp_path, progress=False, plots=False).cells[0].to_json()
    assert (cell["trials_in"], cell["trainings_in"], cell["canaries_per_training"]) == (400, 100, 4)
    assert cell["canaries_independent"] is (sampler == "poisson")
    assert cell["bound"]["n_in"] == 400
    assert cell["roc"]["tpr_at_fpr"][0]["confidence"] == 0.95


def test_betting_bound_covers_the_mean_of_dependent_fractions():
    # per training, the fraction of k = 10 canaries in error: a shared Bernoulli(0.1) switches on
    # each canary with probability 0.7, and each has its own Bernoulli(0.05)
    alpha, repetitions, trainings, k = 0.1, 1000, 200, 10
    rng = np.random.default_rng(10)
    shared = rng.random((repetitions, trainings, 1)) < 0.1
    on = (shared & (rng.random((repetitions, trainings, k)) < 0.7)) | (
        rng.random((repetitions, trainings, k)) < 0.05
    )
    truth = 0.07 + 0.05 - 0.07 * 0.05
    failures = sum(betting_upper_bound(row, alpha) < truth for row in on.mean(axis=2))
    assert failures <= int(binom.ppf(0.999, repetitions, alpha)), failures
    # adapts to the variance p (1 - p) / k
    independent = (rng.random((trainings, k)) < 0.2).mean(axis=1)
    assert betting_upper_bound(independent, 0.05) < kl_upper_bound(
        independent.mean(), trainings, 0.05
    )
