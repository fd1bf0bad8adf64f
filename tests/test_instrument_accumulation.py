"""Gradient accumulation under the Dirac canaries (audit/deployed/instrument.py; issue 33
leftovers): k loader batches -> one optimizer step, the step's batch the union of their rows,
the divisor the macro-batch's b.

With sigma = 0 the canary block's gradient is exact: y_{j,t} = 1[j IN and in step t's batch]
(the clipped Dirac row C e_j summed once per step, divided by the declared b, read back in units
of C / b), so the grouping is checked exactly, not statistically. Also: a loader batch processed
in micro-batches (each injected alone, one step at its end), Opacus with k backward passes per
step and with BatchMemoryManager, and the refusals (a step within a batch, a step without a
rewritten batch).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.utils.data import DataLoader, Dataset

from audit.deployed import DiracCanaries, one_run_audit
from audit.deployed.claims import DeployedClaim

N, M, CLIP = 60, 20, 1.0


class Rows(Dataset):
    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 4, generator=g)
        self.y = torch.randint(0, 2, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i]


class Poisson:
    """Poisson batches at q from one generator seeded once."""

    def __init__(self, n: int, q: float, steps: int, seed: int) -> None:
        self.n, self.q, self.steps = n, q, steps
        self.generator = torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        return self.steps

    def __iter__(self):
        for _ in range(self.steps):
            yield torch.nonzero(torch.rand(self.n, generator=self.generator) < self.q).flatten(
            ).tolist()


def plain_accumulating(canaries: DiracCanaries, *, k: int, sigma: float, batches: int,
                       macro: float, split: int | None = None, seed: int = 0,
                       step_within: bool = False) -> None:
    """A plain torch DP-SGD loop stepping once per k loader batches (the clipped sums of the k
    batches added, the noise drawn once per step, divided by the macro-batch's b); ``split``:
    each loader batch's per-example gradients injected in micro-batches of that many rows."""
    torch.manual_seed(seed)
    dataset = canaries.wrap(Rows(N))
    model = canaries.attach(nn.Sequential(nn.Linear(4, 2)))
    loader = DataLoader(dataset, batch_sampler=Poisson(len(dataset), 0.1, batches, seed))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    canaries.plain(optimizer, loader, noise_divisor=macro)
    params = dict(model.named_parameters())

    def loss(p, x, y):
        return nn.functional.cross_entropy(functional_call(model, p, (x[None],)), y[None])

    per_example = vmap(grad(loss), in_dims=(None, 0, 0))
    noise = torch.Generator().manual_seed(seed + 1)
    summed = {name: torch.zeros_like(p) for name, p in params.items()}
    for i, (x, y) in enumerate(loader):
        detached = {name: v.detach() for name, v in params.items()}
        parts = [(x, y)] if split is None else list(zip(x.split(split), y.split(split),
                                                        strict=True))
        if not len(x):
            parts = [(x, y)]
        for a, b in parts:
            g = dict(per_example(detached, a, b)) if len(a) else {
                name: torch.zeros((0, *p.shape)) for name, p in params.items()}
            canaries.inject(g)
            if len(a):
                norms = torch.sqrt(sum(v.flatten(1).pow(2).sum(1) for v in g.values()))
                factor = torch.clamp(CLIP / (norms + 1e-12), max=1.0)
                for name in params:
                    summed[name] += (g[name] * factor.view(-1, *[1] * (g[name].dim() - 1))).sum(0)
            if step_within:
                break
        if (i + 1) % k == 0:
            for name, p in params.items():
                z = torch.randn(p.shape, generator=noise)
                p.grad = (summed[name] + sigma * CLIP * z) / macro
                summed[name] = torch.zeros_like(p)
            optimizer.step()


def exact(canaries: DiracCanaries) -> np.ndarray:
    """1[j IN] x (rows of j's slot in step t's batch): the canary block's y without noise.
    Independent Poisson loader batches accumulated into one step can hold an example twice
    (each row clipped alone: 2 C in that step, as the clipped sum really has)."""
    assert canaries.real is not None
    expected = np.zeros((M, len(canaries.step_batches)))
    for t, rows in enumerate(canaries.step_batches):
        slots = rows[rows >= canaries.real] - canaries.real
        np.add.at(expected[:, t], slots, canaries.included[slots])
    return expected


def test_plain_accumulation_groups_k_batches_per_step():
    canaries = DiracCanaries(M, clip=CLIP, seed=1)
    plain_accumulating(canaries, k=3, sigma=0.0, batches=30, macro=24.0)
    y = canaries.observations
    assert y.shape == (M, 10)
    assert canaries.batches_per_step == [3] * 10 and canaries.unstepped_batches == 0
    for t in range(10):  # the step's batch is the union of its three loader batches, in order
        np.testing.assert_array_equal(canaries.step_batches[t],
                                      np.concatenate(canaries.batches[3 * t: 3 * t + 3]))
    # y = 1 exactly where an IN canary was in the macro-batch (float32 sums: 1e-5)
    np.testing.assert_allclose(y, exact(canaries), atol=1e-5)
    assert exact(canaries).sum() > 0
    assert canaries.noise_divisor == 24.0
    record = canaries.record(0)
    assert record.batch_rows.tolist() == [b.size for b in canaries.step_batches]


def test_micro_batches_of_one_loader_batch_form_one_step():
    canaries = DiracCanaries(M, clip=CLIP, seed=2)
    plain_accumulating(canaries, k=1, sigma=0.0, batches=12, macro=8.0, split=3)
    assert canaries.observations.shape == (M, 12)
    assert canaries.batches_per_step == [1] * 12
    for t in range(12):
        np.testing.assert_array_equal(canaries.step_batches[t], canaries.batches[t])
    np.testing.assert_allclose(canaries.observations, exact(canaries), atol=1e-5)


def test_accumulating_audit_aligns_batches_and_steps():
    """The canaries-form audit of a correct accumulating loop: batch_alignment passes (each
    step's group counts once), no finding fails at sigma = 2 (one seed; levels 0.05 / K).
    The claim: 30 steps at the macro-batch's q = 1 - 0.9^2 (two loader batches at 0.1)."""
    canaries = DiracCanaries(M, clip=CLIP, seed=3)
    plain_accumulating(canaries, k=2, sigma=2.0, batches=60, macro=16.0)
    claim = DeployedClaim(epsilon=1.0, delta=1e-5, accountant="stated", assumptions=(),
                          sample_rate=1 - 0.9**2, noise_multiplier=2.0, steps=30)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        audit = one_run_audit(canaries, claim, delta=1e-5, family=None)
    names = {f.name: f for f in audit.findings}
    assert "30 batches for 30 optimizer steps" in names["batch_alignment"].message
    assert not audit.failed, [f"{f.name}: {f.message}" for f in audit.failed]
    assert "not compared" not in names["batch_sizes"].message  # enabled by the recorded sizes


def test_trailing_batches_without_a_step_are_counted():
    canaries = DiracCanaries(M, clip=CLIP, seed=4)
    plain_accumulating(canaries, k=3, sigma=0.0, batches=10, macro=24.0)  # 3 steps + 1 batch
    assert canaries.observations.shape == (M, 3)
    assert canaries.unstepped_batches == 1


def test_a_step_within_a_batch_is_refused():
    canaries = DiracCanaries(M, clip=CLIP, seed=5)
    plain_accumulating(canaries, k=1, sigma=0.0, batches=6, macro=8.0, split=2,
                       step_within=True)
    with pytest.raises(ValueError, match="took part of loader batch"):
        canaries.observations  # noqa: B018


def test_a_step_without_a_rewritten_batch_is_refused():
    canaries = DiracCanaries(M, clip=CLIP, seed=6)
    dataset = canaries.wrap(Rows(N))
    model = canaries.attach(nn.Sequential(nn.Linear(4, 2)))
    loader = DataLoader(dataset, batch_size=10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    canaries.plain(optimizer, loader, noise_divisor=10.0)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    with pytest.raises(ValueError, match="rewrote no batch"):
        canaries.observations  # noqa: B018


def opacus_training(canaries: DiracCanaries, *, k: int, physical: int | None = None,
                    steps: int = 8) -> None:
    """Opacus at sigma = 0: k backward passes per step (a list of grad_sample per parameter;
    Opacus allows it without Poisson sampling only), or Poisson batches cut by
    BatchMemoryManager(max_physical_batch_size=physical)."""
    opacus = pytest.importorskip("opacus")
    from opacus.utils.batch_memory_manager import BatchMemoryManager

    torch.manual_seed(0)
    dataset = canaries.wrap(Rows(N))
    model = canaries.attach(nn.Sequential(nn.Linear(4, 2)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(dataset, batch_size=16, generator=torch.Generator().manual_seed(0))
    engine = opacus.PrivacyEngine(accountant="rdp")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, optimizer, loader = engine.make_private(
            module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=0.0,
            max_grad_norm=CLIP, poisson_sampling=physical is not None,
        )
        canaries.opacus(model, optimizer, loader)
        if physical is not None:
            with BatchMemoryManager(data_loader=loader, max_physical_batch_size=physical,
                                    optimizer=optimizer) as memory:
                for x, y in memory:
                    optimizer.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    optimizer.step()
            return
        batches = iter(loader)
        for _ in range(steps):
            optimizer.zero_grad()
            for _ in range(k):
                x, y = next(batches)
                nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()


def test_opacus_k_backward_passes_per_step():
    canaries = DiracCanaries(M, clip=CLIP, seed=7)
    opacus_training(canaries, k=2, steps=2)
    assert canaries.batches_per_step == [2, 2]
    # Opacus divides by expected_batch_size x 2 (accumulated_iterations): read back with it
    np.testing.assert_allclose(canaries.observations, exact(canaries), atol=1e-5)


def test_opacus_batch_memory_manager():
    canaries = DiracCanaries(M, clip=CLIP, seed=8)
    opacus_training(canaries, k=1, physical=4)
    steps = canaries.observations.shape[1]
    assert steps == len(canaries.batches) and canaries.batches_per_step == [1] * steps
    np.testing.assert_allclose(canaries.observations, exact(canaries), atol=1e-5)



def test_replay_of_an_accumulating_loop() -> None:
    """The replay under accumulation: one probed slot per optimizer step. One batch split into
    micro-batches passes at C / b (before: each micro-batch got its own probed slot, k C);
    k independent Poisson batches accumulated into a step can hold the slot twice: a true 2 C,
    named as such."""
    from audit.deployed import replay

    def split(canaries: DiracCanaries, seed: int) -> None:
        plain_accumulating(canaries, k=1, sigma=1.0, batches=6, macro=7.6, split=3, seed=seed)

    result = replay(split, seed=3, clip=CLIP, noise_divisor=7.6, slots=16)
    assert result.passed, result.message
    assert abs(result.sensitivity - 1.0) < 1e-3  # float rounding only

    def independent(canaries: DiracCanaries, seed: int) -> None:
        plain_accumulating(canaries, k=3, sigma=1.0, batches=18, macro=22.8, seed=seed)

    result = replay(independent, seed=3, clip=CLIP, noise_divisor=22.8, slots=16)
    assert not result.passed and "accumulated batches" in result.message
