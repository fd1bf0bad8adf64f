"""Opacus's MNIST example in the shape its users run it, offline and tiny, with the audit's lines.

Opacus's ``examples/mnist.py`` trains a small CNN (two convolutions, each followed by a max
pool, then two linear layers) with ``PrivacyEngine.make_private`` at its defaults: Poisson
sampling, ``noise_multiplier`` 1.0, ``max_grad_norm`` 1.0, a ``DataLoader`` with
``batch_size=64``, SGD at lr 0.1. Here the data are random MNIST-shaped tensors (1 x 28 x 28,
10 classes; no download), the CNN is narrower and one epoch is run, so that the replay takes a
few seconds; the lines marked ``# audit`` are all the audit adds (docs/auditing-your-training.md).

Replay it as a new user would (README.md):

    audit replay examples/opacus_mnist/mnist.py:train --seed 0

(C, b and sigma are read from Opacus's optimizer; ``--noise-divisor 64``, the DataLoader's batch
size, is named as disagreeing with Opacus's expected batch size and Opacus's is used).
``train_ghost`` is the same training with ``grad_sample_mode="ghost"`` (fast gradient clipping).
"""

from __future__ import annotations

import warnings

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

N, BATCH, EPOCHS, SIGMA, CLIP, LR, DELTA = 300, 64, 1, 1.0, 1.0, 0.1, 1e-5
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081


class TinyConvNet(nn.Module):
    """A narrower stand-in for Opacus's example CNN: the same layer kinds and shapes of maps
    (28 -> 14 -> 13 -> 5 -> 4), fewer channels."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 8, 2, padding=3)
        self.conv2 = nn.Conv2d(4, 8, 4, 2)
        self.fc1 = nn.Linear(8 * 4 * 4, 16)
        self.fc2 = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2, 1)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2, 1)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def mnist_like(seed: int) -> TensorDataset:
    """N random images, normalised as the example's transform does, and random labels."""
    g = torch.Generator().manual_seed(seed)
    images = torch.rand(N, 1, 28, 28, generator=g)
    return TensorDataset((images - MNIST_MEAN) / MNIST_STD, torch.randint(0, 10, (N,), generator=g))


def _train(canaries, seed: int, grad_sample_mode: str):
    from opacus import PrivacyEngine

    torch.manual_seed(seed)
    dataset = canaries.wrap(mnist_like(seed))  # audit: canary slots appended
    model = canaries.attach(TinyConvNet())  # audit: the canary block
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0)
    loader = DataLoader(dataset, batch_size=BATCH)
    criterion = nn.CrossEntropyLoss()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Opacus's notes on secure_mode and the sampler
        engine = PrivacyEngine()
        private = engine.make_private(
            module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=SIGMA,
            max_grad_norm=CLIP, grad_sample_mode=grad_sample_mode, criterion=criterion,
        )
        if grad_sample_mode == "ghost":
            model, optimizer, criterion, loader = private
        else:
            model, optimizer, loader = private
        canaries.opacus(model, optimizer, loader)  # audit
        for _ in range(EPOCHS):
            for data, target in loader:
                optimizer.zero_grad()
                criterion(model(data), target).backward()
                optimizer.step()
    return engine


def train(canaries, seed: int):
    """One training as Opacus's example runs it (hooks); returns the ``PrivacyEngine``."""
    return _train(canaries, seed, "hooks")


def train_ghost(canaries, seed: int):
    """The same with ghost clipping (``grad_sample_mode="ghost"``)."""
    return _train(canaries, seed, "ghost")
