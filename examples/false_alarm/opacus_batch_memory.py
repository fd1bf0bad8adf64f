"""Correct: Opacus with ``BatchMemoryManager`` (each logical batch in physical batches).

The bug zoo's Opacus training (``examples/bug_zoo/opacus_train.py``) iterating its Poisson
loader through ``opacus.utils.batch_memory_manager.BatchMemoryManager`` with at most
``PHYSICAL`` rows per backward pass: Opacus accumulates the per-example gradients of the
physical batches and clips, noises and steps once per logical batch (the optimizer skips the
intermediate steps). One DP-SGD step per logical batch, as accounted.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bug_zoo"))
# the zoo's data, make_private call and Opacus's divisor for n rows
from opacus_train import (
    BATCH,
    CLIP,
    EPOCHS,
    Blobs,
    N,
    make_loader,
    noise_divisor,
    private,
)

__all__ = ["BATCH", "CLIP", "EPOCHS", "Blobs", "N", "make_loader", "noise_divisor", "train"]

PHYSICAL = 16  # rows per backward pass


def train(canaries, seed: int):
    """One training with the canaries' lines (marked ``# audit``); returns the engine."""
    from opacus.utils.batch_memory_manager import BatchMemoryManager

    torch.manual_seed(seed)
    dataset = canaries.wrap(Blobs(N, seed))  # audit
    model = canaries.attach(nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 2)))  # audit
    engine, model, optimizer, loader = private(model, dataset, seed)
    canaries.opacus(model, optimizer, loader)  # audit
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(EPOCHS):
            with BatchMemoryManager(data_loader=loader, max_physical_batch_size=PHYSICAL,
                                    optimizer=optimizer) as physical_loader:
                for x, y in physical_loader:
                    optimizer.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    optimizer.step()
    return engine
