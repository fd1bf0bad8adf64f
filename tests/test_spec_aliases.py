"""The ecosystem's names in the spec (issue 34 item 3): Opacus's ``noise_multiplier`` and
``max_grad_norm``, ``epsilon`` / ``target_epsilon`` for an explicit claim; one canonical name."""

from __future__ import annotations

import sys

import pytest

from audit.run.spec import parse_spec, resolve_aliases


def test_aliases_resolve_to_canonical_names() -> None:
    data = {"epsilon": 2.0, "training": {"noise_multiplier": 1.0, "max_grad_norm": 0.5, "n": 10}}
    out = resolve_aliases(data)
    assert out == {"claim": 2.0, "training": {"sigma": 1.0, "clip": 0.5, "n": 10}}
    assert resolve_aliases({"target_epsilon": 3})["claim"] == 3


def test_alias_beside_canonical_key_is_refused() -> None:
    with pytest.raises(ValueError, match="'noise_multiplier' and 'sigma'"):
        resolve_aliases({"training": {"noise_multiplier": 1.0, "sigma": 1.0}})
    with pytest.raises(ValueError, match="must be a number"):
        resolve_aliases({"epsilon": "poisson"})


def test_misspelt_alias_is_suggested() -> None:
    alias = r"Did you mean 'noise_multiplier' \(an alias of 'sigma'\)"
    with pytest.raises(ValueError, match=alias):
        parse_spec({"training": {"noise_multiplie": 1.0}})


def test_example_spec_with_opacus_names_parses_as_canonical() -> None:
    from pathlib import Path

    tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")

    path = Path(__file__).resolve().parent.parent / "examples" / "opacus_poisson" / "audit.toml"
    data = tomllib.loads(path.read_text())
    training = dict(data["training"])
    training["noise_multiplier"] = training.pop("sigma")
    if "clip" in training:
        training["max_grad_norm"] = training.pop("clip")
    assert parse_spec({**data, "training": training}) == parse_spec(data)


def test_sample_rate_gives_batch_size_or_is_refused() -> None:
    assert resolve_aliases({"training": {"sample_rate": 0.001, "n": 60000}})["training"] == {
        "n": 60000, "batch_size": 60,
    }
    with pytest.raises(ValueError, match=r"12.3, not an integer.*batch_size = 12"):
        resolve_aliases({"training": {"sample_rate": 0.0123, "n": 1000}})
    with pytest.raises(ValueError, match=r"needs training\.n"):
        resolve_aliases({"training": {"sample_rate": 0.01}})
    with pytest.raises(ValueError, match="'sample_rate' and 'batch_size'"):
        resolve_aliases({"training": {"sample_rate": 0.01, "batch_size": 10, "n": 1000}})


def test_training_alias_at_the_top_level_is_told_where_it_belongs() -> None:
    moved = r"'noise_multiplier' \(an alias of 'sigma'\).*under \[training\]"
    with pytest.raises(ValueError, match=moved):
        parse_spec({"noise_multiplier": 1.0, "samplers": ["poisson"]})
    with pytest.raises(ValueError, match=r"missing key 'sigma' in \[training\].*noise_multiplier"):
        parse_spec({"samplers": ["poisson"], "trials_in": 10, "trials_out": 10,
                    "training": {"batch_size": 5, "n": 50}})
