"""The ``batched`` gradient method (audit.training.batched_layers): hand-batched layers for the
forward of K models, autograd to the layers' outputs, the ghost norms and sums.

Tolerance: against torch.func's per-example gradients (``vmap``) the clipped sums are the same
float32 quantities computed by other kernels in other orders (a grouped convolution and
``baddbmm`` over the models against vmapped per-example calls), so they agree to float32
rounding: rtol 1e-5, as in tests/test_ghost_norms.py (a missing or wrong term moves a sum by
O(1) of a per-example gradient). The canary block, which real rows never move, is exactly 0, so
the Dirac observations are bit for bit those of the other methods.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch import nn

from audit.sampling.factory import make_sampler
from audit.training import func_engine
from audit.training.batched_layers import BATCHED_LAYERS, batched_plan
from audit.training.engine import train
from audit.training.func_engine import TorchModel, torch_model
from audit.training.ghost_norms import RULES, plan
from audit.training.heap import retain_freed_memory
from audit.training.models import augment
from audit.training.torch_models import build_canary_model
from audit.training.trials import TrainingConfig, build_problem

CASES = {"cnn": "digits", "transformer": "sequences", "mlp": "digits"}


def mlp(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """A two-layer MLP (Linear - Tanh - Linear) on flattened inputs, with a LayerNorm."""
    width = int(np.prod(input_shape))
    return nn.Sequential(
        nn.Flatten(), nn.LayerNorm(width), nn.Linear(width, 16), nn.Tanh(),
        nn.Linear(16, num_classes),
    )


def _problem(model: str):
    config = TrainingConfig(
        dataset=CASES[model], model="cnn" if model == "mlp" else model, sampler="poisson",
        sigma=1.0, clip=1.0, lr=0.5, batch_size=10, n=200, canary="dirac",
        threat_model="isolated",
    )
    problem = build_problem(config)
    if model == "mlp":
        network = torch_model(mlp, (1, 8, 8), 10, seed=0)
        problem = dataclasses.replace(problem, model=network, theta0=network.initial())
    return problem


def test_every_ghost_rule_has_a_batched_layer():
    assert set(BATCHED_LAYERS) == set(RULES)


@pytest.mark.parametrize("model", list(CASES))
def test_batched_sums_equal_the_per_example_gradients(model):
    problem = _problem(model)
    vmap = dataclasses.replace(problem.model, method="vmap")
    batched = dataclasses.replace(vmap, method="batched")
    assert batched.batched is not None and vmap.batched is None
    k, slots = 6, 9
    generator = torch.Generator().manual_seed(1)
    theta = torch.as_tensor(problem.theta0) + 0.2 * torch.randn(
        k, batched.size, generator=generator
    )
    index = torch.randint(1, problem.x.shape[0], (k, slots), generator=generator)
    index[:, 0] = 0  # the canary's row (feature s = 1): its gradient moves the canary block
    rows = augment(torch.as_tensor(problem.x, dtype=torch.float32))[index]
    labels = torch.as_tensor(problem.y)[index]
    weight = (torch.rand(k, slots, generator=generator) < 0.7).float()
    clip = 0.5  # clips most examples: the factors matter
    expected = vmap._clipped_sum(theta, rows, labels, weight, clip, None, None, False, None)
    got = batched._clipped_sum(theta, rows, labels, weight, clip, None, None, False, None)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6 * expected.abs().max().item())
    # one example at a time, unclipped (clip large): its gradient
    one = torch.zeros(k, slots)
    one[:, 3] = 1.0
    grads = vmap.per_example_grads(theta, rows[..., :-1], labels)[:, 3]
    got = batched._clipped_sum(theta, rows, labels, one, 1e9, None, None, False, None)
    torch.testing.assert_close(got, grads, rtol=1e-5, atol=1e-6 * grads.abs().max().item())
    real = weight.clone()
    real[:, 0] = 0  # without the canary's row, the canary block is exactly 0
    sums = batched._clipped_sum(theta, rows, labels, real, clip, None, None, False, None)
    assert not sums[:, : batched.private_width].any()


@pytest.mark.parametrize("model", ["cnn", "transformer"])
def test_batched_training_observes_the_dirac_canary_bit_for_bit(model):
    """Real rows add exactly 0 on the canary's coordinate in every method and the noise is the
    same: the Dirac observations are identical, the parameters equal to float32 rounding."""
    problem = _problem(model)
    batches = make_sampler("poisson", n=200, batch_size=10).sample(np.random.default_rng(2), 8)[
        :, :4
    ]
    canary_in = np.arange(8) < 4
    outputs = {}
    for method in ("batched", "vmap"):  # ghost against vmap: tests/test_ghost_norms.py
        variant = dataclasses.replace(
            problem, model=dataclasses.replace(problem.model, method=method)
        )
        outputs[method] = train(
            variant, batches, canary_in, [(torch.Generator().manual_seed(5), 8)]
        )
    assert np.array_equal(outputs["batched"].y, outputs["vmap"].y)
    # 4 steps of float32 rounding in other orders (as tests/test_ghost_norms.py)
    np.testing.assert_allclose(
        outputs["batched"].theta, outputs["vmap"].theta, rtol=1e-4, atol=1e-5
    )


class SequenceFirst(nn.Module):
    """A Linear applied with the positions in front of the examples (sequence-first layout):
    each example stays alone, but the rows of one model are no longer contiguous, so the
    batched layer would mix models: no batched plan."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.layer(x.view(x.shape[0], 2, 2).transpose(0, 1))  # (positions, S, 2)
        return h.transpose(0, 1).reshape(x.shape[0], 4)


class Shared(nn.Module):
    """One Linear layer applied twice: no ghost plan, so no batched plan."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(self.layer(x))


def test_modules_the_batched_layers_do_not_fit_keep_the_other_methods():
    module = build_canary_model(lambda shape, classes: SequenceFirst(), (4,), 4, seed=0)
    ghost = plan(module, 5)
    assert ghost is not None and batched_plan(module, ghost, 5) is None
    model = TorchModel(
        module=module, features=5, classes=4, private_start=0, private_width=4, method="batched"
    )
    assert model.batched is None and model.ghost is not None  # the engine keeps ghost
    module = build_canary_model(lambda shape, classes: Shared(), (4,), 4, seed=0)
    model = TorchModel(
        module=module, features=5, classes=4, private_start=0, private_width=4, method="batched"
    )
    assert model.batched is None and model.ghost is None  # and vmap without a ghost plan
    rows = augment(torch.randn(3, 2, 5))  # with the trailing ones the engine appends
    rows[..., -2] = 0.0  # real rows: canary feature 0
    theta = torch.as_tensor(model.initial()).expand(3, -1).clone()
    sums = model._clipped_sum(
        theta, rows, torch.zeros(3, 2, dtype=torch.long), torch.ones(3, 2), 1.0, None, None,
        False, None,
    )
    assert sums.shape == (3, model.size) and not sums[:, :4].any()


def test_the_default_method_is_compiled_with_the_batched_fallback():
    """``compiled`` (audit.training.compiled_cnn) where the kernel covers the module, with the
    batched plan beside it for the devices, dtypes and modules the kernel does not take."""
    assert func_engine.GRADIENT_METHOD == "compiled"
    assert _problem("cnn").model.batched is not None
    assert _problem("transformer").model.batched is not None


def test_freed_memory_is_retained_on_glibc():
    """mallopt exists in glibc (Linux): the thresholds are set; elsewhere the call is a no-op."""
    import platform

    retained = retain_freed_memory()
    assert isinstance(retained, bool)
    if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
        assert retained
