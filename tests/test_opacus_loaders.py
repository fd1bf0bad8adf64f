"""The samplers' Opacus loaders (:func:`audit.plugins.opacus_loaders.opacus_loader`),
balls-and-bins' above all.

The loader a sampler builds is what the opacus plug-in hands to ``make_private``
(:func:`audit.plugins.opacus.make_private`); these tests read the batches of the
loader ``make_private`` returns, i.e. the batches Opacus trains on.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

pytest.importorskip("opacus", reason="the 'accountants' extra (opacus) is not installed")

import torch
from torch.utils.data import TensorDataset

from audit.plugins.contract import TrainingSetup, run_implementation_shard
from audit.plugins.opacus import OPACUS_SAMPLERS, make_private
from audit.report import run_audit


def _epochs(
    sampler: str, *, n: int, batch_size: int, epochs: int, seed: int = 0
) -> tuple[list[list[np.ndarray]], object]:
    """The index batches of ``epochs`` passes over the loader ``make_private`` returns."""
    dataset = TensorDataset(torch.zeros(n, 1), torch.arange(n))
    _, _, optimizer, loader = make_private(
        torch.nn.Linear(1, 2), dataset, sampler=sampler, batch_size=batch_size, epochs=epochs,
        lr=0.1, sigma=1.0, clip=1.0, seeds=(seed, seed + 1, seed + 2, seed + 3),
    )
    return [[index.numpy() for _, index in loader] for _ in range(epochs)], optimizer


def test_builtin_samplers_with_an_opacus_loader():
    assert OPACUS_SAMPLERS == (
        "deterministic",
        "persistent_shuffle",
        "dynamic_shuffle",
        "poisson",
        "balls_and_bins",
        "sampled_without_replacement",
    )


def test_balls_and_bins_loader_law():
    """The batches Opacus sees have the balls-and-bins law (n = 20, b = 2, T = 10, E = 1000 epochs).

    - Exact: every epoch is T batches holding each example exactly once; Opacus divides by
      its expected batch size n / len(loader) = b.
    - Batch sizes: an epoch's sizes (c_1..c_T) are Multinomial(n, 1/T each) (so each is
      Binomial(n, 1/T)). Pearson's X = sum_t (c_t - n/T)^2 / (n/T) has, exactly, E X = T - 1
      and Var X = 2 (T - 1) (1 - 1/n) (the multinomial moments of Pearson's statistic); the
      sum over E independent epochs is within 4 standard deviations of E (T - 1) (normal by
      the CLT; two-sided level 6e-5). A fixed-size loader (every c_t = b) gives X = 0, z = -69.
    - Marginal: step 0's size in each epoch, E i.i.d. Binomial(n, 1/T) draws, against that
      law by a chi-square test on the cells 0, 1, 2, 3, 4, >= 5 (expected counts >= 43),
      p > 1e-3.
    - Across epochs: example 0 is at the same step in two consecutive epochs with probability
      1/T, independently per epoch pair given the draws of each epoch: the count over E - 1
      pairs is Binomial(E - 1, 1/T), within 4 sd of its mean (persistent shuffling: E - 1).
    """
    n, b, epochs = 20, 2, 1000
    t = n // b
    batches, optimizer = _epochs("balls_and_bins", n=n, batch_size=b, epochs=epochs)
    assert optimizer.expected_batch_size == b
    sizes = np.array([[len(batch) for batch in epoch] for epoch in batches])
    assert sizes.shape == (epochs, t)
    for epoch in batches:
        np.testing.assert_array_equal(np.sort(np.concatenate(epoch)), np.arange(n))
    assert (sizes == 0).any()  # empty steps happen (P = 0.9^20 = 0.12 each) and reach Opacus

    pearson = (((sizes - n / t) ** 2) / (n / t)).sum()
    z = (pearson - epochs * (t - 1)) / np.sqrt(epochs * 2 * (t - 1) * (1 - 1 / n))
    assert abs(z) < 4, z

    law = stats.binom(n, 1 / t)
    observed = np.bincount(np.minimum(sizes[:, 0], 5), minlength=6)
    expected = epochs * np.append(law.pmf(np.arange(5)), law.sf(4))
    assert stats.chisquare(observed, expected).pvalue > 1e-3

    step = np.array([next(s for s, batch in enumerate(epoch) if 0 in batch) for epoch in batches])
    same = int((step[1:] == step[:-1]).sum())
    mean, sd = (epochs - 1) / t, np.sqrt((epochs - 1) * (1 / t) * (1 - 1 / t))
    assert abs(same - mean) < 4 * sd, (same, mean)


def test_persistent_loader_repeats_one_permutation():
    batches, optimizer = _epochs("persistent_shuffle", n=12, batch_size=3, epochs=3)
    assert optimizer.expected_batch_size == 3
    first = np.concatenate(batches[0])
    assert sorted(first) == list(range(12)) and not np.array_equal(first, np.arange(12))
    for epoch in batches[1:]:
        np.testing.assert_array_equal(np.concatenate(epoch), first)


def test_balls_and_bins_opacus_dirac_protocol_exact():
    """sigma -> 0, isolated Dirac canary: the IN canary reads exactly 1 at one step per epoch
    (Opacus divides its clipped sum by b), OUT reads 0, empty steps included."""
    setup = TrainingSetup(
        sampler="balls_and_bins",
        sigma=1e-9,
        clip=1.0,
        lr=0.5,
        batch_size=2,
        n=10,
        epochs=3,
        dataset="digits",
        threat_model="isolated",
    )
    out = run_implementation_shard("opacus-rdp", setup, seed=1, shard=0, trials=4)
    per_epoch = out["y_in"].reshape(4, setup.epochs, -1)
    np.testing.assert_allclose(np.sort(per_epoch, axis=2)[..., -1], 1.0, atol=1e-4)
    np.testing.assert_allclose(np.sort(per_epoch, axis=2)[..., :-1], 0.0, atol=1e-4)
    np.testing.assert_allclose(out["y_out"], 0.0, atol=1e-4)




def test_tiny_opacus_audit_with_balls_and_bins(run_folder, audit_toml, implementation_spec):
    """``audit run`` of Opacus with balls-and-bins batches, isolated, against its own theory
    (sigma 2 keeps the random-allocation curves at ~0.2 s)."""
    folder = run_folder(
        audit_toml(
            implementation_spec,
            implementation="opacus",
            seed=4,
            dataset="digits",
            samplers=["balls_and_bins"],
            attacks=["default"],
            trials_in=6,
            trials_out=6,
            shard_size=6,
            claim=3.0,
            n_jobs=1,
            training={"sigma": 2.0, "batch_size": 2, "n": 10, "lr": 0.5},
        )
    )
    run_audit(folder, progress=False, plots=False)
    summary = json.loads((folder / "summary.json").read_text())
    (cell,) = summary["cells"]
    assert cell["sampler"] == "balls_and_bins" and cell["threat_model"] == "isolated"
    assert cell["epsilon_lb"] >= 0 and cell["verdict"] in ("consistent", "violated")
    # balls-and-bins' own theory
    assert cell["theory_lower_epsilon"] <= cell["theory_upper_epsilon"]
