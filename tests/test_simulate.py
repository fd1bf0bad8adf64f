"""audit.training.simulate: the law of the simulated observations, seeding, and the two commands.

Tolerances: a mean of m independent values of standard deviation s is checked to 5 s/sqrt(m)
(a false alarm has probability < 1e-6); frequencies likewise with s = sqrt(p (1 - p)).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from audit.cli import main
from audit.core.mechanism import Mechanism
from audit.sampling.exact_draws import SPARSE_BELOW, bernoulli_mask, bernoulli_positions
from audit.sampling.factory import make_sampler
from audit.sampling.laws import canary_inclusion_probability, cobatch_mean, cobatch_variance
from audit.training.simulate import simulate_observations, simulate_shard

TINY = 1e-6  # near-noiseless runs expose the signal pattern exactly


def noiseless(sampler: str, threat: str, trials: int = 2000, **kw) -> tuple[np.ndarray, np.ndarray]:
    mechanism = Mechanism(sampler, sigma=TINY, threat_model=threat, **kw)
    o = simulate_observations(mechanism, trials, np.random.default_rng(0))
    return np.round(o.y_in).astype(int), np.round(o.y_out).astype(int)


def test_shapes_dtype_metadata():
    mechanism = Mechanism("deterministic", sigma=1.0, steps_per_epoch=5, epochs=2)
    o = simulate_observations(mechanism, 7, np.random.default_rng(0))
    assert o.y_in.shape == o.y_out.shape == (7, 10) and o.y_in.dtype == np.float32
    assert o.metadata["canary_steps"] == [0, 5] and o.available == ("all_iterates",)


@pytest.mark.parametrize("threat", ["isolated", "adversarial"])
def test_fixed_size_patterns(threat):
    base = 1 if threat == "adversarial" else 0
    y_in, y_out = noiseless("deterministic", threat, steps_per_epoch=4, epochs=3)
    expected = np.zeros(12, dtype=int)
    expected[[0, 4, 8]] = 1
    assert (y_in == (base + 1) * expected).all() and (y_out == base * expected).all()
    y_in, y_out = noiseless("persistent_shuffle", threat, steps_per_epoch=4, epochs=3)
    epochs_in = y_in.reshape(-1, 3, 4)
    assert ((epochs_in == base + 1).sum(axis=2) == 1).all()
    assert (epochs_in == epochs_in[:, :1, :]).all()  # same step every epoch
    assert ((y_out.reshape(-1, 3, 4) == base).sum(axis=2) == (1 if base else 4)).all()
    y_in, _ = noiseless("dynamic_shuffle", threat, steps_per_epoch=4, epochs=3)
    epochs_in = y_in.reshape(-1, 3, 4)
    assert ((epochs_in == base + 1).sum(axis=2) == 1).all()
    moved = (epochs_in[:, 0] != epochs_in[:, 1]).any(axis=1).mean()
    assert moved == pytest.approx(3 / 4, abs=5 * np.sqrt(3 / 16 / 2000))
    position = np.argmax(epochs_in[:, 0], axis=1)
    assert np.bincount(position, minlength=4) / 2000 == pytest.approx(
        np.full(4, 0.25), abs=5 * np.sqrt(3 / 16 / 2000)
    )


def test_poisson_isolated_participation():
    y_in, y_out = noiseless("poisson", "isolated", steps_per_epoch=10, epochs=2)
    assert set(np.unique(y_in)) <= {0, 1} and (y_out == 0).all()
    assert y_in.mean() == pytest.approx(0.1, abs=5 * np.sqrt(0.09 / y_in.size))


@pytest.mark.parametrize(
    ("p", "size"), [(1e-7, 10**11), (3e-8, 10**11), (1e-12, 10**15), (0.01, 10**6)]
)
def test_bernoulli_positions_are_exact_at_small_q(p, size):
    # The number of ones among `size` i.i.d. Bernoulli(p) draws is Binomial(size, p): an exact
    # two-sided binomial test at level 1e-6 (an exact sampler fails it with probability <= 1e-6;
    # seed fixed). Power: float32 uniforms (multiples of 2^-24) give the law Bin(size, ceil(p 2^24)
    # 2^-24): at p = 1e-7, 11921 expected ones instead of 1e4, 19 standard deviations away (p-value
    # ~1e-80); at 3e-8 and 1e-12 the float32 rate is 2^-24, twice and 6e4 times p (at 0.01 the
    # excess, 5e-6 relative, is not detectable). Positions: distinct, sorted, in range, uniform (KS
    # test, 1e-6).
    from scipy.stats import binomtest, kstest

    positions = bernoulli_positions(np.random.default_rng(11), p, size)
    assert positions.dtype == np.int64 and (np.diff(positions) > 0).all()
    assert positions[0] >= 0 and positions[-1] < size
    assert binomtest(positions.size, size, p).pvalue > 1e-6
    float32_rate = np.ceil(p * 2**24) / 2**24
    if size * (float32_rate - p) > 10 * np.sqrt(size * p):  # float32's excess: over 10 sd
        assert binomtest(positions.size, size, float32_rate).pvalue < 1e-6
    assert kstest(positions / size, "uniform").pvalue > 1e-6


@pytest.mark.parametrize("p", [0.0, 1e-5, 0.01, SPARSE_BELOW, 0.3, 1.0])
def test_bernoulli_mask_law(p):
    # Both paths (geometric gaps below SPARSE_BELOW, float64 uniforms above): the count of
    # ones in 4e6 draws is Binomial(4e6, p), checked with an exact two-sided binomial test at
    # level 1e-6; each row's count follows the same law (independence across the flattening).
    from scipy.stats import binomtest

    mask = bernoulli_mask(np.random.default_rng(3), p, (2000, 2000))
    assert mask.dtype == bool and mask.shape == (2000, 2000)
    count = int(mask.sum())
    if p in (0.0, 1.0):
        assert count == p * mask.size
        return
    assert binomtest(count, mask.size, p).pvalue > 1e-6
    rows = mask[:, :1000].sum(axis=1)  # 2000 counts of Bin(1000, p): mean to 5 standard errors
    assert rows.mean() == pytest.approx(1000 * p, abs=5 * np.sqrt(1000 * p * (1 - p) / 2000))
    with pytest.raises(ValueError, match="p must be a probability"):
        bernoulli_mask(np.random.default_rng(0), 1.5, (2,))


class _Float64UniformsOnly(np.random.Generator):
    """A generator that refuses float32 uniforms (multiples of 2^-24: not exact for small q)."""

    def random(self, size=None, dtype=np.float64, out=None):
        if np.dtype(dtype) != np.float64:
            raise AssertionError(
                f"uniforms drawn as {np.dtype(dtype)}: Pr[U < q] is rounded up to 2^-24"
            )
        return super().random(size, dtype=dtype, out=out)


@pytest.mark.parametrize("threat", ["isolated", "adversarial"])
@pytest.mark.parametrize("sampler", ["poisson", "truncated_poisson"])
def test_simulator_inclusions_compare_no_float32_uniform(sampler, threat):
    # Every Bernoulli draw of the simulator goes through an exact law (bernoulli_mask) or
    # float64 uniforms: float32 uniforms raised the canary's q by 19% at q = 1e-7.
    extra = {"max_batch_size": 12} if sampler == "truncated_poisson" else {}
    mechanism = Mechanism(
        sampler, sigma=1.0, steps_per_epoch=10, batch_size=10, threat_model=threat, **extra
    )
    observations = simulate_observations(mechanism, 200, _Float64UniformsOnly(np.random.PCG64(0)))
    assert observations.y_in.shape == (200, 10)


def test_truncated_poisson_law_matches_the_sampler():
    # Monte Carlo of the real sampler (audit.sampling.batches): the canary (example 0) is in a
    # step's batch with probability q E[min(1, B/(1 + K))]; the others kept have the
    # computed mean and variance.
    n, b, big_b = 50, 5, 6
    mechanism = Mechanism("truncated_poisson", sigma=1.0, steps_per_epoch=10, n=n, batch_size=b,
                          max_batch_size=big_b, threat_model="adversarial")
    batches = make_sampler("truncated_poisson", n=n, batch_size=b, max_batch_size=big_b).sample(
        np.random.default_rng(0), 20000
    ).reshape(-1, big_b)
    has_canary = (batches == 0).any(axis=1)
    others = (batches > 0).sum(axis=1)
    p = canary_inclusion_probability(mechanism)
    assert has_canary.mean() == pytest.approx(p, abs=5 * np.sqrt(p * (1 - p) / has_canary.size))
    assert others.mean() == pytest.approx(
        cobatch_mean(mechanism), abs=5 * others.std() / np.sqrt(others.size)
    )
    # Variance of a sample variance: ~ (mu4 - s^4)/m; 5 of those standard errors.
    m4 = ((others - others.mean()) ** 4).mean()
    assert others.var() == pytest.approx(
        cobatch_variance(mechanism), abs=5 * np.sqrt((m4 - others.var() ** 2) / others.size)
    )
    # The simulator's canary frequency (isolated) matches too.
    y_in, _ = noiseless(
        "truncated_poisson",
        "isolated",
        trials=4000,
        steps_per_epoch=10,
        n=n,
        batch_size=b,
        max_batch_size=big_b,
    )
    assert y_in.mean() == pytest.approx(p, abs=5 * np.sqrt(p * (1 - p) / y_in.size))


@pytest.mark.parametrize("sampler", ["poisson", "truncated_poisson"])
def test_poisson_adversarial_adds_cobatch_variance(sampler):
    extra = {"max_batch_size": 12} if sampler == "truncated_poisson" else {}
    mechanism = Mechanism(
        sampler, sigma=0.5, steps_per_epoch=10, batch_size=10, threat_model="adversarial", **extra
    )
    o = simulate_observations(mechanism, 4000, np.random.default_rng(1))
    y = o.y_out.astype(np.float64).ravel()
    var = 0.25 + cobatch_variance(mechanism)
    assert y.mean() == pytest.approx(0.0, abs=5 * np.sqrt(var / y.size))
    # Sample variance of ~4e4 values, kurtosis near 3: standard error ~ var sqrt(2/m).
    assert y.var() == pytest.approx(var, abs=5 * var * np.sqrt(3 / y.size))
    shift = o.y_in.astype(np.float64).mean() - y.mean()
    assert shift == pytest.approx(
        canary_inclusion_probability(mechanism), abs=5 * np.sqrt(2 * var / y.size)
    )
    with pytest.raises(ValueError, match="needs n"):
        unknown_n = Mechanism("poisson", sigma=1.0, steps_per_epoch=10, threat_model="adversarial")
        simulate_observations(unknown_n, 10, np.random.default_rng(0))


def test_shards_are_reproducible_and_distinct():
    mechanism = Mechanism("dynamic_shuffle", sigma=1.0, steps_per_epoch=8, epochs=2)
    a = simulate_shard(mechanism, seed=3, shard=1, trials=5)
    b = simulate_shard(mechanism, seed=3, shard=1, trials=5)
    c = simulate_shard(mechanism, seed=3, shard=2, trials=5)
    d = simulate_shard(mechanism, seed=3, shard=1, trials=5, cell="other")
    assert set(a) == {"y_in", "y_out"} and a["y_in"].shape == (5, 16)
    assert np.array_equal(a["y_in"], b["y_in"]) and np.array_equal(a["y_out"], b["y_out"])
    assert not np.array_equal(a["y_in"], c["y_in"]) and not np.array_equal(a["y_in"], d["y_in"])
    with pytest.raises(ValueError, match="trials"):
        simulate_shard(mechanism, seed=3, shard=0, trials=0)


def test_cli_simulate_json(capsys):
    code = main(["simulate", "--sampler", "deterministic", "--sigma", "1.0", "--steps", "10",
                 "--trials", "4000", "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    for key in ("epsilon_lb", "epsilon_optimistic", "theory", "attack", "trials", "alpha", "delta"):
        assert key in result
    assert set(result["theory"]) >= {"upper", "lower"}
    assert result["attack"] == "known_step" and result["trials"] == 4000
    assert 0 < result["epsilon_lb"] <= result["epsilon_optimistic"] + 1e-9
    if result["theory"]["upper"] is not None:
        assert result["epsilon_lb"] <= result["theory"]["upper"]


def test_cli_simulate_text_and_errors(capsys):
    assert (
        main(
            [
                "simulate",
                "--sampler",
                "dynamic_shuffle",
                "--sigma",
                "1.0",
                "--steps",
                "10",
                "--trials",
                "2000",
            ]
        )
        == 0
    )
    assert "optimistic, not a bound" in capsys.readouterr().out
    assert main(["simulate", "--sampler", "poison", "--sigma", "1.0", "--steps", "10"]) == 2
    assert "Did you mean 'poisson'" in capsys.readouterr().err
    assert (
        main(
            [
                "simulate",
                "--sampler",
                "poisson",
                "--sigma",
                "1.0",
                "--steps",
                "10",
                "--attack",
                "loss",
            ]
        )
        == 2
    )


def test_cli_plan(capsys):
    code = main(
        [
            "plan",
            "--sampler",
            "deterministic",
            "--sigma",
            "1.0",
            "--steps",
            "10",
            "--claim",
            "2.0",
            "--json",
        ]
    )
    if code == 2:
        pytest.skip("audit.theory gives no lower curve here: " + capsys.readouterr().err)
    result = json.loads(capsys.readouterr().out)
    assert result["reachable"] and result["trials"] > 100
    assert (
        main(
            [
                "plan",
                "--sampler",
                "deterministic",
                "--sigma",
                "1.0",
                "--steps",
                "10",
                "--claim",
                "50",
            ]
        )
        == 0
    )
    assert "not reachable" in capsys.readouterr().out
    assert (
        main(
            [
                "plan",
                "--sampler",
                "deterministic",
                "--sigma",
                "1.0",
                "--steps",
                "10",
                "--certify",
                "2.0",
            ]
        )
        == 0
    )
    assert "certify eps >= 2" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("sampler", "n", "b", "big_b"),
    [
        ("poisson", 100, 10, None),
        ("truncated_poisson", 100, 10, 12),
        ("truncated_poisson", 100, 10, 8),
        ("truncated_poisson", 50, 5, 5),
    ],
)
def test_simulator_adds_back_what_the_engine_attacker_adds_back(sampler, n, b, big_b):
    # One convention across modules: the simulator centres the co-batch count with E O
    # (cobatch_mean), the engine and the plug-in implementations add back known_offset.
    # Under zero-out, E O = (n-1)/n E[min(Bin(n, q), B)] (exchangeability of the kept slots),
    # so both are the same number up to float rounding (two formulas: 1e-12 relative).
    from audit.training.canaries import known_offset

    mechanism = Mechanism(sampler, sigma=1.0, steps_per_epoch=n // b, n=n, batch_size=b,
                          max_batch_size=big_b, threat_model="adversarial")
    assert cobatch_mean(mechanism) == pytest.approx(known_offset(mechanism), rel=1e-12)
    assert known_offset(mechanism.with_(threat_model="isolated")) == 0.0


def test_cli_simulate_default_threshold_is_the_specs(capsys):
    """Issue 32 item 4: one default. ``audit simulate`` (and ``audit plan``, which shares the
    flag) default to the spec's ``threshold``; without a theory lower curve the plan comes from a
    pilot, as in a spec's audit."""
    import dataclasses

    from audit.run.spec import ClaimSection
    from audit.stats.binary import DEFAULT_THRESHOLD

    spec_default = {f.name: f.default for f in dataclasses.fields(ClaimSection)}["threshold"]
    assert spec_default == DEFAULT_THRESHOLD == "planned"
    code = main(["simulate", "--sampler", "deterministic", "--sigma", "1.0", "--steps", "10",
                 "--trials", "4000", "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["threshold"] == DEFAULT_THRESHOLD
    assert 0 < result["epsilon_lb"] <= result["theory"]["upper"]


def test_cli_simulate_planned_without_a_theory_lower_curve_plans_from_a_pilot(
    capsys, monkeypatch
):
    """Where the theory has no lower curve, the default ``planned`` plans from a pilot of a tenth
    of the trials, left out of the test, as a spec's audit does (docs/design.md §8.3, §8.12)."""
    import audit.run.planning as planning

    real = planning.theory_bounds
    monkeypatch.setattr(
        planning, "theory_bounds", lambda mechanism: (real(mechanism)[0], None, "no lower curve")
    )
    code = main(["simulate", "--sampler", "deterministic", "--sigma", "1.0", "--steps", "10",
                 "--trials", "4000", "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["threshold"] == "planned" and result["ceiling"] is None
    assert 0 < result["epsilon_lb"] <= result["theory"]["upper"]
