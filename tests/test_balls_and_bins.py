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
from audit.core.mechanism import Mechanism
from audit.sampling import get_sampler, validate
from audit.sampling.batches import PADDING, batch_size_pmf, participation_pmf
from audit.sampling.factory import make_sampler
from audit.stats.binary import clopper_pearson_lower, clopper_pearson_upper
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
    steps = steps_of(
        make_sampler(NAME, n=20, batch_size=2, epochs=2).sample(np.random.default_rng(2), 4000),
        20,
        10,
    )
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
        validate(Mechanism(NAME, sigma=1.0, steps_per_epoch=7, n=100, batch_size=10))


def test_refusals_name_sampler_and_capability():
    from attacks.defaults import default_attack_for
    from audit.accounting.events import dp_event

    adversarial = Mechanism(
        NAME, sigma=1.0, steps_per_epoch=5, n=20, batch_size=4, threat_model="adversarial"
    )
    assert default_attack_for(NAME, "adversarial") == "shuffle_isolated_lr"
    # no dp_accounting event: those accountants refuse
    assert isinstance(dp_event(adversarial), str)


# -- the adversarial pair ----------------------------------------------------------------

ADV = {
    "sigma": 1e-6,
    "steps_per_epoch": 8,
    "epochs": 2,
    "n": 40,
    "batch_size": 5,
    "threat_model": "adversarial",
}


def _noiseless_counts(trials: int, seed: int) -> tuple[np.ndarray, np.ndarray, Mechanism]:
    """Noise-free adversarial observations (sigma 1e-6, rounded): y_t = 1[IN, canary at t] - O_t +
    (n - 1)/T."""
    from audit.training.simulate import simulate_observations

    m = Mechanism(NAME, **ADV)
    o = simulate_observations(m, trials, np.random.default_rng(seed))
    offset = (m.n - 1) / m.steps_per_epoch

    def as_int(y):
        return np.rint(offset - y.astype(np.float64)).astype(int).reshape(
            trials, m.epochs, m.steps_per_epoch
        )

    return as_int(o.y_in), as_int(o.y_out), m


def test_adversarial_cobatch_law_is_multinomial_per_epoch():
    """OUT: the others' counts of an epoch sum to n - 1 exactly; one step's count is Binomial(n - 1,
    1/T) and two steps' counts are jointly trinomial (chi-square, P_MIN; the pair test tells them
    apart from independent binomials, whose sums would vary). IN: a step reads O_t - 1[canary at t],
    of law (1/T) Bin(k + 1) + (1 - 1/T) Bin(k) only if the canary's step is independent of the
    counts (chi-square, P_MIN)."""
    c_in, c_out, m = _noiseless_counts(3000, 5)
    n1, t = m.n - 1, m.steps_per_epoch
    assert (c_out.sum(axis=2) == n1).all() and (c_in.sum(axis=2) == n1 - 1).all()
    k = np.arange(n1 + 1)
    binom = stats.binom.pmf(k, n1, 1 / t)
    one_step = np.concatenate([c_out[:, 0, 0], c_out[:, 1, 5]])  # two independent epochs
    assert chi_square_p(np.bincount(one_step, minlength=n1 + 1), binom) > P_MIN
    i, j = np.meshgrid(k, k, indexing="ij")
    keep = i + j <= n1
    trinomial = stats.multinomial.pmf(
        np.stack([i[keep], j[keep], n1 - i[keep] - j[keep]], axis=1), n1, [1 / t, 1 / t, 1 - 2 / t]
    )
    pairs = np.zeros((n1 + 1, n1 + 1))
    np.add.at(pairs, (c_out[:, 0, 0], c_out[:, 0, 1]), 1)
    assert chi_square_p(pairs[keep], trinomial) > P_MIN
    # Pr[O - 1[J = t] = k], k = -1..n - 1 (index k + 1)
    mixture = (1 - 1 / t) * np.append(0.0, binom) + np.append(binom, 0.0) / t
    read = np.concatenate([c_in[:, 0, 2], c_in[:, 1, 7]]) + 1
    assert chi_square_p(np.bincount(read, minlength=n1 + 2), mixture) > P_MIN
    sampler = get_sampler(NAME)
    assert sampler.cobatch_moments(m, n1) == pytest.approx((n1 / t, n1 / t * (1 - 1 / t)))
    assert sampler.known_offset(m) == pytest.approx(n1 / t)


def test_adversarial_moments_with_noise():
    """sigma 0.5: per step E y_out = 0 and Var y_out = sigma^2 + (n - 1)(1/T)(1 - 1/T); the IN
    shift is 1/T per step; each epoch's sum is N(1[IN], T sigma^2) exactly (the co-batch
    cancels). Tolerances: 5 standard errors (means: sd/sqrt(m); sample variance of m
    near-normal values: var sqrt(2/m), m the independent values; epochs are independent)."""
    from audit.training.simulate import simulate_observations

    m = Mechanism(NAME, **{**ADV, "sigma": 0.5})
    trials, t = 4000, m.steps_per_epoch
    o = simulate_observations(m, trials, np.random.default_rng(6))
    var = 0.25 + (m.n - 1) / t * (1 - 1 / t)
    # one step per epoch: independent values
    step = o.y_out[:, [0, t + 3]].astype(np.float64).ravel()
    assert step.mean() == pytest.approx(0.0, abs=5 * np.sqrt(var / step.size))
    assert step.var() == pytest.approx(var, abs=5 * var * np.sqrt(3 / step.size))
    shift = o.y_in.astype(np.float64).mean() - o.y_out.astype(np.float64).mean()
    assert shift == pytest.approx(1 / t, abs=5 * np.sqrt(2 * var / (trials * m.epochs)))
    for y, mean in ((o.y_out, 0.0), (o.y_in, 1.0)):
        sums = y.astype(np.float64).reshape(trials, m.epochs, t).sum(axis=2).ravel()
        assert stats.kstest(sums, stats.norm(mean, 0.5 * np.sqrt(t)).cdf).pvalue > P_MIN


def test_adversarial_theory_is_the_isolated_pair():
    from audit.theory import bounds_for

    kw = {"sigma": 1.0, "steps_per_epoch": 10, "epochs": 3, "n": 40, "batch_size": 4}
    adv = bounds_for(Mechanism(NAME, threat_model="adversarial", **kw))
    iso = bounds_for(Mechanism(NAME, threat_model="isolated", **kw))
    alphas = np.linspace(0, 1, 401)
    assert (adv.upper(alphas) <= adv.lower(alphas) + 1e-12).all()  # guarantee below achieved
    assert adv.upper.epsilon(1e-5) >= adv.lower.epsilon(1e-5)
    assert np.array_equal(adv.upper(alphas), iso.upper(alphas)) and np.array_equal(
        adv.lower(alphas), iso.lower(alphas)
    )
    assert (adv.upper.threat_model, adv.lower.threat_model) == ("adversarial", "adversarial")
    assert (adv.upper.kind, adv.lower.kind) == ("upper", "lower")
    assert "post-processing" in adv.upper.method and "gradient 0" in adv.lower.method
    assert adv.exact is None and iso.exact is not None
    # the fallback where the random-allocation lattice does not fit (small sigma) too
    small = bounds_for(
        Mechanism(
            NAME, sigma=0.3, steps_per_epoch=100, n=200, batch_size=2, threat_model="adversarial"
        )
    )
    assert small.notes and (small.upper(alphas) <= small.lower(alphas) + 1e-12).all()
    assert small.lower.threat_model == "adversarial"


def test_simulator_adversarial_between_curves():
    """The default attack on the simulated adversarial pair: its true (FPR, FNR) lies above
    the guarantee (FNR_hi >= upper(FPR_hi), one-sided Clopper-Pearson at 1e-3 per rate, 3
    thresholds: a correct simulator fails with probability <= 0.006). The sum test's law is
    exact: the total of all steps is N(E 1[IN], T E sigma^2) (the co-batch cancels in each
    epoch), so at each threshold the two exact rates lie in their two-sided CP intervals
    (1e-3 per side and rate); its curve G_mu, mu = sqrt(E / T) / sigma, is achieved on this
    co-batch, so it lies on or above the guarantee, and the co-batch (a post-processing of
    the isolated pair) lands on or above the isolated pair's achieved (lower) curve."""
    from attacks import get_attack
    from audit.theory import bounds_for
    from audit.training.simulate import simulate_observations

    m = Mechanism(
        NAME,
        sigma=1.0,
        steps_per_epoch=10,
        epochs=2,
        n=20,
        batch_size=2,
        threat_model="adversarial",
    )
    b = bounds_for(m)
    trials = 20_000
    obs = simulate_observations(m, trials, np.random.default_rng(12))
    scores_in, scores_out = get_attack("shuffle_isolated_lr").scores(obs)
    for threshold in np.quantile(scores_out, [0.5, 0.9, 0.99]):
        fp, fn = int((scores_out > threshold).sum()), int((scores_in <= threshold).sum())
        fpr_hi, fnr_hi = (
            clopper_pearson_upper(fp, trials, 1e-3),
            clopper_pearson_upper(fn, trials, 1e-3),
        )
        assert fnr_hi >= b.upper(float(fpr_hi))
    sum_in, sum_out = get_attack("sum").scores(obs)
    sd = m.sigma * np.sqrt(m.total_steps)
    for threshold in (0.5, 1.0, 2.0, 4.0):
        fp, fn = int((sum_out > threshold).sum()), int((sum_in <= threshold).sum())
        fpr, fnr = stats.norm.sf(threshold / sd), stats.norm.cdf((threshold - m.epochs) / sd)
        assert (
            clopper_pearson_lower(fp, trials, 1e-3)
            <= fpr
            <= clopper_pearson_upper(fp, trials, 1e-3)
        )
        assert (
            clopper_pearson_lower(fn, trials, 1e-3)
            <= fnr
            <= clopper_pearson_upper(fn, trials, 1e-3)
        )
    mu = np.sqrt(m.epochs / m.steps_per_epoch) / m.sigma
    alphas = np.linspace(1e-6, 1 - 1e-6, 201)
    achieved = stats.norm.cdf(stats.norm.isf(alphas) - mu)
    assert (b.upper(alphas) <= achieved + 1e-9).all()


def test_adversarial_attack_is_the_gaussian_model_likelihood_ratio():
    """shuffle_isolated_lr on the adversarial pair equals, per epoch, log mean_j N(y; e_j, S) /
    N(y; 0, S) with S = sigma^2 I + Cov(O), Cov(O) the multinomial's (n - 1)(diag(p) - p p^T),
    p = 1/T: the closed form checked against scipy's multivariate normal (to 1e-9)."""
    from attacks import get_attack
    from audit.core.observations import Observations

    m = Mechanism(
        NAME, sigma=0.8, steps_per_epoch=6, epochs=2, n=30, batch_size=5, threat_model="adversarial"
    )
    t, n1 = m.steps_per_epoch, m.n - 1
    p = np.full(t, 1 / t)
    cov = m.sigma**2 * np.eye(t) + n1 * (np.diag(p) - np.outer(p, p))
    y = np.random.default_rng(9).normal(0.3, 2.0, size=(5, m.total_steps))
    scores, _ = get_attack("shuffle_isolated_lr").scores(Observations(mechanism=m, y_in=y, y_out=y))
    law_out = stats.multivariate_normal(np.zeros(t), cov)
    expected = np.zeros(5)
    for e in range(m.epochs):
        part = y[:, e * t:(e + 1) * t]
        ratios = [
            stats.multivariate_normal(np.eye(t)[j], cov).logpdf(part) - law_out.logpdf(part)
            for j in range(t)
        ]
        expected += np.log(np.mean(np.exp(ratios), axis=0))
    np.testing.assert_allclose(scores, expected, rtol=0, atol=1e-9)


def test_engine_adversarial_reads_the_cobatch():
    """Train mode (the engine, noise 1e-4): y_t = 1[IN, canary in batch] + (n - 1)/T - (others in
    batch), and each epoch's sum is 1[IN] exactly (every example once per epoch)."""
    import torch

    from audit.training.canaries import CANARY_INDEX
    from audit.training.engine import train
    from audit.training.trials import TrainingConfig, build_problem

    config = TrainingConfig(
        dataset="digits",
        model="logistic",
        sampler=NAME,
        sigma=1e-4,
        clip=1.0,
        lr=0.5,
        batch_size=5,
        n=40,
        epochs=2,
        canary="dirac",
        threat_model="adversarial",
    )
    problem = build_problem(config)
    assert problem.known == pytest.approx(39 / 8)
    batches = make_sampler(NAME, n=40, batch_size=5, epochs=2).sample(np.random.default_rng(4), 8)
    present = (batches == CANARY_INDEX).any(-1)
    others = ((batches >= 0) & (batches != CANARY_INDEX)).sum(-1)
    canary_in = np.repeat([True, False], 4)
    streams = [(torch.Generator().manual_seed(i), 4) for i in range(2)]
    out = train(problem, batches, canary_in, streams)
    assert np.allclose(out.y, present * canary_in[:, None] + 39 / 8 - others, atol=1e-3)
    assert np.allclose(out.y.reshape(8, 2, 8).sum(-1), canary_in[:, None], atol=1e-3)


@pytest.mark.parametrize(("sigma", "steps", "epochs"), [(1.0, 10, 3), (0.7, 10, 1)])
def test_theory_lower_below_upper(sigma, steps, epochs):
    from audit.theory import bounds_for

    b = bounds_for(
        Mechanism(
            NAME,
            sigma=sigma,
            steps_per_epoch=steps,
            epochs=epochs,
            batch_size=2,
            threat_model="isolated",
        )
    )
    alphas = np.linspace(0, 1, 201)
    # trade-off curves: the guarantee (upper) lies below the achieved (lower) curve, the exact
    # between
    assert (b.upper(alphas) <= b.lower(alphas) + 1e-9).all()
    assert b.upper.epsilon(1e-5) >= b.lower.epsilon(1e-5)
    if b.exact is not None:  # the lattice errors are stated in the methods: O(1e-3) in eps here
        assert b.lower.epsilon(1e-5) - 5e-3 <= b.exact.epsilon(1e-5) <= b.upper.epsilon(1e-5) + 5e-3
    # the isolated pair is dynamic shuffling's: the same random-allocation upper where it applies
    shuffle = bounds_for(
        Mechanism(
            "dynamic_shuffle",
            sigma=sigma,
            steps_per_epoch=steps,
            epochs=epochs,
            batch_size=2,
            threat_model="isolated",
        )
    )
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
    from audit.theory import bounds_for
    from audit.training.simulate import simulate_observations

    m = Mechanism(
        NAME, sigma=1.0, steps_per_epoch=10, epochs=2, batch_size=2, threat_model="isolated"
    )
    b = bounds_for(m)
    trials = 20_000
    scores_in, scores_out = get_attack("shuffle_isolated_lr").scores(
        simulate_observations(m, trials, np.random.default_rng(11))
    )
    for threshold in np.quantile(scores_out, [0.5, 0.9, 0.99]):
        fp, fn = int((scores_out > threshold).sum()), int((scores_in <= threshold).sum())
        fpr_lo, fpr_hi = (
            clopper_pearson_lower(fp, trials, 1e-3),
            clopper_pearson_upper(fp, trials, 1e-3),
        )
        fnr_lo, fnr_hi = (
            clopper_pearson_lower(fn, trials, 1e-3),
            clopper_pearson_upper(fn, trials, 1e-3),
        )
        assert fnr_hi >= b.upper(float(fpr_hi))
        assert fnr_lo <= b.lower(float(fpr_lo)) + 1e-3


def test_cli_samplers_curves_simulate(capsys):
    assert (
        main(
            [
                "samplers",
                "--sampler",
                NAME,
                "--n",
                "60",
                "--batch-size",
                "6",
                "--epochs",
                "2",
                "--draws",
                "200",
                "--json",
            ]
        )
        == 0
    )
    (row,) = json.loads(capsys.readouterr().out)["samplers"]
    assert row["sampler"] == NAME and row["participations_law"]["measured_mean"] == 2.0
    assert (
        main(
            [
                "curves",
                "--sampler",
                NAME,
                "--sigma",
                "1",
                "--steps",
                "10",
                "--epochs",
                "2",
                "--threat-model",
                "isolated",
                "--json",
            ]
        )
        == 0
    )
    curves = json.loads(capsys.readouterr().out)
    assert NAME in json.dumps(curves)
    assert (
        main(
            [
                "simulate",
                "--sampler",
                NAME,
                "--threat-model",
                "isolated",
                "--sigma",
                "1",
                "--steps",
                "10",
                "--epochs",
                "2",
                "--batch-size",
                "2",
                "--trials",
                "2000",
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["epsilon_lb"] >= 0


def test_cli_curves_and_simulate_adversarial(capsys):
    assert main(["curves", "--sampler", NAME, "--sigma", "1", "--steps", "10", "--epochs", "2",
                 "--threat-model", "adversarial", "--json"]) == 0
    text = capsys.readouterr().out
    assert NAME in text and "adversarial" in text and "post-processing" in text
    assert (
        main(
            [
                "simulate",
                "--sampler",
                NAME,
                "--threat-model",
                "adversarial",
                "--sigma",
                "1",
                "--steps",
                "10",
                "--epochs",
                "2",
                "--batch-size",
                "2",
                "--trials",
                "2000",
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["attack"] == "shuffle_isolated_lr"
    assert 0 <= out["epsilon_lb"] <= out["theory"]["upper"]


@pytest.mark.parametrize("threat", ["isolated", "adversarial"])
def test_audit_run_simulate_with_its_own_theory(run_folder, threat):
    folder: Path = run_folder(
        'mode = "simulate"\nseed = 7\nsamplers = ["balls_and_bins"]\nthreat_models = '
        f'["{threat}"]\n'
        'attacks = ["default", "sum"]\ntrials_in = 2000\ntrials_out = 2000\nshard_size = '
        '1000\nclaim = "sampler"\n\n'
        "[training]\nsigma = 1.0\nbatch_size = 2\nn = 20\nepochs = 2\n"
    )
    assert main(["run", str(folder)]) == 0
    cells = json.loads((folder / "summary.json").read_text())["cells"]
    assert sorted(c["attack"] for c in cells) == ["shuffle_isolated_lr", "sum"]
    for cell in cells:
        assert cell["sampler"] == NAME and cell["threat_model"] == threat
        assert cell["verdict"] == "consistent"
        assert (
            0
            <= cell["epsilon_lb"]
            <= cell["theory_upper_epsilon"]
            == pytest.approx(cell["claimed_epsilon"])
        )
        assert "random-allocation" in cell["theory_upper_method"]
        assert ("adversarial: the isolated pair" in cell["theory_upper_method"]) == (
            threat == "adversarial"
        )


def test_accountant_random_allocation_against_the_theory():
    """``pld-accounting-random-allocation`` (pld-accounting's eps upper bound of the
    random-allocation pair) and audit/theory/balls_and_bins.py's upper curve bound the same
    eps from above: the theory's lower eps lies below both, and the claim is within the
    package's stopping rule of ours (its upper <= 1.1 x its lower <= 1.1 x the true eps <=
    1.1 x our upper). Measured at sigma 1, T 10, E 2: claim 2.8631, ours [2.8323, 2.8399].
    The shuffles' isolated pair is the same pair (dynamic: the same claim; persistent: one
    round at sigma / sqrt(E), above its theory's lower eps); their adversarial pair and
    other samplers are Unsupported."""
    pytest.importorskip("PLD_accounting")
    from audit.accounting.adapters import Unsupported, get_accountant
    from audit.accounting.check import GridCell, check_accountant
    from audit.theory import bounds_for

    name = "pld-accounting-random-allocation"
    accountant = get_accountant(name)
    kw = {"sigma": 1.0, "steps_per_epoch": 10, "epochs": 2, "n": 20, "batch_size": 2}
    claims = {}
    for threat in ("isolated", "adversarial"):
        m = Mechanism(NAME, threat_model=threat, **kw)
        claims[threat] = accountant(m, 1e-5)
        b = bounds_for(m)
        lower, upper = float(b.lower.epsilon(1e-5)), float(b.upper.epsilon(1e-5))
        assert lower <= upper and lower <= claims[threat] <= 1.1 * upper
        assert abs(claims[threat] - upper) / upper < 0.02  # measured 0.8%
    assert claims["isolated"] == claims["adversarial"]
    assert (
        accountant(Mechanism("dynamic_shuffle", threat_model="isolated", **kw), 1e-5)
        == claims["isolated"]
    )
    persistent = Mechanism("persistent_shuffle", threat_model="isolated", **kw)
    assert accountant(persistent, 1e-5) >= float(bounds_for(persistent).lower.epsilon(1e-5))
    for sampler, threat in (("dynamic_shuffle", "adversarial"), ("poisson", "isolated")):
        answer = accountant(Mechanism(sampler, threat_model=threat, **kw), 1e-5)
        assert isinstance(answer, Unsupported) and sampler in answer.reason
    cells = [
        GridCell(Mechanism(NAME, threat_model=t, **kw), 1e-5) for t in ("isolated", "adversarial")
    ]
    report = check_accountant(name, cells)
    assert [c.status for c in report.cells] == ["ok", "ok"], report.table()
