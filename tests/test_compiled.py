"""The compiled route (audit.training.compiled): the same DP-SGD training as the torch routes, up to
float32 summation order.

Tolerances: both routes compute in float32 and differ only in the order in which products are
summed (a dot product of D + 1 = 14 terms, a clipped sum of up to ~20 slots), a few float32
ulps (eps = 1.2e-7) per step; over T = 10-20 steps 1e-5 relative (1e-6 absolute near 0) is
ample and would still catch any wrong term (a missing clip factor or example moves parameters
by ~lr/b = 1e-2). The Dirac canary's coordinate receives exactly 0 from every real example in
both routes, so its observations are compared bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from audit.sampling.factory import make_sampler
from audit.training import compiled
from audit.training.engine import ROUTES, train
from audit.training.models import augment, make_model
from audit.training.trials import build_problem

pytestmark = pytest.mark.skipif(not compiled.available(), reason="numba not installed")


def _streams(*rows: int, seed: int = 0) -> list[tuple[torch.Generator, int]]:
    return [(torch.Generator().manual_seed(seed + i), r) for i, r in enumerate(rows)]


CASES = [
    dict(sampler="poisson", threat_model="isolated", canary="dirac"),
    dict(sampler="poisson", threat_model="adversarial", canary="dirac"),
    dict(sampler="truncated_poisson", threat_model="isolated", canary="dirac", max_batch_size=12),
    dict(sampler="poisson", threat_model="isolated", canary="input"),
    dict(sampler="dynamic_shuffle", threat_model="isolated", canary="dirac"),
    dict(sampler="persistent_shuffle", threat_model="adversarial", canary="input", epochs=2),
    dict(sampler="balls_and_bins", threat_model="isolated", canary="dirac", epochs=2),
    dict(sampler="sampled_without_replacement", threat_model="adversarial", canary="dirac"),
    dict(sampler="deterministic", threat_model="isolated", canary="dirac", batch_size=1),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_compiled_route_is_the_torch_route_up_to_rounding(case, training_config):
    config = training_config(model="logistic", **case)
    problem = build_problem(config)
    sampler = make_sampler(
        config.sampler, n=config.n, batch_size=config.batch_size, epochs=config.epochs,
        max_batch_size=config.max_batch_size,
    )
    batches = sampler.sample(np.random.default_rng(11), 24)
    canary_in = np.arange(24) % 2 == 0
    fused = train(problem, batches, canary_in, _streams(12, 12), route="compiled")
    grouped = train(problem, batches, canary_in, _streams(12, 12), route="grouped")
    padded = train(problem, batches, canary_in, _streams(12, 12), route="padded")
    for other in (grouped, padded):
        assert np.array_equal(fused.batch_sizes, other.batch_sizes)
        np.testing.assert_allclose(fused.theta, other.theta, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(fused.loss, other.loss, rtol=1e-5, atol=1e-6)
        if config.canary == "dirac":
            assert np.array_equal(fused.y, other.y) and np.array_equal(fused.final, other.final)
        else:
            np.testing.assert_allclose(fused.y, other.y, rtol=1e-5, atol=1e-5)


def _rounding_bound(xa, index, through, theta, noise, clip, classes):
    """A first-order bound on the float32 error of one clipped DP-SGD sum plus noise, per
    parameter (k, j C + c), against the exact value: eps = 2^-24; a slot's logits carry at most
    (D + 3) eps A_s absolute error (a float32 dot product of D + 1 terms, Higham's gamma_n, A_s =
    max_c sum_j |x_sj w_cj|), the softmax passes it on with gain at most 1 and adds about 16
    eps (exponential 1.3 ulp, sum, division, norm, clip factor); the clipped term f e_c x_j is at
    most clip |x_j| / ||x|| per unit of error in e (f ||e|| ||x|| <= clip), and the factor 2
    covers the clip factor's relative error, itself from ||e||; the noise is added once (8 eps |N|
    covers the sum's rounding). Measured over 300 draws of this test's data: errors at most 0.08 of
    the bound (median 0.045), so it is loose, and a real fault (a slot dropped or counted twice:
    errors of order 0.1) exceeds it by 10^4."""
    eps = 2.0**-24
    xs = xa.astype(np.float64)[index]  # (K, S, D + 1)
    weights = theta.astype(np.float64).reshape(theta.shape[0], xs.shape[2], classes)
    logit_sum = np.einsum("ksf,kfc->ksc", np.abs(xs), np.abs(weights)).max(-1)  # A_s, (K, S)
    share = np.abs(xs) / np.sqrt((xs**2).sum(-1))[..., None]  # |x_j| / ||x||
    per_slot = through * clip * 2 * ((xs.shape[2] + 2) * logit_sum + 16)
    per_input = (share * per_slot[..., None]).sum(1)  # (K, D + 1), the same for every class
    return eps * (8 * np.abs(noise) + np.repeat(per_input, classes, axis=1))


def test_kernel_matches_the_closed_form_sum_and_its_python_source():
    """One call against the model's own clipped sum computed exactly (torch, float64), within the
    float32 rounding bound of :func:`_rounding_bound`, and the kernel's Python source run
    uncompiled (the same code, so the compiled loop is what the source says). The draws have their
    own generators: the data do not depend on which tests ran before."""
    model = make_model("logistic", features=13, classes=5)
    rng = np.random.default_rng(4)
    draws = torch.Generator().manual_seed(4)
    n, k, slots = 30, 6, 7
    x = (
        rng.normal(size=(n, model.features)).astype(np.float32)
        * np.logspace(-2, 1, n, dtype=np.float32)[:, None]
    )
    labels = rng.integers(0, model.classes, n)
    xa = augment(torch.from_numpy(x))
    sqnorm = xa.square().sum(-1)
    theta = model.init(k, torch.Generator().manual_seed(1)) + 0.3 * torch.randn(
        k, model.size, generator=draws
    )
    index = rng.integers(0, n, (k, slots)).astype(np.int32)
    through = rng.random((k, slots)) < 0.7
    through[0] = False  # a model without a gradient this step
    noise = torch.randn(k, model.size, generator=draws)
    expected = model.clipped_grad_sum_augmented(
        theta.double(),
        xa.double()[index],
        torch.from_numpy(labels)[index],
        torch.from_numpy(through).double(),
        1.5,
    ) + noise.double()
    bound = _rounding_bound(
        xa.numpy(), index, through, theta.numpy(), noise.numpy(), 1.5, model.classes
    )
    features = model.features + 1
    padded = np.where(through, index, -1).astype(np.int32)  # slots not through the model: padding
    rules = compiled.step_rules(
        canary_index=-5, injected_canary=False, adversarial=False, coordinate=None
    )
    u = np.zeros(model.size, dtype=np.float32)
    data = (
        compiled.padded_rows(xa.numpy()),
        sqnorm.numpy(),
        labels,
        padded,
        np.ones(k, dtype=bool),
        rules,
        u,
        1.5,
    )
    for run in (compiled.logistic_step, compiled._logistic_step):
        weights = compiled.transposed_weights(theta.numpy(), features)
        grad = compiled.kernel_order(noise.numpy(), model.classes)  # the kernel's layout
        sizes = np.zeros(k, dtype=np.int32)
        run(weights, grad, *data, np.float32(-0.25), np.zeros(k), sizes)
        grad = compiled.flat_order(grad, model.classes)
        assert np.all(np.abs(grad - expected.numpy()) <= bound)
        # the update theta - 0.25 G: the sum's error scaled, plus one rounding of the result
        updated = (theta.double() - 0.25 * expected).numpy()
        assert np.all(
            np.abs(compiled.natural_weights(weights, features) - updated)
            <= 0.25 * bound + 2.0**-23 * np.abs(updated)
        )
        assert not weights[:, :, features:].any()  # the padding columns stay zero
        assert np.array_equal(sizes, through.sum(1))
    assert np.array_equal(grad[0], noise[0].numpy())


def test_kernel_refuses_shapes_it_would_read_past():
    weights = compiled.transposed_weights(np.zeros((2, 7 * 4), np.float32), 7)
    xa = np.zeros((5, 32), np.float32)  # padded to 32 columns, the weights to 16
    rules = compiled.step_rules(
        canary_index=0, injected_canary=True, adversarial=False, coordinate=0
    )
    with pytest.raises(
        ValueError, match=r"logistic_step: shapes disagree.*transposed_weights and padded_rows"
    ):
        compiled.logistic_step(
            weights,
            np.zeros((2, 28), np.float32),
            xa,
            np.zeros(5, np.float32),
            np.zeros(5, np.int64),
            np.zeros((2, 3), np.int32),
            np.ones(2, bool),
            rules,
            np.zeros(28, np.float32),
            1.0,
            np.float32(-0.1),
            np.zeros(2),
            np.zeros(2, np.int32),
        )


def test_kernel_exponential_is_within_two_ulp():
    """The kernel's branch-free exp (Cody-Waite reduction, Cephes' polynomial) against the float64
    exponential over its whole domain [-87, 0] (uniform, denser near 0 where softmax terms
    matter, and the edges): at most 2 float32 ulp (measured 1.26; numpy's float32 exp: 2.4)."""
    rng = np.random.default_rng(0)
    t = np.concatenate(
        [
            -87 * rng.random(20_000),
            -2 * rng.random(20_000),
            [0.0, -0.0, -1e-8, -0.5 * np.log(2), -86.99, -87.0],
        ]
    ).astype(np.float32)
    got = compiled.exp_nonpositive(t).astype(np.float64)
    exact = np.exp(t.astype(np.float64))
    ulps = np.abs(got - exact) / np.spacing(exact.astype(np.float32)).astype(np.float64)
    assert ulps.max() <= 2.0, (ulps.max(), t[np.argmax(ulps)])
    assert 0 < compiled.exp_nonpositive(np.float32([-200.0]))[0] < 2e-38  # below -87: taken as -87


def test_layouts_round_trip():
    theta = np.random.default_rng(0).normal(size=(3, 7 * 4)).astype(np.float32)
    weights = compiled.transposed_weights(theta, 7)
    assert weights.shape == (3, 4, 16) and weights[1, 2, 5] == theta[1, 5 * 4 + 2]
    assert np.array_equal(compiled.natural_weights(weights, 7), theta)


def test_routes_are_checked_and_chosen(training_config, monkeypatch):
    problem = build_problem(training_config(model="mlp", hidden=4))
    batches = make_sampler("poisson", n=100, batch_size=10).sample(np.random.default_rng(1), 2)
    with pytest.raises(ValueError, match=r"route='fast' is not valid.*compiled.*grouped.*padded"):
        train(problem, batches, np.array([True, False]), _streams(2), route="fast")
    with pytest.raises(ValueError, match=r"route='compiled': the MLP's compiled route is "
                       r"'compiled_philox' with a Dirac canary"):
        train(problem, batches, np.array([True, False]), _streams(2), route="compiled")
    assert ROUTES == ("compiled", "compiled_philox", "grouped", "padded")
    import audit.training.engine

    logistic = build_problem(training_config(model="logistic")).model
    # its own noise
    assert audit.training.engine._route(logistic, torch.device("cpu"), None) == "compiled_philox"
    # the MLP's kernel (compiled_mlp) with a Dirac canary; the torch route for any other canary
    mlp = problem.model
    assert audit.training.engine._route(mlp, torch.device("cpu"), None) == "compiled_philox"
    assert audit.training.engine._route(mlp, torch.device("cpu"), None, dirac=False) == "grouped"
    with pytest.raises(ValueError, match=r"Dirac canary: False"):
        audit.training.engine._route(mlp, torch.device("cpu"), "compiled_philox", dirac=False)
    monkeypatch.setenv("AUDIT_COMPILED", "0")
    assert audit.training.engine._route(mlp, torch.device("cpu"), None) == "grouped"
    assert audit.training.engine._route(logistic, torch.device("cpu"), None) == "grouped"


@pytest.mark.parametrize(
    ("sampler", "options"),
    [
        ("poisson", {}),
        ("truncated_poisson", {"max_batch_size": 12}),
        ("poisson", {"n": 60, "batch_size": 20}),
    ],
)
def test_compiled_sampler_rows_are_numpys(sampler, options, monkeypatch):
    """The Poisson samplers' rows sorted by the compiled pass or by numpy: the same integers
    (a sort has one answer; the rejection of repeated indices consumes the same draws)."""
    arguments = {"n": 1000, "batch_size": 10, "epochs": 2, **options}
    fast = make_sampler(sampler, **arguments).sample(np.random.default_rng(8), 500)
    monkeypatch.setenv("AUDIT_COMPILED", "0")
    assert not compiled.available()
    slow = make_sampler(sampler, **arguments).sample(np.random.default_rng(8), 500)
    assert fast.dtype == slow.dtype and np.array_equal(fast, slow)


def test_fingerprint_records_the_default_routes(monkeypatch):
    """Shards of the compiled and the torch routes agree only up to float32 rounding, so a shard's
    fingerprint names the routes that made it; a GPU spec names the padded route."""
    from audit.run.fingerprint import changes, shard_fingerprint
    from audit.run.spec import parse_spec

    spec = parse_spec({"samplers": ["poisson"], "trials_in": 10, "trials_out": 10,
                       "training": {"sigma": 1.0, "batch_size": 5, "n": 50, "lr": 0.1}})
    stored = shard_fingerprint(spec)
    assert stored["engine"] == {
        "logistic": "compiled_philox",
        "mlp": "compiled_philox",
        "noise": "philox4x32-10-ziggurat256-f32-classmajor",
        "kernel": "per-model-softmax-1",
        "torch": "compiled",
    }
    assert compiled.default_routes("cuda") == {
        "logistic": "padded",
        "mlp": "padded",
        "batches": "device",
        "torch": "batched",
    }
    monkeypatch.setenv("AUDIT_COMPILED", "0")
    (change,) = changes(stored, shard_fingerprint(spec))
    assert change.startswith("engine routes") and "'grouped'" in change
