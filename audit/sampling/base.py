"""A sampler is a type: one registered :class:`Sampler` object per batch sampler.

The object owns its LAW (docs/design.md §3.3, §4): its extra parameters and their checks,
its batch draws and exact laws (``batch_sampler``), the canary's inclusion probability and
steps, the co-batch moments and known offset of the adversarial pair, and its simulator law.
Every layer asks the registry (:func:`get_sampler`) instead of branching on the sampler's name.

What other stages build on the law is attached where that stage lives, in a table keyed by
the sampler's class (:class:`audit.sampling.attachments.Attachments`): the theory's curves and
calibration (:mod:`audit.theory.registry`), the accountants' events
(:mod:`audit.accounting.events`), the Opacus DataLoader (:mod:`audit.plugins.opacus_loaders`)
and the default attack (:mod:`attacks.defaults`).

Layering: this package sits above the core, whose :class:`~audit.core.mechanism.Mechanism` is
pure data; :func:`validate` checks a mechanism against its sampler's rules (the registered
name, the sampler's parameters) where one is built from user input.

A capability a sampler lacks raises :class:`ValueError` naming the sampler and the
capability (:meth:`Sampler.missing`).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import replace
from typing import ClassVar

import numpy as np

from audit.core.mechanism import Mechanism
from audit.core.names import SAMPLER_ALIASES
from audit.core.record import Training
from audit.core.validation import check_choice, check_int, closest
from audit.sampling.batches import BatchSampler

__all__ = [
    "Sampler",
    "canaries_independent",
    "canonical_sampler_name",
    "check_canary_isolation",
    "get_sampler",
    "other_examples",
    "register_sampler",
    "registered_samplers",
    "sampler_names",
    "uniform_step_per_epoch",
    "validate",
    "validate_training",
]


class Sampler:
    """One batch sampler: its parameters, draws and laws.

    Subclass it, set the class attributes, override what the sampler's law supports, and call
    :func:`register_sampler` with an instance. Methods take a
    :class:`~audit.core.mechanism.Mechanism` (checked by :func:`validate`).

    Class attributes:
        name: the registered name (a spec's ``samplers`` entry, the Mechanism's ``sampler``).
        fixed_size: every example is used exactly once per epoch, n = b T exactly.
        parameters: extra parameters beyond (n, b, E), e.g. ``("max_batch_size",)``.
        isolated_needs_dirac: the isolated theory assumes no other example moves the canary's
            parameters, which only the Dirac canary guarantees (the shuffles).
        canary_law: the law of the canary's steps the attacks are built on (None: none known):
            ``"known_steps"`` (the same steps in every trial), ``"uniform_step_per_epoch"``
            (one uniformly random step per epoch), ``"independent_steps"`` (each step
            independently, with the inclusion probability).
        same_step_every_epoch: the canary's step index repeats in every epoch (persistent).
        description: one line for ``audit samplers``.
        adversarial_worst: the adversarial co-batch is a strictly stronger attack than the
            isolated pair (its theory differs), so a simulated audit should default to it:
            fixed batch sizes that reveal the canary's step or inclusion (the shuffles,
            ``sampled_without_replacement``).
        independent_canaries: k canaries of one training take their steps independently of
            each other (each example's participation is drawn on its own: Poisson,
            balls-and-bins, or fixed: deterministic), so that k Dirac canaries on disjoint
            coordinates give k independent observations (docs/design.md §8.17).
    """

    name: ClassVar[str] = "abstract"
    fixed_size: ClassVar[bool] = False
    parameters: ClassVar[tuple[str, ...]] = ()
    isolated_needs_dirac: ClassVar[bool] = False
    canary_law: ClassVar[str | None] = None
    same_step_every_epoch: ClassVar[bool] = False
    adversarial_worst: ClassVar[bool] = False
    independent_canaries: ClassVar[bool] = False
    description: ClassVar[str] = ""

    # -- refusal -----------------------------------------------------------------------

    def missing(self, capability: str, detail: str = "") -> ValueError:
        """The error for a capability this sampler lacks (naming sampler and capability)."""
        extra = f" ({detail})" if detail else ""
        return ValueError(f"sampler {self.name!r} has no {capability}{extra}")

    # -- parameters --------------------------------------------------------------------

    def check_parameters(
        self, *, n: int | None, batch_size: int | None, steps_per_epoch: int | None,
        max_batch_size: int | None,
    ) -> int | None:
        """Validate the sampler's own fields; returns max_batch_size as this sampler keeps it.

        The default: fixed-size samplers need n = b T exactly; a sampler without
        ``max_batch_size`` among its parameters refuses one (the caller warns and drops it).
        """
        if (
            self.fixed_size
            and n is not None
            and batch_size is not None
            and steps_per_epoch is not None
        ):
            if n != batch_size * steps_per_epoch:
                raise ValueError(
                    f"sampler={self.name!r} needs n = batch_size * steps_per_epoch exactly; "
                    f"got n={n}, batch_size={batch_size}, steps_per_epoch={steps_per_epoch}"
                )
        return None

    # -- draws and laws ------------------------------------------------------------------

    def batch_sampler(
        self, *, n: int, batch_size: int, epochs: int, max_batch_size: int | None
    ) -> BatchSampler:
        """The :class:`BatchSampler` drawing this sampler's batches (``sample(rng, trials)``)."""
        raise self.missing("batch draws (batch_sampler)")

    def check_divisible(self, n: int, batch_size: int) -> None:
        """Fixed-size samplers: n must be a multiple of b (ValueError naming both)."""
        if self.fixed_size and n % batch_size:
            raise ValueError(
                f"sampler={self.name!r} needs n to be a multiple of batch_size (n = batch_size * "
                f"T); got n={n}, batch_size={batch_size} (n / batch_size = {n / batch_size:.4g}). "
                f"Use n={n - n % batch_size} or a batch_size that divides {n}."
            )

    def slots(self, *, n: int, batch_size: int, max_batch_size: int | None) -> int:
        """The padded batch width of a draw (an estimate where it is random). Fixed-size: b."""
        if self.fixed_size:
            return int(batch_size)
        raise self.missing("batch width (slots) estimate")

    # -- the canary ----------------------------------------------------------------------

    def inclusion_probability(self, mechanism: Mechanism) -> float:
        """Pr[the canary's gradient is in a given step's sum]. Fixed-size: 1/T."""
        if self.fixed_size:
            return 1.0 / mechanism.steps_per_epoch
        raise self.missing("canary inclusion probability")

    def cobatch_moments(self, mechanism: Mechanism, n_others: int) -> tuple[float, float]:
        """(E O, Var O) of the number O of co-batch examples in a step's sum.

        Fixed-size samplers: (0, 0), no random co-batch term (exactly b slots, known).
        """
        if self.fixed_size:
            return 0.0, 0.0
        raise self.missing("co-batch moments of the adversarial pair")

    def known_offset(self, mechanism: Mechanism) -> float:
        """What the attacker adds back per step (units of C), adversarial pair. Fixed-size: b."""
        if self.fixed_size:
            return float(batch_size_of(mechanism))
        raise self.missing("known offset of the adversarial pair")

    # -- the simulator ------------------------------------------------------------------

    def simulate_signal(
        self, mechanism: Mechanism, rng: np.random.Generator, y: np.ndarray, canary_in: bool
    ) -> None:
        """The simulator law: add to one side's noise ``y`` what the sampler's law puts on it.

        ``y`` is ``(trials, T*E)`` float32 noise N(0, sigma^2), drawn first by
        :mod:`audit.training.simulate`; this adds, in place, the canary's gradient (+1 per step
        whose sum holds it, IN only) and, with ``threat_model="adversarial"``, the co-batch (-1 per
        other example in the step's sum) plus the attacker's add-back (:meth:`known_offset`), in
        units of C (docs/design.md §3.4, §4). Each sampler draws from its own law with ``rng``; a
        new sampler brings its law by overriding this method.

        Default, fixed-size samplers: the canary is in the steps :meth:`canary_steps` draws;
        such a step reads 1 IN, 0 OUT (isolated), or 2 IN, 1 OUT (adversarial: b - 1 others
        at -1 and b added back), every other step 0.

        Raises:
            ValueError: the sampler has no simulator law (naming the sampler and the capability).
        """
        if not self.fixed_size:
            raise self.missing("simulator law", "audit simulate cannot draw its observations")
        trials = y.shape[0]
        where = self.canary_steps(mechanism, rng, trials)
        signal = (1.0 if canary_in else 0.0) + (
            1.0 if mechanism.threat_model == "adversarial" else 0.0
        )
        if signal:
            y[np.arange(trials)[:, None], where] += y.dtype.type(signal)

    def simulate_canaries(
        self,
        mechanism: Mechanism,
        rng: np.random.Generator,
        y: np.ndarray,
        canary_in: bool,
        canaries: int,
    ) -> None:
        """The simulator law of ``canaries`` = k Dirac canaries per training on k disjoint
        coordinates, isolated pair (docs/design.md §8.17): ``y`` is ``(trials * k, T*E)`` noise,
        training r's canaries in rows r k .. r k + k - 1; all k are IN (or all OUT).

        Default: a sampler with :attr:`independent_canaries` draws each row alone
        (:meth:`simulate_signal`): the k participations are independent and so is the noise
        on disjoint coordinates. Other samplers override it with their joint law or refuse.
        """
        if not self.independent_canaries:
            raise self.missing(
                f"simulator law of {canaries} canaries per training (their joint law)"
            )
        self.simulate_signal(mechanism, rng, y, canary_in)

    def has_canaries_law(self) -> bool:
        """Whether :meth:`simulate_canaries` can draw k canaries per training."""
        return (
            self.independent_canaries
            or type(self).simulate_canaries is not Sampler.simulate_canaries
        )

    def canary_steps(
        self, mechanism: Mechanism, rng: np.random.Generator, trials: int
    ) -> np.ndarray:
        """Steps holding the canary, ``(trials, E)`` indices into the T*E steps (fixed-size law)."""
        raise self.missing("simulator law (canary_steps)")

    def fixed_canary_steps(self, mechanism: Mechanism) -> list[int] | None:
        """The canary's steps when they are the same in every trial (else None)."""
        return None

    def truncate_cobatch(
        self,
        mechanism: Mechanism,
        rng: np.random.Generator,
        sampled: np.ndarray,
        others: np.ndarray,
    ) -> np.ndarray:
        """Subsampled law: the co-batch counts after the sampler's own cut (default: none)."""
        return others


def uniform_step_per_epoch(
    mechanism: Mechanism, rng: np.random.Generator, trials: int, *, same_every_epoch: bool = False
) -> np.ndarray:
    """The canary law "one uniformly random step per epoch": ``(trials, E)`` indices into the
    T*E steps, epoch e's step drawn uniformly from [e T, (e + 1) T); with ``same_every_epoch``
    one draw per trial, repeated in every epoch (persistent shuffling)."""
    steps, epochs = mechanism.steps_per_epoch, mechanism.epochs
    offsets = steps * np.arange(epochs)
    return rng.integers(0, steps, size=(trials, 1 if same_every_epoch else epochs)) + offsets


def canaries_independent(sampler: str) -> bool:
    """Whether k canaries of one training under ``sampler`` give k independent observations
    (docs/design.md §8.17)."""
    return bool(get_sampler(sampler).independent_canaries)


def distinct_positions(rng: np.random.Generator, trials: int, k: int, n: int) -> np.ndarray:
    """``(trials, k)`` positions in 0..n-1, each row a uniformly random ordered k-tuple of
    distinct positions: the places of k given examples in a uniform permutation of n.

    Floyd's algorithm draws a uniform k-subset per row (Bentley & Floyd 1987, "A sample of
    brilliance"), vectorised over the rows; a uniform shuffle of each row's k entries then
    makes the tuple's order uniform too.
    """
    chosen = np.empty((trials, k), dtype=np.int64)
    for column, j in enumerate(range(n - k, n)):
        draw = rng.integers(0, j + 1, size=trials)
        taken = (chosen[:, :column] == draw[:, None]).any(axis=1)
        chosen[:, column] = np.where(taken, j, draw)
    return rng.permuted(chosen, axis=1)


def shuffled_canaries_signal(
    mechanism: Mechanism, rng: np.random.Generator, y: np.ndarray, canary_in: bool, canaries: int,
    *, same_every_epoch: bool,
) -> None:
    """The joint law of k canaries under a shuffle, isolated pair: in each epoch (once, if
    ``same_every_epoch``) the k canaries take k distinct positions of a uniform permutation of
    the n examples; position p is in step p // b. IN rows gain 1 at their steps."""
    if mechanism.threat_model != "isolated":
        raise ValueError("canaries_per_training > 1 simulates the isolated threat model only")
    if not canary_in:
        return
    trials = y.shape[0] // canaries
    steps, b, n = mechanism.steps_per_epoch, mechanism.batch_size, mechanism.n
    assert n is not None  # a shuffle permutes n examples: its mechanism states n
    rows = np.arange(trials * canaries)
    for epoch in range(mechanism.epochs):
        if epoch == 0 or not same_every_epoch:
            step = distinct_positions(rng, trials, canaries, n).reshape(-1) // b
        y[rows, epoch * steps + step] += y.dtype.type(1.0)


def near_poisson_slots(n: int, batch_size: int) -> int:
    """Memory-estimate batch width of a sampler whose batch is near Poisson(b): b + 6 sqrt(b) + 6,
    at most n (the largest of millions of such batches lies below it in practice: an estimate
    used for sizing only; the draws themselves pad to the largest batch actually drawn)."""
    return min(n, int(batch_size + 6 * math.sqrt(batch_size) + 6))


def dataset_size(mechanism: Mechanism) -> int:
    """n, for a sampler whose law needs it (ValueError without it; n and b come together)."""
    if mechanism.n is None:
        raise ValueError(
            f"sampler={mechanism.sampler!r} needs n (or batch_size): its law depends on the "
            "dataset size"
        )
    return mechanism.n


def batch_size_of(mechanism: Mechanism) -> int:
    """b, for a sampler whose law needs it (ValueError without it; n and b come together)."""
    if mechanism.batch_size is None:
        raise ValueError(
            f"sampler={mechanism.sampler!r} needs batch_size (or n): its law depends on the "
            "batch size"
        )
    return mechanism.batch_size


def other_examples(mechanism: Mechanism) -> int:
    """n - 1: the examples other than the canary (ValueError without n: their law needs it)."""
    if mechanism.n is None:
        raise ValueError(
            f"sampler={mechanism.sampler!r} with threat_model='adversarial' needs n (or "
            "batch_size): "
            "the number of co-batch examples per step is random and its law depends on n"
        )
    return mechanism.n - 1


def check_canary_isolation(canary: str, threat_model: str, sampler: str) -> None:
    """Refuse ``canary='input'`` with ``threat_model='isolated'`` for a sampler whose isolated
    theory needs the Dirac canary (:attr:`Sampler.isolated_needs_dirac`: the shuffles).

    The shuffles' isolated pair has every other example contribute 0 along the canary's
    direction and move none of the parameters the canary moves; only the Dirac canary, on its
    private coordinate, guarantees it (an input canary's gradient also moves shared
    parameters). Samplers whose curves are worst-case guarantees under both threat models
    accept any canary.

    Raises:
        ValueError: naming canary, threat_model, sampler and the allowed combinations.
    """
    chosen = get_sampler(sampler)
    if canary == "input" and threat_model == "isolated" and chosen.isolated_needs_dirac:
        accepting = ", ".join(s.name for s in _REGISTRY.values() if not s.isolated_needs_dirac)
        raise ValueError(
            f"canary='input' with threat_model='isolated' and sampler={sampler!r} is refused: the "
            "shuffles' isolated theory assumes that no other example moves the canary's "
            "parameters, which only canary='dirac' guarantees. Allowed: canary='dirac' with "
            "threat_model='isolated'; "
            "canary='input' with threat_model='adversarial', or with a sampler whose isolated "
            f"curves are worst-case guarantees ({accepting})"
        )


_REGISTRY: dict[str, Sampler] = {}


def register_sampler(sampler: Sampler, *, replace: bool = False) -> Sampler:
    """Register ``sampler`` under ``sampler.name`` (ValueError if taken, unless ``replace``)."""
    if not isinstance(sampler, Sampler):
        raise ValueError(f"sampler must be an audit.sampling.Sampler, got {type(sampler).__name__}")
    if not sampler.name or sampler.name == "abstract":
        raise ValueError("a registered sampler needs a name (the class attribute 'name')")
    if sampler.name in _REGISTRY and not replace:
        raise ValueError(f"sampler {sampler.name!r} is already registered")
    _REGISTRY[sampler.name] = sampler
    return sampler


def unregister_sampler(name: str) -> None:
    """Remove a sampler registered at run time (tests)."""
    _REGISTRY.pop(name, None)


def sampler_names() -> tuple[str, ...]:
    """The registered sampler names, in registration order (the built-ins first)."""
    return tuple(_REGISTRY)


def registered_samplers() -> tuple[Sampler, ...]:
    return tuple(_REGISTRY.values())


def canonical_sampler_name(name: str) -> str:
    """``name`` itself if registered, else the registered name of a user's alias
    (:data:`audit.core.names.SAMPLER_ALIASES`: ``wor``, ``without_replacement``, ``fixed_size``
    -> ``sampled_without_replacement``).

    Raises:
        ValueError: neither registered nor an alias, naming the allowed values, the closest one
            and the aliases (``sampler='x' is not valid; allowed: ...``).
    """
    if isinstance(name, str) and name not in _REGISTRY and name in SAMPLER_ALIASES:
        return SAMPLER_ALIASES[name]
    try:
        return check_choice("sampler", name, sampler_names())
    except ValueError as err:
        alias = closest(name, SAMPLER_ALIASES) if isinstance(name, str) else None
        if alias is None or "Did you mean" in str(err):
            raise
        raise ValueError(
            f"{err} Did you mean {alias!r} (an alias of {SAMPLER_ALIASES[alias]!r})?"
        ) from None


def get_sampler(name: str) -> Sampler:
    """The registered sampler ``name``, or the one an alias names (:func:`canonical_sampler_name`;
    ValueError naming the allowed values otherwise)."""
    return _REGISTRY[canonical_sampler_name(name)]


def validate(mechanism: Mechanism) -> Mechanism:
    """``mechanism`` checked against its sampler's rules, as its sampler keeps it.

    The core's :class:`~audit.core.mechanism.Mechanism` checks its own fields; this checks what
    needs the registry (docs/design.md §3.3): the sampler is registered (ValueError naming the
    allowed values and the closest), its parameters agree (:meth:`Sampler.check_parameters`:
    n = b T for the fixed-size samplers, B >= 1 and n for truncated Poisson, T = round(n / b)
    for balls-and-bins), and ``max_batch_size`` is kept only by a sampler that declares it
    (elsewhere a UserWarning, and the copy returned has None). Called where a mechanism is
    built from user input (the spec, the CLI, the training records, the theory's and the
    accountants' keyword faces); idempotent: a checked mechanism comes back unchanged.

    Raises:
        ValueError: naming the field, the value and what is allowed.
    """
    sampler = get_sampler(mechanism.sampler)
    if sampler.name != mechanism.sampler:  # an alias: the record keeps the registered name
        mechanism = replace(mechanism, sampler=sampler.name)
    big_b = sampler.check_parameters(
        n=mechanism.n, batch_size=mechanism.batch_size, steps_per_epoch=mechanism.steps_per_epoch,
        max_batch_size=mechanism.max_batch_size,
    )
    if "max_batch_size" not in sampler.parameters:
        if mechanism.max_batch_size is None:
            return mechanism
        warnings.warn(
            f"max_batch_size={mechanism.max_batch_size} is ignored by "
            f"sampler={mechanism.sampler!r} "
            "(only a sampler with a max_batch_size parameter uses it)",
            stacklevel=2,
        )
        big_b = None
    if big_b is mechanism.max_batch_size:
        return mechanism
    return replace(mechanism, max_batch_size=big_b)


def validate_training(record: Training) -> Training:
    """``record`` checked against its sampler's rules: its mechanism (:func:`validate`) and the
    canaries its isolated theory accepts (:func:`check_canary_isolation`).

    The core's :class:`~audit.core.record.Training` checks its own fields; the views built
    above this layer call this on construction (``TrainingConfig``, ``TrainingSetup``), the
    spec on the records it builds. The record is updated in place, while it is being built
    (no one else holds it yet): its mechanism and ``max_batch_size`` become the ones
    :func:`validate` returns. Returns ``record``.
    """
    mechanism = validate(record.mechanism)
    check_canary_isolation(record.canary, record.threat_model, record.sampler)
    if mechanism.sampler != record.sampler:  # an alias: the record keeps the registered name
        object.__setattr__(record, "sampler", mechanism.sampler)
    if mechanism is not record.mechanism:
        object.__setattr__(record, "max_batch_size", mechanism.max_batch_size)
        object.__setattr__(record, "_mechanism", mechanism)
    return record


def check_max_batch_size(value: int | None, name: str) -> int:
    """B >= 1, required."""
    if value is None:
        raise ValueError(
            f"max_batch_size is required for sampler={name!r}: the fixed padded batch size B, "
            "an integer >= 1"
        )
    return check_int("max_batch_size", value, minimum=1)

