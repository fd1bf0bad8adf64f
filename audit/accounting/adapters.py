"""Privacy accountants as the harness sees them: a mechanism and delta in, a claimed eps out.

An *accountant* is any callable ``accountant(mechanism, delta) -> float | Unsupported``: given
the one description of the training (:class:`audit.core.mechanism.Mechanism`: sampler, sigma,
steps per epoch T, epochs E, n, batch size b, max batch size B) and a target delta, it
returns the epsilon it would report for that training, or :class:`Unsupported` with a reason
when it cannot account for it (e.g. a shuffled sampler in a Poisson-only library). The
checker (:mod:`audit.accounting.check`) compares these claims with proven bounds.

Built-in adapters (names are a contract):

- ``dp-accounting-pld``: dp_accounting's ``PLDAccountant`` (pessimistic connect-the-dots PLD,
  value discretisation 1e-4, its default add/remove relation): Poisson as
  ``PoissonSampledDpEvent(q, GaussianDpEvent(sigma))`` composed T*E times, deterministic as
  ``GaussianDpEvent(sigma)`` composed E times (each example is in exactly one batch per
  epoch), truncated Poisson as ``TruncatedSubsampledGaussianDpEvent(n, q, B, sigma)`` composed
  T*E times (Ganesh 2025, arXiv 2508.15089). No event exists for shuffling: unsupported.
- ``dp-accounting-rdp``: dp_accounting's ``RdpAccountant`` (default orders) on the same
  events; it has no truncated-Poisson event.
- ``opacus-rdp``, ``opacus-prv``, ``opacus-gdp``: Opacus' ``RDPAccountant``, ``PRVAccountant``
  (its eps upper bound, eps_error 0.01) and ``GaussianAccountant`` (the CLT, Bu et al.
  2020, with ``poisson=True``), each with history ``[(sigma, q, T*E)]``, exactly what
  ``PrivacyEngine.get_epsilon`` computes. Opacus accounts only Poisson-sampled steps.
- ``prv-accountant``: Microsoft's ``prv_accountant.PRVAccountant`` (Gopi et al. 2021), the
  upper end of its [lower, estimate, upper] eps bracket with eps_error 0.01 and
  delta_error delta/1000; Poisson (``PoissonSubsampledGaussianMechanism``) and deterministic
  (``GaussianMechanism`` composed E times).
- ``poisson-for-shuffle``: a Poisson PLD (as ``dp-accounting-pld``) with q = b/n and T*E
  steps applied to *any* sampler: how shuffled trainings are usually reported (Opacus'
  ``make_private(poisson_sampling=False)`` does the same). Sound only for Poisson.
- ``pld-accounting-random-allocation``: the ``pld-accounting`` package (Feldman & Shenfeld's
  random-allocation accountant, arXiv 2502.08202), the upper end of its
  ``gaussian_allocation_epsilon_range`` (its dominating PLD; default accuracy, upper / lower
  <= 1.1), for the random-allocation pair P = (1/T) sum_j N(e_j, sigma^2 I) vs N(0, sigma^2 I)
  composed over the epochs. Where the sampler says that pair dominates the cell
  (:meth:`audit.sampling.Sampler.random_allocation`): balls-and-bins under both threat models
  (for any co-batch, Chua et al. 2025, §3: a DP guarantee of the training), and the shuffles'
  isolated pair only (dynamic: E rounds; persistent: one round at sigma / sqrt(E)), which is
  a guarantee for that pair, not for the training (the shuffles' adversarial pair is not
  dominated: fixed batch sizes reveal the canary's step; Unsupported). Its numba kernels
  speed it up when numba is installed (optional; bench/README.md).

Users register their own accountant by name (:func:`register_accountant`) or pass an import
path ``"package.module:function"`` wherever a name is accepted.

Optional dependencies (opacus, prv-accountant, pld-accounting) come from the ``accountants`` extra;
asking for an adapter whose package is missing raises :class:`MissingAccountantDependency`, an
``ImportError`` whose message says ``pip install 'dpsgd-audit[accountants]'``.
"""

from __future__ import annotations

import importlib
import math
import numbers
import warnings
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol, TypeAlias

from audit.accounting.events import dp_event, gaussian_steps, random_allocation
from audit.core.mechanism import Mechanism
from audit.core.validation import check_choice, check_probability, load_callable
from audit.sampling import validate

__all__ = [
    "ACCOUNTANTS_EXTRA",
    "BUILTIN_ACCOUNTANTS",
    "Accountant",
    "AccountantSpec",
    "Claim",
    "MissingAccountantDependency",
    "Unsupported",
    "available_accountants",
    "claim_epsilon",
    "claimed_epsilon",
    "get_accountant",
    "opacus_epsilon",
    "register_accountant",
    "unregister_accountant",
]

ACCOUNTANTS_EXTRA = "pip install 'dpsgd-audit[accountants]'"
"""How to install the optional accountant libraries (opacus, prv-accountant, pld-accounting)."""

PLD_DISCRETISATION = 1e-4
"""Value discretisation of the PLD adapters: dp_accounting's default, and what users run."""

PRV_EPS_ERROR = 0.01
"""eps_error of the PRV adapters (Opacus' default; Gopi et al.'s accountant guarantees
eps_true <= eps_upper with eps_upper - eps_estimate <= eps_error)."""


@dataclass(frozen=True)
class Unsupported:
    """An accountant's answer for a training it cannot account for, with the reason."""

    reason: str


Claim: TypeAlias = "float | Unsupported"


class Accountant(Protocol):
    """``accountant(mechanism, delta)`` -> the claimed eps at ``delta``, or :class:`Unsupported`."""

    def __call__(self, mechanism: Mechanism, delta: float) -> float | Unsupported: ...


class MissingAccountantDependency(ImportError):
    """An adapter's optional package is not installed (names the package and the extra)."""


@dataclass(frozen=True)
class AccountantSpec:
    """A named accountant: the callable, the packages it needs, one line describing it, and
    the neighbouring relation it states its claims for (docs/design.md §11.3)."""

    name: str
    function: Accountant
    requires: tuple[str, ...] = ()
    description: str = ""
    adjacency: str | None = None
    """The neighbouring relation its claims are for (``add_remove``, ``replace_one``,
    ``zero_out``; None: not stated). A callable states it with an ``adjacency`` attribute."""

    def __call__(self, mechanism: Mechanism, delta: float) -> float | Unsupported:
        return claim_epsilon(self.function, mechanism, delta)


# ---------------------------------------------------------------------------------------
# dp_accounting adapters


def _dp_event(mechanism: Mechanism, *, poisson_for_all: bool = False):
    """The dp_accounting event of ``mechanism``, or :class:`Unsupported`.

    Poisson: ``PoissonSampledDpEvent(q, GaussianDpEvent(sigma))`` x T*E; deterministic:
    ``GaussianDpEvent(sigma)`` x E; truncated Poisson: ``TruncatedSubsampledGaussianDpEvent(n, q, B,
    sigma)`` x T*E. With ``poisson_for_all`` every sampler is accounted as Poisson with q = b/n (the
    ``poisson-for-shuffle`` practice). The event is the one registered for the sampler
    (:func:`audit.accounting.events.dp_event`); a sampler without one gives :class:`Unsupported`
    with its reason.
    """
    import dp_accounting

    if poisson_for_all:
        step = dp_accounting.PoissonSampledDpEvent(
            mechanism.sampling_probability, dp_accounting.GaussianDpEvent(mechanism.sigma)
        )
        return dp_accounting.SelfComposedDpEvent(step, mechanism.total_steps)
    event = dp_event(mechanism)
    if isinstance(event, str):
        return Unsupported(event)
    return event



@lru_cache(maxsize=128)
def _composed_accountant(kind: str, event):
    """A dp_accounting accountant (``pld`` or ``rdp``) with ``event`` composed, cached per event.

    Returns the accountant, or the library's error message when it does not support the event.
    """
    from dp_accounting.pld import pld_privacy_accountant
    from dp_accounting.rdp import rdp_privacy_accountant

    if kind == "pld":
        accountant = pld_privacy_accountant.PLDAccountant(
            value_discretization_interval=PLD_DISCRETISATION
        )
    else:
        accountant = rdp_privacy_accountant.RdpAccountant()
    if not accountant.supports(event):
        return (
            f"dp_accounting's {type(accountant).__name__} does not support "
            f"{type(event.event).__name__}"
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        accountant.compose(event)
    return accountant


def _dp_accounting_claim(
    kind: str, mechanism: Mechanism, delta: float, *, poisson_for_all: bool = False
):
    event = _dp_event(mechanism, poisson_for_all=poisson_for_all)
    if isinstance(event, Unsupported):
        return event
    accountant = _composed_accountant(kind, event)
    if isinstance(accountant, str):
        return Unsupported(accountant)
    return float(accountant.get_epsilon(delta))


def dp_accounting_pld(mechanism: Mechanism, delta: float) -> float | Unsupported:
    """dp_accounting's PLD accountant (pessimistic, discretisation 1e-4)."""
    return _dp_accounting_claim("pld", mechanism, delta)


def dp_accounting_rdp(mechanism: Mechanism, delta: float) -> float | Unsupported:
    """dp_accounting's RDP accountant (default orders)."""
    return _dp_accounting_claim("rdp", mechanism, delta)


def poisson_for_shuffle(mechanism: Mechanism, delta: float) -> float | Unsupported:
    """A Poisson PLD with q = b/n over T*E steps, whatever the sampler really was."""
    return _dp_accounting_claim("pld", mechanism, delta, poisson_for_all=True)


@lru_cache(maxsize=128)
def _random_allocation_epsilon(sigma: float, steps: int, rounds: int, delta: float) -> float:
    import PLD_accounting

    with warnings.catch_warnings():
        # "numba is not installed" (an ImportWarning), refinement notes
        warnings.simplefilter("ignore")
        upper, _ = PLD_accounting.gaussian_allocation_epsilon_range(
            delta=delta, sigma=sigma, num_steps=steps, num_epochs=rounds
        )
    return float(upper)


def pld_accounting_random_allocation(mechanism: Mechanism, delta: float) -> float | Unsupported:
    """pld-accounting's random-allocation eps upper bound, where that pair dominates the cell."""
    pair = random_allocation(mechanism)
    if pair is None:
        return Unsupported(
            f"the random-allocation pair does not dominate sampler {mechanism.sampler!r} with "
            f"threat_model={mechanism.threat_model!r} (it does for balls_and_bins, and for the "
            "shuffles' isolated pair)"
        )
    if delta >= 1.0:
        return 0.0
    if delta <= 0.0:
        return math.inf  # Gaussian noise: no finite eps at delta = 0
    sigma, steps, rounds = pair
    return _random_allocation_epsilon(float(sigma), int(steps), int(rounds), float(delta))


# ---------------------------------------------------------------------------------------
# Opacus adapters

_OPACUS_ONLY_POISSON = (
    "Opacus accounts only Poisson-subsampled Gaussian steps (its make_private("
    "poisson_sampling=False) reports a shuffled loader as Poisson: see 'poisson-for-shuffle')"
)


OPACUS_KINDS: tuple[str, ...] = ("rdp", "prv", "gdp")
"""Opacus accountants by ``PrivacyEngine(accountant=...)`` name: RDP, PRV, Gaussian (CLT)."""


@lru_cache(maxsize=256)
def opacus_epsilon(kind: str, history: tuple[tuple[float, float, int], ...], delta: float) -> float:
    """Epsilon of Opacus's ``kind`` accountant holding ``history`` of (sigma, q, steps) at
    ``delta``.

    What ``PrivacyEngine.get_epsilon(delta)`` computes after a run whose accountant recorded
    ``history`` (after T*E steps of DP-SGD with noise sigma and rate q: ``((sigma, q, T*E),)``);
    PRV with eps_error 0.01. Cached: the PRV accountant takes a fraction of a second, and
    every training of a cell has the same history. Opacus's errors propagate.
    """
    check_choice("opacus accountant", kind, OPACUS_KINDS)
    from opacus.accountants import GaussianAccountant, PRVAccountant, RDPAccountant

    classes = {"rdp": RDPAccountant, "prv": PRVAccountant, "gdp": GaussianAccountant}
    with warnings.catch_warnings():
        # GaussianAccountant under-reports; "Optimal order is the largest alpha"
        warnings.simplefilter("ignore")
        accountant = classes[kind]()
        accountant.history = list(history)
        if kind == "prv":
            return float(accountant.get_epsilon(delta, eps_error=PRV_EPS_ERROR))
        return float(accountant.get_epsilon(delta))


def _opacus_claim(kind: str, mechanism: Mechanism, delta: float) -> float | Unsupported:
    steps = gaussian_steps(mechanism)
    if steps is None or steps[0] != "poisson":
        return Unsupported(_OPACUS_ONLY_POISSON)
    history = ((mechanism.sigma, steps[1], steps[2]),)
    return opacus_epsilon(kind, history, delta)


def opacus_rdp(mechanism: Mechanism, delta: float) -> float | Unsupported:
    """Opacus' RDPAccountant (its default orders)."""
    return _opacus_claim("rdp", mechanism, delta)


def opacus_prv(mechanism: Mechanism, delta: float) -> float | Unsupported:
    """Opacus' PRVAccountant: its upper eps bound with eps_error 0.01, delta_error delta/1000."""
    return _opacus_claim("prv", mechanism, delta)


def opacus_gdp(mechanism: Mechanism, delta: float) -> float | Unsupported:
    """Opacus' GaussianAccountant: mu = q sqrt(T (e^{1/sigma^2} - 1)) (a CLT, not a bound)."""
    return _opacus_claim("gdp", mechanism, delta)


# ---------------------------------------------------------------------------------------
# prv_accountant adapter


@lru_cache(maxsize=128)
def _prv_epsilon(kind: str, sigma: float, q: float, compositions: int, delta: float) -> float:
    import prv_accountant

    if kind == "poisson":
        prv = prv_accountant.PoissonSubsampledGaussianMechanism(
            sampling_probability=q, noise_multiplier=sigma
        )
    else:
        prv = prv_accountant.GaussianMechanism(noise_multiplier=sigma)
    accountant = prv_accountant.PRVAccountant(
        prvs=[prv],
        eps_error=PRV_EPS_ERROR,
        delta_error=delta / 1000,
        max_self_compositions=[compositions],
    )
    _, _, eps_upper = accountant.compute_epsilon(delta, [compositions])
    return float(eps_upper)


def prv_accountant_adapter(mechanism: Mechanism, delta: float) -> float | Unsupported:
    """prv_accountant's PRVAccountant: the upper end of its eps bracket."""
    steps = gaussian_steps(mechanism)
    if steps is not None:
        kind, q, compositions = steps
        return _prv_epsilon(kind, mechanism.sigma, q, compositions, delta)
    return Unsupported(
        "prv_accountant has privacy random variables for Poisson-subsampled and plain Gaussian "
        f"steps only, not for sampler {mechanism.sampler!r}"
    )


# ---------------------------------------------------------------------------------------
# Registry

BUILTIN_ACCOUNTANTS: tuple[AccountantSpec, ...] = (
    AccountantSpec(
        "dp-accounting-pld",
        dp_accounting_pld,
        ("dp_accounting",),
        "dp_accounting PLDAccountant (pessimistic, 1e-4): deterministic, poisson, "
        "truncated_poisson",
        adjacency="add_remove",
    ),
    AccountantSpec(
        "dp-accounting-rdp",
        dp_accounting_rdp,
        ("dp_accounting",),
        "dp_accounting RdpAccountant: deterministic, poisson",
        adjacency="add_remove",
    ),
    AccountantSpec(
        "opacus-rdp",
        opacus_rdp,
        ("opacus",),
        "Opacus RDPAccountant: poisson",
        adjacency="add_remove",
    ),
    AccountantSpec(
        "opacus-prv",
        opacus_prv,
        ("opacus",),
        "Opacus PRVAccountant (eps upper): poisson",
        adjacency="add_remove",
    ),
    AccountantSpec(
        "opacus-gdp",
        opacus_gdp,
        ("opacus",),
        "Opacus GaussianAccountant (CLT estimate): poisson",
        adjacency="add_remove",
    ),
    AccountantSpec(
        "prv-accountant",
        prv_accountant_adapter,
        ("prv_accountant",),
        "prv_accountant PRVAccountant (eps upper): deterministic, poisson",
        adjacency="add_remove",
    ),
    AccountantSpec(
        "poisson-for-shuffle",
        poisson_for_shuffle,
        ("dp_accounting",),
        "Poisson PLD with q = b/n over T*E steps applied to every sampler",
        adjacency="add_remove",
    ),
    AccountantSpec(
        "pld-accounting-random-allocation",
        pld_accounting_random_allocation,
        ("PLD_accounting",),
        "pld-accounting random allocation (eps upper): balls_and_bins; shuffles' isolated pair",
        adjacency="add_remove",
    ),
)

_REGISTRY: dict[str, AccountantSpec] = {spec.name: spec for spec in BUILTIN_ACCOUNTANTS}

_PIP_NAMES = {
    "opacus": "opacus", "prv_accountant": "prv-accountant", "dp_accounting": "dp-accounting",
    "PLD_accounting": "pld-accounting",
}


def register_accountant(
    name: str,
    function: Accountant,
    *,
    requires: tuple[str, ...] = (),
    description: str = "",
    replace: bool = False,
    adjacency: str | None = None,
) -> AccountantSpec:
    """Register ``function(mechanism, delta) -> float | Unsupported`` under ``name``.

    ``requires`` lists importable module names checked when the accountant is looked up.
    Built-in names cannot be replaced; a user name only with ``replace=True``.
    """
    if not isinstance(name, str) or not name or ":" in name:
        raise ValueError(f"accountant name={name!r} must be a non-empty string without ':'")
    if not callable(function):
        raise ValueError(f"accountant {name!r}: function={function!r} is not callable")
    if any(s.name == name for s in BUILTIN_ACCOUNTANTS):
        raise ValueError(
            f"accountant name={name!r} is built in and cannot be replaced; choose another name"
        )
    if name in _REGISTRY and not replace:
        raise ValueError(f"accountant name={name!r} is already registered; pass replace=True")
    if adjacency is not None:
        check_choice("adjacency", adjacency, ("zero_out", "add_remove", "replace_one"))
    spec = AccountantSpec(name, function, tuple(requires), description,
                          adjacency or getattr(function, "adjacency", None))
    _REGISTRY[name] = spec
    return spec


def unregister_accountant(name: str) -> None:
    """Remove a user-registered accountant (built-ins stay)."""
    if any(s.name == name for s in BUILTIN_ACCOUNTANTS):
        raise ValueError(f"accountant name={name!r} is built in and cannot be removed")
    check_choice(
        "accountant", name, [n for n in _REGISTRY if n not in {s.name for s in BUILTIN_ACCOUNTANTS}]
    )
    del _REGISTRY[name]


def available_accountants() -> tuple[str, ...]:
    """Names of the registered accountants (built-ins first)."""
    return tuple(_REGISTRY)


def _check_requirements(spec: AccountantSpec) -> None:
    for module in spec.requires:
        try:
            importlib.import_module(module)
        except ImportError as error:
            package = _PIP_NAMES.get(module, module)
            raise MissingAccountantDependency(
                f"accountant {spec.name!r} needs the optional package {package!r}, which is not "
                f"installed ({error}); install the accountants extra: {ACCOUNTANTS_EXTRA}"
            ) from error


def _import_path(path: str) -> AccountantSpec:
    function = load_callable("accountant", path)
    return AccountantSpec(path, function, adjacency=getattr(function, "adjacency", None))


def get_accountant(accountant: str | Accountant | AccountantSpec) -> AccountantSpec:
    """The accountant named ``accountant`` (registered name or ``"package.module:function"``).

    A callable is wrapped as is (named after its ``__name__``). Raises ``ValueError`` for an
    unknown name (with the closest registered one) and :class:`MissingAccountantDependency`
    when an optional package is missing. How its claims are checked against the theory's
    bracket: docs/design.md §11.

    Args:
        accountant: a registered name (the built-ins of the module docstring, or one added
            with :func:`register_accountant`), an import path ``"package.module:function"``,
            any callable ``(mechanism, delta) -> eps | Unsupported``, or an
            :class:`AccountantSpec` (returned after its requirements are checked).

    Returns:
        :class:`AccountantSpec`: the name, the callable, the packages it needs and a
        description; calling it as ``spec(mechanism, delta)`` checks the answer (eps >= 0, or
        :class:`Unsupported` with its reason).

    Raises:
        ValueError: an unknown name (the message names the closest registered one), an import
            path that cannot be imported, has no such attribute or is not callable, or an
            argument of another type.
        MissingAccountantDependency: the adapter needs an optional package (opacus,
            prv-accountant) that is not installed; an ``ImportError`` whose message gives
            the install command of the ``accountants`` extra.
    """
    if isinstance(accountant, AccountantSpec):
        spec = accountant
    elif isinstance(accountant, str):
        if accountant in _REGISTRY:
            spec = _REGISTRY[accountant]
        elif ":" in accountant:
            spec = _import_path(accountant)
        else:
            check_choice("accountant", accountant, _REGISTRY)  # raises, naming the closest
            raise AssertionError("unreachable")
    elif callable(accountant):
        name = getattr(accountant, "__name__", None) or type(accountant).__name__
        spec = AccountantSpec(str(name), accountant,
                              adjacency=getattr(accountant, "adjacency", None))
    else:
        raise ValueError(
            f"accountant={accountant!r} must be a registered name, 'package.module:function' or a "
            "callable"
        )
    _check_requirements(spec)
    return spec


def claim_epsilon(
    accountant: Accountant, mechanism: Mechanism, delta: float
) -> float | Unsupported:
    """Call ``accountant(mechanism, delta)`` and check its answer (eps >= 0, or Unsupported)."""
    if not isinstance(mechanism, Mechanism):
        raise ValueError(f"mechanism={mechanism!r} must be an audit.core.mechanism.Mechanism")
    delta = check_probability("delta", delta)
    answer = accountant(mechanism, delta)
    if isinstance(answer, Unsupported):
        return answer
    if isinstance(answer, bool) or not isinstance(answer, numbers.Real):
        raise ValueError(
            f"accountant {getattr(accountant, '__name__', accountant)!r} returned {answer!r}; "
            "an accountant must return a float eps >= 0 or "
            "audit.accounting.adapters.Unsupported(reason)"
        )
    eps = float(answer)
    if math.isnan(eps) or eps < 0:
        raise ValueError(
            f"accountant {getattr(accountant, '__name__', accountant)!r} returned eps={eps!r}; "
            "eps must be >= 0 (math.inf for no guarantee)"
        )
    return eps


def claimed_epsilon(
    accountant: str | Accountant | AccountantSpec,
    *,
    sampler: str,
    sigma: float,
    steps_per_epoch: int,
    delta: float,
    epochs: int = 1,
    n: int | None = None,
    batch_size: int | None = None,
    max_batch_size: int | None = None,
    threat_model: str = "adversarial",
) -> float | Unsupported:
    """The keyword face: ``accountant``'s claimed eps at ``delta`` for this training.

    Example: ``claimed_epsilon("opacus-gdp", sampler="poisson", sigma=1.0,
    steps_per_epoch=100, epochs=10, delta=1e-5)`` is about 1.618.
    """
    mechanism = validate(Mechanism(
        sampler=sampler, sigma=sigma, steps_per_epoch=steps_per_epoch, epochs=epochs,
        threat_model=threat_model, n=n, batch_size=batch_size, max_batch_size=max_batch_size,
    ))
    return get_accountant(accountant)(mechanism, delta)
