"""The plug-in implementation contract (audit.plugins.contract) and the built-in ``opacus``."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from audit.plugins.contract import (
    CANARY_INDEX,
    Canary,
    IterateRecorder,
    TrainingResult,
    TrainingSetup,
    claimed_epsilon,
    coerce_result,
    load_implementation,
    make_canary,
    observations_of,
    run_implementation_shard,
    setup_from,
    training_data,
)


def user_train(data, canary, setup, seed):
    """The README's ten-line example: numpy DP-SGD, logistic regression, Poisson batches."""
    rng, (x, y, w) = np.random.default_rng(seed), canary.place(data)  # canary at row 0
    theta = np.zeros((data.classes, x.shape[1]))  # W (classes, D)
    for _ in range(setup.total_steps):  # Poisson, q = b/n
        batch = np.flatnonzero(rng.random(len(x)) < setup.batch_size / len(x))
        e = np.exp(x[batch] @ theta.T)
        e = e / e.sum(1, keepdims=True) - np.eye(data.classes)[y[batch]]
        g = w[batch, None, None] * e[:, :, None] * x[batch, None, :]  # zero-out: weight 0 OUT
        g *= np.minimum(1, setup.clip / np.maximum(np.linalg.norm(g, axis=(1, 2)), 1e-12))[
            :, None, None
        ]
        theta -= (
            setup.lr
            * (g.sum(0) + rng.normal(0, setup.sigma * setup.clip, theta.shape))
            / setup.batch_size
        )
    return {"final_params": theta.ravel(), "initial_params": np.zeros(theta.size),
            "canary_coordinate": canary.coordinate(data)}


def small_setup(**changes) -> TrainingSetup:
    values = dict(
        sampler="poisson", sigma=1.0, clip=1.0, lr=0.5, batch_size=5, n=20, dataset="breast_cancer"
    )
    values.update(changes)
    return TrainingSetup(**values)


# ------------------------------------------------------------------ loading


def test_load_builtins_and_paths():
    from audit.plugins import broken

    assert load_implementation("numpy-reference") is broken.correct
    assert load_implementation("audit.plugins.broken:noise_halved") is broken.noise_halved
    assert load_implementation(user_train) is user_train


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("opacuss", "Did you mean 'opacus'"),
        ("no_such_module_xyz:train", "cannot import 'no_such_module_xyz'"),
        ("audit.plugins.broken:nope", "has no attribute 'nope'"),
        ("audit.plugins.broken:BROKEN", "is not callable"),
        ("", "built-in name"),
    ],
)
def test_load_errors(name, message):
    with pytest.raises(ValueError, match=message):
        load_implementation(name)


# ------------------------------------------------------------------ results and observations


def test_coerce_result_validates():
    ok = coerce_result({"final_params": [1.0, 2.0], "canary_coordinate": 1})
    assert isinstance(ok, TrainingResult) and ok.final_params.dtype == np.float64
    with pytest.raises(ValueError, match="unknown keys"):
        coerce_result({"final_params": [1.0], "loss": 2.0})
    with pytest.raises(ValueError, match="must contain 'final_params'"):
        coerce_result({"canary_loss": 1.0})
    with pytest.raises(ValueError, match="canary_coordinate"):
        coerce_result({"final_params": [1.0, 2.0], "canary_coordinate": 2})
    with pytest.raises(ValueError, match="shape"):
        coerce_result({"final_params": [1.0, 2.0], "iterates": np.zeros((3, 3))})
    with pytest.raises(ValueError, match="unit vector"):
        coerce_result({"final_params": [1.0, 2.0], "canary_direction": [1.0, 1.0]})
    with pytest.raises(ValueError, match="TrainingResult or a dict"):
        coerce_result(3.0)


def test_observation_conversion_is_exact():
    """y_t = -(b/(lr C)) <Delta_t, u> + known and final = sum_t y_t, for known G_t + N_t."""
    setup = small_setup(
        lr=0.3, clip=2.0, batch_size=4, n=20, threat_model="adversarial", sampler="dynamic_shuffle"
    )
    rng = np.random.default_rng(0)
    k, size, steps = 3, 6, setup.total_steps
    signal = rng.normal(size=steps)  # <G_t + N_t, u> / C, u = -e_k
    theta = np.zeros((steps + 1, size))
    theta[0] = rng.normal(size=size)
    for t in range(steps):
        step = rng.normal(size=size)
        step[k] = -setup.clip * signal[t]  # component along e_k of G + N (u = -e_k)
        theta[t + 1] = theta[t] - setup.lr / setup.batch_size * step
    result = coerce_result({"final_params": theta[-1], "canary_coordinate": k, "iterates": theta})
    observed = observations_of(result, setup)
    known = float(setup.batch_size)  # adversarial, fixed-size sampler: b
    np.testing.assert_allclose(observed["y"], signal + known, atol=1e-9)
    np.testing.assert_allclose(observed["final"], observed["y"].sum(), atol=1e-9)
    updates = coerce_result(
        {
            "final_params": theta[-1],
            "canary_coordinate": k,
            "updates": np.diff(theta, axis=0),
            "initial_params": theta[0],
        }
    )
    np.testing.assert_allclose(observations_of(updates, setup)["y"], observed["y"], atol=1e-12)


def test_setup_from_engine_config():
    from audit.training.trials import TrainingConfig

    config = TrainingConfig(
        dataset="digits",
        model="logistic",
        sampler="poisson",
        sigma=0.7,
        clip=1.5,
        lr=0.2,
        batch_size=10,
        n=100,
        epochs=2,
        threat_model="adversarial",
        init_seed=3,
    )
    setup = setup_from(config, delta=1e-6)
    assert (setup.sigma, setup.clip, setup.n, setup.epochs, setup.init_seed, setup.delta) == (
        0.7,
        1.5,
        100,
        2,
        3,
        1e-6,
    )
    assert setup.total_steps == 20 and setup.mechanism == config.mechanism
    with pytest.raises(ValueError, match="lacks"):
        setup_from({"sampler": "poisson"})
    with pytest.raises(ValueError, match="sampler"):
        small_setup(sampler="poison")


def test_input_canary_refuses_adversarial():
    # The Dirac protocol alone injects the adversarial co-batch (-C u from every other row);
    # an input canary under 'adversarial' read y_t = b + noise at every step (the add-back b
    # of known_offset with no co-batch to cancel it): a mislabelled audit.
    with pytest.raises(ValueError, match=r"adversarial.*canary='dirac'"):
        small_setup(canary="input", threat_model="adversarial")
    assert small_setup(canary="dirac", threat_model="adversarial").canary == "dirac"


def test_input_canary_refuses_isolated_shuffles():
    # The shuffles' isolated theory assumes no other example moves the canary's parameters:
    # only the Dirac canary guarantees it. Poisson's isolated curves are worst-case guarantees.
    with pytest.raises(
        ValueError,
        match=r"canary='input' with threat_model='isolated' and sampler='dynamic_shuffle'",
    ):
        small_setup(canary="input", sampler="dynamic_shuffle")
    assert small_setup(canary="dirac", sampler="dynamic_shuffle").threat_model == "isolated"
    assert small_setup(canary="input", sampler="poisson").canary == "input"


def test_canary_placement_zero_out():
    setup = small_setup(canary="input")
    data = training_data(setup)
    assert data.x.shape == (setup.n - 1, 31) and np.all(data.x[:, -1] == 0)
    for is_in in (True, False):
        canary = make_canary(setup, data, is_in=is_in)
        x, y, w = canary.place(data)
        assert len(y) == setup.n and x[CANARY_INDEX, -1] == setup.canary_scale
        assert w[CANARY_INDEX] == (1.0 if is_in else 0.0) and np.all(w[1:] == 1.0)
    with pytest.raises(ValueError, match="weight"):
        Canary(kind="dirac", x=np.zeros(3), y=0, weight=0.5)


def test_training_data_are_the_engines_rows():
    # Plug-ins train on the engine's rows: the canary at CANARY_INDEX (0), the others 1..n-1.
    from audit.training.trials import TrainingConfig, build_problem

    config = TrainingConfig(
        dataset="breast_cancer",
        model="logistic",
        sampler="poisson",
        sigma=1.0,
        clip=1.0,
        lr=0.5,
        batch_size=5,
        n=20,
        data_seed=4,
    )
    problem, data = build_problem(config), training_data(setup_from(config))
    others = np.arange(config.n) != CANARY_INDEX
    np.testing.assert_array_equal(data.x, problem.x[others])
    np.testing.assert_array_equal(data.y, problem.y[others])


# ------------------------------------------------------------------ running shards


def test_user_implementation_shard_reproducible():
    setup = small_setup(observation="last_iterate")
    first = run_implementation_shard(user_train, setup, seed=7, shard=2, trials=6, cell="c")
    again = run_implementation_shard(user_train, setup, seed=7, shard=2, trials=6, cell="c")
    other = run_implementation_shard(user_train, setup, seed=7, shard=3, trials=6, cell="c")
    assert set(first) == {"final_in", "final_out"} and first["final_in"].shape == (6,)
    for key in first:
        np.testing.assert_array_equal(first[key], again[key])
    assert not np.allclose(first["final_in"], other["final_in"])
    with pytest.raises(ValueError, match=r"all_iterates.*needs"):
        run_implementation_shard(
            user_train, setup, seed=7, shard=0, trials=1, observation="all_iterates"
        )


def test_reference_noise_and_signal():
    """numpy-reference, Poisson, isolated Dirac canary: y_out ~ N(0, sigma^2) iid, and
    E[sum_t y_in - sum_t y_out] = q T (one +1 per participation).

    400 trials x 4 steps = 1600 OUT values: the sample variance / sigma^2 lies in the
    central 99.9% chi-square(1599)/1599 interval; the mean difference of the sums has
    standard error sqrt((2 T sigma^2 + T q (1-q)) / 400) and must lie within 4 of them.
    """
    setup = small_setup(sigma=0.7, batch_size=5, n=20)  # q = 0.25, T = 4
    out = run_implementation_shard("numpy-reference", setup, seed=1, shard=0, trials=400)
    y_out = out["y_out"].ravel()
    dof = y_out.size - 1
    ratio = y_out.var(ddof=1) / setup.sigma**2
    assert stats.chi2.ppf(0.0005, dof) / dof < ratio < stats.chi2.ppf(0.9995, dof) / dof
    q, steps = 0.25, setup.total_steps
    diff = out["y_in"].sum(1).mean() - out["y_out"].sum(1).mean()
    se = np.sqrt((2 * steps * setup.sigma**2 + steps * q * (1 - q)) / 400)
    assert abs(diff - q * steps) < 4 * se


def test_iterate_recorder_torch_sgd():
    import torch

    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    recorder = IterateRecorder(model.parameters()).attach(optimizer)
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.ones(1, 3)).sum().backward()
        optimizer.step()
    recorder.detach()
    optimizer.step()
    assert recorder.iterates.shape == (4, 8)
    # bias grad = 1
    np.testing.assert_allclose(np.diff(recorder.iterates, axis=0)[:, -2:], -0.1, atol=1e-6)


# ------------------------------------------------------------------ built-in opacus

opacus = pytest.importorskip("opacus", reason="the 'accountants' extra (opacus) is not installed")


@pytest.mark.parametrize(
    "sampler", ["deterministic", "persistent_shuffle", "dynamic_shuffle", "poisson"]
)
@pytest.mark.parametrize("threat_model", ["isolated", "adversarial"])
def test_opacus_dirac_protocol_exact(sampler, threat_model):
    """With sigma -> 0, Opacus's clipped sum along u is exactly the canary's participation:
    IN reads 1 (isolated) or 2 (adversarial, fixed size) at its steps, OUT 0 or 1; every
    fixed-size sampler holds the canary exactly once per epoch."""
    setup = small_setup(
        sampler=sampler, threat_model=threat_model, sigma=1e-9, n=8, batch_size=2, epochs=2
    )
    out = run_implementation_shard("opacus", setup, seed=3, shard=0, trials=3)
    y_in, y_out = out["y_in"], out["y_out"]
    assert y_in.shape == (3, setup.total_steps)
    if sampler == "poisson":
        known = (setup.n - 1) * setup.batch_size / setup.n
        if threat_model == "isolated":
            assert np.allclose(y_out, 0, atol=1e-4) and np.allclose(y_in, np.round(y_in), atol=1e-4)
            assert set(np.round(y_in).ravel()) <= {0.0, 1.0}
        else:  # y = 1{canary IN} - (others in batch) + (n-1) q: integers shifted by `known`
            frac = (y_out - known) - np.round(y_out - known)
            assert np.allclose(frac, 0, atol=1e-4)
        return
    shift = 1.0 if threat_model == "adversarial" else 0.0
    per_epoch_in = y_in.reshape(3, setup.epochs, -1)
    per_epoch_out = y_out.reshape(3, setup.epochs, -1)
    np.testing.assert_allclose(np.sort(per_epoch_in, axis=2)[..., -1], 1 + shift, atol=1e-4)
    np.testing.assert_allclose(np.sort(per_epoch_in, axis=2)[..., :-1], 0, atol=1e-4)
    np.testing.assert_allclose(per_epoch_out.sum(axis=2), shift, atol=1e-4)
    step = per_epoch_in.argmax(axis=2)
    if sampler == "deterministic":
        assert np.all(step == 0)
    if sampler == "persistent_shuffle":
        assert np.all(step == step[:, :1])
    np.testing.assert_allclose(out["final_in"], y_in.sum(1), atol=1e-4)


def test_opacus_noise_scale_and_claim():
    """Opacus's noise along u has variance sigma^2 (in units of C): 20 trainings x 20 steps =
    400 OUT values, the ratio inside the central 99.9% chi-square interval. Its claimed
    epsilon is privacy_engine.get_epsilon(delta) of the run, also given without training
    (RDP accountant here: Opacus's default PRV takes ~8 s for this history)."""
    setup = small_setup(sampler="dynamic_shuffle", sigma=0.8, n=40, batch_size=2, dataset="digits")
    out = run_implementation_shard("opacus-rdp", setup, seed=5, shard=0, trials=20)
    y_out = out["y_out"].ravel()
    dof = y_out.size - 1
    ratio = y_out.var(ddof=1) / setup.sigma**2
    assert stats.chi2.ppf(0.0005, dof) / dof < ratio < stats.chi2.ppf(0.9995, dof) / dof
    claimed = claimed_epsilon("opacus-rdp", setup, setup.delta)
    np.testing.assert_allclose(out["claimed_epsilon"], claimed)
    from opacus.accountants import RDPAccountant

    accountant = RDPAccountant()
    # poisson_sampling=False is still accounted as Poisson, q = 1/len(loader)
    accountant.history = [(0.8, 1 / 20, 20)]
    assert claimed == pytest.approx(accountant.get_epsilon(delta=setup.delta))


def test_opacus_input_canary_and_errors():
    setup = small_setup(
        canary="input", observation="black_box", sampler="poisson", n=20, dataset="digits"
    )
    out = run_implementation_shard("opacus-rdp", setup, seed=2, shard=0, trials=2)
    assert {"loss_in", "loss_out", "final_in", "logits_in"} <= set(out)
    assert "y_in" not in out  # black box: no per-step parameters recorded
    assert out["logits_in"].shape == (2, 10)
    with pytest.raises(ValueError, match="sampler"):
        run_implementation_shard(
            "opacus",
            small_setup(sampler="truncated_poisson", max_batch_size=6),
            seed=0,
            shard=0,
            trials=1,
        )


def test_opacus_mlp_runs():
    setup = small_setup(
        model="mlp", hidden=8, sampler="deterministic", n=10, batch_size=5, sigma=1e-9
    )
    out = run_implementation_shard("opacus", setup, seed=0, shard=0, trials=1)
    np.testing.assert_allclose(out["y_in"], [[1.0, 0.0]], atol=1e-4)


@pytest.mark.parametrize("sampler", ["poisson", "dynamic_shuffle"])
def test_setup_needs_n_multiple_of_batch_size(sampler):
    # T = n / b must be one number for the harness, the samplers and Opacus (len(loader)).
    with pytest.raises(ValueError, match=r"n=21 must be a multiple of batch_size=5.*use n=20"):
        small_setup(sampler=sampler, n=21)
