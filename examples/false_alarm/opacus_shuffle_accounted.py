"""Correct: Opacus with a shuffling ``DataLoader``, accounted as shuffling.

The bug zoo's Opacus training (``examples/bug_zoo/opacus_train.py``) with
``make_private(poisson_sampling=False)``: each epoch a new permutation cut into batches of
``BATCH`` (every example once per epoch). Opacus's own accountant would still compose Poisson
steps at q = 1 / len(loader) (the zoo's ``opacus_shuffle_accounted_poisson`` bug); this user
accounts the shuffling without amplification instead: each example is in one batch per epoch,
so the training is ``EPOCHS`` Gaussian mechanisms of noise multiplier sigma (each example's
clipped gradient enters one noisy sum per epoch), composed by dp_accounting's RDP accountant.
That is a valid (if loose) epsilon for any shuffling, the upper end of the theory's bracket
for ``dynamic_shuffle`` (mu = sqrt(E) / sigma Gaussian DP, docs/design.md).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bug_zoo"))
# the zoo's data and Opacus's divisor for n rows
from opacus_train import BATCH, CLIP, EPOCHS, LR, SIGMA, Blobs, N, noise_divisor

__all__ = [
    "ACCOUNTED_SAMPLER",
    "BATCH",
    "CLIP",
    "EPOCHS",
    "Blobs",
    "N",
    "make_loader",
    "noise_divisor",
    "train",
]

ACCOUNTED_SAMPLER = "dynamic_shuffle"  # what the user's accountant assumes (inspect-loader)


def private(model: nn.Module, dataset, seed: int):
    """(engine, model, optimizer, loader) of ``make_private`` keeping the shuffling loader."""
    from opacus import PrivacyEngine

    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    loader = DataLoader(dataset, batch_size=BATCH, shuffle=True,
                        generator=torch.Generator().manual_seed(seed))
    engine = PrivacyEngine(accountant="rdp")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, optimizer, loader = engine.make_private(
            module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=SIGMA,
            max_grad_norm=CLIP, poisson_sampling=False,
        )
    return engine, model, optimizer, loader


def make_loader(dataset, seed: int):
    """The loader ``make_private`` returns for this dataset (what the training iterates)."""
    model = nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 2))
    return private(model, dataset, seed)[3]


def train(canaries, seed: int):
    """One training with the canaries' lines (marked ``# audit``); returns the user's own
    accountant (shuffling: one Gaussian mechanism per epoch), not Opacus's."""
    import dp_accounting

    torch.manual_seed(seed)
    dataset = canaries.wrap(Blobs(N, seed))  # audit
    model = canaries.attach(nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 2)))  # audit
    _, model, optimizer, loader = private(model, dataset, seed)
    canaries.opacus(model, optimizer, loader)  # audit
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(EPOCHS):
            for x, y in loader:
                optimizer.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()
    accountant = dp_accounting.rdp.RdpAccountant()
    accountant.compose(dp_accounting.GaussianDpEvent(SIGMA), EPOCHS)  # one per epoch
    return accountant
