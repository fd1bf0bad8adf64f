"""A sampler is a type: one registered :class:`Sampler` object per batch sampler.

The object owns everything sampler-specific (docs/design.md §3.3, §4): its extra
parameters and their validation, its batch draws and exact laws (``batch_sampler``), the
canary's inclusion probability, the co-batch moments and known offset of the adversarial
pair, its simulator law, its default attack, its Opacus DataLoader, its ``dp_event`` for
accountants and its theory (upper/lower curves, calibration). Every layer asks the registry
(:func:`get_sampler`) instead of branching on the sampler's name.

Layering: this package sits just above validation, below the mechanism, so the mechanism can
ask the sampler to validate its fields. Capabilities that live in higher layers (theory
curves, calibration) are named by import path (``"package.module:attribute"``, loaded with
:func:`audit.validation.load_callable` when asked, as accountants and model factories are),
so the curve code stays in :mod:`audit.theory` and the dependency stays one way.

A capability a sampler lacks raises :class:`ValueError` naming the sampler and the
capability (:meth:`Sampler.missing`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from audit.sampling.batches import BatchSampler
from audit.validation import check_choice, check_int, load_callable

__all__ = [
    "OpacusLoader",
    "Sampler",
    "check_canary_isolation",
    "get_sampler",
    "other_examples",
    "register_sampler",
    "registered_samplers",
    "sampler_names",
    "uniform_step_per_epoch",
]


@dataclass(frozen=True)
class OpacusLoader:
    """What :meth:`Sampler.opacus_loader` returns.

    Attributes:
        loader: the torch ``DataLoader`` (T batches per epoch) passed to ``make_private``.
        poisson_sampling: ``make_private(poisson_sampling=...)``: True lets Opacus replace
            the loader by its Poisson ``DPDataLoader`` (q = 1 / len(loader)).
    """

    loader: Any
    poisson_sampling: bool = False


class Sampler:
    """One batch sampler: its parameters, draws, laws and capabilities.

    Subclass it, set the class attributes, override what the sampler supports, and call
    :func:`register_sampler` with an instance. Methods take a mechanism (duck-typed: any object
    with the fields of :class:`audit.mechanism.Mechanism`; that class sits above this package).

    Class attributes:
        name: the registered name (a spec's ``samplers`` entry, the Mechanism's ``sampler``).
        fixed_size: every example is used exactly once per epoch, n = b T exactly.
        parameters: extra parameters beyond (n, b, E), e.g. ``("max_batch_size",)``.
        isolated_needs_dirac: the isolated theory assumes no other example moves the canary's
            parameters, which only the Dirac canary guarantees (the shuffles).
        default_attack: the all-iterates attack for each threat model (None: none).
        canary_law: the law of the canary's steps the attacks are built on (None: none known):
            ``"known_steps"`` (the same steps in every trial), ``"uniform_step_per_epoch"``
            (one uniformly random step per epoch), ``"independent_steps"`` (each step
            independently, with the inclusion probability).
        same_step_every_epoch: the canary's step index repeats in every epoch (persistent).
        independent_canaries: k canaries of one training take their steps independently of
            each other (each example's participation is drawn on its own: Poisson,
            balls-and-bins, or fixed: deterministic), so that k Dirac canaries on disjoint
            coordinates give k independent observations (docs/design.md §8.12).
        theory: import path of ``f(mechanism) -> audit.theory.Bounds`` (None: no theory).
        epsilon_at: import path of a fast ``f(mechanism, delta, bound) -> eps`` for calibration
            (None: calibration reads the theory's curves).
        sigma_closed_form: import path of ``f(epsilon, delta, T, E) -> sigma`` where the
            calibration is closed-form (None: bisection on eps(sigma)).
    """

    name: ClassVar[str] = "abstract"
    fixed_size: ClassVar[bool] = False
    parameters: ClassVar[tuple[str, ...]] = ()
    isolated_needs_dirac: ClassVar[bool] = False
    default_attack: ClassVar[dict[str, str] | None] = None
    theory: ClassVar[str | None] = None
    epsilon_at: ClassVar[str | None] = None
    sigma_closed_form: ClassVar[str | None] = None
    canary_law: ClassVar[str | None] = None
    same_step_every_epoch: ClassVar[bool] = False
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
        if self.fixed_size and n is not None and batch_size is not None and steps_per_epoch is not None:
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
                f"sampler={self.name!r} needs n to be a multiple of batch_size (n = batch_size * T); "
                f"got n={n}, batch_size={batch_size} (n / batch_size = {n / batch_size:.4g}). "
                f"Use n={n - n % batch_size} or a batch_size that divides {n}."
            )

    def slots(self, *, n: int, batch_size: int, max_batch_size: int | None) -> int:
        """The padded batch width of a draw (an estimate where it is random). Fixed-size: b."""
        if self.fixed_size:
            return int(batch_size)
        raise self.missing("batch width (slots) estimate")

    # -- the canary ----------------------------------------------------------------------

    def inclusion_probability(self, mechanism: Any) -> float:
        """Pr[the canary's gradient is in a given step's sum]. Fixed-size: 1/T."""
        if self.fixed_size:
            return 1.0 / mechanism.steps_per_epoch
        raise self.missing("canary inclusion probability")

    def cobatch_moments(self, mechanism: Any, n_others: int) -> tuple[float, float]:
        """(E O, Var O) of the number O of co-batch examples in a step's sum.

        Fixed-size samplers: (0, 0), no random co-batch term (exactly b slots, known).
        """
        if self.fixed_size:
            return 0.0, 0.0
        raise self.missing("co-batch moments of the adversarial pair")

    def known_offset(self, mechanism: Any) -> float:
        """What the attacker adds back per step (units of C), adversarial pair. Fixed-size: b."""
        if self.fixed_size:
            return float(mechanism.batch_size)
        raise self.missing("known offset of the adversarial pair")

    # -- the simulator ------------------------------------------------------------------

    def simulate_signal(self, mechanism: Any, rng: np.random.Generator, y: np.ndarray, canary_in: bool) -> None:
        """The simulator law: add to one side's noise ``y`` what the sampler's law puts on it.

        ``y`` is ``(trials, T*E)`` float32 noise N(0, sigma^2), drawn first by
        :mod:`audit.simulate`; this adds, in place, the canary's gradient (+1 per step whose
        sum holds it, IN only) and, with ``threat_model="adversarial"``, the co-batch (-1 per
        other example in the step's sum) plus the attacker's add-back (:meth:`known_offset`),
        in units of C (docs/design.md §3.4, §4). Each sampler draws from its own law with
        ``rng``; a new sampler brings its law by overriding this method.

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
        signal = (1.0 if canary_in else 0.0) + (1.0 if mechanism.threat_model == "adversarial" else 0.0)
        if signal:
            y[np.arange(trials)[:, None], where] += y.dtype.type(signal)

    def simulate_canaries(
        self, mechanism: Any, rng: np.random.Generator, y: np.ndarray, canary_in: bool, canaries: int
    ) -> None:
        """The simulator law of ``canaries`` = k Dirac canaries per training on k disjoint
        coordinates, isolated pair (docs/design.md §8.12): ``y`` is ``(trials * k, T*E)`` noise,
        training r's canaries in rows r k .. r k + k - 1; all k are IN (or all OUT).

        Default: a sampler with :attr:`independent_canaries` draws each row alone
        (:meth:`simulate_signal`): the k participations are independent and so is the noise
        on disjoint coordinates. Other samplers override it with their joint law or refuse.
        """
        if not self.independent_canaries:
            raise self.missing(f"simulator law of {canaries} canaries per training (their joint law)")
        self.simulate_signal(mechanism, rng, y, canary_in)

    def has_canaries_law(self) -> bool:
        """Whether :meth:`simulate_canaries` can draw k canaries per training."""
        return self.independent_canaries or type(self).simulate_canaries is not Sampler.simulate_canaries

    def canary_steps(self, mechanism: Any, rng: np.random.Generator, trials: int) -> np.ndarray:
        """Steps holding the canary, ``(trials, E)`` indices into the T*E steps (fixed-size law)."""
        raise self.missing("simulator law (canary_steps)")

    def fixed_canary_steps(self, mechanism: Any) -> list[int] | None:
        """The canary's steps when they are the same in every trial (else None)."""
        return None

    def truncate_cobatch(
        self, mechanism: Any, rng: np.random.Generator, sampled: np.ndarray, others: np.ndarray
    ) -> np.ndarray:
        """Subsampled law: the co-batch counts after the sampler's own cut (default: none)."""
        return others

    # -- attacks, plug-ins -------------------------------------------------------------

    def default_attack_for(self, threat_model: str) -> str:
        """The name of the default all-iterates attack for ``threat_model``."""
        if not self.default_attack or threat_model not in self.default_attack:
            raise self.missing("default attack", f"threat_model={threat_model!r}")
        return self.default_attack[threat_model]

    def opacus_loader(
        self, dataset: Any, *, batch_size: int, epochs: int, generator: Any, rng: np.random.Generator
    ) -> OpacusLoader:
        """The torch ``DataLoader`` the opacus plug-in hands to ``make_private`` (docs/design.md §3.3).

        Args:
            dataset: a map-style torch dataset of the n rows (row i is example i).
            batch_size: b (the loader must have T = n / b batches per epoch: Opacus divides
                the noisy sum by its expected batch size n / len(loader)).
            epochs: E (the plug-in iterates the loader once per epoch).
            generator: the loader's ``torch.Generator`` (torch's shuffles and Opacus's own
                Poisson draws read it).
            rng: a numpy Generator for the sampler's own draws.

        Returns:
            :class:`OpacusLoader`: the loader, and whether ``make_private`` replaces it by
            Opacus's Poisson ``DPDataLoader`` (``poisson_sampling=True``).

        Raises:
            ValueError: naming the sampler, when it has no Opacus counterpart.
        """
        raise self.missing("Opacus DataLoader", "the opacus plug-in cannot reproduce it")

    def has_opacus_loader(self) -> bool:
        """Whether this sampler overrides :meth:`opacus_loader` (the opacus plug-in can run it)."""
        return type(self).opacus_loader is not Sampler.opacus_loader

    # -- accounting and theory -----------------------------------------------------------

    def dp_event(self, mechanism: Any) -> Any:
        """The dp_accounting event of ``mechanism`` (or an explanation string: none exists)."""
        return f"sampler {self.name!r} has no dp_event (no dp_accounting event is known for it)"

    def gaussian_steps(self, mechanism: Any) -> tuple[str, float, int] | None:
        """The run as self-composed Gaussian steps, for accountants with only those classes.

        ``("poisson", q, T E)``: Poisson-subsampled Gaussian steps; ``("gaussian", 1, k)``:
        k plain Gaussian steps on the canary; None: neither (the accountant is Unsupported).
        """
        return None

    def random_allocation(self, mechanism: Any) -> tuple[float, int, int] | None:
        """The run as the random-allocation pair, where that pair dominates the cell's observation.

        ``(sigma', T, E')``: the canary's observation is dominated by E' independent rounds of
        P = (1/T) sum_j N(e_j, sigma'^2 I_T) vs Q = N(0, sigma'^2 I_T) (Feldman & Shenfeld,
        arXiv 2502.08202; docs/design.md §6.8), for accountants of that pair; None: it is not
        (the accountant answers Unsupported).
        """
        return None

    def bounds(self, mechanism: Any) -> Any:
        """Upper (guarantee) and lower (achieved) curves: ``audit.theory.Bounds``."""
        if self.theory is None:
            raise self.missing("theory (upper/lower trade-off curves)")
        return load_callable("theory", self.theory)(mechanism)

    def epsilon_at_function(self) -> Callable[..., float] | None:
        """The fast eps(mechanism, delta, bound) of calibration, or None (use the curves)."""
        if self.theory is None:
            raise self.missing("calibration (needs theory: upper/lower trade-off curves)")
        return None if self.epsilon_at is None else load_callable("epsilon_at", self.epsilon_at)

    def sigma_for_function(self) -> Callable[..., float] | None:
        """The closed-form sigma(epsilon, delta, T, E), or None (bisection)."""
        return None if self.sigma_closed_form is None else load_callable("sigma_closed_form", self.sigma_closed_form)


def uniform_step_per_epoch(
    mechanism: Any, rng: np.random.Generator, trials: int, *, same_every_epoch: bool = False
) -> np.ndarray:
    """The canary law "one uniformly random step per epoch": ``(trials, E)`` indices into the
    T*E steps, epoch e's step drawn uniformly from [e T, (e + 1) T); with ``same_every_epoch``
    one draw per trial, repeated in every epoch (persistent shuffling)."""
    steps, epochs = mechanism.steps_per_epoch, mechanism.epochs
    offsets = steps * np.arange(epochs)
    return rng.integers(0, steps, size=(trials, 1 if same_every_epoch else epochs)) + offsets


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
    mechanism: Any, rng: np.random.Generator, y: np.ndarray, canary_in: bool, canaries: int,
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


def other_examples(mechanism: Any) -> int:
    """n - 1: the examples other than the canary (ValueError without n: their law needs it)."""
    if mechanism.n is None:
        raise ValueError(
            f"sampler={mechanism.sampler!r} with threat_model='adversarial' needs n (or batch_size): "
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
            "shuffles' isolated theory assumes that no other example moves the canary's parameters, "
            "which only canary='dirac' guarantees. Allowed: canary='dirac' with threat_model='isolated'; "
            "canary='input' with threat_model='adversarial', or with a sampler whose isolated curves "
            f"are worst-case guarantees ({accepting})"
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


def get_sampler(name: str) -> Sampler:
    """The registered sampler ``name`` (ValueError naming the allowed values otherwise)."""
    check_choice("sampler", name, sampler_names())
    return _REGISTRY[name]


def check_max_batch_size(value: int | None, name: str) -> int:
    """B >= 1, required."""
    if value is None:
        raise ValueError(
            f"max_batch_size is required for sampler={name!r}: the fixed padded batch size B, "
            "an integer >= 1"
        )
    return check_int("max_batch_size", value, minimum=1)

