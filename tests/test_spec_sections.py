"""The spec in sections (docs/design.md §2.6): every key declared once, the shard identity
derived from the keys' roles, and the same identities, hashes and plain data as before.

The expected hashes and identities were computed with the flat ``AuditSpec`` of commit
1a01c9f (before the sections): stored shards stay valid only if they are unchanged.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from audit.run.spec import (
    DEFAULTS,
    SECTION_OF,
    TOP_LEVEL_KEYS,
    TOP_LEVEL_SECTIONS,
    TRAINING_KEYS,
    AuditKind,
    Mode,
    Role,
    TrainingSection,
    load_spec,
    parse_spec,
)

ROOT = Path(__file__).resolve().parents[1]

HASHES_BEFORE = {
    "cnn-shuffle": "c463d1175e23cfc4ed1af05b20ad8644b96c875432bf8889f755de93b672b0eb",
    "one-million-gpu": "ad412dcf9da2c8e0677d04e1af98da4bdda03e9a6c662e321ec65b403a51c920",
    "one-million": "1d86fdd3a711d6ae1ea2fbe69967850df78f713a1dfe83a46c3a7fe4a938203f",
    "opacus-shuffle": "4e5ffabd020b1569d9d7051b4cf59ed85d62dd25766c6522e18f30cea49e1210",
    "quickstart": "1a00123d5f6fbd5061f8a9c81a54652be427d793e4591c08fdcd015c2fb05172",
    # a simulated run: store = "scores" by default since issue 23 (a shard's content changed, so its
    # hash did; the committed scores were recomputed with it)
    "shuffle-vs-poisson": "81d82ffae882df73ce703506b9134ccb838b1528185322e1f3333ec89d93c2f6",
    "ten-million": "479b0492bf3a3e3af423c5e48c8f4c2d5d98958fdb2d4c6ac1b04418488c8b65",
}

ONE_RUN = {"mode": "simulate", "audit": "one_run", "canaries": 300, "samplers": ["deterministic"],
           "threat_models": ["isolated"], "shard_size": 200, "claim": 0.5,
           "training": {"sigma": 0.5, "batch_size": 1, "n": 400}}
TRAIN = {
    "mode": "train",
    "seed": 3,
    "samplers": ["poisson", "truncated_poisson"],
    "trials_in": 10,
    "trials_out": 12,
    "store": "scores",
    "training": {"sigma": 0.5, "batch_size": 2, "n": 10, "lr": 0.1, "max_batch_size": 4},
}
SIMULATE = {"mode": "simulate", "samplers": ["poisson"], "trials_in": 10, "trials_out": 10,
            "training": {"sigma": 1.0, "batch_size": 1, "n": 10}}
COMMON = {
    "dataset": "digits",
    "model": "logistic",
    "hidden": None,
    "activation": None,
    "implementation": None,
    "canary": "dirac",
    "input_canary": None,
    "canary_label": None,
    "canary_scale": None,
}


@pytest.mark.parametrize("run", sorted(HASHES_BEFORE))
def test_committed_specs_keep_their_shard_hash(run: str) -> None:
    assert load_spec(ROOT / "runs" / run).shard_hash() == HASHES_BEFORE[run]


def test_identity_values_of_a_one_run_and_a_train_spec_are_unchanged() -> None:
    one_run = parse_spec(ONE_RUN)
    assert one_run.shard_identity() == {
        "training": {
            "sigma": 0.5,
            "n": 400,
            "batch_size": 1,
            "epochs": 1,
            "max_batch_size": None,
            "lr": None,
            "clip": 1.0,
        },
        "mode": "simulate",
        "seed": 0,
        **COMMON,
        "shard_size": 200,
        "store": "observations",
        "audit": "one_run",
        "canaries": 300,
    }
    assert (
        one_run.shard_hash() == "6ed4cac41022cde5fb445acb3a987222a8e6032eaabf914d69ff666e70b85325"
    )
    # guesses only choose how the canaries are scored: the same shards
    assert parse_spec({**ONE_RUN, "guesses": [10, 5]}).shard_hash() == one_run.shard_hash()
    train = parse_spec(TRAIN)
    assert train.shard_identity() == {
        "training": {
            "sigma": 0.5,
            "n": 10,
            "batch_size": 2,
            "epochs": 1,
            "max_batch_size": 4,
            "lr": 0.1,
            "clip": 1.0,
        },
        "mode": "train",
        "seed": 3,
        **COMMON,
        "shard_size": 12,
        "store": "scores",
    }
    assert train.shard_hash() == "e021dc1e7fe07902a44274aaf75d2c6480c33b3835a981ea946646031dd573a1"


def test_identity_follows_the_roles() -> None:
    """A SCORING or EXECUTION key never changes the hash; a SHARD key always does; an ADDED key
    (device) only away from its default."""
    base = parse_spec(SIMULATE)
    for change in (
        {"alpha": 0.1},
        {"claim": 2.0},
        {"n_jobs": 2},
        {"description": "x"},
        {"trials_in": 20},
        {"attacks": ["max"]},
        {"threshold": "bonferroni"},
    ):
        assert parse_spec({**SIMULATE, **change}).shard_hash() == base.shard_hash(), change
    # store: "scores" is the simulate-mode default (issue 23), so "observations" is the change
    for change in ({"seed": 1}, {"shard_size": 7}, {"store": "observations"}):
        assert parse_spec({**SIMULATE, **change}).shard_hash() != base.shard_hash(), change
    cuda = dataclasses.replace(base, execution=dataclasses.replace(base.execution, device="cuda"))
    assert cuda.shard_identity() == {**base.shard_identity(), "device": "cuda"}


def test_every_key_is_declared_once_in_one_section() -> None:
    names = [f.name for section in TOP_LEVEL_SECTIONS.values() for f in dataclasses.fields(section)]
    assert len(names) == len(set(names)) == len(TOP_LEVEL_KEYS) == len(SECTION_OF)
    assert list(TRAINING_KEYS) == [f.name for f in dataclasses.fields(TrainingSection)]
    for section in (*TOP_LEVEL_SECTIONS.values(), TrainingSection):
        for f in dataclasses.fields(section):
            assert isinstance(f.metadata["role"], Role) and f.metadata["meaning"], f.name
    assert DEFAULTS["threat_models"] == ["adversarial"] and DEFAULTS["mode"] == "train"


def test_to_dict_keeps_the_summary_order_and_values() -> None:
    """summary.json's ``spec``: flat keys in the order it has always had, plain JSON values."""
    data = parse_spec(ONE_RUN, name="o").to_dict()
    assert list(data)[:6] == [
        "name",
        "samplers",
        "trials_in",
        "trials_out",
        "training",
        "description",
    ]
    assert list(data)[-5:] == ["audit", "canaries", "guesses", "score_family", "device"]
    assert list(data["training"]) == [
        "sigma",
        "n",
        "batch_size",
        "epochs",
        "max_batch_size",
        "lr",
        "clip",
    ]
    assert (data["mode"], data["audit"], data["samplers"]) == (
        "simulate",
        "one_run",
        ["deterministic"],
    )
    json.dumps(data)


def test_mode_and_kind_are_types_not_strings() -> None:
    spec = parse_spec(ONE_RUN)
    assert spec.mode is Mode.SIMULATE and not spec.mode.trains
    assert spec.kind is AuditKind.ONE_RUN and spec.kind.one_run
    with pytest.raises(TypeError, match="compared with the string"):
        _ = spec.mode == "simulate"
    with pytest.raises(TypeError, match="compared with the string"):
        _ = spec.kind == "one_run"
