"""The sampler registry: one registered :class:`Sampler` per batch sampler (docs/design.md §3.3).

``get_sampler(name)`` is how every layer asks for a sampler's law;
``register_sampler(obj)`` adds one at run time; ``validate(mechanism)`` checks a mechanism
against its sampler's rules. The built-ins register here, in the order of
:data:`audit.core.names.SAMPLERS`; what other stages attach to a sampler is registered where
that stage lives (:mod:`audit.sampling.attachments`).
"""

from __future__ import annotations

from audit.core.names import SAMPLERS as _BUILTIN_NAMES
from audit.sampling.balls_and_bins import BallsAndBins
from audit.sampling.base import (
    Sampler,
    canaries_independent,
    canonical_sampler_name,
    check_canary_isolation,
    check_max_batch_size,
    get_sampler,
    other_examples,
    register_sampler,
    registered_samplers,
    sampler_names,
    unregister_sampler,
    validate,
    validate_training,
)
from audit.sampling.deterministic import Deterministic
from audit.sampling.dynamic_shuffle import DynamicShuffle
from audit.sampling.persistent_shuffle import PersistentShuffle
from audit.sampling.poisson import Poisson
from audit.sampling.sampled_without_replacement import SampledWithoutReplacement
from audit.sampling.truncated_poisson import TruncatedPoisson

__all__ = [
    "Sampler",
    "canaries_independent",
    "canonical_sampler_name",
    "check_canary_isolation",
    "check_max_batch_size",
    "fixed_size_samplers",
    "get_sampler",
    "isolation_samplers",
    "other_examples",
    "register_sampler",
    "registered_samplers",
    "sampler_names",
    "unregister_sampler",
    "validate",
    "validate_training",
]

for _sampler in (
    Deterministic(),
    PersistentShuffle(),
    DynamicShuffle(),
    Poisson(),
    TruncatedPoisson(),
    BallsAndBins(),
    SampledWithoutReplacement(),
):
    register_sampler(_sampler, replace=True)
assert sampler_names()[: len(_BUILTIN_NAMES)] == _BUILTIN_NAMES


def __getattr__(name: str) -> tuple[str, ...]:
    """``audit.sampling.SAMPLERS``: the registered names now (built-ins first, in order)."""
    if name == "SAMPLERS":
        return sampler_names()
    raise AttributeError(f"module 'audit.sampling' has no attribute {name!r}")


def fixed_size_samplers() -> tuple[str, ...]:
    """Names of the registered samplers that use every example once per epoch."""
    return tuple(s.name for s in registered_samplers() if s.fixed_size)


def isolation_samplers() -> tuple[str, ...]:
    """Names of the registered samplers whose isolated theory needs the Dirac canary."""
    return tuple(s.name for s in registered_samplers() if s.isolated_needs_dirac)
