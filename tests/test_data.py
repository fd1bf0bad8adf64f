"""Offline datasets: sizes, standardisation, seeded subsets, errors."""

from __future__ import annotations

import numpy as np
import pytest

from audit.core.data import DATASETS, dataset_size, input_shape, load_dataset


@pytest.mark.parametrize("name", [d for d in DATASETS if d != "sequences"])
def test_standardised_subset(name):
    data = load_dataset(name, 200, seed=1)
    assert data.x.shape[0] == data.y.shape[0] == 200
    assert data.x.dtype == np.float32 and data.y.dtype == np.int64
    assert set(np.unique(data.y)) <= set(range(data.classes))
    std = data.x.std(axis=0)
    varying = std > 0
    assert np.allclose(data.x.mean(axis=0), 0.0, atol=1e-5)
    assert np.allclose(std[varying], 1.0, atol=1e-4)
    assert np.all(data.x[:, ~varying] == 0)


def test_sizes_and_features():
    assert (dataset_size("digits"), dataset_size("breast_cancer")) == (1797, 569)
    assert load_dataset("digits", 10).features == 64
    assert load_dataset("breast_cancer", 10).classes == 2
    assert load_dataset("gaussian", 10).features == 20


def test_seeded_and_reproducible():
    a, b = load_dataset("digits", 100, seed=3), load_dataset("digits", 100, seed=3)
    assert np.array_equal(a.x, b.x) and np.array_equal(a.y, b.y)
    c = load_dataset("digits", 100, seed=4)
    assert not np.array_equal(a.y, c.y)
    assert np.array_equal(
        load_dataset("gaussian", 50, seed=2).x, load_dataset("gaussian", 50, seed=2).x
    )


def test_errors():
    with pytest.raises(ValueError, match="larger than dataset 'breast_cancer'"):
        load_dataset("breast_cancer", 570)
    with pytest.raises(ValueError, match="digits"):
        load_dataset("digit", 10)
    with pytest.raises(ValueError, match="n=0"):
        load_dataset("digits", 0)


def test_sequences_one_hot_and_labels():
    data = load_dataset("sequences", 300, seed=1)
    length, vocabulary = input_shape("sequences")
    assert data.x.shape == (300, length * vocabulary) and data.x.dtype == np.float32
    one_hot = data.x.reshape(300, length, vocabulary)
    assert np.array_equal(one_hot.sum(-1), np.ones((300, length)))  # exactly one token per position
    counts = one_hot.sum(1)[:, : data.classes]
    assert np.array_equal(data.y, counts.argmax(1))  # the most frequent of tokens 0..C-1
    assert len(np.unique(data.y)) == data.classes
    assert np.array_equal(load_dataset("sequences", 300, seed=1).x, data.x)


def test_input_shapes():
    for name in DATASETS:
        assert int(np.prod(input_shape(name))) == load_dataset(name, 5).features
