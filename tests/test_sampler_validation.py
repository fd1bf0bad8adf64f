"""Bad sampler input gets a ValueError that names the field, the value and what is allowed."""

from __future__ import annotations

import json
import warnings

import pytest

from audit.cli import main
from audit.core.mechanism import Mechanism
from audit.core.names import SAMPLERS
from audit.sampling import validate
from audit.sampling.factory import make_sampler


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"name": "deterministic", "n": 100, "batch_size": 7}, r"n=100.*batch_size=7"),
        ({"name": "persistent_shuffle", "n": 10, "batch_size": 3}, r"multiple of batch_size"),
        ({"name": "dynamic_shuffle", "n": 10, "batch_size": 0}, r"batch_size=0 must be >= 1"),
        ({"name": "poisson", "n": 10, "batch_size": -2}, r"batch_size=-2 must be >= 1"),
        ({"name": "poisson", "n": 10, "batch_size": 11}, r"batch_size=11 must be <= 10"),
        (
            {"name": "deterministic", "n": 10, "batch_size": 2, "epochs": 0},
            r"epochs=0 must be >= 1",
        ),
        ({"name": "truncated_poisson", "n": 10, "batch_size": 2}, r"max_batch_size is required"),
        (
            {"name": "truncated_poisson", "n": 10, "batch_size": 2, "max_batch_size": 0},
            r"max_batch_size=0 must be >= 1",
        ),
        (
            {"name": "truncated_poisson", "n": 10, "batch_size": 2, "max_batch_size": -3},
            r"max_batch_size=-3",
        ),
        ({"name": "poisson", "n": 10.5, "batch_size": 2}, r"n=10.5 must be an integer"),
    ],
)
def test_bad_arguments(kwargs, pattern):
    name = kwargs.pop("name")
    with pytest.raises(ValueError, match=pattern):
        make_sampler(name, **kwargs)


@pytest.mark.parametrize(
    ("typo", "suggestion"),
    [
        ("posson", "poisson"),
        ("dynamic_shufle", "dynamic_shuffle"),
        ("truncated-poisson", "truncated_poisson"),
    ],
)
def test_unknown_name_suggests_closest(typo, suggestion):
    with pytest.raises(
        ValueError, match=rf"sampler='{typo}'.*allowed: deterministic.*Did you mean '{suggestion}'"
    ):
        make_sampler(typo, n=10, batch_size=2)


def test_unknown_name_without_close_match_lists_all():
    with pytest.raises(ValueError, match=rf"allowed: {', '.join(SAMPLERS)}\.$"):
        make_sampler("xyzzy", n=10, batch_size=2)


@pytest.mark.parametrize(
    "name", ["deterministic", "persistent_shuffle", "dynamic_shuffle", "poisson"]
)
def test_max_batch_size_ignored_warns(name):
    with pytest.warns(UserWarning, match=rf"max_batch_size=5 is ignored by sampler='{name}'"):
        make_sampler(name, n=10, batch_size=2, max_batch_size=5)


def test_truncated_poisson_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make_sampler("truncated_poisson", n=10, batch_size=2, max_batch_size=3)


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"sampler": "poison", "sigma": 1.0, "steps_per_epoch": 10}, r"Did you mean 'poisson'"),
        ({"sampler": "poisson", "sigma": 0.0, "steps_per_epoch": 10}, r"sigma=0.0 must be > 0"),
        ({"sampler": "poisson", "sigma": 1.0, "steps_per_epoch": 0}, r"steps_per_epoch=0"),
        (
            {"sampler": "poisson", "sigma": 1.0, "steps_per_epoch": 10, "threat_model": "adverse"},
            r"Did you mean 'adversarial'",
        ),
        (
            {
                "sampler": "deterministic",
                "sigma": 1.0,
                "steps_per_epoch": 10,
                "n": 95,
                "batch_size": 10,
            },
            r"n = batch_size \* steps_per_epoch",
        ),
        (
            {"sampler": "truncated_poisson", "sigma": 1.0, "steps_per_epoch": 10, "n": 100},
            r"max_batch_size is required",
        ),
    ],
)
def test_mechanism_validation(kwargs, pattern):
    # the core's Mechanism checks its own fields; the sampler's rules are audit.sampling.validate's,
    # called wherever a mechanism is built from user input (docs/design.md §3.3)
    with pytest.raises(ValueError, match=pattern):
        validate(Mechanism(**kwargs))


def test_mechanism_defaults():
    m = Mechanism("poisson", sigma=1.0, steps_per_epoch=100, epochs=2)
    assert m.total_steps == 200 and m.sampling_probability == pytest.approx(0.01)
    m = Mechanism(
        "truncated_poisson", sigma=1.0, steps_per_epoch=100, batch_size=10, max_batch_size=15
    )
    assert m.n == 1000 and m.sampling_probability == pytest.approx(0.01)


def test_cli_samplers_json(capsys):
    assert (
        main(
            [
                "samplers",
                "--n",
                "100",
                "--batch-size",
                "10",
                "--epochs",
                "2",
                "--draws",
                "200",
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    names = [s["sampler"] for s in out["samplers"]]
    assert names == list(SAMPLERS)
    fixed = out["samplers"][0]
    assert fixed["participations_law"]["measured_mean"] == 2.0 and fixed["slots"] == 10
    truncated = out["samplers"][4]
    assert truncated["slots"] == truncated["max_batch_size"] == 17


def test_cli_samplers_table(capsys):
    assert main(["samplers", "--n", "100", "--batch-size", "10", "--draws", "100"]) == 0
    out = capsys.readouterr().out
    assert "poisson" in out and "measured" in out


def test_cli_bad_input_is_one_clear_line(capsys):
    assert main(["samplers", "--n", "100", "--batch-size", "7", "--sampler", "deterministic"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("audit samplers: error: sampler='deterministic' needs n to be a multiple")
    assert "Traceback" not in err
    assert main(["samplers", "--sampler", "posson"]) == 2
    assert "Did you mean 'poisson'" in capsys.readouterr().err
