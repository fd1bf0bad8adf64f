"""The privacy claim of a deployed training, read from the user's own accountant
(docs/design.md §14.2).

Two sources:

- an Opacus ``PrivacyEngine`` (any of its accountants: ``prv``, its default, ``rdp``, ``gdp``):
  its epsilon is what ``privacy_engine.get_epsilon(delta)`` computes (the same computation,
  cached by history: :func:`audit.accounting.adapters.opacus_epsilon`) from the history
  [(sigma, q, steps)] its accountant recorded at each optimizer step; before training (an
  empty history) the same computation on the planned history [(sigma, q, T E)]
  (:func:`audit.accounting.adapters.opacus_epsilon`, what ``get_epsilon`` computes). Opacus assumes
  Poisson sampling at q = 1 / len(loader) whatever the loader is (``make_private`` sets
  ``sample_rate = 1 / len(data_loader)``), divides the noisy sum by
  ``expected_batch_size = int(n q)``, and composes steps at one noise multiplier;
- a dp_accounting ``PrivacyAccountant`` (``RdpAccountant``, ``PLDAccountant``) on which the
  user composed their events: ``accountant.get_epsilon(delta)``, and the composed event
  (``accountant.ledger``) is the assumption it carries (its Poisson sampling probability
  read from any ``PoissonSampledDpEvent`` in it).

A :class:`DeployedClaim` says which accountant and which assumptions the epsilon carries;
:meth:`DeployedClaim.power` is the claim as the one-run verdict reads it, the (eps, delta)-DP
trade-off curve (:func:`audit.stats.one_run.eps_delta_power`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from audit.core.validation import check_int, check_real

OPACUS_SAMPLER = "poisson"
"""The sampler every Opacus accountant composes (Poisson subsampled Gaussian steps)."""

__all__ = [
    "AccountantAssumptions",
    "Composition",
    "DeployedClaim",
    "claim_from",
    "composition",
    "dp_accounting_claim",
    "opacus_assumptions",
    "opacus_claim",
]


@dataclass(frozen=True)
class AccountantAssumptions:
    """What the accountant assumed about the loader (Opacus's ``make_private`` or given).

    Attributes:
        sampler: the sampler the accountant composes (Opacus: ``poisson``, for any loader).
        sample_rate: q the accountant composes (Opacus: 1 / len(loader)).
        poisson_sampling: whether ``make_private(poisson_sampling=True)`` was used (Opacus
            accounts Poisson sampling either way).
        expected_batch_size: the b the noisy sum is divided by
            (``DPOptimizer.expected_batch_size``).
        noise_multiplier: sigma.
        epochs, steps_per_epoch: the training's E and T (steps = T E).
        delta: the delta of the claim; epsilon: the accountant's epsilon at delta (None: not given).
        accountant: its name (``opacus-prv``, ``opacus-rdp``, ...).
    """

    sampler: str = OPACUS_SAMPLER
    sample_rate: float | None = None
    poisson_sampling: bool | None = None
    expected_batch_size: float | None = None
    noise_multiplier: float | None = None
    epochs: int | None = None
    steps_per_epoch: int | None = None
    delta: float | None = None
    epsilon: float | None = None
    accountant: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class DeployedClaim:
    """An epsilon at delta and where it comes from.

    Attributes:
        epsilon, delta: the claim (eps, delta)-DP.
        accountant: e.g. ``opacus-prv``, ``dp_accounting.rdp.RdpAccountant``.
        assumptions: the assumptions the number carries, in words (sampler, q, sigma, steps).
        sample_rate, noise_multiplier, steps: what the accountant composed, where known.
    """

    epsilon: float
    delta: float
    accountant: str
    assumptions: tuple[str, ...]
    sample_rate: float | None = None
    noise_multiplier: float | None = None
    steps: int | None = None

    def power(self) -> Any:
        """The claim for :func:`audit.stats.one_run.one_run_verdict`: the (eps, delta)-DP curve."""
        from audit.stats.one_run import eps_delta_power

        return eps_delta_power(self.epsilon, self.delta)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _opacus_sample_rate(loader: Any) -> float | None:
    if loader is None:
        return None
    rate = getattr(loader, "sample_rate", None)
    if rate is not None:
        return float(rate)
    return 1.0 / len(loader)


def opacus_assumptions(
    *, privacy_engine: Any = None, optimizer: Any = None, loader: Any = None,
    epochs: int | None = None, delta: float | None = None,
) -> AccountantAssumptions:
    """What Opacus assumes about the training (``make_private``'s outputs; any may be None).

    ``sample_rate``: the engine's history if it has steps, else the loader's (``DPDataLoader``
    keeps its own; any other loader 1 / len(loader), as ``make_private`` computes it).
    ``poisson_sampling``: whether the loader is Opacus's Poisson ``DPDataLoader``.
    ``epsilon``: ``get_epsilon(delta)`` after training; before it, the planned epsilon for
    ``epochs`` epochs of len(loader) steps.
    """
    sigma = getattr(optimizer, "noise_multiplier", None)
    divisor = getattr(optimizer, "expected_batch_size", None)
    history = list(getattr(getattr(privacy_engine, "accountant", None), "history", []) or [])
    rate = float(history[-1][1]) if history else _opacus_sample_rate(loader)
    if sigma is None and history:
        sigma = float(history[-1][0])
    poisson = None if loader is None else type(loader).__name__ == "DPDataLoader"
    steps_per_epoch = None if loader is None else len(loader)
    name = None
    epsilon = None
    if privacy_engine is not None:
        name = f"opacus-{privacy_engine.accountant.mechanism()}"
        # before training: planned for `epochs`
        if delta is not None and (history or epochs is not None):
            epsilon = opacus_claim(
                privacy_engine, delta, optimizer=optimizer, loader=loader, epochs=epochs
            ).epsilon
    return AccountantAssumptions(
        sample_rate=rate, poisson_sampling=poisson,
        expected_batch_size=None if divisor is None else float(divisor),
        noise_multiplier=None if sigma is None else float(sigma), epochs=epochs,
        steps_per_epoch=steps_per_epoch, delta=delta, epsilon=epsilon, accountant=name,
    )


def opacus_claim(
    privacy_engine: Any,
    delta: float,
    *,
    optimizer: Any = None,
    loader: Any = None,
    epochs: int | None = None,
) -> DeployedClaim:
    """The claim of an Opacus ``PrivacyEngine`` at ``delta`` (module docstring)."""
    from audit.accounting.adapters import opacus_epsilon

    delta = check_real(
        "delta", delta, minimum=0.0, maximum=1.0, strict_minimum=True, strict_maximum=True
    )
    kind = privacy_engine.accountant.mechanism()
    history = [(float(s), float(q), int(k)) for s, q, k in privacy_engine.accountant.history]
    planned = not history
    if planned:
        sigma = getattr(optimizer, "noise_multiplier", None)
        if sigma is None or loader is None or epochs is None:
            raise ValueError(
                "privacy_engine: its accountant has no history yet (no training step); give "
                "optimizer, "
                "loader and epochs (as make_private returned them) to compute the planned epsilon"
            )
        epochs = check_int("epochs", epochs, minimum=1)
        rate = _opacus_sample_rate(loader)
        assert rate is not None  # a loader was given (checked above)
        history = [(float(sigma), rate, len(loader) * epochs)]
    # what get_epsilon(delta) computes on this history, cached (every training of a cell has the
    # same)
    try:
        epsilon = opacus_epsilon(kind, tuple(history), delta)
    except (ValueError, OverflowError, FloatingPointError, MemoryError):
        # the accountant cannot represent it (e.g. sigma ~ 0): no finite claim
        epsilon = float("inf")
    sigmas = {s for s, _, _ in history}
    rates = {q for _, q, _ in history}
    steps = sum(k for _, _, k in history)
    assumptions = (
        "Poisson sampling: each example independently in each step with probability q "
        f"= {', '.join(f'{q:.6g}' for q in sorted(rates))} (Opacus assumes it for any loader)",
        f"noise multiplier sigma = {', '.join(f'{s:g}' for s in sorted(sigmas))}, {steps} steps"
        + (" (planned: len(loader) x epochs)" if planned else " (recorded)"),
        "per-example gradients clipped to max_grad_norm, noise N(0, sigma^2 C^2) added to the sum "
        "once per step",
        "add/remove adjacency (Opacus's accountants)",
    )
    return DeployedClaim(
        epsilon=float(epsilon), delta=delta, accountant=f"opacus-{kind}", assumptions=assumptions,
        sample_rate=next(iter(rates)) if len(rates) == 1 else None,
        noise_multiplier=next(iter(sigmas)) if len(sigmas) == 1 else None, steps=steps,
    )


@dataclass(frozen=True)
class Composition:
    """What a dp_accounting event composes: the Gaussian steps (counted with their
    multiplicity), their noise multipliers and the Poisson sampling probabilities."""

    steps: int
    sigmas: tuple[float, ...]
    rates: tuple[float, ...]


def composition(event: Any) -> Composition:
    """One walk of a dp_accounting event: ``SelfComposedDpEvent(count)`` x
    ``ComposedDpEvent(events)`` x ``PoissonSampledDpEvent(q, GaussianDpEvent(sigma))``.

    Steps and sigmas are counted through these four kinds only (a step under another kind of
    event is not counted); the sampling probabilities of every ``PoissonSampledDpEvent`` are
    found inside any event (through its ``event`` / ``events``)."""
    steps, sigmas, rates = _walk(event, 1, counted=True)
    return Composition(steps, tuple(sorted(set(sigmas))), tuple(sorted(set(rates))))


def _walk(event: Any, times: int, *, counted: bool) -> tuple[int, list[float], list[float]]:
    import dp_accounting

    if isinstance(event, dp_accounting.GaussianDpEvent):
        return (times, [float(event.noise_multiplier)], []) if counted else (0, [], [])
    if isinstance(event, dp_accounting.PoissonSampledDpEvent):
        steps, sigmas, _ = _walk(event.event, times, counted=counted)
        return steps, sigmas, [float(event.sampling_probability)]
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        return _walk(event.event, times * int(event.count), counted=counted)
    known = isinstance(event, dp_accounting.ComposedDpEvent)
    steps, sigmas, rates = 0, list[float](), list[float]()
    for name in ("event", "events"):
        inner = getattr(event, name, None)
        for e in inner if isinstance(inner, (list, tuple)) else [inner] if inner else []:
            c, s, r = _walk(e, times, counted=counted and known)
            steps, sigmas, rates = steps + c, sigmas + s, rates + r
    return steps, sigmas, rates


def dp_accounting_claim(accountant: Any, delta: float) -> DeployedClaim:
    """The claim of a dp_accounting ``PrivacyAccountant`` on which the user composed events."""
    delta = check_real(
        "delta", delta, minimum=0.0, maximum=1.0, strict_minimum=True, strict_maximum=True
    )
    epsilon = float(accountant.get_epsilon(delta))
    ledger = accountant.ledger
    rates = composition(ledger).rates
    kind = f"{type(accountant).__module__}.{type(accountant).__name__}"
    assumptions = [f"the composed event: {ledger}"]
    if rates:
        assumptions.append(
            "Poisson sampling with probability q = " + ", ".join(f"{q:.6g}" for q in rates)
        )
    else:
        assumptions.append("no Poisson subsampling in the composed event")
    return DeployedClaim(
        epsilon=epsilon,
        delta=delta,
        accountant=kind,
        assumptions=tuple(assumptions),
        sample_rate=rates[0] if len(rates) == 1 else None,
    )


def claim_from(source: Any, delta: float, **context: Any) -> DeployedClaim:
    """The claim of ``source``: an Opacus ``PrivacyEngine``, a dp_accounting accountant, or a
    :class:`DeployedClaim` / a float epsilon (an explicit claim).

    ``context``: ``optimizer``, ``loader``, ``epochs`` for an Opacus engine before training.

    Raises:
        ValueError: a source that is none of these (one line naming the allowed kinds).
    """
    if isinstance(source, DeployedClaim):
        return source
    if isinstance(source, (int, float)) and not isinstance(source, bool):
        eps = check_real("epsilon", source, minimum=0.0)
        return DeployedClaim(
            float(eps), float(delta), "explicit", ("an explicit (epsilon, delta) claim",)
        )
    if hasattr(source, "accountant") and hasattr(source, "make_private"):
        return opacus_claim(source, delta, **context)
    if hasattr(source, "ledger") and hasattr(source, "get_epsilon"):
        return dp_accounting_claim(source, delta)
    raise ValueError(
        f"claim: a {type(source).__name__} is not an accountant; allowed: an opacus "
        "PrivacyEngine, a "
        "dp_accounting PrivacyAccountant (RdpAccountant, PLDAccountant), or an explicit epsilon"
    )
