"""A sampler is a type: a sampler registered at run time is handled or refused by every layer.

The dummy ``reversed_batches`` is a fixed-size sampler with only its draws, its exact laws and
a simulator law (batches in reverse index order, the same every epoch: the canary, example 0,
is in the last step of every epoch; the fixed-size law of ``Sampler.simulate_signal`` needs
only its ``canary_steps``). The layers that need nothing more handle it (mechanism,
samplers and their laws, ``audit samplers``, the simulator, the spec); the layers that need a
capability it lacks refuse it with a ValueError (or the accountants' Unsupported) naming the
sampler and the capability.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from audit.core.mechanism import Mechanism
from audit.sampling import (
    Sampler,
    get_sampler,
    register_sampler,
    sampler_names,
    unregister_sampler,
    validate,
)
from audit.sampling.batches import INDEX_DTYPE, _FixedSizeSampler

NAME = "reversed_batches"


class _ReversedBatches(_FixedSizeSampler):
    """Batches in reverse index order, the same in every epoch."""

    name = NAME

    def _epoch_orders(self, rng: np.random.Generator, trials: int) -> np.ndarray:
        order = np.arange(self.n - 1, -1, -1, dtype=INDEX_DTYPE)
        return np.broadcast_to(order, (trials, self.epochs, self.n)).copy()


class ReversedBatches(Sampler):
    name = NAME
    fixed_size = True

    def batch_sampler(self, *, n, batch_size, epochs, max_batch_size):
        return _ReversedBatches(n=n, batch_size=batch_size, epochs=epochs)

    def canary_steps(self, mechanism, rng, trials):
        last = mechanism.steps_per_epoch * np.arange(1, mechanism.epochs + 1) - 1
        return np.broadcast_to(last, (trials, mechanism.epochs))


@pytest.fixture
def dummy():
    sampler = register_sampler(ReversedBatches())
    try:
        yield sampler
    finally:
        unregister_sampler(NAME)
    assert NAME not in sampler_names()


def _mechanism(**changes) -> Mechanism:
    fields = {
        "sampler": NAME,
        "sigma": 1.0,
        "steps_per_epoch": 5,
        "epochs": 2,
        "n": 20,
        "batch_size": 4,
    }
    fields.update(changes)
    return validate(Mechanism(**fields))


def test_registry_lists_builtins_in_order_then_runtime_ones(dummy):
    from audit.core.names import SAMPLERS

    assert sampler_names() == (*SAMPLERS, NAME)
    assert get_sampler(NAME) is dummy
    with pytest.raises(ValueError, match="already registered"):
        register_sampler(ReversedBatches())
    with pytest.raises(ValueError, match="sampler"):
        get_sampler("no_such_sampler")


def test_handled_mechanism_draws_and_laws(dummy):
    from audit.sampling.batches import batch_size_pmf, participation_counts, participation_pmf
    from audit.sampling.factory import make_sampler

    m = _mechanism()
    assert m.sampler == NAME
    with pytest.raises(ValueError, match=f"sampler='{NAME}' needs n = batch_size"):
        _mechanism(n=21)
    sampler = make_sampler(NAME, n=20, batch_size=4, epochs=2)
    batches = sampler.sample(np.random.default_rng(0), 3)
    assert batches.shape == (3, 10, 4)
    assert (batches[:, 4] == [3, 2, 1, 0]).all()  # the last step of epoch 1 holds example 0
    assert (participation_counts(batches, 0) == 2).all()
    assert batch_size_pmf(sampler)[0].tolist() == [4]
    assert participation_pmf(sampler)[0].tolist() == [2]
    # the canary laws a fixed-size sampler has by construction
    from audit.sampling.laws import canary_inclusion_probability, cobatch_mean
    from audit.training.canaries import known_offset

    assert canary_inclusion_probability(m) == pytest.approx(1 / 5)
    assert cobatch_mean(m) == 0.0
    assert known_offset(m) == 4.0


def test_handled_samplers_cli(dummy, capsys):
    from audit.cli import main

    assert (
        main(
            [
                "samplers",
                "--sampler",
                NAME,
                "--n",
                "20",
                "--batch-size",
                "4",
                "--draws",
                "50",
                "--json",
            ]
        )
        == 0
    )
    (row,) = json.loads(capsys.readouterr().out)["samplers"]
    assert row["sampler"] == NAME and row["slots"] == 4 and row["max_batch_size"] is None


def test_handled_simulator(dummy):
    from audit.training.simulate import simulate_observations

    m = _mechanism(threat_model="isolated", sigma=0.01)
    obs = simulate_observations(m, 8, np.random.default_rng(1))
    # IN: a shift of 1 exactly in the canary's steps (4 and 9), noise sigma = 0.01 (100 sigma
    # margins)
    assert np.abs(obs.y_in[:, [4, 9]] - 1).max() < 0.5
    assert np.abs(obs.y_in[:, [0, 1, 2, 3, 5, 6, 7, 8]]).max() < 0.5
    assert np.abs(obs.y_out).max() < 0.5


def test_refused_theory_and_calibration(dummy):
    from audit.theory import bounds_for, privacy_bounds, sigma_for

    with pytest.raises(ValueError, match=f"sampler '{NAME}' has no theory"):
        bounds_for(_mechanism())
    with pytest.raises(ValueError, match=f"sampler '{NAME}' has no theory"):
        privacy_bounds(NAME, sigma=1.0, steps_per_epoch=5, n=20)
    with pytest.raises(ValueError, match=f"sampler '{NAME}' has no calibration"):
        sigma_for(1.0, 1e-5, NAME, steps_per_epoch=5, n=20)


def test_refused_accountants(dummy):
    pytest.importorskip("dp_accounting")
    from audit.accounting.adapters import Unsupported, claim_epsilon, dp_accounting_pld

    answer = claim_epsilon(dp_accounting_pld, _mechanism(), 1e-5)
    assert isinstance(answer, Unsupported)
    assert NAME in answer.reason and "dp_event" in answer.reason
    from audit.accounting.adapters import pld_accounting_random_allocation

    answer = claim_epsilon(pld_accounting_random_allocation, _mechanism(), 1e-5)
    assert (
        isinstance(answer, Unsupported)
        and NAME in answer.reason
        and "random-allocation" in answer.reason
    )


def test_refused_attacks_and_plugins(dummy):
    from attacks import default_attack, get_attack
    from audit.plugins.opacus import check_opacus_sampler
    from audit.training.simulate import simulate_observations

    m = _mechanism()
    with pytest.raises(ValueError, match=f"sampler '{NAME}' has no default attack"):
        default_attack(m)
    assert default_attack(m, "last_iterate") == "final_projection"  # needs no sampler law
    obs = simulate_observations(m, 4, np.random.default_rng(2))
    with pytest.raises(
        ValueError, match=f"attack 'known_step' is built for sampler in .*not sampler='{NAME}'"
    ):
        get_attack("known_step").scores(obs)
    with pytest.raises(
        ValueError, match=f"sampler='{NAME}' is not supported by the opacus implementation"
    ):
        check_opacus_sampler(NAME)
    from audit.plugins.opacus_loaders import opacus_loader

    with pytest.raises(ValueError, match=f"sampler '{NAME}' has no Opacus DataLoader"):
        opacus_loader(NAME, None, batch_size=4, epochs=1, generator=None, rng=None)


@pytest.mark.parametrize("fixed_size", [True, False])
def test_refused_simulator_without_law(fixed_size):
    """A sampler that brings no simulator law is refused by the simulator, naming it: a
    fixed-size one without ``canary_steps``, any other without ``simulate_signal``."""

    class NoLaw(Sampler):
        name = "no_law"

        def batch_sampler(self, *, n, batch_size, epochs, max_batch_size):
            return _ReversedBatches(n=n, batch_size=batch_size, epochs=epochs)

    NoLaw.fixed_size = fixed_size
    register_sampler(NoLaw())
    try:
        from audit.training.simulate import simulate_observations, simulate_shard

        m = Mechanism(sampler="no_law", sigma=1.0, steps_per_epoch=5, n=20, batch_size=4)
        with pytest.raises(ValueError, match="sampler 'no_law' has no simulator law"):
            simulate_observations(m, 4, np.random.default_rng(0))
        with pytest.raises(ValueError, match="sampler 'no_law' has no simulator law"):
            simulate_shard(m.with_(threat_model="isolated"), seed=0, shard=0, trials=4)
    finally:
        unregister_sampler("no_law")


def test_builtin_stage_entries():
    """Every built-in has its law's attributes and what each stage attaches to it: a theory
    (tests/test_theory_registry.py checks every registered sampler), a default attack per
    threat model, an accountants' entry (an event or the reason there is none)."""
    from attacks.defaults import default_attack_for
    from audit.accounting.events import EVENTS
    from audit.core.names import SAMPLERS
    from audit.theory.registry import theory_for

    for name in SAMPLERS:
        sampler = get_sampler(name)
        assert callable(theory_for(name).bounds), name
        assert all(default_attack_for(name, threat) for threat in ("isolated", "adversarial")), name
        assert EVENTS.find(name) is not None, name
        assert sampler.canary_law is not None, name
        # every built-in brings its simulator law (the hook), under both threat models
        for threat in ("isolated", "adversarial"):
            m = Mechanism(
                name,
                sigma=1.0,
                steps_per_epoch=4,
                n=8,
                batch_size=2,
                threat_model=threat,
                max_batch_size=3 if "max_batch_size" in sampler.parameters else None,
            )
            y = np.zeros((50, 4), dtype=np.float32)
            sampler.simulate_signal(m, np.random.default_rng(0), y, True)
            assert np.isfinite(y).all() and (y != 0).any(), (name, threat)
