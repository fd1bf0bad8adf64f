"""The bug zoo's correct reference: a plain torch DP-SGD loop as a user writes it.

Logistic-regression-sized MLP on two Gaussian blobs, Poisson batches from the user's own batch
sampler, per-example gradients by ``torch.func``, clipping to C, Gaussian noise sigma C,
division by b, SGD; the accountant is dp_accounting's RdpAccountant. The canaries' lines are
docs/auditing-your-training.md §0's, ``canaries.privatized()`` included (it marks where the
privatized gradient is made; without it the noise findings a post-processing could cause are
inconclusive, and the noise bugs rest on ``noise_multiplier`` against the post-processing floor
alone: measured at the accusation level, ``noise_without_clip`` was then found on 4 of 5 seeds
at m = 200, where the mark finds it on 5 of 5; the accumulation and augmentation bases stay
unmarked, and the false-alarm suite's ``_unmarked`` kinds test that path). Every bug of the zoo
(``zoo.py``) is this file with exactly one line changed. ``train(canaries, seed)`` is the
function ``audit.deployed.replay`` calls; it returns the user's accountant (the claim);
``make_loader(dataset, seed)`` is the loader it trains with (``inspect-loader`` reads it).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.func import functional_call, grad, vmap
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


class PoissonBatches:
    """Each example independently with probability q, ``steps`` batches per epoch."""

    def __init__(self, n: int, q: float, steps: int, seed: int) -> None:
        self.n, self.q, self.steps, self.seed = n, q, steps, seed
        self.generator = torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        return self.steps

    def __iter__(self):
        g = self.generator
        for _ in range(self.steps):
            yield torch.nonzero(torch.rand(self.n, generator=g) < self.q).flatten().tolist()


def make_loader(dataset, seed: int) -> DataLoader:
    """The training's loader: Poisson batches at q = b / n, 1 / q of them per epoch (what
    ``inspect-loader`` inspects)."""
    q = BATCH / len(dataset)
    sampler = PoissonBatches(len(dataset), q, round(1 / q), seed)
    return DataLoader(dataset, batch_sampler=sampler)


def train(canaries, seed: int):
    """One training with the canaries' lines (marked ``# audit``); returns the accountant."""
    import dp_accounting

    torch.manual_seed(seed)
    dataset = canaries.wrap(Blobs(N, seed))  # audit
    model = canaries.attach(nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 2)))  # audit
    q = BATCH / len(dataset)
    q_accounted = BATCH / len(dataset)
    steps = round(1 / q)
    loader = make_loader(dataset, seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    canaries.plain(optimizer, loader, noise_divisor=BATCH)  # audit
    params = dict(model.named_parameters())

    def loss(p, x, y):
        return nn.functional.cross_entropy(functional_call(model, p, (x[None],)), y[None])

    per_example_grad = vmap(grad(loss), in_dims=(None, 0, 0))
    noise = torch.Generator().manual_seed(seed + 1)
    for epoch in range(EPOCHS):
        for x, y in loader:
            g = per_example_grad({k: v.detach() for k, v in params.items()}, x, y)
            canaries.inject(g)  # audit
            norms = torch.sqrt(sum(v.flatten(1).pow(2).sum(1) for v in g.values()))
            factor = torch.clamp(CLIP / (norms + 1e-12), max=1.0)
            for name, p in params.items():
                f = factor
                summed = (g[name] * f.view(-1, *[1] * (g[name].dim() - 1))).sum(0)
                z = torch.randn(p.shape, generator=noise)
                std = SIGMA * CLIP
                p.grad = (summed + std * z) / BATCH
            canaries.privatized()  # audit
            optimizer.step()
    accountant = dp_accounting.rdp.RdpAccountant()
    event = dp_accounting.PoissonSampledDpEvent(q_accounted, dp_accounting.GaussianDpEvent(SIGMA))
    accountant.compose(event, steps * EPOCHS)
    return accountant
