"""The default all-iterates attack of each sampler and threat model (docs/design.md §3.3, §5).

A sampler's law lives in :mod:`audit.sampling`; the attack built on it is registered here, in
:data:`DEFAULT_ATTACKS`, against the sampler's class
(:class:`audit.sampling.attachments.Attachments`): the likelihood ratio of the pair its theory uses,
per threat model. :func:`attacks.registry.default_attack` reads it.
"""

from __future__ import annotations

from collections.abc import Mapping

from attacks.likelihood_ratio import (
    FixedSizeIndependentLR,
    PoissonLR,
    ShuffleAdversarialLR,
    ShuffleIsolatedLR,
)
from attacks.simple import KnownStep
from audit.sampling.attachments import Attachments
from audit.sampling.balls_and_bins import BallsAndBins
from audit.sampling.deterministic import Deterministic
from audit.sampling.dynamic_shuffle import DynamicShuffle
from audit.sampling.persistent_shuffle import PersistentShuffle
from audit.sampling.poisson import Poisson
from audit.sampling.sampled_without_replacement import SampledWithoutReplacement
from audit.sampling.truncated_poisson import TruncatedPoisson

__all__ = ["DEFAULT_ATTACKS", "default_attack_for"]

DEFAULT_ATTACKS: Attachments[Mapping[str, str]] = Attachments("default attack")
"""Per sampler class: threat model -> the name of its default all-iterates attack."""


def default_attack_for(sampler: str, threat_model: str) -> str:
    """The name of ``sampler``'s default all-iterates attack for ``threat_model``.

    Raises:
        ValueError: naming the sampler and the capability, when it has none for ``threat_model``.
    """
    detail = f"threat_model={threat_model!r}"
    attacks = DEFAULT_ATTACKS.get(sampler, detail)
    if threat_model not in attacks:
        raise DEFAULT_ATTACKS.missing(sampler, detail)
    return attacks[threat_model]


_SHUFFLE = {"isolated": ShuffleIsolatedLR.name, "adversarial": ShuffleAdversarialLR.name}
_POISSON = {"isolated": PoissonLR.name, "adversarial": PoissonLR.name}

for _sampler, _attacks in {
    Deterministic: {"isolated": KnownStep.name, "adversarial": KnownStep.name},
    PersistentShuffle: _SHUFFLE,
    DynamicShuffle: _SHUFFLE,
    Poisson: _POISSON,
    TruncatedPoisson: _POISSON,
    # The likelihood ratio of the canary law "one uniform step per epoch"; under the adversarial
    # threat model it adds the random co-batch's moments (a Gaussian model of the multinomial
    # counts: ShuffleIsolatedLR), as poisson_lr does for Poisson.
    BallsAndBins: {"isolated": ShuffleIsolatedLR.name, "adversarial": ShuffleIsolatedLR.name},
    # Isolated: Poisson's observation exactly. Adversarial: the fixed batch size reveals the
    # canary's inclusion, IN 2 S_t vs OUT S_t (audit.sampling.sampled_without_replacement).
    SampledWithoutReplacement: {
        "isolated": PoissonLR.name, "adversarial": FixedSizeIndependentLR.name,
    },
}.items():
    DEFAULT_ATTACKS.register(_sampler, _attacks, replace=True)
