"""inspect_loader: unequal inclusion rates, stratified shuffles and fixed-size batches drawn
without replacement (issue 41 item 5, issue 45 item 5; docs/design/deployed.md).

- A Poisson loader whose rates differ by class never gets a bracket at the mean rate: either a
  test rejects equal rates (``class_rates`` with labels, ``weighted`` without) and the sampler
  is ``unknown``, or the bracket's upper end is at the upper confidence bound of the most drawn
  example's rate, which is at least the higher rate with probability >= 1 - ALPHA / 2
  (Bonferroni over the n examples), so the truth's epsilon at the higher rate is in the range.
- A class-stratified shuffle is not ``dynamic_shuffle``: ``stratified_batches`` rejects a
  uniform permutation at an exact level (a dynamic program, checked here against simulation).
- ``torch.randperm(n)[:b]`` at every step is ``sampled_without_replacement``.

Seeds are fixed; every tolerance is derived from the statistics (said where used).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from audit.deployed.loader_inspection import (
    ALPHA,
    _log_balanced,
    _weighted,
    inspect_loader,
)

N = 200


class ClassPoisson:
    """Each example drawn independently at its class's rate at each of ``steps`` steps."""

    def __init__(self, labels: np.ndarray, rates: list[float], steps: int, seed: int) -> None:
        self.p = np.asarray(rates)[labels]
        self.steps, self.rng = steps, np.random.default_rng(seed)

    def __iter__(self):
        for _ in range(self.steps):
            yield np.flatnonzero(self.rng.random(self.p.size) < self.p).tolist()


class Stratified:
    """Every epoch: each class shuffled, batch i takes the i-th slice of every class (a fixed
    number of each class per batch), batches in a shuffled order."""

    def __init__(self, labels: np.ndarray, b: int, seed: int) -> None:
        self.labels, self.b, self.rng = labels, b, np.random.default_rng(seed)

    def __iter__(self):
        per = [self.rng.permutation(np.flatnonzero(self.labels == k))
               for k in np.unique(self.labels)]
        take = [p.size * self.b // self.labels.size for p in per]
        batches = [np.concatenate([p[i * c:(i + 1) * c] for p, c in zip(per, take, strict=True)])
                   for i in range(self.labels.size // self.b)]
        for i in self.rng.permutation(len(batches)):
            yield self.rng.permutation(batches[i]).tolist()


class WithoutReplacement:
    """``torch.randperm(n)[:b]`` at each of ``steps`` steps."""

    def __init__(self, n: int, b: int, steps: int, seed: int) -> None:
        self.n, self.b, self.steps = n, b, steps
        self.generator = torch.Generator().manual_seed(seed)

    def __iter__(self):
        for _ in range(self.steps):
            yield torch.randperm(self.n, generator=self.generator)[: self.b].tolist()


def labelled(labels: np.ndarray) -> TensorDataset:
    return TensorDataset(torch.zeros(labels.size, 2), torch.as_tensor(labels))


@functools.cache
def poisson_upper(q: float, sigma: float, steps: int, delta: float) -> float:
    """The truth's upper epsilon: the Poisson-subsampled Gaussian at rate q (adversarial)."""
    from audit.core.mechanism import Mechanism
    from audit.stats.binary import curve_epsilon
    from audit.theory import bounds_for

    grid = 10**6
    mech = Mechanism(sampler="poisson", sigma=sigma, steps_per_epoch=steps, epochs=1,
                     threat_model="adversarial", n=grid, batch_size=round(q * grid))
    return float(curve_epsilon(bounds_for(mech).upper, delta))


def test_class_dependent_poisson_with_labels_is_unknown():
    labels = np.repeat([0, 1], N // 2)
    loader = DataLoader(labelled(labels), batch_sampler=ClassPoisson(labels, [0.04, 0.06], 20, 1))
    result = inspect_loader(loader, noise_multiplier=1.0, training_epochs=1, delta=1e-5)
    assert result.sampler == "unknown"
    assert result.test("class_rates").holds  # rejected equal class rates
    assert any("unequal rates" in r and "class_rates" in r for r in result.reasons)
    assert result.theory.epsilon_upper is None  # no bracket at the mean rate
    classes = {c.label: c for c in result.rates.classes}
    assert classes[1].lower <= 0.06 <= classes[1].upper


@pytest.mark.parametrize(("rates", "epochs"), [([0.045, 0.055], 10), ([0.049, 0.051], None)])
def test_class_dependent_poisson_without_labels_gets_the_worst_rate(rates, epochs):
    """No labels (a batch sampler alone): unknown, or the range holds the truth at the higher
    rate (not at the mean 0.05). The range's upper end holds it with probability >= 1 - 5e-4
    by construction; the lower end is below it unless the mean rate's lower bound errs
    (<= ALPHA / 2). At 10 epochs the weighted test has little power against rates 1.22x apart
    (the range path is taken); drawn until the worst rate is within 25% of the mean, rates 4%
    apart are found (unknown)."""
    labels = np.repeat([0, 1], N // 2)
    sigma, steps, delta = 1.0, 20, 1e-5
    result = inspect_loader(ClassPoisson(labels, rates, steps, 2), n=N, inspection_epochs=epochs,
                            noise_multiplier=sigma, training_epochs=1, delta=delta)
    truth = poisson_upper(rates[1], sigma, steps, delta)
    if result.sampler != "unknown":
        th = result.theory
        assert th.epsilon_lower <= truth <= th.epsilon_upper, (th, truth)
        assert result.rates is not None and result.rates.worst_upper >= rates[1]
        assert "most drawn example's rate" in result.summary()
    else:
        assert result.theory.epsilon_upper is None
        assert any("unequal rates" in r for r in result.reasons)


def test_equal_rate_poisson_bracket_is_at_the_worst_example_rate():
    """Equal rates: identified as poisson; the bracket holds the truth and says which rate."""
    labels = np.repeat([0, 1], N // 2)
    sigma, steps, delta = 1.0, 20, 1e-5
    loader = DataLoader(labelled(labels), batch_sampler=ClassPoisson(labels, [0.05, 0.05],
                                                                     steps, 4))
    result = inspect_loader(loader, noise_multiplier=sigma, training_epochs=1, delta=delta)
    assert result.sampler == "poisson"
    assert not result.test("class_rates").holds
    truth = poisson_upper(0.05, sigma, steps, delta)
    assert result.theory.epsilon_lower <= truth <= result.theory.epsilon_upper
    # inspection_epochs=None drew until the worst rate's bound is within 25% of the mean
    assert result.rates.worst_upper <= 1.25 * result.rates.mean
    assert any("worst example's rate decides" in note for note in result.theory.notes)


def test_stratified_shuffle_is_not_dynamic_shuffle():
    labels = np.repeat([0, 1, 2, 3], N // 4)
    result = inspect_loader(DataLoader(labelled(labels), batch_sampler=Stratified(labels, 20, 5)))
    assert result.sampler == "unknown"
    test = result.test("stratified_batches")
    assert test.holds is False and test.p_value <= ALPHA and test.power == 1.0
    assert any(r.startswith("stratified shuffle") for r in result.reasons)


def test_uniform_shuffle_with_labels_is_still_dynamic_shuffle():
    labels = np.repeat([0, 1, 2, 3], N // 4)
    loader = DataLoader(labelled(labels), batch_size=20, shuffle=True,
                        generator=torch.Generator().manual_seed(6))
    result = inspect_loader(loader)
    assert result.sampler == "dynamic_shuffle"
    assert result.test("stratified_batches").holds is True


def test_balanced_probability_matches_simulation():
    """The exact level's dynamic program against 20000 uniform permutations: n = 20, one class
    of 8, five batches of 4 (the last unconstrained). The frequency is within 4 binomial sd of
    the program's probability (a 6e-5 two-sided chance for a correct program)."""
    n, nk, b = 20, 8, 4
    sizes = np.full(4, b)
    mu = sizes * nk / n
    p = math.exp(_log_balanced(sizes, n, nk, mu))
    rng = np.random.default_rng(7)
    reps = 20_000
    member = np.zeros(n, dtype=bool)
    member[:nk] = True
    hits = 0
    for _ in range(reps):
        counts = member[rng.permutation(n)][: 4 * b].reshape(4, b).sum(axis=1)
        hits += bool(np.all(np.abs(counts - mu) <= 1))
    assert abs(hits / reps - p) <= 4 * math.sqrt(p * (1 - p) / reps), (hits / reps, p)


def test_randperm_prefix_is_sampled_without_replacement():
    result = inspect_loader(WithoutReplacement(N, 20, 10, 8), n=N, noise_multiplier=1.0,
                            training_epochs=2, delta=1e-5)
    assert result.sampler == "sampled_without_replacement", result.reasons
    assert result.batch_size == 20 and result.test("fixed_sizes").holds
    assert not result.test("once_per_epoch").holds and result.test("independence").holds
    from audit.core.mechanism import Mechanism
    from audit.theory.sampled_without_replacement import sampled_without_replacement_epsilon_at

    th = result.theory
    mech = Mechanism(sampler="sampled_without_replacement", sigma=1.0, steps_per_epoch=20,
                     epochs=1, threat_model="adversarial", n=N, batch_size=20)
    # by draws: the upper end at the worst rate's bound (n' <= n), so at least the theory's at n
    assert th.epsilon_upper >= sampled_without_replacement_epsilon_at(mech, 1e-5, "upper")
    assert th.epsilon_lower == pytest.approx(
        sampled_without_replacement_epsilon_at(mech, 1e-5, "lower"), rel=1e-9)
    assert "consistent with sampled_without_replacement" in result.summary()


def test_fixed_size_weighted_statistic_has_the_chi_square_mean():
    """Fixed sizes: the rescaled statistic's mean is n - 1 (the chi-square's); the sample mean
    over R draws is within 4 sd, sd = sqrt(2 (n - 1) / R) (its variance is the chi-square's
    up to O(1/S))."""
    n, b, steps, reps = 50, 5, 100, 400
    rng = np.random.default_rng(9)
    xs = []
    for _ in range(reps):
        epoch = [rng.choice(n, b, replace=False) for _ in range(steps)]
        xs.append(_weighted([epoch], n, False, False, b / n, True)[0].statistic)
    assert abs(np.mean(xs) - (n - 1)) <= 4 * math.sqrt(2 * (n - 1) / reps)


def test_labels_argument_is_checked():
    with pytest.raises(ValueError, match="labels: one class label per example"):
        inspect_loader(WithoutReplacement(N, 20, 10, 8), n=N, labels=[0, 1])


def test_harness_without_replacement_loader_is_identified_by_type():
    """The harness's own loader (EpochBatches with its law) is identified by type, and its
    bracket is the theory's at the loader's n (no worst-rate widening: the type states q)."""
    from audit.core.mechanism import Mechanism
    from audit.plugins.torch_loaders import EpochBatches
    from audit.sampling.sampled_without_replacement import SampledWithoutReplacementSampler
    from audit.theory.sampled_without_replacement import sampled_without_replacement_epsilon_at

    rng = np.random.default_rng(10)
    epoch = SampledWithoutReplacementSampler(n=N, batch_size=20, epochs=1)
    batches = EpochBatches(lambda: epoch.sample(rng, 1)[0], epoch.steps_per_epoch,
                           "sampled_without_replacement")
    result = inspect_loader(batches, n=N, inspection_epochs=20, noise_multiplier=1.0,
                            training_epochs=2, delta=1e-5)
    assert result.identification.how == "type"
    assert result.sampler == "sampled_without_replacement", result.reasons
    mech = Mechanism(sampler="sampled_without_replacement", sigma=1.0,
                     steps_per_epoch=2 * epoch.steps_per_epoch, epochs=1,
                     threat_model="adversarial", n=N, batch_size=20)
    assert result.theory.epsilon_upper == pytest.approx(
        sampled_without_replacement_epsilon_at(mech, 1e-5, "upper"), rel=1e-9)
    assert result.theory.epsilon_lower <= result.theory.epsilon_upper


@pytest.mark.parametrize(("classes", "steps"), [(2, 10), (4, 100)])
def test_class_rates_level_under_equal_rates(classes, steps):
    """Equal rates (Poisson at q = 0.1, n = 40): the class_rates test rejects at most its level.
    K = 2 is exact (hypergeometric given the total), K = 4 the chi-square at >= 50 expected per
    class. A test of level <= ALPHA rejects a count of R null draws stochastically below
    Binomial(R, ALPHA), above binom.isf(1e-3, R, ALPHA) with probability < 1e-3."""
    from scipy.stats import binom

    from audit.deployed.loader_inspection import _inclusion_rates

    n, q, reps = 40, 0.1, 1000
    labels = np.arange(n) % classes
    rng = np.random.default_rng(11 + classes)
    rejected = applied = 0
    for _ in range(reps):
        epoch = [np.flatnonzero(rng.random(n) < q) for _ in range(steps)]
        test = _inclusion_rates([epoch], n, labels, (0.0, 1.0))[1]
        applied += test.holds is not None
        rejected += bool(test.holds)
    assert applied == reps
    assert rejected <= binom.isf(1e-3, reps, ALPHA)
