"""A sound audit catches broken DP-SGD implementations, and the engine agrees with Opacus.

Each test runs the whole chain a user's implementation goes through: the plug-in contract
(:func:`audit.plugins.contract.run_implementation_shard`), an attack from the registry, and
:func:`audit.stats.binary.verdict` against the guarantee of the *accounted* mechanism (the theory's
upper curve). The broken implementations (:mod:`audit.plugins.broken`) must come out
``violated``, the correct one ``consistent``.

Why each bug is caught with overwhelming probability at these trial counts (alpha = 0.05,
``split`` thresholds: half of the trials choose the threshold, the other half -- N/2 per
side -- give the Clopper-Pearson bounds):

- deterministic batches, sigma = 1, one step holding the canary: the claim is mu-GDP with
  mu = 1. Halving the noise, or leaving the canary's 2C gradient unclipped, makes it mu = 2:
  at the midpoint threshold FPR = FNR = Phi(-1) = 0.16; with N/2 = 250 the one-sided CP
  bounds add about 2.2 sqrt(0.16 * 0.84 / 250) = 0.05, so FPR_hi ~ FNR_hi ~ 0.21 while the
  claim requires FNR >= f(0.21) = Phi(Phi^-1(0.79) - 1) = 0.42. The expected margin, 0.2, is
  about 9 standard errors of the FNR estimate (0.023): a miss has probability < 1e-15.
- noise once per epoch: the canary's step is noise-free, so IN and OUT separate perfectly:
  FPR_hi = FNR_hi = 1 - 0.025^(1/250) = 0.015 against f(0.015) = 0.88, whatever the draw.
- a shuffling sampler accounted as Poisson (q = 0.1, T = 10, sigma = 0.6, adversarial): the
  canary is in exactly one batch, seen as max_t y_t ~ 2 (IN) vs 1 (OUT) over noise 0.6;
  the Poisson guarantee keeps FNR >= ~0.54 at FPR 0.2 (the canary misses every batch with
  probability 0.9^10 = 0.35), while the max test reaches FNR ~ 0.25 there: with N/2 = 500
  the margin (~0.25) is over 10 standard errors (0.02).
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest

from attacks import get_attack
from audit.core.observations import Observations
from audit.plugins.contract import TrainingSetup, run_implementation_shard
from audit.stats.binary import epsilon_lower_bound, verdict

ALPHA = 0.05

DETERMINISTIC = TrainingSetup(
    sampler="deterministic",
    sigma=1.0,
    clip=1.0,
    lr=0.5,
    batch_size=5,
    n=10,
    dataset="breast_cancer",
)
POISSON_ADVERSARIAL = TrainingSetup(
    sampler="poisson", sigma=0.6, clip=1.0, lr=0.5, batch_size=1, n=10, dataset="breast_cancer",
    threat_model="adversarial",
)


def scores(implementation: str, setup: TrainingSetup, trials: int, attack: str, seed: int = 0):
    out = run_implementation_shard(
        implementation, setup, seed=seed, shard=0, trials=trials, cell="bugs"
    )
    observations = Observations(mechanism=setup.mechanism, y_in=out["y_in"], y_out=out["y_out"],
                                final_in=out.get("final_in"), final_out=out.get("final_out"))
    return get_attack(attack).scores(observations)


def deterministic_claim():
    from audit.theory import bounds_for

    return bounds_for(DETERMINISTIC.mechanism).upper  # exact: mu = sqrt(E) / sigma = 1


@functools.cache
def poisson_claim():
    """The Poisson guarantee (pessimistic PLD, an upper curve), discretisation 1e-3 for speed:
    coarser pessimistic rounding only weakens the claim, so a violation stays a violation."""
    from audit.theory.poisson import poisson_curves

    m = POISSON_ADVERSARIAL.mechanism
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return poisson_curves(
            m.sampling_probability,
            m.sigma,
            m.total_steps,
            threat_model=m.threat_model,
            discretisation=1e-3,
        )[0]


@pytest.mark.parametrize(
    ("implementation", "expected"),
    [
        ("numpy-reference", False),
        ("audit.plugins.broken:noise_halved", True),
        ("audit.plugins.broken:canary_unclipped", True),
        ("audit.plugins.broken:noise_once_per_epoch", True),
    ],
)
def test_deterministic_bugs_caught(implementation, expected):
    scores_in, scores_out = scores(implementation, DETERMINISTIC, 500, "known_step")
    decision = verdict(scores_in, scores_out, deterministic_claim(), confidence=1 - ALPHA,
        threshold="split")
    assert decision.violated is expected, decision


@pytest.mark.parametrize(
    ("implementation", "expected"),
    [("numpy-reference", False), ("audit.plugins.broken:shuffled_not_poisson", True)],
)
def test_wrong_sampler_caught(implementation, expected):
    scores_in, scores_out = scores(implementation, POISSON_ADVERSARIAL, 1000, "max")
    decision = verdict(scores_in, scores_out, poisson_claim(), confidence=1 - ALPHA,
        threshold="split")
    assert decision.violated is expected, decision


# ------------------------------------------------------------------ engine vs opacus


def _bootstrap_se(scores_in, scores_out, delta, rng, repeats=100) -> float:
    """Standard error of eps_lb by resampling trials (IN and OUT separately)."""
    values = [
        epsilon_lower_bound(
            rng.choice(scores_in, scores_in.size),
            rng.choice(scores_out, scores_out.size),
            delta=delta,
            confidence=1 - ALPHA, threshold="split",
        ).epsilon_lb
        for _ in range(repeats)
    ]
    return float(np.std(values, ddof=1))


def test_engine_and_opacus_agree():
    """Same configuration, same attack, same statistics: the engine's eps_lb and Opacus's differ
    by less than 4 standard errors of their difference (each estimated by bootstrapping the
    trials; independent runs, so the variances add), and their scores pass two-sample
    Kolmogorov-Smirnov tests at level 1e-3 (IN against IN, OUT against OUT)."""
    pytest.importorskip("opacus", reason="the 'accountants' extra (opacus) is not installed")
    from scipy import stats

    from audit.training.trials import TrainingConfig, run_shard

    config = TrainingConfig(
        dataset="digits",
        model="logistic",
        sampler="poisson",
        sigma=0.5,
        clip=1.0,
        lr=0.5,
        batch_size=5,
        n=10,
        threat_model="isolated",
        canary="dirac",
    )
    trials, delta = 300, 1e-3
    attack = get_attack("poisson_lr")
    results = {}
    for name, arrays in (
        ("engine", run_shard(config, seed=11, shard=0, trials=trials, cell="agree")),
        (
            "opacus",
            run_implementation_shard(
                "opacus-rdp", config, seed=11, shard=0, trials=trials, cell="agree"
            ),
        ),
    ):
        observations = Observations(
            mechanism=config.mechanism, y_in=arrays["y_in"], y_out=arrays["y_out"]
        )
        results[name] = attack.scores(observations)
    rng = np.random.default_rng(0)
    bounds, ses = {}, {}
    for name, (scores_in, scores_out) in results.items():
        bounds[name] = epsilon_lower_bound(
            scores_in, scores_out, delta=delta, confidence=1 - ALPHA, threshold="split"
        ).epsilon_lb
        ses[name] = _bootstrap_se(scores_in, scores_out, delta, rng)
    assert bounds["engine"] > 0 and bounds["opacus"] > 0, bounds
    assert abs(bounds["engine"] - bounds["opacus"]) < 4 * np.hypot(ses["engine"], ses["opacus"]), (
        bounds,
        ses,
    )
    for side in (0, 1):
        assert stats.ks_2samp(results["engine"][side], results["opacus"][side]).pvalue > 1e-3


# ------------------------------------------------------------------ through the runner


def test_runner_audits_a_user_implementation(tmp_path):
    """A spec naming an implementation runs end to end (audit.run.runner dispatches to
    run_implementation_shard): the broken noise_halved one is reported violated."""
    from audit.report import run_audit

    run = tmp_path / "bug"
    run.mkdir()
    (run / "audit.toml").write_text(
        'mode = "train"\nimplementation = "audit.plugins.broken:noise_halved"\n'
        'dataset = "breast_cancer"\nsamplers = ["deterministic"]\nthreat_models = ["isolated"]\n'
        'trials_in = 500\ntrials_out = 500\nshard_size = 250\nclaim = "sampler"\nn_jobs = 1\n'
        "[training]\nn = 10\nbatch_size = 5\nsigma = 1.0\nlr = 0.5\nclip = 1.0\n"
    )
    result = run_audit(run, progress=False, plots=False)
    (cell,) = result.cells
    assert cell.verdict == "violated" and cell.epsilon_lb > 0
