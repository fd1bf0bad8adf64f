"""Offline training data for the DP-SGD engine: bundled scikit-learn sets and a synthetic task.

Everything here works without a network: scikit-learn's bundled ``digits`` (1797 x 64,
10 classes; 8x8 images, input shape (1, 8, 8)) and ``breast_cancer`` (569 x 30, 2 classes),
``gaussian``, a seeded two-class Gaussian mixture, and ``sequences``, a seeded synthetic
sequence classification task (token sequences, one-hot encoded, input shape (L, V)).
Features are standardised (zero mean, unit variance per feature over the selected examples;
constant features become 0), except the one-hot ``sequences``, kept exactly 0/1.

Every row is flat (n, d); :func:`input_shape` gives the shape a model sees (the rows
reshaped, d = prod(shape)), e.g. the convolutional model of :mod:`audit.training.torch_models`.

``load_dataset(name, n, seed=...)`` returns ``n`` examples chosen by a seeded permutation
of the whole set, so that an audit with n = b*T examples always trains on the same data.
The engine appends one more input feature that is 0 for every real example (see
:mod:`audit.training.canaries`): the weights leaving it are never moved by real data, which gives
the ``isolated`` threat model its canary direction.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from audit.core.seeding import rng_for
from audit.core.validation import check_choice, check_int

__all__ = [
    "DATASETS",
    "Dataset",
    "dataset_classes",
    "dataset_size",
    "input_shape",
    "load_dataset",
    "load_training_rows",
]

DATASETS: tuple[str, ...] = ("digits", "breast_cancer", "gaussian", "sequences")
"""Dataset names accepted by :func:`load_dataset` (and ``audit train --dataset``)."""

GAUSSIAN_FEATURES = 20
"""Dimension of the synthetic ``gaussian`` task."""

GAUSSIAN_SIZE = 100_000
"""Nominal size of the synthetic ``gaussian`` task (an upper limit on n)."""

SEQUENCE_LENGTH = 8
"""Tokens per sequence of the synthetic ``sequences`` task."""

SEQUENCE_VOCABULARY = 8
"""Token values 0..V-1 of the ``sequences`` task (each token one-hot encoded)."""

SEQUENCE_CLASSES = 4
"""Classes of the ``sequences`` task: which of tokens 0..3 occurs most often."""

SEQUENCE_SIZE = 100_000
"""Nominal size of the synthetic ``sequences`` task (an upper limit on n)."""

_SHAPES: dict[str, tuple[int, ...]] = {
    "digits": (1, 8, 8),
    "breast_cancer": (30,),
    "gaussian": (GAUSSIAN_FEATURES,),
    "sequences": (SEQUENCE_LENGTH, SEQUENCE_VOCABULARY),
}
_CLASSES: dict[str, int] = {
    "digits": 10,
    "breast_cancer": 2,
    "gaussian": 2,
    "sequences": SEQUENCE_CLASSES,
}


@dataclass(frozen=True)
class Dataset:
    """Standardised features ``x`` (n, d) float32 and integer labels ``y`` (n,) int64."""

    name: str
    x: np.ndarray
    y: np.ndarray
    classes: int

    @property
    def n(self) -> int:
        return int(self.x.shape[0])

    @property
    def features(self) -> int:
        return int(self.x.shape[1])


def dataset_size(name: str) -> int:
    """Number of examples available in dataset ``name``."""
    name = check_choice("dataset", name, DATASETS)
    return {
        "digits": 1797,
        "breast_cancer": 569,
        "gaussian": GAUSSIAN_SIZE,
        "sequences": SEQUENCE_SIZE,
    }[name]


def input_shape(name: str) -> tuple[int, ...]:
    """Shape of one example of dataset ``name`` as a model sees it (rows are its flattening):
    (channels, height, width) for images, (length, vocabulary) for one-hot sequences, (d,)
    for tabular data."""
    return _SHAPES[check_choice("dataset", name, DATASETS)]


def dataset_classes(name: str) -> int:
    """Number of classes of dataset ``name``."""
    return _CLASSES[check_choice("dataset", name, DATASETS)]


def load_dataset(name: str, n: int, *, seed: int = 0) -> Dataset:
    """``n`` standardised examples of dataset ``name``, chosen by a permutation seeded by ``seed``.

    Raises:
        ValueError: unknown ``name`` (with the closest valid one), or ``n`` outside
            [1, size of the dataset].
    """
    name = check_choice("dataset", name, DATASETS)
    size = dataset_size(name)
    n = check_int("n", n, minimum=1)
    if n > size:
        raise ValueError(f"n={n} is larger than dataset {name!r}, which has {size} examples")
    x, y, classes = _raw(name, n, seed)
    order = rng_for(seed, "data", name).permutation(x.shape[0])[:n]
    features = x[order].astype(np.float32) if name == "sequences" else _standardise(x[order])
    return Dataset(name=name, x=features, y=y[order].astype(np.int64), classes=classes)


def load_training_rows(name: str, n: int, *, seed: int = 0) -> Dataset:
    """The n rows every audit trains on: :func:`load_dataset` plus the canary feature.

    The appended last feature (index D - 1) is 0 for every example (float32, a fresh array);
    the engine (:func:`audit.training.trials.build_problem`) and the plug-in implementations
    (:func:`audit.plugins.contract.training_data`) both start from these rows.
    """
    data = load_dataset(name, n, seed=seed)
    x = np.concatenate([data.x, np.zeros((data.n, 1), dtype=np.float32)], axis=1)
    return Dataset(name=data.name, x=x, y=data.y, classes=data.classes)


def _raw(name: str, n: int, seed: int) -> tuple[np.ndarray, np.ndarray, int]:
    if name == "gaussian":
        return _gaussian(n, seed)
    if name == "sequences":
        return _sequences(n, seed)
    from sklearn import datasets

    loader = {"digits": datasets.load_digits, "breast_cancer": datasets.load_breast_cancer}[name]
    bunch = loader()
    return (
        np.asarray(bunch.data, dtype=np.float64),
        np.asarray(bunch.target),
        int(bunch.target.max()) + 1,
    )


def _gaussian(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Two classes, x | y ~ N(+-mu, I) with mu a seeded direction of norm 2 (Bayes error ~2.3%)."""
    rng = rng_for(seed, "data", "gaussian")
    mu = rng.standard_normal(GAUSSIAN_FEATURES)
    mu *= 2.0 / np.linalg.norm(mu)
    y = rng.integers(0, 2, size=n)
    x = rng.standard_normal((n, GAUSSIAN_FEATURES)) + np.where(y[:, None] == 1, mu, -mu)
    return x, y, 2


def _sequences(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, int]:
    """n sequences of L i.i.d. uniform tokens in 0..V-1, one-hot (n, L*V); the label is the
    token among 0..C-1 (C = :data:`SEQUENCE_CLASSES`) that occurs most often (ties: the
    smallest), a counting task a one-block attention model learns."""
    rng = rng_for(seed, "data", "sequences")
    tokens = rng.integers(0, SEQUENCE_VOCABULARY, size=(n, SEQUENCE_LENGTH))
    counts = np.stack([(tokens == c).sum(axis=1) for c in range(SEQUENCE_CLASSES)], axis=1)
    y = counts.argmax(axis=1)
    one_hot = np.eye(SEQUENCE_VOCABULARY, dtype=np.float64)[tokens].reshape(n, -1)
    return one_hot, y, SEQUENCE_CLASSES


def _standardise(x: np.ndarray) -> np.ndarray:
    """(x - mean) / std per feature; features with std 0 become 0."""
    mean = x.mean(axis=0)
    std = x.std(axis=0)
    safe = np.where(std > 0, std, 1.0)
    return ((x - mean) / safe * (std > 0)).astype(np.float32)
