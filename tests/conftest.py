"""Fixtures shared by several test files."""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from scipy import optimize
from scipy.stats import norm

from audit.theory.curve import TradeOffCurve

# The accountant checker caches the theory on disk (audit.accounting.reference): the suite's
# cache lives in a fresh folder per test process, never in the user's ~/.cache.
os.environ.setdefault("AUDIT_THEORY_CACHE", tempfile.mkdtemp(prefix="audit-theory-cache-"))


@pytest.fixture
def gdp_epsilon() -> Callable[[float, float], float]:
    """eps(delta) of mu-GDP, recomputed here (not by audit.theory): the root of
    Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) = delta (Dong, Roth, Su, Cor. 2.13), 0 when
    delta is reached at eps = 0; Brent's method to 1e-12."""

    def epsilon(mu: float, delta: float) -> float:
        def gap(e: float) -> float:
            return norm.cdf(-e / mu + mu / 2) - math.exp(e) * norm.cdf(-e / mu - mu / 2) - delta

        return 0.0 if gap(0.0) <= 0 else optimize.brentq(gap, 0.0, 100.0, xtol=1e-12)

    return epsilon


@pytest.fixture
def explicit_claim() -> Callable[..., TradeOffCurve]:
    """The claim "(eps, delta)-DP" as an ``upper`` trade-off curve (as an explicit eps in a
    spec)."""

    def claim(eps: float, delta: float = 1e-5) -> TradeOffCurve:
        return TradeOffCurve.from_privacy_profile(
            [eps],
            [delta],
            sampler="poisson",
            threat_model="isolated",
            kind="upper",
            method="test claim",
        )

    return claim


TINY_SPEC: dict[str, Any] = {
    "mode": "simulate",
    "seed": 7,
    "samplers": ["deterministic", "dynamic_shuffle"],
    "threat_models": ["adversarial"],
    "attacks": ["default", "max"],
    "trials_in": 100,
    "trials_out": 90,
    "shard_size": 40,
    "claim": 3.0,
    "training": {"sigma": 0.5, "batch_size": 1, "n": 20},
}
"""The tiny simulated audit (:func:`tiny_audit`) as a mapping: the base of :func:`spec_toml`."""

IMPLEMENTATION_SPEC: dict[str, Any] = {
    "mode": "train",
    "seed": None,
    "implementation": "user_dpsgd:train",
    "dataset": "breast_cancer",
    "samplers": ["deterministic"],
    "threat_models": ["isolated"],
    "attacks": ["known_step"],
    "training": {"n": 10, "batch_size": 5, "sigma": 1.0, "lr": 0.5},
}
"""Changes to :data:`TINY_SPEC` for a tiny train-mode audit of a plug-in implementation
(deterministic batches, isolated, the known-step attack, on breast_cancer)."""


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string for the ASCII text of these specs
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(value)


def spec_toml(*changes: Mapping[str, Any], **keys: Any) -> str:
    """``audit.toml`` text of :data:`TINY_SPEC` updated by each mapping of ``changes``, then by
    ``keys``: a top-level key is replaced (``None`` drops it; new keys come last), ``training``
    updates the ``[training]`` table key by key."""
    spec, training = dict(TINY_SPEC), dict(TINY_SPEC["training"])
    for change in (*changes, keys):
        for key, value in change.items():
            if key == "training":
                training.update(value)
            else:
                spec[key] = value
    lines = [
        f"{key} = {_toml(value)}"
        for key, value in spec.items()
        if key != "training" and value is not None
    ]
    table = [f"{key} = {_toml(value)}" for key, value in training.items() if value is not None]
    return "\n".join([*lines, "", "[training]", *table, ""])


TINY_AUDIT = spec_toml()


@pytest.fixture
def audit_toml() -> Callable[..., str]:
    """:func:`spec_toml`: ``audit_toml(**keys)`` is the tiny audit's ``audit.toml`` with ``keys``
    changed; ``audit_toml(IMPLEMENTATION_SPEC, **keys)`` a tiny plug-in audit."""
    return spec_toml


@pytest.fixture
def implementation_spec() -> dict[str, Any]:
    """:data:`IMPLEMENTATION_SPEC` (a copy), the changes that make a tiny plug-in audit."""
    return dict(IMPLEMENTATION_SPEC)


@pytest.fixture
def tiny_audit() -> str:
    """A tiny simulated audit spec, about a second to run: two training keys (deterministic and
    dynamic shuffle, adversarial) of a 20-step mechanism whose theory is in closed form, two
    attacks each, 100 IN / 90 OUT trials in shards of 40, 40, 20, an explicit eps claim."""
    return TINY_AUDIT


TINY_TRAINING: dict[str, Any] = {
    "dataset": "digits", "model": "logistic", "sampler": "poisson", "sigma": 1.0, "clip": 1.0,
    "lr": 0.5, "batch_size": 10, "n": 100, "canary": "dirac", "threat_model": "isolated",
}
"""A tiny engine training (logistic regression on digits, Poisson b 10, T 10, E 1): the base of
:func:`training_config`."""


@pytest.fixture
def training_config() -> Callable[..., Any]:
    """``training_config(**changes)``: the engine's ``TrainingConfig`` of :data:`TINY_TRAINING`
    with ``changes`` (torch is imported only by the tests that ask for it)."""
    from audit.training.trials import TrainingConfig

    def make(**changes: Any) -> TrainingConfig:
        return TrainingConfig(**{**TINY_TRAINING, **changes})

    return make


@pytest.fixture
def run_folder(tmp_path: Path) -> Callable[..., Path]:
    """``run_folder(text, name="run")``: a new folder ``tmp_path / name`` whose ``audit.toml`` is
    ``text``."""

    def make(text: str, name: str = "run") -> Path:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "audit.toml").write_text(text)
        return folder

    return make
