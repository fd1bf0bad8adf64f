"""Multi-run scripts ``train(data, canary, setup, seed)`` as a user writes them: a plain torch
DP-SGD loop (Poisson batches from their own batch sampler, ``torch.func`` per-example gradients,
clipping, Gaussian noise, SGD) on the harness's data, one Dirac canary (the contract's
``DiracCanaries(1, ...)`` lines), and one-line bugs (tests/test_multi_run_findings.py)."""

from __future__ import annotations

import torch
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.utils.data import DataLoader, TensorDataset


class PoissonBatches:
    """Each row independently with probability q, ``steps`` batches per epoch (never empty)."""

    def __init__(self, n: int, q: float, steps: int, generator: torch.Generator) -> None:
        self.n, self.q, self.steps, self.generator = n, q, steps, generator

    def __len__(self) -> int:
        return self.steps

    def __iter__(self):
        for _ in range(self.steps):
            batch = torch.nonzero(torch.rand(self.n, generator=self.generator) < self.q).flatten()
            yield batch.tolist() or [0]


def _train(data, canary, setup, seed, bug=None):
    from audit.deployed import DiracCanaries  # audit

    seed = int(seed % 2**31)
    if bug != "unseeded_init":  # THE BUG otherwise: theta_0 drawn from torch's global state
        torch.manual_seed(seed)
    canaries = DiracCanaries(1, clip=setup.clip, included=[canary.is_in],  # audit
                             threat_model=canary.threat_model)
    x, y = torch.from_numpy(data.x), torch.from_numpy(data.y)
    if bug == "rows_twice":  # THE BUG: each person stored as two rows (same n rows in all)
        half = (len(x) + 1) // 2
        x, y = x[:half].repeat(2, 1)[: len(x)], y[:half].repeat(2)[: len(y)]
    rows = TensorDataset(x, y)
    dataset = canaries.wrap(rows)  # audit: n rows with the canary's slot
    model = canaries.attach(nn.Sequential(nn.Linear(data.features, 4), nn.Tanh(),
                                          nn.Linear(4, data.classes)))  # audit
    q = setup.batch_size / len(dataset)
    loader = DataLoader(dataset, batch_sampler=PoissonBatches(
        len(dataset), q, setup.steps_per_epoch, torch.Generator().manual_seed(seed)))
    optimizer = torch.optim.SGD(model.parameters(), lr=setup.lr)
    canaries.plain(optimizer, loader, noise_divisor=setup.batch_size)  # audit
    head = torch.optim.SGD(model[2].parameters(), lr=setup.lr)  # used by second_optimizer
    params = dict(model.named_parameters())

    def loss(p, x, y):
        return nn.functional.cross_entropy(functional_call(model, p, (x[None],)), y[None])

    per_example = vmap(grad(loss), in_dims=(None, 0, 0))
    noise = torch.Generator().manual_seed(1234 if bug == "noise_constant_seed" else seed + 1)
    C, b, std = setup.clip, setup.batch_size, setup.sigma * setup.clip
    for _ in range(setup.epochs):
        for x, y in loader:
            if bug == "noise_recreated":
                noise = torch.Generator().manual_seed(seed + 1)  # THE BUG: re-seeded each step
            g = per_example({k: v.detach() for k, v in params.items()}, x, y)
            canaries.inject(g)  # audit
            if bug == "per_tensor_clipping":  # THE BUG: each tensor clipped to C alone
                factors = {k: torch.clamp(C / (v.flatten(1).norm(dim=1) + 1e-12), max=1.0)
                           for k, v in g.items()}
            else:
                norms = torch.sqrt(sum(v.flatten(1).pow(2).sum(1) for v in g.values()))
                whole = torch.clamp(C / (norms + 1e-12), max=1.0)
                factors = {k: whole for k in g}
            for name, p in params.items():
                f = factors[name].view(-1, *[1] * (g[name].dim() - 1))
                summed = (g[name] * f).sum(0)
                scale = std / 4 if bug == "noise_quarter" else std  # THE BUG: too little noise
                if bug == "bias_no_noise" and p.dim() == 1:
                    scale = 0.0  # THE BUG: noise only on the weight matrices (a p.dim() filter)
                p.grad = (summed + scale * torch.randn(p.shape, generator=noise)) / b
            optimizer.step()
            if bug == "second_optimizer":  # THE BUG: the head also stepped on the batch's loss
                head.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                head.step()
    return canaries.result(setup)  # audit


def train(data, canary, setup, seed):
    """Correct DP-SGD."""
    return _train(data, canary, setup, seed)


def noise_recreated(data, canary, setup, seed):
    """The noise generator re-created inside the loop: the same noise at every step."""
    return _train(data, canary, setup, seed, "noise_recreated")


def noise_constant_seed(data, canary, setup, seed):
    """The noise generator seeded by a constant: the same noise in every training."""
    return _train(data, canary, setup, seed, "noise_constant_seed")


def noise_quarter(data, canary, setup, seed):
    """A quarter of the claimed noise."""
    return _train(data, canary, setup, seed, "noise_quarter")


def per_tensor_clipping(data, canary, setup, seed):
    """Each parameter tensor clipped to C separately."""
    return _train(data, canary, setup, seed, "per_tensor_clipping")


def unseeded_init(data, canary, setup, seed):
    """The model's initial parameters not drawn from the seed (torch's global generator)."""
    return _train(data, canary, setup, seed, "unseeded_init")


def bias_no_noise(data, canary, setup, seed):
    """No noise on the bias vectors (a ``p.dim() > 1`` filter): the canary block is noised."""
    return _train(data, canary, setup, seed, "bias_no_noise")


def rows_twice(data, canary, setup, seed):
    """Each person stored as two rows of the script's dataset (correct DP-SGD on those rows)."""
    return _train(data, canary, setup, seed, "rows_twice")


def second_optimizer(data, canary, setup, seed):
    """The head (the last Linear) also stepped by a plain SGD on the batch's loss (no clipping,
    no noise) after the private step."""
    return _train(data, canary, setup, seed, "second_optimizer")
