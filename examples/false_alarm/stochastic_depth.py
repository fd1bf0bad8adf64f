"""Correct: stochastic depth (residual blocks dropped at random per example).

The bug zoo's plain torch DP-SGD loop with a residual MLP whose blocks are skipped per example
with probability ``P_SKIP`` during training (Huang et al. 2016, "row" mode: a fresh draw per
example, ``vmap(..., randomness="different")``). Each example's gradient depends on that
example and the random stream only.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bug_zoo"))
# the zoo's data and Poisson loader (inspect-loader reads make_loader)
from plain import BATCH, CLIP, EPOCHS, LR, SIGMA, Blobs, N, make_loader

__all__ = ["BATCH", "CLIP", "EPOCHS", "Blobs", "N", "make_loader", "train"]

P_SKIP = 0.2  # each residual block's drop probability


class ResidualMLP(nn.Module):
    """10 -> 16, two residual blocks (each skipped with probability P_SKIP while training,
    scaled by 1 / (1 - P_SKIP) when kept), -> 2."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(10, 16)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(16, 16), nn.Tanh()) for _ in range(2)
        )
        self.out = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.inp(x))
        for block in self.blocks:
            if self.training:
                keep = (torch.rand(h.shape[0], 1) >= P_SKIP).to(h) / (1 - P_SKIP)
                h = h + keep * block(h)
            else:
                h = h + block(h)
        return self.out(h)


def train(canaries, seed: int):
    """One training with the canaries' lines (marked ``# audit``); returns the accountant."""
    import dp_accounting

    torch.manual_seed(seed)
    dataset = canaries.wrap(Blobs(N, seed))  # audit
    model = canaries.attach(ResidualMLP())  # audit
    loader = make_loader(dataset, seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    canaries.plain(optimizer, loader, noise_divisor=BATCH)  # audit
    params = dict(model.named_parameters())

    def loss(p, x, y):
        return nn.functional.cross_entropy(functional_call(model, p, (x[None],)), y[None])

    per_example_grad = vmap(grad(loss), in_dims=(None, 0, 0), randomness="different")
    noise = torch.Generator().manual_seed(seed + 1)
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
    accountant = dp_accounting.rdp.RdpAccountant()
    event = dp_accounting.PoissonSampledDpEvent(BATCH / len(dataset),
                                                dp_accounting.GaussianDpEvent(SIGMA))
    accountant.compose(event, len(loader) * EPOCHS)
    return accountant
