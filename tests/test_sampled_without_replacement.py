"""``sampled_without_replacement``: a uniform b-subset at each step, independently (Lebeda et al.
2024, arXiv 2405.20769). Its draws, simulator law, registry entries and curves, each curve
against an independent reference in a small case (docs/design/samplers.md, docs/design/theory.md).

Statistical checks use fixed seeds and chi-square tests at significance P_MIN = 1e-3 (each
fails with probability 1e-3 under a correct sampler for a random seed; cells pooled until each
expects >= 5, :func:`tests.test_samplers.chi_square_p`); mean checks use 5 standard errors
(two-sided 5.7e-7 under a Gaussian approximation of the mean of >= 1e5 Bernoullis).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import integrate, stats

from audit.core.mechanism import Mechanism
from audit.sampling import get_sampler, sampler_names, validate
from audit.sampling.batches import participation_counts, participation_pmf
from audit.sampling.factory import make_sampler
from audit.theory.poisson import poisson_lower, poisson_upper
from audit.theory.sampled_without_replacement import (
    EpsilonBracket,
    mixture_pair_lower,
    rdp_epsilon,
    revealed_delta,
    revealed_epsilon,
    revealed_upper,
    sampled_without_replacement_bounds_for,
    sampled_without_replacement_bracket,
)
from tests.test_samplers import chi_square_p

NAME = "sampled_without_replacement"
P_MIN = 1e-3


# ---------------------------------------------------------------------------- draws


def test_fixed_size_no_repeats_and_range():
    batches = make_sampler(NAME, n=50, batch_size=7, epochs=2).sample(np.random.default_rng(0), 40)
    assert batches.shape == (40, 14, 7) and batches.dtype == np.int32  # T = round(50/7) = 7
    assert batches.min() >= 0 and batches.max() < 50  # no padding: every batch has b examples
    ordered = np.sort(batches, axis=2)
    assert (ordered[..., 1:] > ordered[..., :-1]).all()  # b distinct examples
    # large b (b^2 > 2n: the permutation path) too
    big = make_sampler(NAME, n=20, batch_size=15).sample(np.random.default_rng(1), 30)
    assert (np.diff(np.sort(big, axis=2), axis=2) > 0).all() and big.shape == (30, 1, 15)


def test_batches_uniform_and_independent_across_steps():
    """The pair (batch at step 1, batch at step 2) is uniform on C(5,2)^2 = 100 cells: each
    batch a uniform 2-subset and the two independent (a chi-square test of the joint law)."""
    n, b, trials = 5, 2, 20_000
    batches = make_sampler(NAME, n=n, batch_size=b, epochs=1).sample(
        np.random.default_rng(2), trials
    )  # T = round(5/2) = 2 steps
    index = {c: i for i, c in enumerate(itertools.combinations(range(n), b))}
    codes = np.array([[index[tuple(row)] for row in trial] for trial in batches.tolist()])
    joint = codes[:, 0] * len(index) + codes[:, 1]
    cells = len(index) ** 2
    assert chi_square_p(np.bincount(joint, minlength=cells), np.full(cells, 1 / cells)) > P_MIN


def test_participations_binomial():
    sampler = make_sampler(NAME, n=60, batch_size=6, epochs=3)
    counts = participation_counts(sampler.sample(np.random.default_rng(3), 4000), example=0)
    support, pmf = participation_pmf(sampler)
    assert np.allclose(pmf, stats.binom(30, 0.1).pmf(support))
    observed = np.bincount(counts, minlength=len(support))[: len(support)]
    assert chi_square_p(observed, pmf) > P_MIN


# ---------------------------------------------------------------------------- registry


def test_registered_with_aliases_and_every_stage():
    from attacks.defaults import default_attack_for
    from audit.theory.registry import bounds_under, theory_for

    assert NAME in sampler_names()
    for alias in ("wor", "without_replacement", "fixed_size"):
        assert get_sampler(alias).name == NAME
        assert validate(Mechanism(alias, sigma=1.0, n=20, batch_size=4)).sampler == NAME
    with pytest.raises(ValueError, match=r"Did you mean 'wor' \(an alias of "):
        get_sampler("wro")
    theory = theory_for(NAME)
    assert callable(theory.bounds) and callable(theory.adjacency_bounds)
    assert default_attack_for(NAME, "isolated") == "poisson_lr"
    assert default_attack_for(NAME, "adversarial") == "fixed_size_independent_lr"
    m = Mechanism(NAME, sigma=1.0, steps_per_epoch=20, n=200, batch_size=10)
    with pytest.raises(ValueError, match="adjacency='add_remov' is not valid"):
        bounds_under(m, "add_remov")
    with pytest.raises(ValueError, match="no theory under adjacency='add_remove'"):
        bounds_under(Mechanism("poisson", sigma=1.0, steps_per_epoch=20), "add_remove")


# ---------------------------------------------------------------------------- simulation


@pytest.mark.parametrize("threat", ["isolated", "adversarial"])
def test_simulator_law(threat):
    """Per step, IN reads 2 S (adversarial) or S (isolated), OUT S or 0, S ~ Bernoulli(q):
    with sigma tiny the observation is the signal; its mean is checked to 5 standard errors."""
    from audit.training.simulate import simulate_observations

    q, trials, steps = 0.1, 4000, 50
    m = Mechanism(NAME, sigma=1e-6, steps_per_epoch=steps, n=100, batch_size=10,
                  threat_model=threat)
    obs = simulate_observations(m, trials, np.random.default_rng(4))
    y_in, y_out = (np.rint(np.asarray(a)) for a in obs.pair("all_iterates"))
    size = trials * steps
    se = math.sqrt(q * (1 - q) / size)
    scale_in, scale_out = (2, 1) if threat == "adversarial" else (1, 0)
    assert set(np.unique(y_in)) <= {0, scale_in}
    assert abs((y_in / scale_in).mean() - q) < 5 * se
    if scale_out:
        assert set(np.unique(y_out)) <= {0, 1} and abs(y_out.mean() - q) < 5 * se
    else:
        assert (y_out == 0).all()


def test_tiny_simulated_audit_stays_below_the_theory():
    """A tiny simulated audit of the adversarial pair (its own LR attack): the sound eps lower
    bound lies below the theory's upper curve."""
    from attacks import default_attack, get_attack
    from audit.stats.binary import epsilon_lower_bound
    from audit.training.simulate import simulate_observations

    m = Mechanism(NAME, sigma=0.8, steps_per_epoch=30, n=300, batch_size=30)
    obs = simulate_observations(m, 3000, np.random.default_rng(5))
    s_in, s_out = get_attack(default_attack(m)).scores(obs)
    bound = epsilon_lower_bound(s_in, s_out, delta=1e-5, confidence=0.95, threshold="split",
                                seed=0)
    upper = revealed_epsilon(1e-5, 0.1, 0.8, 30)
    assert 0 < bound.epsilon_lb < upper


# ---------------------------------------------------------------------------- curves


def _reference_revealed_epsilon(delta, q, sigma, steps, shift=1.0, d=1e-4):
    """dp_accounting's own pessimistic PLD of the revealed pair: one step is loss 0 with
    probability 1 - q, else the Gaussian loss N(mu^2/2, mu^2), mu = shift/sigma, rounded UP to
    the grid d (pessimistic), self-composed by FFT; an independent route to the closed form."""
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    mu = shift / sigma
    top = mu * mu / 2 + 20 * mu
    ks = np.arange(math.floor((mu * mu / 2 - 20 * mu) / d), math.ceil(top / d) + 1)
    law = stats.norm(mu * mu / 2, mu)
    mass = np.diff(law.cdf(np.concatenate(([ks[0] - 1], ks)) * d))  # ((k-1) d, k d] -> k
    pmf = {int(k): q * float(m) for k, m in zip(ks, mass, strict=True) if m > 0}
    pmf[0] = pmf.get(0, 0.0) + (1 - q)
    pld = pld_lib.PrivacyLossDistribution.create_from_rounded_probability(pmf, 0.0, d)
    return float(pld.self_compose(steps).get_epsilon_for_delta(delta))


@pytest.mark.parametrize(("q", "sigma", "steps", "shift"), [(0.05, 1.0, 60, 1.0),
                                                             (0.2, 2.0, 20, 2.0)])
def test_revealed_upper_matches_an_independent_pld(q, sigma, steps, shift):
    """The closed form against dp_accounting's FFT composition of the same pair: the reference
    rounds each step's loss up by < d, so it lies above the exact eps by at most steps * d."""
    d = 1e-4
    for delta in (1e-3, 1e-6):
        exact = revealed_epsilon(delta, q, sigma, steps, shift)
        reference = _reference_revealed_epsilon(delta, q, sigma, steps, shift, d)
        assert exact - 1e-6 <= reference <= exact + steps * d + 1e-6
        curve = revealed_upper(q, sigma, steps, delta_shift=shift)
        # the envelope of supporting lines is below the true curve: its eps is at least exact,
        # and close (3000 lines)
        assert exact - 1e-9 <= float(curve.epsilon(delta)) <= exact * 1.01 + 1e-3


def _mixture_delta(eps, q, a, a_prime, sigma, steps):
    """delta(eps) of the pair (1-q) N(0) + q N(a) vs (1-q) N(0) + q N(a'), both orders (max),
    composed ``steps`` (1 or 2) times, by numerical integration (scipy quad / a fine grid)."""
    def pdf(y, mean):
        return stats.norm.pdf(y, mean, sigma)

    def p(y):
        return (1 - q) * pdf(y, 0.0) + q * pdf(y, a)

    def r(y):
        return (1 - q) * pdf(y, 0.0) + q * pdf(y, a_prime)

    lo, hi = min(0, a, a_prime) - 12 * sigma, max(0, a, a_prime) + 12 * sigma
    out = 0.0
    for f, g in ((p, r), (r, p)):
        if steps == 1:
            def excess(y, f=f, g=g):
                return max(f(y) - math.exp(eps) * g(y), 0.0)

            value = integrate.quad(excess, lo, hi, limit=400, epsabs=1e-14, epsrel=1e-10)[0]
        else:
            y = np.linspace(lo, hi, 4001)
            w = np.full(y.size, y[1] - y[0])
            w[[0, -1]] /= 2  # trapezoid weights
            fy, gy = f(y), g(y)
            value = float(w @ np.maximum(np.outer(fy, fy) - math.exp(eps) * np.outer(gy, gy),
                                         0.0) @ w)
        out = max(out, value)
    return out


@pytest.mark.parametrize(("pair", "steps"), [((2.0, 1.0), 1), ((2.0, 1.0), 2), ((1.0, -1.0), 2)])
def test_explicit_pairs_match_numerical_integration(pair, steps):
    """The achieved curve of an explicit pair against the direct integral of its privacy
    profile: never above it (achieved: a dominated pair; 1e-9 for the quadrature), and below
    it by at most what a loss lattice of spacing d costs, delta(eps + steps d) (checked as
    delta_lower(eps) >= reference(eps + 2 steps d) - 1e-6, the grid integral's error)."""
    q, sigma = 0.3, 1.0
    curve = mixture_pair_lower(q, *pair, sigma, steps)
    d = 1e-4
    for eps in (0.5, 1.5):
        got = float(curve.delta(np.array([eps]))[0])
        assert got <= _mixture_delta(eps, q, *pair, sigma, steps) + 1e-6
        assert got >= _mixture_delta(eps + 2 * steps * d, q, *pair, sigma, steps) - 1e-6


def test_zero_out_isolated_is_poisson_and_adversarial_refutes_poisson():
    q, sigma, steps, delta = 0.01, 0.8, 100, 1e-5
    m = Mechanism(NAME, sigma=sigma, steps_per_epoch=steps, n=1000, batch_size=10,
                  threat_model="isolated")
    iso = sampled_without_replacement_bounds_for(m)
    poisson_up = float(poisson_upper(q, sigma, steps).epsilon(delta))
    assert float(iso.upper.epsilon(delta)) == pytest.approx(poisson_up, rel=1e-12)
    assert float(iso.lower.epsilon(delta)) == pytest.approx(
        float(poisson_lower(q, sigma, steps).epsilon(delta)), rel=1e-12
    )
    adv = sampled_without_replacement_bounds_for(m.with_(threat_model="adversarial"))
    lower, upper = float(adv.lower.epsilon(delta)), float(adv.upper.epsilon(delta))
    # a Poisson accountant's eps (its own upper curve) is below the achieved eps: unsound
    assert poisson_up < 2.0 < 8.0 < lower <= upper
    # the upper curve is the max of two guarantees: its eps is the smaller of theirs (to the
    # envelopes' grids, 1%)
    best = min(revealed_epsilon(delta, q, sigma, steps), rdp_epsilon(delta, 1000, 10, sigma, steps))
    assert best - 1e-9 <= upper <= best * 1.01


def test_rdp_with_the_noise_multiplier_as_is_under_reports():
    """dp_accounting's RDP of SampledWithoutReplacementDpEvent under REPLACE_ONE with the noise
    multiplier sigma (not sigma / 2: replace-one moves a clipped sum by 2 C) is below the eps the
    W pair achieves: the accountant a user would write under-reports (2.60 against 8.85 here)."""
    import dp_accounting
    from dp_accounting import rdp

    n, b, sigma, steps, delta = 1000, 10, 0.8, 100, 1e-5
    accountant = rdp.RdpAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE
    )
    accountant.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.SampledWithoutReplacementDpEvent(n, b, dp_accounting.GaussianDpEvent(sigma)),
        steps,
    ))
    as_is = accountant.get_epsilon(delta)
    bracket = sampled_without_replacement_bracket(n, b, sigma, steps, delta)
    assert as_is < 3.0 < 8.0 < bracket.lower <= bracket.upper
    assert bracket.upper <= rdp_epsilon(delta, n, b, sigma, steps)


def test_add_remove_is_poisson_at_half_the_noise_and_replace_one_brackets():
    q, sigma, steps, delta = 0.05, 2.0, 50, 1e-5
    bracket = sampled_without_replacement_bracket(200, 10, sigma, steps, delta,
                                                  adjacency="add_remove")
    assert isinstance(bracket, EpsilonBracket)
    half = float(poisson_upper(q, sigma / 2, steps).epsilon(delta))
    assert bracket.upper == pytest.approx(half, rel=1e-12)
    assert bracket.lower == pytest.approx(half, rel=1e-3)
    rep = sampled_without_replacement_bracket(200, 10, sigma, steps, delta,
                                              adjacency="replace_one")
    assert bracket.lower - 1e-3 <= rep.lower <= rep.upper  # replace-one contains add/remove's pair
    zero = sampled_without_replacement_bracket(200, 10, sigma, steps, delta)
    assert zero.lower <= zero.upper <= rep.upper  # zero-out is a special case of replace-one
    with pytest.raises(ValueError, match="needs batch_size < n"):
        sampled_without_replacement_bracket(10, 10, sigma, steps, delta, adjacency="add_remove")


def test_lower_curves_below_dp_accounting_rdp_replace_one():
    """dp_accounting's RDP of SampledWithoutReplacementDpEvent under replace-one is a guarantee
    (loose): no achieved eps may exceed it. Its Gaussian is taken at noise multiplier sigma / 2
    (replace-one moves the sum by up to 2 C), the safe reading of its convention."""
    import dp_accounting
    from dp_accounting import rdp

    n, b, sigma, steps, delta = 200, 10, 2.0, 50, 1e-5
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.SampledWithoutReplacementDpEvent(
            n, b, dp_accounting.GaussianDpEvent(sigma / 2)
        ),
        steps,
    )
    accountant = rdp.RdpAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE
    )
    accountant.compose(event)
    rdp_eps = accountant.get_epsilon(delta)
    for adjacency in ("zero_out", "replace_one"):
        bracket = sampled_without_replacement_bracket(n, b, sigma, steps, delta,
                                                      adjacency=adjacency)
        assert bracket.lower <= rdp_eps, (adjacency, bracket, rdp_eps)


def test_revealed_delta_is_a_probability_sum():
    """At eps = 0 the revealed pair's delta is sum_k w_k (2 Phi(mu_k / 2) - 1), k = 0 excluded."""
    q, sigma, steps = 0.1, 1.0, 10
    k = np.arange(steps + 1)
    w = stats.binom(steps, q).pmf(k)
    expected = float(w @ (2 * stats.norm.cdf(np.sqrt(k) / sigma / 2) - 1))
    assert float(revealed_delta(0.0, q, sigma, steps)[0]) == pytest.approx(expected, rel=1e-12)


def test_spec_resolves_the_aliases():
    from audit.run.spec import parse_spec
    from tests.conftest import TINY_SPEC

    spec = parse_spec({**TINY_SPEC, "samplers": ["wor", "poisson"]})
    assert tuple(spec.experiment.samplers) == (NAME, "poisson")
    with pytest.raises(ValueError, match="lists a name twice"):
        parse_spec({**TINY_SPEC, "samplers": ["wor", NAME]})


def test_opacus_loader_draws_the_law():
    """The batches the opacus plug-in trains on (n 20, b 4, T 5, 400 epochs): every batch b
    distinct examples; example 0 in a step's batch with frequency q = 0.2 (within 5 standard
    errors), and in two batches of one epoch with probability 1 - (1-q)^5 - 5 q (1-q)^4 = 0.26
    (a shuffle: 0), within 5 standard errors."""
    pytest.importorskip("opacus", reason="the 'accountants' extra (opacus) is not installed")
    import torch
    from torch.utils.data import TensorDataset

    from audit.plugins.opacus import make_private

    n, b, epochs = 20, 4, 400
    dataset = TensorDataset(torch.zeros(n, 1), torch.arange(n))
    _, _, _, loader = make_private(
        torch.nn.Linear(1, 2), dataset, sampler="wor", batch_size=b, epochs=epochs, lr=0.1,
        sigma=1.0, clip=1.0, seeds=(0, 1, 2, 3),
    )
    batches = np.array([[index.numpy() for _, index in loader] for _ in range(epochs)])
    assert batches.shape == (epochs, 5, b)
    assert (np.diff(np.sort(batches, axis=2), axis=2) > 0).all()
    inside = (batches == 0).any(axis=2)  # (epochs, T)
    q = b / n
    assert abs(inside.mean() - q) < 5 * math.sqrt(q * (1 - q) / inside.size)
    twice = 1 - (1 - q) ** 5 - 5 * q * (1 - q) ** 4
    twice_se = math.sqrt(twice * (1 - twice) / epochs)
    assert abs((inside.sum(axis=1) >= 2).mean() - twice) < 5 * twice_se


def test_engine_training_reads_the_simulator_law(training_config):
    """Real DP-SGD (the engine, logistic regression on digits, n 100, b 10, Dirac canary,
    adversarial co-batch, sigma 1e-4): each step's observation is exactly 2 S_t IN and S_t OUT,
    S_t the canary's inclusion in the drawn batch, as :meth:`SampledWithoutReplacement.
    simulate_signal` draws it (to 1e-2, far above the noise 1e-4 and float32 rounding)."""
    import torch

    from audit.training.engine import train
    from audit.training.trials import build_problem

    config = training_config(sampler="wor", threat_model="adversarial", sigma=1e-4)
    assert config.sampler == NAME
    sampler = make_sampler(NAME, n=config.n, batch_size=config.batch_size, epochs=config.epochs)
    trials = 200
    batches = sampler.sample(np.random.default_rng(1), trials)
    canary_in = np.arange(trials) % 2 == 0
    out = train(build_problem(config), batches, canary_in,
                [(torch.Generator().manual_seed(0), trials)], route="compiled")
    y, included = np.asarray(out.y), (batches == 0).any(axis=2)
    np.testing.assert_allclose(y[canary_in], 2.0 * included[canary_in], atol=1e-2)
    np.testing.assert_allclose(y[~canary_in], 1.0 * included[~canary_in], atol=1e-2)
    assert included.any() and not included.all()


@pytest.mark.parametrize("adjacency", ["zero_out", "add_remove", "replace_one"])
@pytest.mark.parametrize("threat", ["isolated", "adversarial"])
def test_every_adjacency_brackets_through_the_registry(adjacency, threat):
    """bounds_under gives, for each adjacency and threat model, a guarantee at or above the
    achieved curve (eps at two deltas; 1e-6 for the curves' own rounding), labelled with the
    sampler and threat model."""
    from audit.theory.registry import bounds_under

    m = Mechanism(NAME, sigma=1.5, steps_per_epoch=20, n=100, batch_size=10, threat_model=threat)
    bounds = bounds_under(m, adjacency)
    assert bounds.upper.sampler == bounds.lower.sampler == NAME
    assert bounds.upper.threat_model == bounds.lower.threat_model == threat
    for delta in (1e-3, 1e-8):
        lower, upper = (float(c.epsilon(delta)) for c in (bounds.lower, bounds.upper))
        assert 0 < lower <= upper + 1e-6 < math.inf
