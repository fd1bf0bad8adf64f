"""Batches drawn by torch (audit.training.device_batches), tested on CPU tensors: the layout of the
numpy samplers and their laws.

Statistics: fixed seeds; chi-square and binomial checks at level ALPHA = 1e-6 each (about ten
checks: a correct sampler fails one with probability 1e-5); the power of each is stated.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from audit.sampling.factory import make_sampler
from audit.training import device_batches
from audit.training.engine import train
from audit.training.trials import build_problem

ALPHA = 1e-6
Z = stats.norm.isf(ALPHA / 2)


def _draw(name: str, trials: int, seed: int = 0, **options) -> tuple[np.ndarray, object]:
    sampler = make_sampler(name, **options)
    batches = device_batches.sample(sampler, torch.Generator().manual_seed(seed), trials)
    assert batches.dtype == torch.int32 and batches.shape[:2] == (trials, sampler.total_steps)
    return batches.numpy(), sampler


def _check_layout(batches: np.ndarray, n: int) -> np.ndarray:
    """Ascending real indices in [0, n), then -1 padding; returns the batch sizes."""
    real = batches >= 0
    assert ((batches >= -1) & (batches < n)).all()
    assert (real[..., :-1] >= real[..., 1:]).all()  # padding only after the real slots
    values = np.where(real, batches, n + np.arange(batches.shape[-1]))
    assert (np.diff(values, axis=-1) > 0).all()  # strictly ascending: no repeats
    return real.sum(-1)


def _chi_square_ok(counts: np.ndarray, probabilities: np.ndarray) -> bool:
    """Pearson's chi-square of counts against a law (cells with expected count < 5 pooled)."""
    expected = probabilities * counts.sum()
    keep = expected >= 5
    observed = np.append(counts[keep], counts[~keep].sum())
    expected = np.append(expected[keep], expected[~keep].sum())
    if expected[-1] == 0:
        observed, expected = observed[:-1], expected[:-1]
    return stats.chisquare(observed, expected).pvalue >= ALPHA


def test_poisson_masks_have_the_binomial_size_and_uniform_inclusion():
    """4000 runs x 20 steps of n = 200, q = 0.05: batch sizes against Binomial(200, 0.05)
    (chi-square over 80,000 batches: detects a 2% change of q), each example's inclusion
    frequency against q (binomial, 80,000 draws each: detects a 5% relative bias)."""
    batches, sampler = _draw("poisson", 4000, n=200, batch_size=10)
    sizes = _check_layout(batches, 200).ravel()
    support, pmf = sampler.batch_size_law()
    assert _chi_square_ok(np.bincount(sizes, minlength=support.size)[: support.size], pmf)
    assert batches.shape[2] == sizes.max()
    counts = np.bincount(batches[batches >= 0], minlength=200)
    draws, q = sizes.size, 0.05
    assert (np.abs(counts - draws * q) <= Z * np.sqrt(draws * q * (1 - q))).all()


def test_truncated_poisson_keeps_a_uniform_subset():
    """q = 0.1 on n = 100 cut to B = 8 (P(|S| > 8) = 0.33): sizes against min(Binomial, B),
    inclusion uniform over examples (a truncation favouring low or high indices would show:
    detects a 6% relative bias per example at 60,000 batches)."""
    batches, sampler = _draw(
        "truncated_poisson", 3000, seed=1, n=100, batch_size=10, max_batch_size=8
    )
    assert batches.shape[2] == 8
    sizes = _check_layout(batches, 100).ravel()
    support, pmf = sampler.batch_size_law()
    assert _chi_square_ok(np.bincount(sizes, minlength=support.size)[: support.size], pmf)
    counts = np.bincount(batches[batches >= 0], minlength=100)
    p = sizes.mean() / 100  # each example equally likely given the sizes
    assert (np.abs(counts - sizes.size * p) <= Z * np.sqrt(sizes.size * p * (1 - p))).all()


@pytest.mark.parametrize("name", ["dynamic_shuffle", "persistent_shuffle"])
def test_shuffles_are_uniform_permutations(name):
    """Every epoch a permutation; the example in the first slot uniform over n = 20 (chi-square
    over 20,000 epochs: detects a 20% relative bias of one example); persistent: the same
    order every epoch, dynamic: independent epochs (the first example repeats with
    probability 1/n)."""
    batches, _ = _draw(name, 10_000, seed=2, n=20, batch_size=5, epochs=2)
    epochs = batches.reshape(10_000, 2, 20)
    assert (np.sort(epochs, axis=-1) == np.arange(20)).all()
    first = epochs[:, :, 0].ravel()
    assert _chi_square_ok(np.bincount(first, minlength=20), np.full(20, 1 / 20))
    same = (epochs[:, 0] == epochs[:, 1]).all(-1)
    if name == "persistent_shuffle":
        assert same.all()
    else:
        repeats = (epochs[:, 0, 0] == epochs[:, 1, 0]).sum()
        assert abs(repeats - 10_000 / 20) <= Z * np.sqrt(10_000 * (1 / 20) * (19 / 20))


def test_deterministic_and_unsupported():
    batches, sampler = _draw("deterministic", 3, n=12, batch_size=4, epochs=2)
    assert np.array_equal(batches, sampler.sample(np.random.default_rng(0), 3))
    balls = make_sampler("balls_and_bins", n=12, batch_size=4)
    assert not device_batches.supported(balls)
    with pytest.raises(ValueError, match="sampler='balls_and_bins' has no device draw"):
        device_batches.sample(balls, torch.Generator(), 2)


def test_engine_trains_tensor_batches_as_arrays(training_config):
    """The engine reads batches given as a tensor (drawn on the device) exactly as the same
    batches given as an array."""
    problem = build_problem(training_config(model="mlp", hidden=4))
    sampler = make_sampler("poisson", n=100, batch_size=10)
    batches = device_batches.sample(sampler, torch.Generator().manual_seed(3), 8)
    canary_in = np.arange(8) < 4
    outputs = [
        train(problem, b, canary_in, [(torch.Generator().manual_seed(1), 8)])
        for b in (batches, batches.numpy())
    ]
    assert np.array_equal(outputs[0].y, outputs[1].y) and np.array_equal(
        outputs[0].theta, outputs[1].theta
    )
