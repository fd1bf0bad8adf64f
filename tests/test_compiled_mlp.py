"""The MLP's compiled route (audit/training/compiled_mlp.py, docs/design.md §12.6): the kernel
against the closed form computed exactly, its Python source, the Dirac observations bit for bit
against the Philox stream, and trainings that do not depend on the block they run in."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from audit.sampling.factory import make_sampler
from audit.training import compiled, compiled_mlp
from audit.training.canaries import CANARY_INDEX
from audit.training.engine import train
from audit.training.models import augment, make_model
from audit.training.trials import build_problem

pytest.importorskip("numba")


def _kernel_layout(model, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The two layers of flat parameters (K, P) in the kernel's layout."""
    (fan_in, hidden), _ = model.layers
    split = (fan_in + 1) * hidden
    return (
        compiled.transposed_weights(theta[:, :split], fan_in + 1),
        compiled.transposed_weights(theta[:, split:], hidden + 1),
    )


def _term_scale(model, theta, xa, labels, index, through, noise, clip) -> np.ndarray:
    """Per parameter (K, P), |N_p| plus the sum over the slots through the model of the clipped
    per-example gradient's |entry| (|f d_h x_j| in layer 1, |f e_c a_j| in layer 2), in float64
    from the closed form (written out here with numpy: e = softmax - onehot, d = (W2 e) act'(z),
    f = min(1, C / sqrt(||x||^2 ||d||^2 + ||[a, 1]||^2 ||e||^2)))."""
    (fan_in, hidden), (_, classes) = model.layers
    split = (fan_in + 1) * hidden
    act = {
        "relu": lambda z: np.maximum(z, 0.0),
        "tanh": np.tanh,
        "sigmoid": lambda z: 1.0 / (1.0 + np.exp(-z)),
    }[model.activation]
    out = np.abs(noise).copy()
    for k in range(theta.shape[0]):
        w1 = theta[k, :split].reshape(fan_in + 1, hidden)
        w2 = theta[k, split:].reshape(hidden + 1, classes)
        for s in np.flatnonzero(through[k]):
            x = xa[index[k, s]]
            z = x @ w1
            a = np.append(act(z), 1.0)
            logits = a @ w2
            e = np.exp(logits - logits.max())
            e /= e.sum()
            e[labels[index[k, s]]] -= 1.0
            slope = {"relu": (z > 0) * 1.0, "tanh": 1 - a[:-1] ** 2,
                     "sigmoid": a[:-1] * (1 - a[:-1])}[model.activation]
            d = (w2[:hidden] @ e) * slope
            f = min(1.0, clip / max(np.sqrt((x @ x) * (d @ d) + (a @ a) * (e @ e)), 1e-30))
            out[k, :split] += np.abs(f * np.outer(x, d)).ravel()
            out[k, split:] += np.abs(f * np.outer(a, e)).ravel()
    return out


def test_layouts_round_trip():
    model = make_model("mlp", features=5, classes=3, hidden=4)
    flat = np.random.default_rng(0).normal(size=(2, model.size)).astype(np.float32)
    kernel = compiled_mlp.mlp_kernel_order(flat, model.layers)
    assert np.array_equal(compiled_mlp.mlp_flat_order(kernel, model.layers), flat)
    # layer 1's [W1; c1] (6, 4) transposed, then layer 2's [W2; c2] (5, 3) transposed
    assert kernel[1, 2 * 6 + 5] == flat[1, 5 * 4 + 2]
    assert kernel[1, 24 + 1 * 5 + 3] == flat[1, 24 + 3 * 3 + 1]


@pytest.mark.parametrize("activation", ["relu", "tanh", "sigmoid"])
def test_mlp_kernel_matches_the_closed_form_and_its_python_source(activation):
    """One step of 6 MLPs (7 slots, inputs over three decades, clip 1.5) against the model's own
    clipped sum computed in float64: every parameter within 2^10 ulps of its scale, the update's
    terms' absolute values summed (:func:`_term_scale`) plus the result's own size. Rounding in
    float32 is a few ulps per operation, amplified by the condition of the two layers' dot
    products (14 and 9 terms, inputs up to about 40): measured over 100 draws per activation,
    at most 86 ulps (relu; tanh 20, sigmoid 14; medians 2-4), so the bound has a margin of 12;
    a fault (a slot dropped or counted twice, a wrong derivative) is an error of the scale itself,
    2^24 ulps. The Python source run uncompiled meets the same bound, and the Dirac observation is
    the noise on its coordinate, bit for bit."""
    model = make_model("mlp", features=13, classes=5, hidden=8, activation=activation)
    rng = np.random.default_rng(4)
    draws = torch.Generator().manual_seed(4)
    n, k, slots = 30, 6, 7
    x = rng.normal(size=(n, model.features)).astype(np.float32)
    x *= np.logspace(-2, 1, n, dtype=np.float32)[:, None]
    x[:, -1] = 0.0  # the private input feature of the Dirac canary
    labels = rng.integers(0, model.classes, n)
    xa = augment(torch.from_numpy(x))
    sqnorm = xa.square().sum(-1)
    theta = model.init(k, torch.Generator().manual_seed(1))
    theta += 0.3 * torch.randn(k, model.size, generator=draws)
    index = rng.integers(0, n, (k, slots)).astype(np.int32)
    through = rng.random((k, slots)) < 0.7
    through[0] = False  # a model without a gradient this step
    noise = torch.randn(k, model.size, generator=draws)
    terms = (torch.from_numpy(labels)[index], 1.5)

    def updated(dtype: torch.dtype) -> np.ndarray:
        sums = model.clipped_grad_sum_augmented(
            theta.to(dtype), xa.to(dtype)[index], terms[0], torch.from_numpy(through).to(dtype),
            terms[1],
        )
        return (theta.to(dtype) - 0.25 * (sums + noise.to(dtype))).numpy()

    exact = updated(torch.float64)
    scale = 0.25 * _term_scale(
        model, theta.double().numpy(), xa.double().numpy(), labels, index, through,
        noise.double().numpy(), 1.5,
    )
    bound = 2.0**10 * 2.0**-24 * (scale + np.abs(exact))
    j = model.private_start + 3
    (fan_in, hidden), _ = model.layers
    coordinate = compiled.kernel_coordinate(j, hidden, (fan_in + 1) * hidden)
    u = np.zeros(model.size, np.float32)
    u[j] = 1.0
    rules = compiled.step_rules(
        canary_index=-5, injected_canary=True, adversarial=False, coordinate=coordinate
    )
    padded = np.where(through, index, -1).astype(np.int32)
    code = compiled_mlp.ACTIVATION_CODES[activation]
    for run in ("compiled", "python"):
        weights1, weights2 = _kernel_layout(model, theta.numpy())
        grad = compiled_mlp.mlp_kernel_order(noise.numpy(), model.layers)
        observed = np.zeros(k, np.float32)
        sizes = np.zeros(k, np.int32)
        arguments = (
            weights1, weights2, grad, compiled.padded_rows(xa.numpy()), sqnorm.numpy(), labels,
            padded, np.ones(k, dtype=bool), rules, compiled_mlp.mlp_kernel_order(u, model.layers),
            1.5, np.float32(-0.25), observed, sizes,
        )
        if run == "compiled":
            compiled_mlp.mlp_step(*arguments, activation)
        else:
            compiled_mlp._mlp_step(*arguments, code)
        got = np.concatenate(
            [
                compiled.natural_weights(weights1, fan_in + 1),
                compiled.natural_weights(weights2, hidden + 1),
            ],
            axis=1,
        )
        assert np.all(np.abs(got - exact) <= bound), run
        assert np.array_equal(observed, noise.numpy()[:, j]), run
        assert np.array_equal(sizes, through.sum(1)), run
        assert not weights1[:, :, fan_in + 1 :].any() and not weights2[:, :, hidden + 1 :].any()


def test_mlp_route_observes_its_own_noise(training_config):
    """The MLP's default route with a Dirac canary is ``compiled_philox``, whose observations are
    the Philox noise on the canary's coordinate (variate at its kernel position) plus the
    injected canary gradient, bit for bit: y_kt = (u_j N_kt[j'] + C I_kt) / C + known."""
    config = training_config(model="mlp", hidden=6, clip=2.0, sigma=0.8)
    problem = build_problem(config)
    model = problem.model
    batches = make_sampler("poisson", n=config.n, batch_size=config.batch_size).sample(
        np.random.default_rng(2), 6
    )
    canary_in = np.array([True, True, True, False, False, False])
    seeds = (2**62 + 3, 12)
    noise = [(torch.Generator().manual_seed(seed), 3) for seed in seeds]
    out = train(problem, batches, canary_in, noise)
    (flat,) = np.flatnonzero(problem.canary.u)
    sign = problem.canary.u[flat]
    (fan_in, hidden), _ = model.layers
    position = compiled.kernel_coordinate(int(flat), hidden, (fan_in + 1) * hidden)
    keys = np.stack([compiled.philox.noise_key(seeds[k // 3]) for k in range(6)])
    rows = np.array([0, 1, 2, 0, 1, 2], np.uint32)
    for t in range(batches.shape[1]):
        noise_t = np.empty((6, model.size), np.float32)
        compiled.gaussian_rows(noise_t, keys, rows, t, 0.8 * 2.0)
        for k in range(6):
            injected = np.float32(2.0) * np.float32(
                canary_in[k] and (batches[k, t] == CANARY_INDEX).any()
            )
            y_raw = np.float32(sign * noise_t[k, position]) + injected
            assert out.y[k, t] == np.float64(y_raw) / 2.0 + problem.known


def test_mlp_training_is_the_same_in_any_block(training_config):
    """A model's training is a function of its own address (noise stream, row, batches): model
    66 gets the same parameters and observations among 70 models as among 67 (its block of the
    route holds 6 models, then 3); with another canary than a Dirac one the MLP keeps the
    grouped torch route."""
    config = training_config(model="mlp", hidden=5, activation="sigmoid")
    problem = build_problem(config)
    batches = make_sampler("poisson", n=config.n, batch_size=config.batch_size).sample(
        np.random.default_rng(3), 70
    )
    canary_in = np.arange(70) % 2 == 0
    many = train(problem, batches, canary_in, [(torch.Generator().manual_seed(9), 70)])
    generator = torch.Generator().manual_seed(9)
    alone = train(problem, batches[:67], canary_in[:67], [(generator, 67)])
    assert np.array_equal(many.theta[66], alone.theta[66])
    assert np.array_equal(many.y[66], alone.y[66])
    input_canary = build_problem(training_config(model="mlp", hidden=5, canary="input"))
    import audit.training.engine as engine

    assert input_canary.canary.injected is False
    assert (
        engine._route(input_canary.model, torch.device("cpu"), None, dirac=False) == "grouped"
    )
