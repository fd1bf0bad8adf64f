"""Neighbouring relations: which pairs of datasets a claim is about, and the theory for each
(docs/design.md §11.3).

- ``zero_out``: the canary's gradient is replaced by zero (a null record keeps its slot, so
  n and the batch layout are the same in both worlds). The harness's own relation: every
  sampler's curves in :mod:`audit.theory` are for it (:func:`audit.theory.bounds_for`).
- ``add_remove``: the canary is in one dataset and absent from the other (n and n - 1).
  Opacus's and dp_accounting's default (``NeighboringRelation.ADD_OR_REMOVE_ONE``).
- ``replace_one``: the canary is swapped for another example (n the same).

What is known, per sampler (:func:`adjacent_bounds`), first from :data:`ADJACENCY_THEORIES`
(entries per sampler class, like :data:`audit.theory.registry.THEORIES`), else by the generic
rules below, which need nothing but the sampler's zero-out theory and its
:attr:`~audit.sampling.base.Sampler.canary_law`, so a sampler registered with theory is checked
under every relation without an entry here:

``add_remove`` (generic):
  - *isolated* threat model: the zero-out curves. The observation (the noisy sums along the
    canary direction u) in the world without the canary is pure noise whether the canary was
    removed or zeroed (no other example moves along u), and the world with it is the same.
  - *adversarial*: ``lower`` = the isolated zero-out lower curve (the isolated datasets are
    among the adversary's, and for them removing is zeroing); no ``upper``: removing an
    example changes n, and with it how a sampler lays the others into batches.
``replace_one`` (generic):
  - ``lower`` = the zero-out lower curve of the same threat model: swapping the canary for an
    example whose clipped gradient is 0 is a replace-one pair (n unchanged).
  - ``upper`` where the canary is in exactly one step per epoch given the draw (canary law
    ``known_steps`` or ``uniform_step_per_epoch``, inclusion probability 1/T): Gaussian DP with
    mu = 2 sqrt(E) / sigma. Given the draw (the same law in both worlds, n unchanged), the two
    worlds differ in one step's sum per epoch by at most 2C: E adaptive Gaussian mechanisms of
    sensitivity 2 (Dong, Roth, Su 2022, Cor. 3.3); a mixture over the draw of mu-GDP pairs is
    mu-GDP (joint convexity of the hockey-stick divergence).

Registered entries (the built-ins):

- Poisson, balls-and-bins, ``add_remove``: the zero-out curves, both threat models: each
  example's participation is drawn on its own (not from n), so removing the canary leaves
  the others' batches with the law they have when it is zeroed, for any co-batch.
- Poisson, ``replace_one``: dp_accounting's REPLACE_ONE PLD (upper) and the dominated lattice
  pair of (1-q)N(0)+qN(1) vs (1-q)N(0)+qN(-1) (lower), :mod:`audit.theory.poisson_replace_one`.
- deterministic, ``replace_one``: exact Gaussian DP, mu = 2 sqrt(E) / sigma (both bounds).
- truncated Poisson: ``add_remove`` upper = dp_accounting's ADD_OR_REMOVE_ONE truncated PLD,
  ``replace_one`` upper = its REPLACE_ONE PLD (Ganesh 2025, arXiv 2508.15089); lower by the
  generic rules (the isolated pair, Poisson at the inclusion probability p').
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

from audit.core.mechanism import Mechanism
from audit.core.validation import check_choice
from audit.sampling.attachments import Attachments
from audit.sampling.balls_and_bins import BallsAndBins
from audit.sampling.base import Sampler, get_sampler
from audit.sampling.deterministic import Deterministic
from audit.sampling.poisson import Poisson
from audit.sampling.truncated_poisson import TruncatedPoisson
from audit.theory import bounds_for
from audit.theory.curve import TradeOffCurve

__all__ = [
    "ADJACENCIES",
    "ADJACENCY_THEORIES",
    "DEFAULT_ADJACENCY",
    "AdjacentBounds",
    "adjacent_bounds",
    "check_adjacency",
]

ADJACENCIES: tuple[str, ...] = ("zero_out", "add_remove", "replace_one")
"""The neighbouring relations a claim may be about (the names are a contract)."""

DEFAULT_ADJACENCY = "zero_out"
"""The harness's relation (its theory curves); the checker's default."""


def check_adjacency(adjacency: object, name: str = "adjacency") -> str:
    """``adjacency`` if it is one of :data:`ADJACENCIES` (ValueError naming the closest)."""
    return check_choice(name, adjacency, ADJACENCIES)


@dataclass(frozen=True)
class AdjacentBounds:
    """The theory of one mechanism under one relation: ``upper`` (a guarantee) and ``lower``
    (achieved by a known pair of neighbours), None where none is known; ``notes`` say why."""

    adjacency: str
    upper: TradeOffCurve | None
    lower: TradeOffCurve | None
    notes: tuple[str, ...] = ()


AdjacencyRule = Callable[[Mechanism], AdjacentBounds]

ADJACENCY_THEORIES: Attachments[dict[str, AdjacencyRule]] = Attachments(
    "theory under other neighbouring relations"
)
"""Per sampler class: ``{adjacency: rule}``, consulted before the generic rules."""


# -- generic rules -----------------------------------------------------------------------


def _zero_out(mechanism: Mechanism) -> AdjacentBounds:
    try:
        bounds = bounds_for(mechanism)
    except (NotImplementedError, ValueError) as error:
        return AdjacentBounds("zero_out", None, None, (f"no theory for this cell: {error}",))
    return AdjacentBounds("zero_out", bounds.upper, bounds.lower, tuple(bounds.notes))


def _one_step_per_epoch(mechanism: Mechanism) -> bool:
    sampler = get_sampler(mechanism.sampler)
    if sampler.canary_law not in ("known_steps", "uniform_step_per_epoch"):
        return False
    try:
        p = sampler.inclusion_probability(mechanism)
    except ValueError:
        return False
    return math.isclose(p * mechanism.steps_per_epoch, 1.0, rel_tol=1e-12)


def _gdp(mechanism: Mechanism, mu: float, kind: str, method: str) -> TradeOffCurve:
    return TradeOffCurve.from_gdp(
        mu, sampler=mechanism.sampler, threat_model=mechanism.threat_model, kind=kind,
        method=method,
    )


def _generic_add_remove(mechanism: Mechanism) -> AdjacentBounds:
    if mechanism.threat_model == "isolated":
        zero = _zero_out(mechanism)
        return AdjacentBounds(
            "add_remove", zero.upper, zero.lower,
            (*zero.notes, "add/remove, isolated: without the canary the observation along u is "
             "pure noise whether it was removed or zeroed, so the zero-out curves hold"),
        )
    isolated = _zero_out(mechanism.with_(threat_model="isolated"))
    return AdjacentBounds(
        "add_remove", None, isolated.lower,
        (f"add/remove, adversarial: no guarantee is known for sampler {mechanism.sampler!r} "
         "(removing an example changes n, and with it how the others are laid into batches); "
         "lower: the isolated pair, which is an add/remove pair too",),
    )


def _generic_replace_one(mechanism: Mechanism) -> AdjacentBounds:
    zero = _zero_out(mechanism)
    notes = ["replace-one lower: the zero-out pair (the canary swapped for an example whose "
             "clipped gradient is 0)"]
    upper = None
    if _one_step_per_epoch(mechanism):
        mu = 2.0 * math.sqrt(mechanism.epochs) / mechanism.sigma
        upper = _gdp(mechanism, mu, "upper",
                     f"replace-one: Gaussian DP mu = 2 sqrt(E)/sigma = {mu:.6g} given the draw "
                     "(one step per epoch, sensitivity 2; a mixture of mu-GDP pairs is mu-GDP)")
    else:
        notes.append(f"replace-one: no guarantee is known for sampler {mechanism.sampler!r}")
    return AdjacentBounds("replace_one", upper, zero.lower, tuple(notes))


# -- registered rules --------------------------------------------------------------------


def _independent_add_remove(mechanism: Mechanism) -> AdjacentBounds:
    zero = _zero_out(mechanism)
    return AdjacentBounds(
        "add_remove", zero.upper, zero.lower,
        (*zero.notes, "add/remove = zero-out: each example's participation is drawn on its own, "
         "so removing the canary leaves the others' batches with the same law"),
    )


def _poisson_replace_one(mechanism: Mechanism) -> AdjacentBounds:
    from audit.theory.poisson_replace_one import (
        poisson_replace_one_lower,
        poisson_replace_one_upper,
    )

    args = (mechanism.sampling_probability, mechanism.sigma, mechanism.total_steps)
    return AdjacentBounds(
        "replace_one",
        poisson_replace_one_upper(*args, threat_model=mechanism.threat_model),
        poisson_replace_one_lower(*args, threat_model=mechanism.threat_model),
    )


def _deterministic_replace_one(mechanism: Mechanism) -> AdjacentBounds:
    mu = 2.0 * math.sqrt(mechanism.epochs) / mechanism.sigma
    exact = _gdp(mechanism, mu, "exact",
                 f"replace-one: Gaussian DP mu = 2 sqrt(E)/sigma = {mu:.6g} (exact, closed form)")
    return AdjacentBounds("replace_one", exact, exact)


@functools.lru_cache(maxsize=8)
def _truncated_pld(n: int, q: float, max_batch_size: int, sigma: float, steps: int,
                   relation: str, discretisation: float):
    from dp_accounting.pld import privacy_loss_distribution as pld_lib
    from dp_accounting.privacy_accountant import NeighboringRelation

    pld = pld_lib.from_truncated_subsampled_gaussian_mechanism(
        dataset_size=n, sampling_probability=q, truncated_batch_size=max_batch_size,
        noise_multiplier=sigma, value_discretization_interval=discretisation,
        neighboring_relation=NeighboringRelation[relation],
    )
    return pld.self_compose(steps) if steps > 1 else pld


TRUNCATED_DISCRETISATION = 2e-4
"""Discretisation of the truncated PLDs (pessimistic; dp_accounting's construction is slow)."""


def _truncated(relation: str, adjacency: str, generic: AdjacencyRule) -> AdjacencyRule:
    def rule(mechanism: Mechanism) -> AdjacentBounds:
        from audit.theory.pld import pld_curve

        assert mechanism.n is not None and mechanism.max_batch_size is not None
        pld = _truncated_pld(mechanism.n, mechanism.sampling_probability,
                             mechanism.max_batch_size, mechanism.sigma, mechanism.total_steps,
                             relation, TRUNCATED_DISCRETISATION)
        upper = pld_curve(
            pld, sampler=mechanism.sampler, threat_model=mechanism.threat_model, kind="upper",
            method=(f"PLD pessimistic (dp_accounting TruncatedSubsampledGaussian, {relation}), "
                    f"discretisation {TRUNCATED_DISCRETISATION:g}"),
        )
        base = generic(mechanism)
        lower = ("the isolated pair (an add/remove pair too)" if adjacency == "add_remove"
                 else "the zero-out pair (the canary swapped for an example with gradient 0)")
        return AdjacentBounds(
            adjacency, upper, base.lower,
            (f"{adjacency}: upper from dp_accounting's {relation} truncated-Poisson PLD "
             f"(Ganesh 2025, arXiv 2508.15089); lower: {lower}",),
        )

    return rule


def register_builtin_adjacency_theories() -> None:
    """Register the built-ins' entries (module docstring); idempotent."""
    table: dict[type[Sampler], dict[str, AdjacencyRule]] = {
        Poisson: {"add_remove": _independent_add_remove, "replace_one": _poisson_replace_one},
        BallsAndBins: {"add_remove": _independent_add_remove},
        Deterministic: {"replace_one": _deterministic_replace_one},
        TruncatedPoisson: {
            "add_remove": _truncated("ADD_OR_REMOVE_ONE", "add_remove", _generic_add_remove),
            "replace_one": _truncated("REPLACE_ONE", "replace_one", _generic_replace_one),
        },
    }
    for sampler, rules in table.items():
        ADJACENCY_THEORIES.register(sampler, rules, replace=True)


register_builtin_adjacency_theories()


def adjacent_bounds(mechanism: Mechanism, adjacency: str = DEFAULT_ADJACENCY) -> AdjacentBounds:
    """The upper and lower curves of ``mechanism`` under ``adjacency`` (module docstring)."""
    adjacency = check_adjacency(adjacency)
    if adjacency == "zero_out":
        return _zero_out(mechanism)
    rules = ADJACENCY_THEORIES.find(mechanism.sampler) or {}
    if adjacency in rules:
        return rules[adjacency](mechanism)
    if adjacency == "add_remove":
        return _generic_add_remove(mechanism)
    return _generic_replace_one(mechanism)
