"""Canaries: directions, the private row untouched by real data, the attacker's add-back."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from audit.core.mechanism import Mechanism
from audit.training.canaries import known_offset, make_canary, private_coordinate
from audit.training.models import make_model
from audit.training.trials import TrainingConfig, build_problem


def _problem(**changes):
    base = dict(dataset="digits", model="logistic", sampler="poisson", sigma=1.0, clip=1.0,
                lr=0.5, batch_size=10, n=100)
    base.update(changes)
    return build_problem(TrainingConfig(**base))


@pytest.mark.parametrize("model", ["logistic", "mlp"])
def test_dirac_is_one_private_coordinate(model):
    problem = _problem(model=model, hidden=8, canary_label=3)
    u = problem.canary.u
    assert problem.canary.injected and np.count_nonzero(u) == 1 and u.sum() == -1.0
    column = 3 if model == "logistic" else 0
    assert u[private_coordinate(problem.model, column)] == -1.0
    # Real data never touch the private row: their gradients are 0 along every private weight.
    m = problem.model
    x = torch.as_tensor(problem.x[1:])[None]
    y = torch.as_tensor(problem.y[1:])[None]
    grads = m.per_example_grads(torch.as_tensor(problem.theta0)[None], x, y)[0].numpy()
    width = m.shapes[0][1]
    start = private_coordinate(m, 0)
    assert np.all(grads[:, start : start + width] == 0)


@pytest.mark.parametrize("model", ["logistic", "mlp"])
def test_ood_input_canary_direction(model):
    problem = _problem(model=model, hidden=8, canary="input")
    canary, m = problem.canary, problem.model
    assert not canary.injected
    assert np.isclose(np.linalg.norm(canary.u), 1.0)
    width = m.shapes[0][1]
    start = private_coordinate(m, 0)
    outside = np.ones(m.size, dtype=bool)
    outside[start : start + width] = False
    assert np.all(canary.u[outside] == 0)
    # The training set's row 0 is the canary: scale * e_{D-1}, label canary_label.
    assert np.array_equal(problem.x[0], canary.x) and problem.x[0, -1] == 10.0
    assert np.all(problem.x[1:, -1] == 0)
    # At theta_0 its clipped gradient has component scale/sqrt(scale^2+1) * C along u (logistic:
    # the private row is scale * e and the bias is e, with the same e).
    g = m.per_example_grads(torch.as_tensor(problem.theta0, dtype=torch.float64)[None],
                            torch.as_tensor(canary.x, dtype=torch.float64)[None, None],
                            torch.tensor([[canary.label]]))[0, 0].numpy()
    cos = g @ canary.u / np.linalg.norm(g)
    if model == "logistic":
        assert cos == pytest.approx(10 / np.sqrt(101), rel=1e-5)
    assert 0 < cos <= 1


def test_mislabeled_canary_flips_label():
    m = make_model("logistic", features=5, classes=3)
    theta0 = np.zeros(m.size)
    canary = make_canary("input", m, theta0, input_kind="mislabeled", example=(np.ones(5), 2))
    assert canary.label == 0 and np.isclose(np.linalg.norm(canary.u), 1.0)
    with pytest.raises(ValueError, match="canary"):
        make_canary("gradient", m, theta0)


def test_known_offset():
    iso = Mechanism("poisson", 1.0, 100, n=1000, batch_size=10, threat_model="isolated")
    assert known_offset(iso) == 0.0
    assert known_offset(iso.with_(threat_model="adversarial")) == pytest.approx(999 * 0.01)
    shuffle = Mechanism(
        "dynamic_shuffle", 1.0, 100, n=1000, batch_size=10, threat_model="adversarial"
    )
    assert known_offset(shuffle) == 10.0
    # Truncated Poisson: (n-1)/n E[min(Bin(n, q), B)]; with B = n it is (n-1) q.
    big = Mechanism("truncated_poisson", 1.0, 10, n=100, batch_size=10, max_batch_size=100,
                    threat_model="adversarial")
    assert known_offset(big) == pytest.approx(99 * 0.1)
    small = big.with_(max_batch_size=10)
    sizes = np.arange(101)
    expected = 0.99 * np.sum(np.minimum(sizes, 10) * stats.binom.pmf(sizes, 100, 0.1))
    assert known_offset(small) == pytest.approx(expected)
    assert known_offset(small) < 9.9


def test_canary_index_and_deterministic_steps_are_one_convention():
    # The canary is example CANARY_INDEX everywhere; under deterministic batches the sampler
    # puts it at the steps that known_step assumes and the simulator records.
    from attacks.simple import canary_steps
    from audit.core.names import CANARY_INDEX
    from audit.core.observations import Observations
    from audit.plugins import contract as implementations
    from audit.sampling.factory import make_sampler
    from audit.training import canaries
    from audit.training.simulate import simulate_observations

    assert canaries.CANARY_INDEX == implementations.CANARY_INDEX == CANARY_INDEX == 0
    mechanism = Mechanism(
        "deterministic", sigma=1.0, steps_per_epoch=4, epochs=3, n=20, batch_size=5
    )
    batches = make_sampler("deterministic", n=20, batch_size=5, epochs=3).sample(
        np.random.default_rng(0), 2
    )
    for trial in batches:
        steps = np.flatnonzero((trial == CANARY_INDEX).any(axis=1)).tolist()
        assert steps == [0, 4, 8]
    blank = Observations(mechanism=mechanism, y_in=np.zeros((1, 12)), y_out=np.zeros((1, 12)))
    assert canary_steps(blank).tolist() == [0, 4, 8]
    simulated = simulate_observations(mechanism, 1, np.random.default_rng(0))
    assert simulated.metadata["canary_steps"] == [0, 4, 8]
