"""Attacks by name, and the best known attack for each sampler and threat model.

``get_attack(name)`` returns a fresh attack; ``ATTACKS`` lists the names;
``default_attack(mechanism, observation)`` names the best known attack for that sampler x
threat model x observation kind (the likelihood ratio of the pair its theory uses).
"""

from __future__ import annotations

from attacks.base import Attack
from attacks.black_box import LiRA, LossAttack
from attacks.defaults import default_attack_for
from attacks.likelihood_ratio import (
    FixedSizeIndependentLR,
    PoissonLR,
    ShuffleAdversarialLR,
    ShuffleIsolatedLR,
)
from attacks.simple import FinalProjection, KnownStep, MaxTest, SumTest
from audit.core.mechanism import Mechanism
from audit.core.names import OBSERVATIONS
from audit.core.validation import check_choice

__all__ = ["ATTACKS", "default_attack", "get_attack"]

_REGISTRY: dict[str, type[Attack]] = {
    cls.name: cls
    for cls in (
        PoissonLR,
        ShuffleIsolatedLR,
        ShuffleAdversarialLR,
        FixedSizeIndependentLR,
        KnownStep,
        MaxTest,
        SumTest,
        FinalProjection,
        LossAttack,
        LiRA,
    )
}

ATTACKS: tuple[str, ...] = tuple(_REGISTRY)
"""Names of every attack."""


def get_attack(name: str, **options: object) -> Attack:
    """A new attack ``name``; ``options`` go to its constructor (e.g. ``reference=`` for lira)."""
    cls = _REGISTRY[check_choice("attack", name, ATTACKS)]
    try:
        return cls(**options)
    except TypeError as error:
        raise ValueError(
            f"attack {name!r} does not take options {sorted(options)}: {error}"
        ) from None


def default_attack(mechanism: Mechanism, observation: str = "all_iterates") -> str:
    """The best known attack for ``mechanism``'s sampler and threat model and ``observation``.

    all_iterates: the sampler's default (:func:`attacks.defaults.default_attack_for`):
    deterministic -> known_step; poisson, truncated_poisson -> poisson_lr;
    shuffles -> shuffle_isolated_lr or shuffle_adversarial_lr by threat model.
    last_iterate -> final_projection; black_box -> loss (lira needs reference trials).
    """
    observation = check_choice("observation", observation, OBSERVATIONS)
    if observation == "last_iterate":
        return FinalProjection.name
    if observation == "black_box":
        return LossAttack.name
    return default_attack_for(mechanism.sampler, mechanism.threat_model)
