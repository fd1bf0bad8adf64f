"""A user's hand-written DP-SGD loop with a classic bug, and the lines that audit it.

The user's training: an MLP on two Gaussian blobs (their own ``Dataset``), Poisson batches
from their own batch sampler (each example independently with probability q), per-example
gradients with ``torch.func``, clipping to C, Gaussian noise, plain SGD; their accountant is
dp_accounting's ``RdpAccountant`` on ``PoissonSampledDpEvent(q, GaussianDpEvent(sigma))``.

The bug: the noise is drawn with standard deviation ``sigma`` instead of ``sigma * C``. With
C = 5 the training adds a fifth of the noise its accountant assumes (an effective noise
multiplier of sigma / C). ``BUG = False`` trains correctly.

The audit (lines marked ``# audit``): m Dirac canaries on a parameter block attached to the
MLP, their slots appended to the Dataset, one ``canaries.inject(per_example)`` call before
clipping, and the one-run audit against the user's own accountant after training.

    python examples/buggy_dpsgd/train.py            # writes examples/buggy_dpsgd/report/
    python examples/buggy_dpsgd/train.py --seeds 5  # and seeds.md: eps_lb over 5 seeds
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.utils.data import DataLoader, Dataset

BUG = True


class Blobs(Dataset):
    """Two Gaussian blobs in 10 dimensions, labels 0 and 1."""

    def __init__(self, n: int, seed: int = 0) -> None:
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
        self.n, self.q, self.steps = n, q, steps
        self.generator = torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        return self.steps

    def __iter__(self):
        for _ in range(self.steps):
            yield (
                torch.nonzero(torch.rand(self.n, generator=self.generator) < self.q)
                .flatten()
                .tolist()
            )


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(10, 32), nn.Tanh(), nn.Linear(32, 2))


def train_and_audit(
    *,
    n=2000,
    m=1000,
    batch_size=150,
    epochs=4,
    sigma=2.0,
    clip=5.0,
    lr=0.05,
    delta=1e-5,
    seed=0,
    bug=BUG,
    out=None,
):
    """Train with the (buggy) loop, then audit it in one run; returns the audit."""
    import dp_accounting

    from audit.deployed import DiracCanaries, one_run_audit  # audit

    torch.manual_seed(seed)
    canaries = DiracCanaries(m, clip=clip, seed=seed)  # audit
    dataset = canaries.wrap(Blobs(n, seed))  # audit: m canary slots after the n examples
    model = canaries.attach(mlp())  # audit: the canaries' parameter block
    q = batch_size / len(dataset)
    steps = round(1 / q)
    loader = DataLoader(dataset, batch_sampler=PoissonBatches(len(dataset), q, steps, seed))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    canaries.plain(optimizer, loader, noise_divisor=batch_size)  # audit
    params = dict(model.named_parameters())

    def loss(p, x, y):
        return nn.functional.cross_entropy(functional_call(model, p, (x[None],)), y[None])

    per_example_grad = vmap(grad(loss), in_dims=(None, 0, 0))
    noise = torch.Generator().manual_seed(seed + 1)
    for _ in range(epochs):
        for x, y in loader:
            g = per_example_grad({k: v.detach() for k, v in params.items()}, x, y)
            canaries.inject(g)  # audit: rewrite the canary rows before clipping
            norms = torch.sqrt(sum(v.flatten(1).pow(2).sum(1) for v in g.values()))
            factor = torch.clamp(clip / (norms + 1e-12), max=1.0)
            for name, p in params.items():
                summed = (g[name] * factor.view(-1, *[1] * (g[name].dim() - 1))).sum(0)
                std = sigma if bug else sigma * clip  # THE BUG: the noise should be sigma * C
                p.grad = (summed + std * torch.randn(p.shape, generator=noise)) / batch_size
            optimizer.step()
    accountant = dp_accounting.rdp.RdpAccountant()
    accountant.compose(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps * epochs
    )
    scores = canaries.scores(sampling_probability=q)  # audit: sigma estimated from the observations
    audit = one_run_audit(scores, canaries.included, accountant, delta=delta,  # audit
                          sampler="poisson", attack="dirac_lr")
    if out is not None:
        audit.write(
            out,
            title="Example (c): a hand-written DP-SGD loop, noise sigma instead of sigma * C",
            notes=(
                f"Training: n = {n} examples + m = {m} canary slots, Poisson q = {q:.4g}, "
                f"{steps * epochs} steps, "
                f"claimed sigma = {sigma}, C = {clip}; bug = {bug} (noise std "
                f"{'sigma' if bug else 'sigma * C'}).",
            ),
        )
    return audit


def seed_distribution(seeds: range, folder: Path) -> str:
    """eps_lb and the verdict over seeds, buggy and fixed (a random quantity is a distribution)."""
    from audit.report.formatting import fmt

    def low(value: float) -> str:
        return fmt(float(value), side="lower")

    rows, table = [], {}
    for bug in (True, False):
        audits = [train_and_audit(bug=bug, seed=seed) for seed in seeds]
        eps = np.array([a.epsilon_lb for a in audits])
        verdicts = [a.verdict for a in audits]
        table[bug] = (eps, verdicts, audits[0].claim.epsilon)
        rows.append(
            f"| {'sigma (bug)' if bug else 'sigma * C (fixed)'} | {audits[0].claim.epsilon:.3g} | "
            f"{low(np.median(eps))} | {low(np.percentile(eps, 10))} | {low(eps.min())} | "
            f"{verdicts.count('violated')} of {len(verdicts)} |"
        )
    text = "\n".join(
        [
            f"# Example (c) over {len(seeds)} seeds ({seeds.start}..{seeds.stop - 1})",
            "",
            "One training per seed (data, canaries' coins, batches, noise all from the seed); "
            "eps_lb at "
            "delta = 1e-5 with 95% confidence each.",
            "",
            "| noise std | claimed eps | eps_lb median | 10th percentile | minimum | violated |",
            "|---|---|---|---|---|---|",
            *rows,
            "",
            "Per seed (buggy): " + ", ".join(low(e) for e in table[True][0]),
            "Per seed (fixed): " + ", ".join(low(e) for e in table[False][0]),
            "",
            "Lower bounds are rounded down (audit.report.formatting.fmt(side='lower')).",
            "",
        ]
    )
    (folder / "seeds.md").write_text(text, encoding="utf-8")
    return text


if __name__ == "__main__":
    # the same floats on every machine (a thread count changes summation order)
    torch.set_num_threads(1)
    folder = Path(__file__).resolve().parent
    write = "--no-write" not in sys.argv
    result = train_and_audit(out=folder / "report" if write else None)
    print(result.sentence())
    correct = train_and_audit(bug=False, out=folder / "report-fixed" if write else None)
    print(correct.sentence())
    if "--seeds" in sys.argv:
        print(seed_distribution(range(int(sys.argv[sys.argv.index("--seeds") + 1])), folder))
