"""The ``balls_and_bins`` sampler (Chua et al., AISTATS 2025, arXiv 2412.16802) in every layer.

Statistical checks use fixed seeds and chi-square / binomial tests at significance
P_MIN = 1e-3 (as tests/test_samplers.py): a correct sampler fails each with probability 1e-3
for a random seed; with the fixed seeds they are deterministic. The simulator check compares
Clopper-Pearson intervals at level 1e-3 per side with the theory's curves (see its docstring).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from audit.cli import main
from audit.mechanism import Mechanism
from audit.samplers import PADDING, batch_size_pmf, make_sampler, participation_pmf
from audit.sampling import get_sampler
from audit.stats import clopper_pearson_lower, clopper_pearson_upper
from tests.test_samplers import chi_square_p  # pools cells that expect < 5

P_MIN = 1e-3
NAME = "balls_and_bins"


def steps_of(batches: np.ndarray, n: int, steps: int) -> np.ndarray:
    """Each example's step within its epoch: ``(trials, epochs, n)``."""
    trials, total, _ = batches.shape
    out = np.full((trials, total // steps, n), -1)
    t_idx, s_idx, _ = np.nonzero(batches != PADDING)
    out[t_idx, s_idx // steps, batches[batches != PADDING]] = s_idx % steps
    return out


def test_shape_padding_and_each_example_once_per_epoch():
    sampler = make_sampler(NAME, n=60, batch_size=6, epochs=3)
    batches = sampler.sample(np.random.default_rng(1), 200)
    assert batches.dtype == np.int32 and batches.shape[:2] == (200, 30)
    sizes = (batches != PADDING).sum(axis=2)
    assert batches.shape[2] == sizes.max()  # slots = the largest batch drawn
    # padding only after the real examples, and each example exactly once per epoch
    assert ((batches[..., 1:] != PADDING) <= (batches[..., :-1] != PADDING)).all()
    epochs = np.sort(batches.reshape(200, 3, -1), axis=2)
    assert (epochs[..., -60:] == np.arange(60)).all() and (epochs[..., :-60] == PADDING).all()
    assert make_sampler(NAME, n=60, batch_size=6).sample(np.random.default_rng(0), 0).shape[0] == 0


def test_batch_sizes_are_binomial():
    sampler = make_sampler(NAME, n=200, batch_size=10, epochs=1)  # T = 20: Binomial(200, 1/20)
    sizes = (sampler.sample(np.random.default_rng(4), 300) != PADDING).sum(axis=2).ravel()
    support, pmf = batch_size_pmf(sampler)
    np.testing.assert_allclose(pmf, stats.binom(200, 0.05).pmf(support))
    observed = np.bincount(sizes, minlength=len(support))[: len(support)]
    assert observed.sum() == sizes.size and chi_square_p(observed, pmf) > P_MIN


def test_steps_uniform_and_independent_across_examples_and_epochs():
    """Example 0's step is uniform; (example 0, example 1) and (epoch 0, epoch 1) are uniform
    on T x T: independent (under a shuffle with b = 2, n = 20, two examples share a step with
    probability 1/19, not 1/10: the pair test tells the two apart)."""
    steps = steps_of(make_sampler(NAME, n=20, batch_size=2, epochs=2).sample(np.random.default_rng(2), 4000), 20, 10)
    assert chi_square_p(np.bincount(steps[:, 0, 0], minlength=10), np.full(10, 0.1)) > P_MIN
    pairs = np.bincount(steps[:, 0, 0] * 10 + steps[:, 0, 1], minlength=100)
    assert chi_square_p(pairs, np.full(100, 0.01)) > P_MIN
    epochs = np.bincount(steps[:, 0, 0] * 10 + steps[:, 1, 0], minlength=100)
    assert chi_square_p(epochs, np.full(100, 0.01)) > P_MIN
    assert participation_pmf(make_sampler(NAME, n=20, batch_size=2, epochs=2))[0].tolist() == [2]


def test_parameters_and_canary_laws():
    m = Mechanism(NAME, sigma=1.0, steps_per_epoch=10, n=95, batch_size=10, threat_model="isolated")
    s = get_sampler(NAME)
    assert s.inclusion_probability(m) == pytest.approx(0.1)
    assert s.cobatch_moments(m, 94) == pytest.approx((9.4, 9.4 * 0.9))
    assert s.known_offset(m) == pytest.approx(9.4)
    with pytest.raises(ValueError, match=r"steps_per_epoch = round\(n / batch_size\)"):
        Mechanism(NAME, sigma=1.0, steps_per_epoch=7, n=100, batch_size=10)


def test_refusals_name_sampler_and_capability():
    from audit.simulate import simulate_observations
    from audit.theory import bounds_for

    s = get_sampler(NAME)
    adversarial = Mechanism(NAME, sigma=1.0, steps_per_epoch=5, n=20, batch_size=4, threat_model="adversarial")
    with pytest.raises(ValueError, match=f"sampler '{NAME}' has no theory for the adversarial pair"):
        bounds_for(adversarial)
    with pytest.raises(ValueError, match=f"sampler '{NAME}' has no default attack"):
        s.default_attack_for("adversarial")
    assert simulate_observations(adversarial, 4, np.random.default_rng(0)).y_in.shape == (4, 5)
    assert isinstance(s.dp_event(adversarial), str)  # no dp_accounting event: accountants refuse


@pytest.mark.parametrize(("sigma", "steps", "epochs"), [(1.0, 10, 3), (0.7, 10, 1)])
def test_theory_lower_below_upper(sigma, steps, epochs):
    from audit.theory import bounds_for

    b = bounds_for(Mechanism(NAME, sigma=sigma, steps_per_epoch=steps, epochs=epochs, batch_size=2, threat_model="isolated"))
    alphas = np.linspace(0, 1, 201)
    # trade-off curves: the guarantee (upper) lies below the achieved (lower) curve, the exact between
    assert (b.upper(alphas) <= b.lower(alphas) + 1e-9).all()
    assert b.upper.epsilon(1e-5) >= b.lower.epsilon(1e-5)
    if b.exact is not None:  # the lattice errors are stated in the methods: O(1e-3) in eps here
        assert b.lower.epsilon(1e-5) - 5e-3 <= b.exact.epsilon(1e-5) <= b.upper.epsilon(1e-5) + 5e-3
    # the isolated pair is dynamic shuffling's: the same random-allocation upper where it applies
    shuffle = bounds_for(Mechanism("dynamic_shuffle", sigma=sigma, steps_per_epoch=steps, epochs=epochs, batch_size=2, threat_model="isolated"))
    if not b.notes:
        assert b.upper.epsilon(1e-5) <= shuffle.upper.epsilon(1e-5) + 1e-9


def test_simulator_isolated_between_curves():
    """The shuffle likelihood-ratio test of the simulated isolated pair, at a few thresholds:
    its true (FPR, FNR) lies above the guarantee (FNR >= upper(FPR)) and, as the LR test of the
    exact pair, on the exact curve, below the achieved curve up to its lattice error. With
    one-sided Clopper-Pearson bounds at level 1e-3 per rate (Bonferroni over 3 thresholds x 4
    rates: a correct simulator fails with probability <= 0.012 for a random seed):
    FNR_hi >= upper(FPR_hi) and FNR_lo <= lower(FPR_lo) + 1e-3."""
    from attacks import get_attack
    from audit.simulate import simulate_observations
    from audit.theory import bounds_for

    m = Mechanism(NAME, sigma=1.0, steps_per_epoch=10, epochs=2, batch_size=2, threat_model="isolated")
    b = bounds_for(m)
    trials = 20_000
    scores_in, scores_out = get_attack("shuffle_isolated_lr").scores(
        simulate_observations(m, trials, np.random.default_rng(11))
    )
    for threshold in np.quantile(scores_out, [0.5, 0.9, 0.99]):
        fp, fn = int((scores_out > threshold).sum()), int((scores_in <= threshold).sum())
        fpr_lo, fpr_hi = clopper_pearson_lower(fp, trials, 1e-3), clopper_pearson_upper(fp, trials, 1e-3)
        fnr_lo, fnr_hi = clopper_pearson_lower(fn, trials, 1e-3), clopper_pearson_upper(fn, trials, 1e-3)
        assert fnr_hi >= b.upper(float(fpr_hi))
        assert fnr_lo <= b.lower(float(fpr_lo)) + 1e-3


def test_cli_samplers_curves_simulate(capsys):
    assert main(["samplers", "--sampler", NAME, "--n", "60", "--batch-size", "6", "--epochs", "2", "--draws", "200", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["samplers"]
    assert row["sampler"] == NAME and row["participations_law"]["measured_mean"] == 2.0
    assert main(["curves", "--sampler", NAME, "--sigma", "1", "--steps", "10", "--epochs", "2", "--threat-model", "isolated", "--json"]) == 0
    curves = json.loads(capsys.readouterr().out)
    assert NAME in json.dumps(curves)
    assert main(["simulate", "--sampler", NAME, "--threat-model", "isolated", "--sigma", "1", "--steps", "10",
                 "--epochs", "2", "--batch-size", "2", "--trials", "2000", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["epsilon_lb"] >= 0


def test_audit_run_simulate_isolated_with_its_own_theory(run_folder):
    folder: Path = run_folder(
        'mode = "simulate"\nseed = 7\nsamplers = ["balls_and_bins"]\nthreat_models = ["isolated"]\n'
        'attacks = ["default"]\ntrials_in = 2000\ntrials_out = 2000\nshard_size = 1000\nclaim = "sampler"\n\n'
        "[training]\nsigma = 1.0\nbatch_size = 2\nn = 20\nepochs = 2\n"
    )
    assert main(["run", str(folder)]) == 0
    (cell,) = json.loads((folder / "summary.json").read_text())["cells"]
    assert cell["sampler"] == NAME and cell["attack"] == "shuffle_isolated_lr"
    assert cell["verdict"] == "consistent"
    assert 0 <= cell["epsilon_lb"] <= cell["theory_upper_epsilon"] == pytest.approx(cell["claimed_epsilon"])
    assert "random-allocation" in cell["theory_upper_method"]
