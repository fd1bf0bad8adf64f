"""Laws of the five batch samplers (Chua et al. 2024, arXiv 2411.04205, §2).

Statistical checks use fixed seeds and chi-square / binomial tests at significance
P_MIN = 1e-3: under a correct sampler each check fails with probability 1e-3 for a random
seed, so the ~20 checks here would, for a random seed, all pass with probability
>= 1 - 20e-3 = 0.98; with the fixed seeds they are deterministic. Cells of a chi-square
test are pooled until each expects at least 5 counts (the usual validity condition).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from audit.core.names import SAMPLERS
from audit.sampling.batches import (
    PADDING,
    _uniform_subsets,
    batch_size_pmf,
    participation_counts,
    participation_pmf,
)
from audit.sampling.factory import make_sampler

P_MIN = 1e-3
FIXED = ("deterministic", "persistent_shuffle", "dynamic_shuffle")


def chi_square_p(observed: np.ndarray, expected_probabilities: np.ndarray) -> float:
    """p-value of a chi-square goodness-of-fit test, pooling cells that expect < 5."""
    observed = np.asarray(observed, dtype=float)
    expected = np.asarray(expected_probabilities, dtype=float) * observed.sum()
    order = np.argsort(expected)
    pooled_obs, pooled_exp, acc_o, acc_e = [], [], 0.0, 0.0
    for i in order:
        acc_o += observed[i]
        acc_e += expected[i]
        if acc_e >= 5:
            pooled_obs.append(acc_o)
            pooled_exp.append(acc_e)
            acc_o = acc_e = 0.0
    if acc_e > 0:
        pooled_obs[-1] += acc_o
        pooled_exp[-1] += acc_e
    assert len(pooled_obs) >= 2, "too few cells for a chi-square test"
    return float(stats.chisquare(pooled_obs, pooled_exp).pvalue)


def draw(name: str, trials: int, seed: int = 0, **kw) -> np.ndarray:
    defaults = {"n": 60, "batch_size": 6, "epochs": 3}
    defaults.update(kw)
    if name == "truncated_poisson":
        defaults.setdefault("max_batch_size", 8)
    return make_sampler(name, **defaults).sample(np.random.default_rng(seed), trials)


@pytest.mark.parametrize("name", SAMPLERS)
def test_shape_dtype_and_steps(name):
    sampler = make_sampler(
        name,
        n=60,
        batch_size=6,
        epochs=3,
        max_batch_size=8 if name == "truncated_poisson" else None,
    )
    assert sampler.steps_per_epoch == 10 and sampler.total_steps == 30
    batches = sampler.sample(np.random.default_rng(1), 7)
    assert batches.shape[:2] == (7, 30)
    assert np.issubdtype(batches.dtype, np.integer)
    assert batches.min() >= PADDING and batches.max() < 60
    if name in FIXED:
        assert batches.shape[2] == 6 and (batches != PADDING).all()
    if name == "truncated_poisson":
        assert batches.shape[2] == 8
    # indices within one batch are distinct
    real = np.sort(batches, axis=2)
    assert not ((real[..., 1:] == real[..., :-1]) & (real[..., 1:] != PADDING)).any()


@pytest.mark.parametrize("name", SAMPLERS)
def test_zero_trials(name):
    assert draw(name, 0).shape[0] == 0


@pytest.mark.parametrize("name", FIXED)
def test_each_example_exactly_once_per_epoch(name):
    batches = draw(name, 50)
    epochs = batches.reshape(50, 3, 60)
    assert (np.sort(epochs, axis=2) == np.arange(60)).all()


def test_deterministic_is_index_order_every_epoch():
    batches = draw("deterministic", 2)
    expected = np.tile(np.arange(60).reshape(10, 6), (3, 1))
    assert (batches == expected).all()


def step_of_each_example(batches: np.ndarray, n: int, steps_per_epoch: int) -> np.ndarray:
    """(trials, epochs, n): the step (within its epoch) at which each example is used."""
    trials, total, b = batches.shape
    epochs = total // steps_per_epoch
    steps = np.broadcast_to(np.arange(steps_per_epoch)[:, None], (steps_per_epoch, b))
    out = np.empty((trials, epochs, n), dtype=np.int64)
    for e in range(epochs):
        block = batches[:, e * steps_per_epoch : (e + 1) * steps_per_epoch].reshape(trials, -1)
        np.put_along_axis(out[:, e], block, np.broadcast_to(steps.ravel(), block.shape), axis=1)
    return out


def test_persistent_keeps_each_examples_step():
    steps = step_of_each_example(draw("persistent_shuffle", 200), 60, 10)
    assert (steps == steps[:, :1]).all()


def test_dynamic_redraws_each_examples_step():
    """Same step in epochs 1 and 2 with probability exactly 1/T = 0.1 under independence."""
    steps = step_of_each_example(draw("dynamic_shuffle", 400), 60, 10)
    same = int((steps[:, 1] == steps[:, 0]).sum())
    total = steps[:, 0].size
    assert stats.binomtest(same, total, 0.1).pvalue > P_MIN


@pytest.mark.parametrize("name", ("persistent_shuffle", "dynamic_shuffle"))
def test_an_examples_step_is_uniform(name):
    steps = step_of_each_example(draw(name, 3000, seed=2), 60, 10)
    for example in (0, 37):
        observed = np.bincount(steps[:, 0, example], minlength=10)
        assert chi_square_p(observed, np.full(10, 0.1)) > P_MIN


def test_dynamic_epochs_are_independent():
    """Joint law of example 0's steps in epochs 0 and 1 is uniform on T x T."""
    steps = step_of_each_example(draw("dynamic_shuffle", 5000, seed=3), 60, 10)
    joint = np.bincount(steps[:, 0, 0] * 10 + steps[:, 1, 0], minlength=100)
    assert chi_square_p(joint, np.full(100, 0.01)) > P_MIN


@pytest.mark.parametrize("name", ("poisson", "truncated_poisson"))
def test_batch_sizes_follow_their_law(name):
    sampler = make_sampler(
        name,
        n=200,
        batch_size=10,
        epochs=1,
        max_batch_size=12 if name == "truncated_poisson" else None,
    )
    batches = sampler.sample(np.random.default_rng(4), 300)
    sizes = (batches != PADDING).sum(axis=2).ravel()
    support, pmf = batch_size_pmf(sampler)
    observed = np.bincount(sizes, minlength=len(support))[: len(support)]
    assert observed.sum() == sizes.size
    assert chi_square_p(observed, pmf) > P_MIN


def test_poisson_slots_equal_largest_batch():
    batches = draw("poisson", 100)
    sizes = (batches != PADDING).sum(axis=2)
    assert batches.shape[2] == sizes.max()


def test_truncated_full_batches_have_probability_of_binomial_tail():
    n, b, cap = 200, 10, 10
    sampler = make_sampler("truncated_poisson", n=n, batch_size=b, max_batch_size=cap)
    batches = sampler.sample(np.random.default_rng(5), 400)
    sizes = (batches != PADDING).sum(axis=2).ravel()
    assert batches.shape[2] == cap and sizes.max() <= cap
    full = int((sizes == cap).sum())
    assert stats.binomtest(full, sizes.size, stats.binom(n, b / n).sf(cap - 1)).pvalue > P_MIN


def test_truncated_kept_subset_is_uniform():
    """n=6, q=1/2, B=2: every full batch is a uniform pair of {0..5} (15 pairs)."""
    sampler = make_sampler("truncated_poisson", n=6, batch_size=3, max_batch_size=2)
    batches = sampler.sample(np.random.default_rng(6), 3000).reshape(-1, 2)
    full = batches[(batches != PADDING).all(axis=1)]
    pairs = {p: i for i, p in enumerate(itertools.combinations(range(6), 2))}
    codes = np.array([pairs[tuple(row)] for row in np.sort(full, axis=1)])
    assert chi_square_p(np.bincount(codes, minlength=15), np.full(15, 1 / 15)) > P_MIN


@pytest.mark.parametrize(("n", "q"), [(5, 0.6), (5, 0.2)])
def test_poisson_membership_is_independent_bernoulli(n, q):
    """The whole set law: P(S) = q^|S| (1-q)^(n-|S|) over all 2^n subsets."""
    sampler = make_sampler("poisson", n=n, batch_size=round(q * n))
    batches = sampler.sample(np.random.default_rng(7), 4000)
    rows = batches.reshape(-1, batches.shape[2])
    codes = np.zeros(len(rows), dtype=np.int64)
    for j in range(rows.shape[1]):
        real = rows[:, j] != PADDING
        codes[real] |= 1 << rows[real, j].astype(np.int64)
    sizes = np.array([bin(s).count("1") for s in range(2**n)])
    expected = q**sizes * (1 - q) ** (n - sizes)
    assert chi_square_p(np.bincount(codes, minlength=2**n), expected) > P_MIN


@pytest.mark.parametrize(("n", "k"), [(8, 2), (6, 3), (7, 5)])
def test_uniform_subsets_given_size(n, k):
    """Both paths (rejection for k^2 <= 2n, permutation otherwise) give uniform k-subsets."""
    subsets = _uniform_subsets(np.random.default_rng(8), np.full(6000, k), n)
    index = {c: i for i, c in enumerate(itertools.combinations(range(n), k))}
    codes = np.array([index[tuple(row)] for row in subsets])
    assert (
        chi_square_p(np.bincount(codes, minlength=len(index)), np.full(len(index), 1 / len(index)))
        > P_MIN
    )


@pytest.mark.parametrize("name", SAMPLERS)
def test_canary_participations(name):
    sampler = make_sampler(
        name,
        n=60,
        batch_size=6,
        epochs=3,
        max_batch_size=7 if name == "truncated_poisson" else None,
    )
    counts = participation_counts(sampler.sample(np.random.default_rng(9), 3000), example=0)
    support, pmf = participation_pmf(sampler)
    if support.size == 1:  # every example once per epoch (the fixed-size ones, balls-and-bins)
        assert (counts == 3).all() and support.tolist() == [3]
    else:
        observed = np.bincount(counts, minlength=len(support))[: len(support)]
        assert observed.sum() == counts.size
        assert chi_square_p(observed, pmf) > P_MIN


def test_same_seed_same_draw_and_different_seed_differs():
    a, b, c = (
        draw("dynamic_shuffle", 5, seed=1),
        draw("dynamic_shuffle", 5, seed=1),
        draw("dynamic_shuffle", 5, seed=2),
    )
    assert (a == b).all() and not (a == c).all()
