"""Clipped sums without per-example gradients (audit.training.ghost_norms) against torch.func's
per-example gradients (the ``vmap`` method) for the built-in CNN and transformer and an MLP.

Tolerance: both methods compute the same float32 quantities in different orders (the ghost
identity sums Gram products, the vmap path squares materialised gradients; the sums are one
product over all examples against a per-example bmm), so they agree to float32 rounding:
rtol 1e-5 (a few hundred ulps of the summed terms' scale, far below any missing or wrong term,
which moves a sum by O(1) of a per-example gradient). The canary's coordinates, which real rows
never move, are exactly 0 in both.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch import nn

from audit.sampling.factory import make_sampler
from audit.training import ghost_norms
from audit.training.engine import train
from audit.training.func_engine import TorchModel, torch_model
from audit.training.ghost_norms import plan
from audit.training.models import augment
from audit.training.torch_models import build_canary_model
from audit.training.trials import TrainingConfig, build_problem

CASES = {"cnn": "digits", "transformer": "sequences", "mlp": "digits"}


def mlp(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """A two-layer MLP (Linear - Tanh - Linear) on flattened inputs."""
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(int(np.prod(input_shape)), 16),
        nn.Tanh(),
        nn.Linear(16, num_classes),
    )


def _problem(model: str):
    """The engine's problem of the built-in ``cnn`` or ``transformer``, or of :func:`mlp` (the
    cnn's problem with the MLP in its place)."""
    config = TrainingConfig(
        dataset=CASES[model],
        model="cnn" if model == "mlp" else model,
        sampler="poisson",
        sigma=1.0,
        clip=1.0,
        lr=0.5,
        batch_size=10,
        n=200,
        canary="dirac",
        threat_model="isolated",
    )
    problem = build_problem(config)
    if model == "mlp":
        network = torch_model(mlp, (1, 8, 8), 10, seed=0)
        problem = dataclasses.replace(problem, model=network, theta0=network.initial())
    return problem


@pytest.mark.parametrize("model", list(CASES))
def test_ghost_sums_and_norms_equal_the_per_example_gradients(model):
    problem = _problem(model)
    assert problem.model.method == "compiled"  # the default (ghost plan, batched layers, kernel)
    vmap = dataclasses.replace(problem.model, method="vmap")
    ghost = dataclasses.replace(vmap, method="ghost")
    assert vmap.ghost is None and ghost.ghost is not None
    k, slots = 6, 9
    generator = torch.Generator().manual_seed(1)
    theta = torch.as_tensor(problem.theta0) + 0.2 * torch.randn(k, ghost.size, generator=generator)
    index = torch.randint(1, problem.x.shape[0], (k, slots), generator=generator)
    index[:, 0] = 0  # the canary's row (feature s = 1): its gradient moves the canary block
    rows = augment(torch.as_tensor(problem.x, dtype=torch.float32))[index]
    labels = torch.as_tensor(problem.y)[index]
    weight = (torch.rand(k, slots, generator=generator) < 0.7).float()
    clip = 0.5  # clips most examples: the factors matter
    expected = vmap._clipped_sum(theta, rows, labels, weight, clip, None, None, False, None)
    got = ghost._clipped_sum(theta, rows, labels, weight, clip, None, None, False, None)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6 * expected.abs().max().item())
    # the norms: unclipped sums of one example at a time are its gradient
    grads = vmap.per_example_grads(theta, rows[..., :-1], labels)
    inputs, outputs = torch.func.vmap(
        lambda p, x, y: ghost.ghost.probe_gradients(
            lambda r: torch.func.functional_call(ghost.module, (p, {}), (r,)), x, y
        )
    )(ghost.params(theta), rows[..., :-1], labels)
    terms = [
        rule(module, inputs[name], outputs[name])[0] for name, module, rule in ghost.ghost.layers
    ]
    torch.testing.assert_close(sum(terms), grads.square().sum(-1), rtol=1e-5, atol=0.0)
    real = weight.clone()
    real[:, 0] = 0  # without the canary's row, the canary block is exactly 0
    sums = ghost._clipped_sum(theta, rows, labels, real, clip, None, None, False, None)
    assert not sums[:, : ghost.private_width].any()


@pytest.mark.parametrize("model", ["cnn", "transformer"])
def test_ghost_training_observes_the_dirac_canary_bit_for_bit(model):
    """Real rows add exactly 0 on the canary's coordinate in both methods and the noise is the
    same: the Dirac observations are identical, the parameters equal to float32 rounding."""
    problem = _problem(model)
    batches = make_sampler("poisson", n=200, batch_size=10).sample(np.random.default_rng(2), 8)[
        :, :4
    ]
    canary_in = np.arange(8) < 4
    outputs = []
    for method in ("ghost", "vmap"):
        variant = dataclasses.replace(
            problem, model=dataclasses.replace(problem.model, method=method)
        )
        outputs.append(train(variant, batches, canary_in, [(torch.Generator().manual_seed(5), 8)]))
    assert np.array_equal(outputs[0].y, outputs[1].y)
    np.testing.assert_allclose(outputs[0].theta, outputs[1].theta, rtol=1e-4, atol=1e-5)


class Shared(nn.Module):
    """One Linear layer applied twice: no ghost plan (a layer's input would be overwritten)."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(self.layer(x))


class Mixing(nn.Module):
    """Rows centred on the batch mean: examples are not independent, no ghost plan."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x - x.mean(0))


class Bare(nn.Module):
    """A parameter outside any supported layer: no ghost plan."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale


@pytest.mark.parametrize("inner", [Shared, Mixing, Bare])
def test_modules_without_a_rule_keep_per_example_gradients(inner):
    module = build_canary_model(lambda shape, classes: inner(), (4,), 4, seed=0)
    assert plan(module, 5) is None
    model = TorchModel(
        module=module, features=5, classes=4, private_start=0, private_width=4, method="ghost"
    )
    assert model.ghost is None  # the engine falls back to vmap
    with pytest.raises(ValueError, match=r"method='fast' is not valid.*ghost.*vmap"):
        TorchModel(
            module=module, features=5, classes=4, private_start=0, private_width=4, method="fast"
        )


@pytest.mark.parametrize(
    "geometry",
    [
        dict(kernel_size=3, stride=2, padding=1),
        dict(kernel_size=3, padding=1),
        dict(kernel_size=(2, 3), stride=(1, 2), padding=(0, 2), dilation=(2, 1)),
        dict(kernel_size=1),
    ],
)
def test_unfold_by_gather_is_torch_unfold(geometry):
    """The gather copies the same entries as F.unfold: equal bit for bit."""
    conv = nn.Conv2d(3, 4, **geometry)
    maps = torch.randn(5, 3, 7, 6, generator=torch.Generator().manual_seed(0))
    expected = torch.nn.functional.unfold(
        maps, conv.kernel_size, conv.dilation, conv.padding, conv.stride
    )
    assert torch.equal(ghost_norms._unfold(maps, conv), expected)


@pytest.mark.parametrize("formed", [True, False])
@pytest.mark.parametrize("model", ["cnn", "transformer"])
def test_formed_and_ghost_norms_agree_with_vmap(model, formed, monkeypatch):
    """Both ways of a layer with T > 1 positions (the product formed per example, or the Gram
    identity), forced for every layer, give vmap's clipped sums (rtol 1e-5: float32 rounding of
    sums in another order, as above)."""
    monkeypatch.setattr(
        ghost_norms, "_materialises", lambda positions, inputs, outputs: formed and positions > 1
    )
    problem = _problem(model)
    ghost = dataclasses.replace(problem.model, method="ghost")
    vmap = dataclasses.replace(problem.model, method="vmap")
    generator = torch.Generator().manual_seed(3)
    theta = torch.as_tensor(problem.theta0) + 0.2 * torch.randn(4, ghost.size, generator=generator)
    index = torch.randint(0, problem.x.shape[0], (4, 7), generator=generator)
    rows = augment(torch.as_tensor(problem.x, dtype=torch.float32))[index]
    labels = torch.as_tensor(problem.y)[index]
    weight = (torch.rand(4, 7, generator=generator) < 0.8).float()
    expected = vmap._clipped_sum(theta, rows, labels, weight, 0.5, None, None, False, None)
    got = ghost._clipped_sum(theta, rows, labels, weight, 0.5, None, None, False, None)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6 * expected.abs().max().item())
