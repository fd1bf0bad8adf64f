"""The replay's ``absent`` probe (audit/deployed/record_replay.py, docs/design.md §14.7): the
canary slot removed from every batch (add/remove adjacency) against the zeroed run (the slot
present, its gradient 0). Correct DP-SGD receives the same in both (bound 0 up to rounding);
a layer that mixes the batch's examples (batch statistics, BatchNorm in train mode), rows
mixed before clipping (a micro-batch's mean), a sum divided by the batch's actual size, or a
noise re-seeded from or scaled by the batch does not, and the probe's message names which
(BatchNorm only when the model runs one: issue 42 item 5).

A small plain torch DP-SGD loop: per-example gradients (torch.func), Poisson batches from a
seeded generator, clipping to C, N(0, sigma^2 C^2) noise, the sum divided by b."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.func import functional_call, grad, jacrev, vmap
from torch.utils.data import DataLoader, TensorDataset

from audit.deployed.instrument import CANARY_MODULE
from audit.deployed.record_replay import ReplayResult, replay

N, BATCH, STEPS, SIGMA, CLIP = 60, 10, 6, 1.0, 1.0


class Poisson:
    """Poisson batches (each row w.p. q) from the loop's own seeded generator."""

    def __init__(self, n: int, q: float, generator: torch.Generator) -> None:
        self.n, self.q, self.generator = n, q, generator

    def __len__(self) -> int:
        return STEPS

    def __iter__(self):
        for _ in range(STEPS):
            draw = torch.rand(self.n, generator=self.generator) < self.q
            yield torch.nonzero(draw).flatten().tolist()


class BatchStandardize(nn.Module):
    """BatchNorm in train mode without running statistics: (h - mean_batch) / std_batch,
    then a learned scale and shift. Each example's output depends on the whole batch."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.bias = nn.Parameter(torch.zeros(width))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = (h - h.mean(0)) / (h.std(0) + 1e-5)
        return h * self.weight + self.bias


def data(seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N, 5, generator=g)
    return TensorDataset(x, (x[:, 0] > 0).long())


def training(bug: str = ""):
    """The loop; ``bug``: "batch_norm" (a batch-statistics layer of the user's own),
    "batch_norm_module" (torch's BatchNorm1d in train mode), "micro_mean" (each row's
    gradient replaced by its micro-batch's mean before clipping, TensorFlow Privacy issue #81),
    "len_x" (divided by the batch's actual size, Opacus issue #571), "noise_from_len" (the
    noise generator re-seeded from the batch's size at every step) or "noise_scale_len" (the
    noise's standard deviation sigma C len(x) / b, Opacus issue #753)."""

    def train(canaries, seed: int) -> None:
        torch.manual_seed(seed)
        dataset = canaries.wrap(data(seed))
        layers = [nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 2)]
        if bug == "batch_norm":
            layers.insert(1, BatchStandardize(8))
        if bug == "batch_norm_module":
            layers.insert(1, nn.BatchNorm1d(8, track_running_stats=False))  # torch.func
        model = canaries.attach(nn.Sequential(*layers))
        loader = DataLoader(dataset, batch_sampler=Poisson(
            len(dataset), BATCH / len(dataset), torch.Generator().manual_seed(seed)))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        canaries.plain(optimizer, loader, noise_divisor=BATCH)
        params = dict(model.named_parameters())
        noise = torch.Generator().manual_seed(seed + 1)

        def loss(p, x, y):
            return nn.functional.cross_entropy(functional_call(model, p, (x[None],)), y[None])

        def losses(p, x, y):  # each example's loss, the batch's statistics shared
            return nn.functional.cross_entropy(functional_call(model, p, (x,)), y,
                                               reduction="none")

        for x, y in loader:
            detached = {k: v.detach() for k, v in params.items()}
            if bug.startswith("batch_norm"):  # per-example gradients through the statistics
                g = jacrev(losses)(detached, x, y)
            else:
                g = vmap(grad(loss), in_dims=(None, 0, 0))(detached, x, y)
            if bug == "micro_mean":  # each row carries its micro-batch's (5 rows) mean
                g = {k: torch.cat([c.mean(0, keepdim=True).expand_as(c) for c in v.split(5)])
                     for k, v in g.items()}
            canaries.inject(g)
            norms = torch.sqrt(sum(v.flatten(1).pow(2).sum(1) for v in g.values()))
            factor = torch.clamp(CLIP / (norms + 1e-12), max=1.0)
            divisor = len(x) if bug == "len_x" else BATCH
            if bug == "noise_from_len":
                noise = torch.Generator().manual_seed(1000 * seed + len(x))
            for name, p in params.items():
                summed = (g[name] * factor.view(-1, *[1] * (g[name].dim() - 1))).sum(0)
                z = torch.randn(p.shape, generator=noise)
                std = SIGMA * CLIP * (len(x) / BATCH if bug == "noise_scale_len" else 1.0)
                p.grad = (summed + std * z) / divisor
            optimizer.step()

    return train


def probe(result: ReplayResult, name: str):
    return next(p for p in result.probes if p.probe == name)


def test_a_correct_training_passes_the_absent_probe() -> None:
    result = replay(training(), seed=0, clip=CLIP, noise_divisor=BATCH)
    assert result.passed, result.message
    absent = probe(result, "absent")
    assert absent.passed and absent.tested_steps > 0
    # bound 0: removing a slot whose gradient is 0 changes nothing beyond float rounding
    assert absent.sensitivity <= result.tolerance < 1e-2


def test_a_batch_statistics_layer_is_found_by_the_absent_probe() -> None:
    result = replay(training("batch_norm"), seed=0, clip=CLIP, noise_divisor=BATCH)
    assert not result.passed
    failure = result.first_failure
    assert failure is not None and failure.probe == "absent", result.message
    assert failure.sensitivity > 10 * failure.tolerance
    # where: the tensors the other examples' changed gradients reach, the layer's among them
    assert "1.weight" in failure.tensors and "0.weight" in failure.tensors
    assert f"{CANARY_MODULE}.block.weight" not in failure.tensors  # only the noise reaches it
    # a layer of the user's own: not one the replay knows, so no BatchNorm is blamed; the
    # sentence names what the evidence shows, the rows mixed before clipping
    assert "the rows are mixed across examples before clipping" in result.message
    assert "a layer of your own" in result.message
    assert "BatchNorm" not in result.message and f"step {failure.step}" in result.message
    # the slot's own row is rewritten in the other probes: only the absent probe sees the mixing
    assert [p.probe for p in result.probes if not p.passed] == ["absent"]


def test_torch_batch_norm_is_named_by_its_module_path() -> None:
    result = replay(training("batch_norm_module"), seed=0, clip=CLIP, noise_divisor=BATCH,
                    probes=("absent",))
    assert result.failed and result.first_failure is not None
    assert result.first_failure.probe == "absent"
    assert "a layer mixes examples in the batch: 1 (BatchNorm1d)" in result.message, (
        result.message)


def test_a_micro_batch_mean_is_not_blamed_on_batch_norm() -> None:
    # TensorFlow Privacy issue #81: each row carries its micro-batch's mean gradient, so one
    # example reaches 5 clipped rows; the model has no BatchNorm
    result = replay(training("micro_mean"), seed=0, clip=CLIP, noise_divisor=BATCH,
                    probes=("absent",))
    assert result.failed and result.first_failure is not None
    assert result.first_failure.probe == "absent"
    assert "BatchNorm" not in result.message
    cause = result.message.split("(probe absent): ")[1]
    assert cause.startswith("removing the slot from the batch changes the other examples' "
                            "gradients"), cause
    # the evidence: 5 rows of distinct examples with exactly the same gradient (a mean)
    assert "up to 5 rows of distinct examples carry exactly the same gradient" in cause
    assert "TensorFlow Privacy issue #81" in cause


def test_divided_by_the_actual_batch_size_is_named_first() -> None:
    result = replay(training("len_x"), seed=0, clip=CLIP, noise_divisor=BATCH)
    assert not result.passed
    assert result.first_failure is not None and result.first_failure.probe == "absent"
    # the crafted probe fails too (b / len(x) C), but reported after the absent probe's kind
    assert result.message.index("divided by the batch's actual size") < result.message.index(
        "crafted")
    assert "Opacus issue #571" in result.message
    assert not probe(result, "crafted").passed


def test_noise_seeded_from_the_batch_is_named() -> None:
    # the slot's absence changes len(x), hence the noise: the difference reaches the canary
    # block, whose gradient is 0 in both runs
    result = replay(training("noise_from_len"), seed=0, clip=CLIP, noise_divisor=BATCH,
                    probes=("absent",))
    assert not result.passed
    assert result.first_failure is not None and result.first_failure.probe == "absent"
    assert f"{CANARY_MODULE}.block.weight" in result.first_failure.tensors
    assert "removing the slot changes the noise itself" in result.message
    assert "seeded or advanced from the batch (its size or content)" in result.message


def test_noise_scaled_by_the_batch_size_is_named() -> None:
    # Opacus issue #753: the same noise draw, its std sigma C len(x) / b: the canary block's
    # noise without the slot is the zeroed run's times (n - 1) / n
    result = replay(training("noise_scale_len"), seed=0, clip=CLIP, noise_divisor=BATCH,
                    probes=("absent",))
    assert result.failed and result.first_failure is not None
    assert result.first_failure.probe == "absent"
    cause = result.message.split("(probe absent): ")[1]
    assert cause.startswith("the noise's standard deviation depends on the batch (its actual "
                            "size"), cause
    assert "(n - 1) / n for the step's n = " in cause and "seeded" not in cause
    # one canary coordinate: every two vectors are parallel, so the two causes are not told
    # apart and both are named (seed 1: the one slot is drawn)
    one = replay(training("noise_scale_len"), seed=1, clip=CLIP, noise_divisor=BATCH,
                 probes=("absent",), slots=1)
    assert one.failed and "cannot be told apart" in one.message, one.message


def test_the_absent_probe_alone() -> None:
    result = replay(training("batch_norm"), seed=0, clip=CLIP, noise_divisor=BATCH,
                    probes=("absent",))
    assert not result.passed and result.runs == 3  # two zeroed runs + the absent run
    assert result.first_failure is not None and result.first_failure.probe == "absent"
    assert "probe" not in result.message.split("(probe absent)")[1]  # no other probe ran


@pytest.mark.parametrize("bug", ["", "batch_norm"])
def test_json_ready(bug: str) -> None:
    import json

    result = replay(training(bug), seed=1, clip=CLIP, noise_divisor=BATCH, probes=("absent",))
    out = json.loads(json.dumps(result.to_dict()))
    assert out["passed"] is (bug == "")
    assert [p["probe"] for p in out["probes"]] == ["absent"]
