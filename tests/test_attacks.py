"""attacks/: the registry, default attacks, refusals, and every LR against its density formula."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import logsumexp
from scipy.stats import norm

from attacks import ATTACKS, Attack, default_attack, get_attack
from attacks.black_box import LiRA
from audit.core.mechanism import Mechanism
from audit.core.observations import Observations


def obs(mechanism: Mechanism, y_in: np.ndarray, y_out: np.ndarray, **extra) -> Observations:
    return Observations(mechanism=mechanism, y_in=y_in, y_out=y_out, **extra)


def mech(
    sampler: str,
    *,
    sigma: float = 0.9,
    steps: int = 6,
    epochs: int = 1,
    threat: str = "isolated",
    **kw,
):
    return Mechanism(
        sampler, sigma=sigma, steps_per_epoch=steps, epochs=epochs, threat_model=threat, **kw
    )


def test_registry_names_and_errors():
    for name in (
        "poisson_lr",
        "shuffle_isolated_lr",
        "shuffle_adversarial_lr",
        "known_step",
        "max",
        "sum",
        "loss",
        "lira",
    ):
        assert name in ATTACKS
        attack = get_attack(name)
        assert isinstance(attack, Attack) and attack.name == name
        assert attack.observation in ("all_iterates", "last_iterate", "black_box")
    with pytest.raises(ValueError, match="Did you mean 'max'"):
        get_attack("maxx")
    with pytest.raises(ValueError, match="does not take options"):
        get_attack("max", reference=None)


@pytest.mark.parametrize(
    ("sampler", "threat", "expected"),
    [
        ("deterministic", "adversarial", "known_step"),
        ("deterministic", "isolated", "known_step"),
        ("poisson", "isolated", "poisson_lr"),
        ("truncated_poisson", "adversarial", "poisson_lr"),
        ("persistent_shuffle", "isolated", "shuffle_isolated_lr"),
        ("dynamic_shuffle", "adversarial", "shuffle_adversarial_lr"),
    ],
)
def test_default_attack(sampler, threat, expected):
    extra = (
        {"n": 60, "batch_size": 10, "max_batch_size": 12} if sampler == "truncated_poisson" else {}
    )
    mechanism = mech(sampler, threat=threat, **extra)
    assert default_attack(mechanism) == expected
    assert default_attack(mechanism, "black_box") == "loss"
    assert default_attack(mechanism, "last_iterate") == "final_projection"
    with pytest.raises(ValueError, match="observation"):
        default_attack(mechanism, "everything")


def test_refuses_wrong_sampler_and_observation():
    y = np.zeros((3, 6))
    deterministic = obs(mech("deterministic"), y, y)
    with pytest.raises(ValueError, match=r"poisson_lr.*sampler='deterministic'"):
        get_attack("poisson_lr").scores(deterministic)
    with pytest.raises(ValueError, match=r"needs observation='black_box'.*all_iterates"):
        get_attack("loss").scores(deterministic)
    with pytest.raises(ValueError, match="shape"):
        get_attack("sum").scores(obs(mech("deterministic"), np.zeros((3, 5)), np.zeros((3, 5))))


def _direct_mog_log_density(y: np.ndarray, means: np.ndarray, sigma: float) -> np.ndarray:
    """log of (1/K) sum_k prod_t N(y_t; means[k, t], sigma^2), for y (trials, T)."""
    per_component = norm.logpdf(y[:, None, :], means[None, :, :], sigma).sum(axis=2)
    return logsumexp(per_component, axis=1) - np.log(means.shape[0])


def test_shuffle_lrs_equal_the_log_density_ratio():
    rng = np.random.default_rng(0)
    steps, sigma = 6, 0.9
    y = rng.normal(0.5, 1.2, size=(50, steps))
    eye = np.eye(steps)
    adversarial = mech("dynamic_shuffle", sigma=sigma, steps=steps, threat="adversarial")
    s_in, _ = get_attack("shuffle_adversarial_lr").scores(obs(adversarial, y, y))
    expected = _direct_mog_log_density(y, 2 * eye, sigma) - _direct_mog_log_density(y, eye, sigma)
    np.testing.assert_allclose(s_in, expected, rtol=1e-9, atol=1e-9)
    isolated = mech("dynamic_shuffle", sigma=sigma, steps=steps)
    s_in, _ = get_attack("shuffle_isolated_lr").scores(obs(isolated, y, y))
    expected = _direct_mog_log_density(y, eye, sigma) - _direct_mog_log_density(
        y, np.zeros((1, steps)), sigma
    )
    np.testing.assert_allclose(s_in, expected, rtol=1e-9, atol=1e-9)


def test_poisson_lr_equals_the_mixture_log_ratio():
    rng = np.random.default_rng(1)
    mechanism = mech("poisson", steps=5, epochs=2, sigma=0.7)  # q = 1/5
    q = mechanism.sampling_probability
    y = rng.normal(0.3, 1, size=(40, 10))
    s_in, _ = get_attack("poisson_lr").scores(obs(mechanism, y, y))
    mixture = np.log((1 - q) * norm.pdf(y, 0, 0.7) + q * norm.pdf(y, 1, 0.7)) - norm.logpdf(
        y, 0, 0.7
    )
    np.testing.assert_allclose(s_in, mixture.sum(axis=1), rtol=1e-9, atol=1e-9)


def test_epoch_combination():
    rng = np.random.default_rng(2)
    steps, epochs, sigma = 4, 3, 0.8
    y = rng.normal(size=(20, steps * epochs))
    attack = get_attack("shuffle_adversarial_lr")
    dynamic = attack.scores(
        obs(mech("dynamic_shuffle", sigma=sigma, steps=steps, epochs=epochs), y, y)
    )[0]
    one_epoch = mech("dynamic_shuffle", sigma=sigma, steps=steps)
    per_epoch = sum(
        attack.scores(obs(one_epoch, y[:, e * steps : (e + 1) * steps], y[:, :steps]))[0]
        for e in range(epochs)
    )
    np.testing.assert_allclose(dynamic, per_epoch, rtol=1e-12)
    persistent = attack.scores(
        obs(mech("persistent_shuffle", sigma=sigma, steps=steps, epochs=epochs), y, y)
    )[0]
    folded = y.reshape(20, epochs, steps).mean(axis=1)
    reference = attack.scores(
        obs(mech("persistent_shuffle", sigma=sigma / np.sqrt(epochs), steps=steps), folded, folded)
    )[0]
    np.testing.assert_allclose(persistent, reference, rtol=1e-12)


def test_known_step_max_sum():
    mechanism = mech("deterministic", steps=3, epochs=2)
    y = np.arange(12.0).reshape(2, 6)
    observations = obs(mechanism, y, -y)
    s_in, s_out = get_attack("known_step").scores(observations)
    np.testing.assert_array_equal(s_in, y[:, 0] + y[:, 3])  # default: steps 0, T, 2T, ...
    np.testing.assert_array_equal(s_out, -(y[:, 0] + y[:, 3]))
    recorded = obs(mechanism, y, -y, metadata={"canary_steps": [1, 4]})
    np.testing.assert_array_equal(get_attack("known_step").scores(recorded)[0], y[:, 1] + y[:, 4])
    with pytest.raises(ValueError, match="canary_steps"):
        get_attack("known_step").scores(obs(mechanism, y, y, metadata={"canary_steps": [9]}))
    np.testing.assert_array_equal(get_attack("max").scores(observations)[0], y.max(axis=1))
    np.testing.assert_array_equal(get_attack("sum").scores(observations)[0], y.sum(axis=1))


def test_black_box_and_last_iterate():
    mechanism = mech("poisson")
    rng = np.random.default_rng(3)
    loss_in, loss_out = rng.gamma(2, 0.1, 400), rng.gamma(2, 0.5, 400)
    observations = Observations(mechanism=mechanism, loss_in=loss_in, loss_out=loss_out,
                                final_in=np.array([2.0, 1.0]), final_out=np.array([0.5, 0.0]))
    s_in, _ = get_attack("loss").scores(observations)
    np.testing.assert_array_equal(s_in, -loss_in)
    f_in, f_out = get_attack("final_projection").scores(observations)
    assert f_in.min() > f_out.max()  # larger normalised displacement = IN
    with pytest.raises(ValueError, match="not fitted"):
        get_attack("lira").scores(observations)
    reference = Observations(
        mechanism=mechanism, loss_in=rng.gamma(2, 0.1, 400), loss_out=rng.gamma(2, 0.5, 400)
    )
    lira = get_attack("lira", reference=reference)
    l_in, l_out = lira.scores(observations)
    assert np.median(l_in) > np.median(l_out)
    assert LiRA().fit(reference).fitted == lira.fitted
