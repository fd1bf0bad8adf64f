"""Correct: Opacus ghost clipping (fast gradient clipping, ``grad_sample_mode="ghost"``).

The bug zoo's Opacus training (``examples/bug_zoo/opacus_train.py``: Poisson batches, flat
clipping to C, noise sigma C divided by the expected batch size, RDP accountant) with Opacus's
ghost clipping: ``make_private`` also returns a wrapped criterion whose ``backward`` runs the
two passes (per-example norms, then the clipped sum) without storing per-example gradients.
Opacus computes the same DP-SGD step; the audit must be able to run on it (issue 41).
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

__all__ = ["BATCH", "CLIP", "EPOCHS", "Blobs", "N", "make_loader", "noise_divisor", "train"]


def private(model: nn.Module, dataset, seed: int):
    """(engine, model, optimizer, criterion, loader) of ``make_private`` with ghost clipping."""
    from opacus import PrivacyEngine

    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    loader = DataLoader(dataset, batch_size=BATCH, shuffle=True,
                        generator=torch.Generator().manual_seed(seed))
    engine = PrivacyEngine(accountant="rdp")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, optimizer, criterion, loader = engine.make_private(
            module=model, optimizer=optimizer, data_loader=loader,
            criterion=nn.CrossEntropyLoss(), noise_multiplier=SIGMA, max_grad_norm=CLIP,
            poisson_sampling=True, grad_sample_mode="ghost",
        )
    return engine, model, optimizer, criterion, loader


def make_loader(dataset, seed: int):
    """The loader ``make_private`` returns for this dataset (what the training iterates)."""
    model = nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 2))
    return private(model, dataset, seed)[4]


def train(canaries, seed: int):
    """One training with the canaries' lines (marked ``# audit``); returns the engine."""
    torch.manual_seed(seed)
    dataset = canaries.wrap(Blobs(N, seed))  # audit
    model = canaries.attach(nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 2)))  # audit
    engine, model, optimizer, criterion, loader = private(model, dataset, seed)
    canaries.opacus(model, optimizer, loader)  # audit
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(EPOCHS):
            for x, y in loader:
                optimizer.zero_grad()
                criterion(model(x), y).backward()
                optimizer.step()
    return engine
