"""The compiled CNN kernel (audit.training.compiled_cnn) against float64 per-example gradients.

Reference: torch.func's per-example gradients (the ``vmap`` method) of the same module in float64,
clipped and summed in float64. Tolerance: the kernel computes in float32 (unit roundoff
u = 2^-24 = 6e-8), with dot products and sums of at most n ~ 300 terms (the head's 256 features,
a GroupNorm's 256 values); by Higham's bound |fl(sum) - sum| <= n u sum |terms| each stage is
off by at most ~2e-5 of its terms' scale, and the forward and backward chain five such stages
(convolution, GroupNorm, head, back through each), so the sums agree to 1e-4 of their largest
entry. A missing or wrong term moves a sum by O(1) of a per-example gradient (about 1e-1 of the
largest entry here), three orders of magnitude above. The canary block, which real rows never
move, is exactly 0, so the Dirac observations are bit for bit those of the torch methods.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from torch import nn

from audit.sampling.factory import make_sampler
from audit.training import compiled_cnn
from audit.training.compiled_cnn import BLOCK_FIELDS, cnn_clipped_sums, cnn_plan
from audit.training.engine import train
from audit.training.func_engine import TorchModel, torch_model
from audit.training.models import augment
from audit.training.torch_models import build_canary_model, cnn
from audit.training.trials import TrainingConfig, build_problem

pytest.importorskip("numba")


def strided(input_shape: tuple[int, ...], classes: int) -> nn.Module:
    """Three input channels, a rectangular kernel with stride and asymmetric padding and no bias,
    a ReLU without GroupNorm, then a dilated convolution with GroupNorm and no ReLU."""
    channels = input_shape[0]
    body = nn.Sequential(
        nn.Conv2d(channels, 4, (3, 2), stride=(2, 1), padding=(1, 0), bias=False),
        nn.ReLU(),
        nn.Conv2d(4, 6, 3, padding=2, dilation=2),
        nn.GroupNorm(3, 6),
    )
    with torch.no_grad():
        flat = body(torch.zeros(1, *input_shape)).numel()
    return nn.Sequential(*body, nn.Flatten(), nn.Linear(flat, classes))


def unpadded(input_shape: tuple[int, ...], classes: int) -> nn.Module:
    """No padding, one GroupNorm group, a head without bias."""
    channels, height, width = input_shape
    flat = 4 * (height - 2) * (width - 2)
    return nn.Sequential(
        nn.Conv2d(channels, 4, 3), nn.GroupNorm(1, 4), nn.Flatten(),
        nn.Linear(flat, classes, bias=False),
    )


ARCHITECTURES = {
    "cnn": (cnn, (1, 8, 8), 10),
    "strided": (strided, (3, 7, 6), 5),
    "unpadded": (unpadded, (2, 5, 5), 3),
}


def _model(name: str, method: str = "compiled") -> TorchModel:
    factory, shape, classes = ARCHITECTURES[name]
    model = torch_model(factory, shape, classes, seed=0)
    return dataclasses.replace(model, method=method)


def _batch(model: TorchModel, k: int, slots: int, seed: int):
    """Models theta (k, P) around theta_0, rows (k, slots, D + 1) with the canary feature 1 in
    slot 0 of every model and 0 elsewhere, labels, weights in {0, 1} with slot 0 kept."""
    generator = torch.Generator().manual_seed(seed)
    theta = torch.as_tensor(model.initial()) + 0.3 * torch.randn(k, model.size, generator=generator)
    x = torch.randn(k, slots, model.features, generator=generator)
    x[..., -1] = 0.0
    x[:, 0, -1] = 1.0  # a canary row per model: its gradient moves the canary block
    rows = augment(x)
    labels = torch.randint(0, model.classes, (k, slots), generator=generator)
    weight = (torch.rand(k, slots, generator=generator) < 0.7).float()
    weight[:, 0] = 1.0
    return theta, rows, labels, weight


def _reference(model: TorchModel, theta, rows, labels, weight, clip) -> torch.Tensor:
    """The clipped sums in float64 by torch.func's per-example gradients."""
    vmap = dataclasses.replace(model, method="vmap")
    return vmap._clipped_sum(
        theta.double(), rows.double(), labels, weight.double(), clip, None, None, False, None
    )


def test_the_plan_covers_the_builtin_cnn():
    plan = cnn_plan(_model("cnn").module)
    assert plan is not None and plan.size == 3876
    table = dict(zip(BLOCK_FIELDS, plan.blocks[1].tolist(), strict=True))
    assert (table["channels"], table["height"], table["out_channels"]) == (8, 4, 16)
    assert (table["groups"], table["relu"], table["out_h"], table["out_w"]) == (4, 1, 4, 4)
    assert plan.head.tolist()[:2] == [256, 10]
    problem = build_problem(TrainingConfig(
        dataset="digits", model="cnn", sampler="poisson", sigma=1.0, clip=1.0, lr=0.5,
        batch_size=10, n=100, canary="dirac", threat_model="isolated",
    ))
    assert problem.model.method == "compiled" and problem.model.cnn is not None


@pytest.mark.parametrize("layers", [
    lambda: [nn.Conv2d(1, 2, 3, padding=1), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32, 3)],
    lambda: [nn.Conv2d(1, 2, 3, padding=1, groups=1), nn.Flatten(), nn.Linear(128, 8),
             nn.ReLU(), nn.Linear(8, 3)],
    lambda: [nn.Conv2d(1, 2, 3, padding="same"), nn.Flatten(), nn.Linear(128, 3)],
    lambda: [nn.Conv2d(1, 4, 3, padding=1), nn.GroupNorm(2, 4, affine=False), nn.Flatten(),
             nn.Linear(256, 3)],
    lambda: [nn.Conv2d(1, 2, 3, padding=1), nn.Tanh(), nn.Flatten(), nn.Linear(128, 3)],
    lambda: [nn.Flatten(), nn.Linear(64, 3)],
], ids=["pool", "two-linear", "same-padding", "norm-no-affine", "tanh", "no-conv"])
def test_other_networks_get_no_plan_and_keep_the_batched_method(layers):
    built = layers()
    model = torch_model(lambda shape, classes: nn.Sequential(*built), (1, 8, 8), 3, seed=0)
    assert model.method == "compiled" and model.cnn is None
    theta, rows, labels, weight = _batch(model, 3, 4, seed=0)
    got = model._clipped_sum(theta, rows, labels, weight, 0.5, None, None, False, None)
    expected = _reference(model, theta, rows, labels, weight, 0.5)
    torch.testing.assert_close(got.double(), expected, rtol=0.0,
                               atol=1e-4 * expected.abs().max().item())


class Doubled(nn.Sequential):
    """A Sequential whose forward doubles the logits: the kernel's plan, read off the layers,
    would compute another network, so it gets none."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2.0 * super().forward(x)


def test_a_module_not_wrapped_as_a_canary_model_gets_no_plan():
    assert cnn_plan(cnn((1, 8, 8), 10)) is None
    assert cnn_plan(build_canary_model(cnn, (1, 8, 8), 10, seed=0).double()) is None
    subclass = build_canary_model(
        lambda shape, classes: Doubled(*cnn(shape, classes)), (1, 8, 8), 10, seed=0
    )
    assert cnn_plan(subclass) is None


@pytest.mark.parametrize("name", list(ARCHITECTURES))
@pytest.mark.parametrize("clip", [0.3, 1e9], ids=["clipped", "unclipped"])
def test_compiled_sums_equal_float64_per_example_gradients(name, clip):
    model = _model(name)
    assert model.cnn is not None
    theta, rows, labels, weight = _batch(model, 5, 7, seed=1)
    expected = _reference(model, theta, rows, labels, weight, clip)
    got = torch.full_like(theta, 0.25)  # accumulates onto what is there (the step's noise)
    model._clipped_sum(theta, rows, labels, weight, clip, None, got, True, None)
    torch.testing.assert_close((got - 0.25).double(), expected, rtol=0.0,
                               atol=1e-4 * expected.abs().max().item())
    # overwriting, and the batched method, agree too
    fresh = model._clipped_sum(theta, rows, labels, weight, clip, None, None, False, None)
    batched = dataclasses.replace(model, method="batched")._clipped_sum(
        theta, rows, labels, weight, clip, None, None, False, None
    )
    torch.testing.assert_close(fresh.double(), expected, rtol=0.0,
                               atol=1e-4 * expected.abs().max().item())
    torch.testing.assert_close(fresh, batched, rtol=0.0, atol=1e-4 * expected.abs().max().item())


def test_one_example_unclipped_is_its_gradient():
    model = _model("strided")
    theta, rows, labels, _ = _batch(model, 4, 5, seed=2)
    one = torch.zeros(4, 5)
    one[:, 2] = 1.0
    got = model._clipped_sum(theta, rows, labels, one, 1e9, None, None, False, None)
    vmap = dataclasses.replace(model, method="vmap")
    grads = vmap.per_example_grads(theta.double(), rows[..., :-1].double(), labels)[:, 2]
    torch.testing.assert_close(got.double(), grads, rtol=0.0, atol=1e-4 * grads.abs().max().item())


def test_real_rows_and_zero_weights_add_exactly_nothing():
    model = _model("cnn")
    theta, rows, labels, weight = _batch(model, 6, 8, seed=3)
    real = weight.clone()
    real[:, 0] = 0.0  # the canary rows dropped: the canary block is exactly 0
    sums = model._clipped_sum(theta, rows, labels, real, 0.5, None, None, False, None)
    assert not sums[:, : model.private_width].any()
    # slots of weight 0 are skipped: whatever their rows hold, the sums are those without them
    noisy = rows.clone()
    noisy[real == 0] = 1e30
    again = model._clipped_sum(theta, noisy, labels, real, 0.5, None, None, False, None)
    assert torch.equal(again, sums)


def _dirac_problem():
    return build_problem(TrainingConfig(
        dataset="digits", model="cnn", sampler="poisson", sigma=1.0, clip=1.0, lr=0.5,
        batch_size=10, n=200, canary="dirac", threat_model="isolated",
    ))


def _train(problem, method: str):
    batches = make_sampler("poisson", n=200, batch_size=10).sample(np.random.default_rng(2), 8)[
        :, :4
    ]
    variant = dataclasses.replace(problem, model=dataclasses.replace(problem.model, method=method))
    return train(variant, batches, np.arange(8) < 4, [(torch.Generator().manual_seed(5), 8)])


def test_training_observes_the_dirac_canary_bit_for_bit(monkeypatch):
    """With the same noise (torch's: Philox switched off), the kernel and the batched method give
    the same Dirac observations (real rows add exactly 0 on the canary's coordinate) and
    parameters equal to float32 rounding."""
    problem = _dirac_problem()
    monkeypatch.setattr(TorchModel, "philox_noise", property(lambda self: False))
    compiled, batched = _train(problem, "compiled"), _train(problem, "batched")
    assert np.array_equal(compiled.y, batched.y)
    np.testing.assert_allclose(compiled.theta, batched.theta, rtol=1e-4, atol=1e-5)


def test_the_kernels_noise_is_the_philox_stream():
    """The ``compiled`` method draws its noise from Philox (flat order, keyed by the generator's
    seed, counters (., step, row, .)): the OUT models' Dirac observations are exactly
    sign * the stream's variate at the canary's coordinate, step by step."""
    from audit.training.compiled import gaussian_rows
    from audit.training.philox import noise_key

    problem = _dirac_problem()
    assert problem.model.philox_noise and not dataclasses.replace(
        problem.model, method="batched"
    ).philox_noise
    out = _train(problem, "compiled")
    (j,) = np.flatnonzero(problem.canary.u)
    sign = float(problem.canary.u[j])
    keys = np.tile(noise_key(5), (8, 1)).astype(np.uint32)
    rows = np.arange(8, dtype=np.uint32)
    noise = np.empty((8, problem.model.size), np.float32)
    std = float(problem.sigma) * float(problem.clip)
    for t in range(out.y.shape[1]):
        gaussian_rows(noise, keys, rows, t, std)
        assert np.array_equal(out.y[4:, t], sign * noise[4:, j].astype(np.float64))


def test_the_batched_method_runs_where_the_kernel_does_not(monkeypatch):
    model = _model("cnn")
    theta, rows, labels, weight = _batch(model, 3, 4, seed=4)
    expected = _reference(model, theta, rows, labels, weight, 0.5)
    # float64 parameters: the kernel is float32 only
    got = model._clipped_sum(theta.double(), rows.double(), labels, weight.double(), 0.5, None,
                             None, False, None)
    torch.testing.assert_close(got, expected, rtol=0.0, atol=1e-4 * expected.abs().max().item())
    monkeypatch.setenv("AUDIT_COMPILED", "0")
    assert _model("cnn").cnn is None


def test_the_kernel_refuses_shapes_it_would_misread():
    model = _model("cnn")
    plan = model.cnn
    assert plan is not None
    theta, rows, labels, weight = _batch(model, 2, 3, seed=5)
    out = torch.zeros_like(theta)
    with pytest.raises(ValueError, match="compiled CNN kernel: shapes or dtypes"):
        cnn_clipped_sums(plan, theta[:, :-1], rows, labels, weight, 1.0, out)
    with pytest.raises(ValueError, match="compiled CNN kernel: shapes or dtypes"):
        cnn_clipped_sums(plan, theta, rows[..., :10], labels, weight, 1.0, out)
    with pytest.raises(ValueError, match=r"labels outside \[0, 10\)"):
        cnn_clipped_sums(plan, theta, rows, labels + 10, weight, 1.0, out)


def test_the_plan_records_each_parameters_offset():
    model = _model("strided")
    plan = model.cnn
    assert plan is not None
    offsets, start = {}, 0
    for name, parameter in model.module.named_parameters():
        offsets[name] = start
        start += parameter.numel()
    first, second = (dict(zip(BLOCK_FIELDS, row.tolist(), strict=True)) for row in plan.blocks)
    assert first["weight"] == offsets["inner.0.weight"] and first["bias"] == -1
    assert first["groups"] == 0 and first["relu"] == 1
    assert (first["stride_h"], first["stride_w"], first["pad_h"], first["pad_w"]) == (2, 1, 1, 0)
    assert second["gamma"] == offsets["inner.3.weight"]
    assert second["beta"] == offsets["inner.3.bias"]
    assert (second["dilation_h"], second["relu"], second["groups"]) == (2, 0, 3)
    assert plan.head.tolist()[2] == offsets["inner.5.weight"]
    assert math.isclose(float(plan.eps[1]), 1e-5)
    assert compiled_cnn.HEAD_FIELDS == ("features", "classes", "weight", "bias", "canary")
