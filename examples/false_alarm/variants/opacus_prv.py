"""The bug zoo's correct Opacus training: plain.py's model and data under Opacus's
``PrivacyEngine`` (Poisson batches, per-example clipping to C, noise sigma C divided by the
expected batch size, its RDP accountant), instrumented with ``canaries.opacus`` as
docs/auditing-your-training.md shows. ``train(canaries, seed)`` returns the engine (the claim);
``make_loader(dataset, seed)`` the loader ``make_private`` trains with (``inspect-loader``).
The bugs of zoo.py whose base is this file change one line of it.
"""

from __future__ import annotations

import math
import warnings

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

N, BATCH, EPOCHS, SIGMA, CLIP, LR = 300, 50, 3, 3.0, 2.0, 0.1


class Blobs(Dataset):
    """Two Gaussian blobs in 10 dimensions, labels 0 and 1."""

    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.y = torch.randint(0, 2, (n,), generator=g)
        self.x = torch.randn(n, 10, generator=g) + 1.5 * (2 * self.y[:, None] - 1).float()

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i]


def private(model: nn.Module, dataset, seed: int):
    """(engine, model, optimizer, loader) of ``make_private`` on the user's objects."""
    from opacus import PrivacyEngine

    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    loader = DataLoader(dataset, batch_size=BATCH, shuffle=True,
                        generator=torch.Generator().manual_seed(seed))
    engine = PrivacyEngine()  # Opacus's default accountant (PRV)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, optimizer, loader = engine.make_private(
            module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=SIGMA,
            max_grad_norm=CLIP, poisson_sampling=True,
        )
    return engine, model, optimizer, loader


def noise_divisor(n: int) -> int:
    """Opacus's ``expected_batch_size`` for n rows: int(n q) with q = 1 / len(loader)."""
    return int(n / math.ceil(n / BATCH))


def make_loader(dataset, seed: int):
    """The loader ``make_private`` returns for this dataset (what the training iterates)."""
    model = nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 2))
    return private(model, dataset, seed)[3]


def train(canaries, seed: int):
    """One training with the canaries' lines (marked ``# audit``); returns the engine."""
    torch.manual_seed(seed)
    dataset = canaries.wrap(Blobs(N, seed))  # audit
    model = canaries.attach(nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 2)))  # audit
    engine, model, optimizer, loader = private(model, dataset, seed)
    canaries.opacus(model, optimizer, loader)  # audit
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(EPOCHS):
            for x, y in loader:
                optimizer.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()
    return engine
