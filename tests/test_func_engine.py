"""The torch.func engine for any nn.Module: equal to the closed forms, canaries, refused layers,
devices, and a user's own module audited end to end.

Exactness: the closed-form models (:mod:`audit.training.models`) and
:class:`audit.training.func_engine.TorchModel` on a module with the same flat parameter layout
compute the same float32 quantities by different kernels, so they agree to rounding (1e-5 relative);
the canary coordinates that real data never touch must be exactly 0 (a product with the always-zero
canary feature).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from audit.sampling.factory import make_sampler
from audit.training.engine import train
from audit.training.func_engine import TorchModel, torch_model
from audit.training.models import augment
from audit.training.torch_models import check_supported, cnn, load_factory, transformer
from audit.training.trials import TrainingConfig, build_problem, run_shard


class Affine(nn.Module):
    """logits = x W + c with W (D, classes): the flat layout of
    audit.training.models.LogisticRegression."""

    def __init__(self, features: int, classes: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(features, classes))
        self.bias = nn.Parameter(torch.zeros(classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight + self.bias


class TwoLayer(nn.Module):
    """relu(x W1 + c1) W2 + c2: the flat layout of audit.training.models.MLP."""

    def __init__(self, features: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.w1 = nn.Parameter(torch.zeros(features, hidden))
        self.c1 = nn.Parameter(torch.zeros(hidden))
        self.w2 = nn.Parameter(torch.zeros(hidden, classes))
        self.c2 = nn.Parameter(torch.zeros(classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ self.w1 + self.c1) @ self.w2 + self.c2


def _config(**changes) -> TrainingConfig:
    base = dict(
        dataset="digits", model="logistic", hidden=8, sampler="poisson", sigma=0.7, clip=1.0,
        lr=0.5, batch_size=10, n=100, canary="dirac", threat_model="isolated",
    )
    return TrainingConfig(**{**base, **changes})


def _as_torch(problem):
    """The problem with its closed-form model replaced by a TorchModel of the same layout."""
    closed = problem.model
    if closed.shapes[0] == (closed.features, closed.classes):
        module = Affine(closed.features, closed.classes)
    else:
        module = TwoLayer(closed.features, closed.shapes[0][1], closed.classes)
    model = TorchModel(
        module=module, features=closed.features, classes=closed.classes,
        private_start=closed.private_start, private_width=closed.private_width,
    )
    return dataclasses.replace(problem, model=model)


def _train(problem, batches, canary_in, seed):
    """Train with torch's noise on every model (the closed forms on their torch route
    ``grouped``: the default compiled_philox route draws its own noise stream)."""
    k = len(canary_in)
    half = k // 2
    noise = [
        (torch.Generator().manual_seed(seed), half),
        (torch.Generator().manual_seed(seed + 1), k - half),
    ]
    return train(problem, batches, canary_in, noise, route="grouped")


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"threat_model": "adversarial"},
        {"canary": "input"},
        {"model": "mlp", "canary": "input", "input_canary": "mislabeled"},
        {"model": "mlp", "sampler": "dynamic_shuffle", "threat_model": "adversarial"},
    ],
)
def test_same_trainings_as_the_closed_form(changes):
    """Whole trainings (same batches, same noise generators, so the same noise tensors in the
    same flat layout): every observation and the final parameters agree to 1e-5."""
    config = _config(**changes)
    problem = build_problem(config)
    sampler = make_sampler(config.sampler, n=config.n, batch_size=config.batch_size)
    batches = sampler.sample(np.random.default_rng(3), 6)
    canary_in = np.array([True, False] * 3)
    closed = _train(problem, batches, canary_in, seed=11)
    func = _train(_as_torch(problem), batches, canary_in, seed=11)
    for name in ("y", "final", "loss", "logits", "theta"):
        a, b = getattr(closed, name), getattr(func, name)
        np.testing.assert_allclose(
            b, a, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(a).max()), err_msg=name
        )
    np.testing.assert_array_equal(closed.batch_sizes, func.batch_sizes)


def test_same_update_on_the_same_batch_and_noise():
    """One DP-SGD update theta - lr/b (G + N) with one given noise tensor N, padding and
    zero weights included: closed form and torch.func agree to 1e-5."""
    problem = build_problem(_config(model="mlp"))
    closed, func = problem.model, _as_torch(problem).model
    gen = torch.Generator().manual_seed(0)
    k, slots = 4, 7
    theta = torch.as_tensor(problem.theta0).expand(k, -1) + 0.1 * torch.randn(
        k, closed.size, generator=gen
    )
    rows = torch.randint(0, problem.x.shape[0], (k, slots), generator=gen)
    x = torch.as_tensor(problem.x)[rows]
    y = torch.as_tensor(problem.y)[rows]
    weight = (torch.rand(k, slots, generator=gen) < 0.7).float()
    noise = torch.randn(k, closed.size, generator=gen)
    step = problem.lr / problem.batch_size
    a = theta - step * (closed.clipped_grad_sum(theta, x, y, weight, problem.clip) + noise)
    b = theta - step * (func.clipped_grad_sum(theta, x, y, weight, problem.clip) + noise)
    torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
    # the engine's entry point (augmented rows) gives the same sum
    c = func.clipped_grad_sum_augmented(theta, augment(x), y, weight, problem.clip)
    torch.testing.assert_close(c, func.clipped_grad_sum(theta, x, y, weight, problem.clip))


@pytest.mark.parametrize(("factory", "dataset"), [(cnn, "digits"), (transformer, "sequences")])
def test_padding_and_real_data_never_touch_the_canary(factory, dataset):
    """Real rows have exactly 0 gradient on the canary weights (every example, every model);
    padding slots (weight 0) add exactly 0, whatever row they hold."""
    problem = build_problem(_config(dataset=dataset, model=factory.__name__, n=60))
    model = problem.model
    gen = torch.Generator().manual_seed(1)
    k = 3
    theta = torch.as_tensor(problem.theta0).expand(k, -1) + 0.05 * torch.randn(
        k, model.size, generator=gen
    )
    x = torch.as_tensor(problem.x[1:58]).reshape(k, 19, -1)  # real rows only (row 0: the canary)
    y = torch.as_tensor(problem.y[1:58]).reshape(k, 19)
    grads = model.per_example_grads(theta, x, y)
    private = slice(model.private_start, model.private_start + model.private_width)
    assert torch.count_nonzero(grads[..., private]) == 0
    assert torch.count_nonzero(grads[..., model.private_width :]) > 0
    weight = torch.ones(x.shape[:2])
    full = model.clipped_grad_sum(theta, x, y, weight, 1.0)
    padded_x = torch.cat([x, 100 * torch.randn(x.shape, generator=gen)], dim=1)
    padded_y = torch.cat([y, y], dim=1)
    padded = model.clipped_grad_sum(
        theta, padded_x, padded_y, torch.cat([weight, 0 * weight], 1), 1.0
    )
    torch.testing.assert_close(padded, full, rtol=1e-6, atol=1e-7)
    # the Dirac canary is the unit vector -e_label on the canary weights
    u = problem.canary.u
    assert (
        np.flatnonzero(u).tolist() == [model.private_start + problem.canary.label]
        and u.sum() == -1.0
    )


@pytest.mark.parametrize(("factory", "dataset"), [(cnn, "digits"), (transformer, "sequences")])
def test_isolated_dirac_observations_are_exact(factory, dataset):
    """Isolated Dirac canary through a CNN/transformer: real data never move u, so y_t is the
    canary's +1 per participation plus N(0, sigma^2) noise, and the last iterate's projection
    equals sum_t y_t (to float32 rounding)."""
    config = _config(dataset=dataset, model=factory.__name__, sampler="dynamic_shuffle", n=60)
    out = run_shard(config, seed=0, shard=0, trials=4)
    np.testing.assert_allclose(out["final_in"], out["y_in"].sum(1), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out["final_out"], out["y_out"].sum(1), rtol=1e-4, atol=1e-4)
    assert np.isfinite(out["loss_in"]).all() and out["logits_in"].shape == (
        4,
        build_problem(config).model.classes,
    )


def test_input_canary_direction_on_the_private_block():
    problem = build_problem(_config(model="cnn", canary="input"))
    u, model = problem.canary.u, problem.model
    assert np.isclose(np.linalg.norm(u), 1.0)
    assert np.flatnonzero(u).max() < model.private_width  # the canary weights only


class WithBatchNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))

    def forward(self, x):
        return self.layers(x)


class RunningMean(nn.Module):
    """A layer that updates a running statistic in place (as batch norm does)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 2)
        self.register_buffer("mean", torch.zeros(4))

    def forward(self, x):
        self.mean.mul_(0.9).add_(0.1 * x.mean(0))
        return self.linear(x - self.mean)


@pytest.mark.parametrize(
    ("module", "match"),
    [
        (WithBatchNorm(), "BatchNorm1d.*GroupNorm"),
        (
            nn.Sequential(nn.Conv2d(1, 2, 3), nn.SyncBatchNorm(2), nn.Flatten(), nn.LazyLinear(2)),
            "SyncBatchNorm.*GroupNorm",
        ),
        (
            nn.Sequential(
                nn.Linear(4, 4), nn.InstanceNorm1d(4, track_running_stats=True), nn.Linear(4, 2)
            ),
            "running statistics",
        ),
        (RunningMean(), "buffer 'mean' changed"),
        (nn.Linear(4, 3), r"expected logits \(2, 2\)"),
    ],
)
def test_refused_modules(module, match):
    shape = (
        (1, 5, 5)
        if isinstance(module, nn.Sequential) and isinstance(module[0], nn.Conv2d)
        else (4,)
    )
    with pytest.raises(ValueError, match=match):
        check_supported(module, shape, 2)


def test_model_names_and_factories():
    with pytest.raises(ValueError, match="Did you mean 'cnn'"):
        _config(model="cn")
    with pytest.raises(ValueError, match="cannot import 'no_such_module_xyz'"):
        _config(model="no_such_module_xyz:f")
    with pytest.raises(ValueError, match="needs images"):
        build_problem(_config(model="cnn", dataset="gaussian"))
    with pytest.raises(ValueError, match="needs one-hot sequences"):
        build_problem(_config(model="transformer"))
    assert (
        load_factory("cnn") is cnn
        and load_factory("audit.training.torch_models:transformer") is transformer
    )
    # the factory's initialisation is seeded by init_seed and leaves the global RNG alone
    state = torch.random.get_rng_state()
    a = torch_model(cnn, (1, 8, 8), 10, seed=5).initial()
    assert torch.equal(torch.random.get_rng_state(), state)
    assert np.array_equal(a, torch_model(cnn, (1, 8, 8), 10, seed=5).initial())
    assert not np.array_equal(a, torch_model(cnn, (1, 8, 8), 10, seed=6).initial())


def test_device_is_validated():
    from audit.run.spec import parse_spec

    with pytest.raises(ValueError, match="device='tpu' is not valid"):
        _config(device="tpu")
    spec = {"samplers": ["poisson"], "trials_in": 10, "trials_out": 10,
            "training": {"sigma": 1.0, "batch_size": 5, "n": 50, "lr": 0.1}}
    with pytest.raises(ValueError, match="device='gpu' is not valid"):
        parse_spec({**spec, "device": "gpu"})
    assert "device" not in parse_spec(spec).shard_identity()  # old specs keep their hash
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"torch\.cuda\.is_available"):
            _config(device="cuda")
        cuda = parse_spec({**spec, "device": "cuda"})
        with pytest.raises(ValueError, match=r"torch\.cuda\.is_available"):
            cuda.training_config(cuda.training_keys()[0])


def test_cli_train_with_a_torch_model(tmp_path: Path):
    from audit.cli import main

    out = tmp_path / "obs.npz"
    argv = [
        "train",
        "--dataset",
        "sequences",
        "--model",
        "transformer",
        "--sampler",
        "poisson",
        "--sigma",
        "1",
        "--clip",
        "1",
        "--lr",
        "0.1",
        "--batch-size",
        "5",
        "--n",
        "20",
        "--canary",
        "dirac",
        "--threat-model",
        "isolated",
        "--trials",
        "3",
        "--seed",
        "0",
        "--quiet",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    with np.load(out) as data:
        assert data["y_in"].shape == (3, 4) and data["logits_out"].shape == (3, 4)


# -- a user's own module, audited end to end ---------------------------------------------


class UserNet(nn.Module):
    """A user's architecture: a 1-D convolution over the 64 digit pixels, then a linear head."""

    def __init__(self, input_shape, num_classes):
        super().__init__()
        self.conv = nn.Conv1d(1, 4, 5, stride=4)
        self.norm = nn.GroupNorm(2, 4)
        self.head = nn.Linear(4 * 15, num_classes)

    def forward(self, x):
        h = torch.tanh(self.norm(self.conv(x.reshape(x.shape[0], 1, -1))))
        return self.head(h.flatten(1))


def user_factory(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    return UserNet(input_shape, num_classes)


AUDIT = """\
mode = "train"
seed = 3
dataset = "digits"
model = "{model}"
samplers = ["poisson", "dynamic_shuffle"]
threat_models = ["isolated"]
canary = "dirac"
observation = "{observation}"
trials_in = 100
trials_out = 100
shard_size = 100
n_jobs = 1
claim = "poisson"

[training]
sigma = 1.0
batch_size = 5
n = 50
lr = 0.2
clip = 1.0
"""


@pytest.mark.parametrize("observation", ["all_iterates", "last_iterate", "black_box"])
def test_user_module_audit_has_the_builtin_summary_keys(tmp_path: Path, observation: str):
    """run_audit in train mode with a module defined here (200 trainings per cell): the
    summary has exactly the keys of the same audit of the built-in logistic model."""
    from audit.report import run_audit

    summaries = {}
    for model in (f"{__name__}:user_factory", "logistic"):
        folder = tmp_path / f"{model.replace(':', '_')}-{observation}"
        folder.mkdir()
        (folder / "audit.toml").write_text(AUDIT.format(model=model, observation=observation))
        run_audit(folder, progress=False, plots=False)
        summaries[model] = json.loads((folder / "summary.json").read_text())
    user, builtin = summaries.values()

    def keys(value, prefix=""):
        if isinstance(value, dict):
            return {
                k for key, v in value.items() for k in keys(v, f"{prefix}{key}.") | {prefix + key}
            }
        if isinstance(value, list):
            return {k for v in value for k in keys(v, prefix)}
        return set()

    def shape(summary):  # a refusal (no evidence in these scores) and a value differ in their keys
        data_dependent = ("cells.curve_evidence.", "cells.estimates.gdp_fit.")
        return {k for k in keys(summary) if not k.startswith(data_dependent)}

    assert shape(user) == shape(builtin)
    assert [c["cell"] for c in user["cells"]] == [c["cell"] for c in builtin["cells"]]
    assert user["spec"]["model"] == f"{__name__}:user_factory"
