"""One record per training (audit.core.record.Training): its views, the spec's records, T once."""

from __future__ import annotations

import dataclasses

import pytest

from audit.core.mechanism import Mechanism
from audit.core.record import Training
from audit.plugins.contract import TrainingSetup, setup_from
from audit.run.spec import TrainingKey, parse_spec
from audit.sampling.batches import steps_per_epoch_for

BASE = {
    "sampler": "poisson",
    "sigma": 0.8,
    "clip": 1.0,
    "lr": 0.5,
    "batch_size": 10,
    "n": 100,
    "epochs": 3,
}


def _names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def test_record_builds_its_mechanism_once():
    record = Training(**BASE, threat_model="adversarial")
    mechanism = record.mechanism
    assert mechanism is record.mechanism
    assert mechanism == Mechanism("poisson", sigma=0.8, steps_per_epoch=10, epochs=3,
                                  threat_model="adversarial", n=100, batch_size=10)
    assert (record.steps_per_epoch, record.total_steps, mechanism.sampling_probability) == (
        10,
        30,
        0.1,
    )
    assert "mechanism" not in record.to_dict()  # plain fields only (JSON metadata)
    assert record.with_(epochs=1).total_steps == 10


def test_views_add_only_their_own_fields():
    record = _names(Training)
    from audit.training.trials import TrainingConfig

    assert _names(TrainingConfig) == [*record, "record_params", "device"]
    assert _names(TrainingSetup) == [*record, "observation", "delta"]


def test_view_takes_each_option_from_the_call_its_default_or_refuses():
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Tagged(Training):
        tags: list[str] = dataclasses.field(default_factory=list)
        owner: str

    record = Training(**BASE)
    view = Tagged.view(record, owner="me")
    assert (view.tags, view.owner, view.mechanism) == ([], "me", record.mechanism)
    with pytest.raises(ValueError, match=r"Tagged\.view needs owner"):
        Tagged.view(record)


def test_setup_is_a_view_of_the_engine_config():
    from audit.training.trials import TrainingConfig, build_problem

    config = TrainingConfig(**BASE, init_seed=4)
    setup = setup_from(config, delta=1e-6)
    assert setup.mechanism is config.mechanism  # viewed, not rebuilt
    assert (setup.init_seed, setup.delta, setup.observation) == (4, 1e-6, "all_iterates")
    assert setup == TrainingSetup(**BASE, init_seed=4, delta=1e-6)
    # a view checks its own rules: plug-ins train logistic or mlp only
    with pytest.raises(ValueError, match="model='cnn' is not valid"):
        setup_from(TrainingConfig(**BASE, model="cnn"))
    with pytest.raises(ValueError, match=r"takes only TrainingSetup's own fields; got \['sigma'\]"):
        TrainingSetup.view(config, sigma=2.0)
    # the engine's problem reads its hyper-parameters from the record
    problem = build_problem(config)
    assert problem.training is config
    assert (problem.sigma, problem.clip, problem.lr, problem.batch_size, problem.threat_model) == (
        0.8, 1.0, 0.5, 10, "isolated")


def test_record_validates_each_field_with_a_clear_error():
    with pytest.raises(ValueError, match=r"n=105 must be a multiple of batch_size=10 .* use n=100"):
        Training(**{**BASE, "n": 105})
    with pytest.raises(ValueError, match="canary_label"):
        Training(**BASE, canary_label=10)  # digits has 10 classes
    with pytest.raises(ValueError, match="dataset"):
        Training(**BASE, dataset="mnist")
    with pytest.raises(ValueError, match="sigma"):
        Training(**{**BASE, "sigma": 0.0})
    with pytest.raises(ValueError, match="input_canary"):
        Training(**BASE, input_canary="loud")
    with pytest.raises(
        ValueError, match=r"n=2000 is larger than dataset 'digits'.*allowed: 2 <= n <= 1797"
    ):
        Training(**{**BASE, "n": 2000})
    with pytest.raises(ValueError, match=r"TrainingSetup.view takes a Training record .* got dict"):
        TrainingSetup.view(BASE)


SPEC = {
    "samplers": ["poisson", "dynamic_shuffle"], "threat_models": ["isolated", "adversarial"],
    "trials_in": 10, "trials_out": 10, "shard_size": 10,
    "training": {"sigma": 1.0, "batch_size": 5, "n": 20, "epochs": 2, "lr": 0.1},
}


def test_spec_builds_one_record_per_training_key():
    spec = parse_spec({**SPEC, "mode": "train"})
    key = TrainingKey("poisson", "adversarial")
    record = spec.training_record(key)
    assert record is spec.training_record(key)
    assert spec.mechanism(key) is record.mechanism
    assert spec.training_config(key).mechanism is record.mechanism
    assert (record.sampler, record.threat_model, record.lr, spec.steps_per_epoch) == (
        "poisson",
        "adversarial",
        0.1,
        4,
    )
    copy = dataclasses.replace(spec, experiment=dataclasses.replace(spec.experiment, seed=1))
    assert copy.training_record(key) is not record  # a copy builds its own
    # the fingerprinted values are the spec's fields only
    assert "_built_records" not in spec.to_dict()


def test_steps_per_epoch_computed_in_one_place():
    # Simulated Poisson may have n not a multiple of b: T = round(n / b), as before the record.
    spec = parse_spec(
        {
            **SPEC,
            "mode": "simulate",
            "samplers": ["poisson"],
            "training": {**SPEC["training"], "n": 23},
        }
    )
    assert (
        spec.mechanism(TrainingKey("poisson", "isolated")).steps_per_epoch
        == steps_per_epoch_for(23, 5)
        == 5
    )
    assert Mechanism("poisson", sigma=1.0, n=23, batch_size=5).steps_per_epoch == 5
    with pytest.raises(
        ValueError, match="steps_per_epoch is required unless both n and batch_size"
    ):
        Mechanism("poisson", sigma=1.0, n=23)
