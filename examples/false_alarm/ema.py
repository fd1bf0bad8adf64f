"""Correct: an exponential moving average of the parameters (the model the user keeps).

The bug zoo's plain torch DP-SGD loop with ``torch.optim.swa_utils.AveragedModel`` keeping an
EMA of the parameters after every step (Polyak / EMA averaging, De et al. 2022): a function of
the iterates, post-processing.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bug_zoo"))
# the zoo's data and Poisson loader (inspect-loader reads make_loader)
from plain import BATCH, CLIP, EPOCHS, LR, SIGMA, Blobs, N, make_loader

__all__ = ["BATCH", "CLIP", "EPOCHS", "Blobs", "N", "make_loader", "train"]

DECAY = 0.99  # the EMA's decay


def train(canaries, seed: int):
    """One training with the canaries' lines (marked ``# audit``); returns the accountant."""
    import dp_accounting

    torch.manual_seed(seed)
    dataset = canaries.wrap(Blobs(N, seed))  # audit
    model = canaries.attach(nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 2)))  # audit
    loader = make_loader(dataset, seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    canaries.plain(optimizer, loader, noise_divisor=BATCH)  # audit
    params = dict(model.named_parameters())

    def loss(p, x, y):
        return nn.functional.cross_entropy(functional_call(model, p, (x[None],)), y[None])

    per_example_grad = vmap(grad(loss), in_dims=(None, 0, 0))
    noise = torch.Generator().manual_seed(seed + 1)
    ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(DECAY))
    for _ in range(EPOCHS):
        for x, y in loader:
            g = per_example_grad({k: v.detach() for k, v in params.items()}, x, y)
            canaries.inject(g)  # audit
            norms = torch.sqrt(sum(v.flatten(1).pow(2).sum(1) for v in g.values()))
            factor = torch.clamp(CLIP / (norms + 1e-12), max=1.0)
            for name, p in params.items():
                summed = (g[name] * factor.view(-1, *[1] * (g[name].dim() - 1))).sum(0)
                z = torch.randn(p.shape, generator=noise)
                p.grad = (summed + SIGMA * CLIP * z) / BATCH
            canaries.privatized()  # audit: the privatized gradient is made here
            optimizer.step()
            ema.update_parameters(model)
    accountant = dp_accounting.rdp.RdpAccountant()
    event = dp_accounting.PoissonSampledDpEvent(BATCH / len(dataset),
                                                dp_accounting.GaussianDpEvent(SIGMA))
    accountant.compose(event, len(loader) * EPOCHS)
    return accountant
