"""A user's training: a small CNN on 8x8 digit images with Opacus, a shuffling DataLoader.

This is the script as a user would write it (data, model, loader, PrivacyEngine, loop), plus
the few lines that let the harness audit it (marked ``# audit``). ``train(data, canary,
setup, seed)`` is the harness's plug-in contract (audit/plugins/contract.py): the
harness calls it K times per shard with the canary IN or OUT; the script ignores the
harness's ``data`` and trains on its own images.

The loader: ``DataLoader(shuffle=True)`` handed to ``make_private(poisson_sampling=False)``,
which keeps it and still accounts it as Poisson with q = 1 / len(loader) (Opacus issues #80,
#128).
"""

from __future__ import annotations

import functools
import warnings

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

POISSON_SAMPLING = False  # the deployed configuration: a shuffling DataLoader


@functools.lru_cache(maxsize=4)
def load_images(n: int) -> TensorDataset:
    """The first n of sklearn's 8x8 digits (bundled with scikit-learn: no download), scaled to [0,
    1]."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = torch.tensor(digits.images[:n] / 16.0, dtype=torch.float32)[:, None]  # (n, 1, 8, 8)
    y = torch.tensor(digits.target[:n], dtype=torch.long)
    return TensorDataset(x, y)


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.head = nn.Linear(4 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = nn.functional.max_pool2d(torch.relu(self.conv(x)), 2)
        return self.head(h.flatten(1))


def make_private(dataset, *, batch_size, sigma, clip, lr, seed, model=None):
    """The user's Opacus setup: model, SGD, a DataLoader and make_private."""
    from opacus import PrivacyEngine

    torch.manual_seed(seed)
    model = model if model is not None else SmallCNN()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=not POISSON_SAMPLING,
                        generator=torch.Generator().manual_seed(seed))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engine = PrivacyEngine()
        model, optimizer, loader = engine.make_private(
            module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=sigma,
            max_grad_norm=clip, poisson_sampling=POISSON_SAMPLING,
            noise_generator=torch.Generator().manual_seed(seed + 1),
        )
    return engine, model, optimizer, loader


def make_loader():
    """For ``audit inspect-loader examples/opacus_shuffle/train.py:make_loader``."""
    engine, _, optimizer, loader = make_private(
        load_images(99), batch_size=5, sigma=0.8, clip=1.0, lr=0.5, seed=0
    )
    return {
        "loader": loader,
        "privacy_engine": engine,
        "optimizer": optimizer,
        "epochs": 1,
        "delta": 1e-5,
    }


def train(data, canary, setup, seed):
    """One training of the user's script with one Dirac canary (the harness's plug-in contract)."""
    from audit.deployed import DiracCanaries, claim_from  # audit

    canaries = DiracCanaries(1, included=[canary.is_in], threat_model=canary.threat_model)  # audit
    images = canaries.wrap(load_images(setup.n - 1))  # audit: the canary's slot makes n rows
    seed = int(seed % 2**31)
    torch.manual_seed(seed)  # the model's initial weights from the seed (reproducible runs)
    model = canaries.attach(SmallCNN())  # audit
    engine, model, optimizer, loader = make_private(
        images, batch_size=setup.batch_size, sigma=setup.sigma, clip=setup.clip, lr=setup.lr,
        seed=seed, model=model)
    canaries.opacus(model, optimizer, loader)  # audit
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Full backward hook")
        for _ in range(setup.epochs):
            for x, y in loader:
                optimizer.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()
    claim = claim_from(engine, setup.delta)  # audit: engine.get_epsilon(delta), cached
    return canaries.result(setup, claimed_epsilon=claim.epsilon, claimed_delta=setup.delta)  # audit
