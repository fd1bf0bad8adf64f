"""The privacy claim audited in a cell, and the theory of its mechanism.

A claim is a trade-off curve and its eps at the spec's delta (see :mod:`audit.report.multi_run` for
the claims a spec can make: ``poisson``, ``sampler``, ``implementation`` or an explicit eps). Its
own module, below both the runner (which checks before any shard runs that every cell's claim can be
computed) and the summary that compares the scores with it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from audit.core.mechanism import Mechanism
from audit.plugins.contract import claimed_epsilon
from audit.run.spec import AuditSpec, TrainingKey
from audit.stats.binary import curve_epsilon
from audit.theory import Bounds, bounds_for
from audit.theory.curve import TradeOffCurve

__all__ = ["Claim", "cell_bounds", "claim_for", "curve_epsilon", "implementation_epsilon"]




@dataclass(frozen=True)
class Claim:
    """The privacy claim audited in one cell: a trade-off curve and its eps at delta."""

    name: str
    description: str
    curve: TradeOffCurve
    epsilon: float


def claim_for(spec: AuditSpec, mechanism: Mechanism, theory: dict[Mechanism, Bounds]) -> Claim:
    """The claim of ``spec`` for the cell whose mechanism is ``mechanism``.

    ``theory`` caches :func:`audit.theory.bounds_for` by mechanism (the Poisson claim of
    every shuffled cell of one threat model is the same curve).
    """
    if spec.claim.claim == "poisson":
        poisson = mechanism.with_(sampler="poisson", max_batch_size=None)
        curve = cell_bounds(poisson, theory).upper
        q = poisson.sampling_probability
        description = (
            f"a Poisson accountant's (q = {q:.4g}, σ = {mechanism.sigma:g}, "
            f"{mechanism.total_steps} steps)"
        )
    elif spec.claim.claim == "sampler":
        curve = cell_bounds(mechanism, theory).upper
        if curve is None:
            raise ValueError(
                f"claim='sampler': no upper bound is known for sampler {mechanism.sampler!r} "
                f"({mechanism.threat_model}); audit claim='poisson' or an explicit epsilon instead"
            )
        description = f"the {mechanism.sampler} upper bound's"
    elif spec.claim.claim == "implementation":
        eps = implementation_epsilon(spec, mechanism)
        curve = TradeOffCurve.from_privacy_profile(
            [eps],
            [spec.claim.delta],
            sampler=mechanism.sampler,
            threat_model=mechanism.threat_model,
            kind="upper",
            method=f"{spec.experiment.implementation}'s own accountant: ({eps:.4g}, "
                   f"{spec.claim.delta:g})-DP",
        )
        description = f"{spec.experiment.implementation}'s own accountant's"
        return Claim("implementation", description, curve, eps)
    else:
        eps = float(spec.claim.claim)
        curve = TradeOffCurve.from_privacy_profile(
            [eps],
            [spec.claim.delta],
            sampler=mechanism.sampler,
            threat_model=mechanism.threat_model,
            kind="upper",
            method=f"claimed ({eps:g}, {spec.claim.delta:g})-DP",
        )
        description = f"an explicit ({eps:g}, {spec.claim.delta:g})-DP"
        return Claim(f"{eps:g}", description, curve, eps)
    assert curve is not None  # a Poisson accountant's upper curve, or checked above
    if curve.kind == "approximation":
        raise ValueError(
            f"claim={spec.claim.claim!r}: the curve is an approximation ({curve.method}), not a "
            "guarantee; an approximation is never a claim"
        )
    return Claim(str(spec.claim.claim), description, curve, curve_epsilon(curve, spec.claim.delta))


def implementation_epsilon(spec: AuditSpec, mechanism: Mechanism) -> float:
    """The epsilon at ``spec.claim.delta`` that the audited implementation's own accountant reports.

    Asked of the implementation without training (its ``claimed_epsilon(setup, delta)``
    attribute, :func:`audit.plugins.contract.claimed_epsilon`); a clear error if it has none.
    """
    key = TrainingKey(mechanism.sampler, mechanism.threat_model)
    implementation = spec.experiment.implementation
    # claim = "implementation" without an implementation is refused when the spec is read
    assert implementation is not None
    eps = claimed_epsilon(implementation, spec.training_config(key), spec.claim.delta)
    if eps is None or not np.isfinite(eps) or eps <= 0:
        raise ValueError(
            f"claim='implementation': implementation {spec.experiment.implementation!r} reports "
            "no claimed epsilon "
            f"for sampler {mechanism.sampler!r} (got {eps!r}); give its train function a "
            "claimed_epsilon(setup, delta) attribute, or audit claim='poisson' or an explicit "
            "epsilon"
        )
    return float(eps)


def cell_bounds(mechanism: Mechanism, theory: dict[Mechanism, Bounds]) -> Bounds:
    """:func:`audit.theory.bounds_for` of ``mechanism``, cached in ``theory``."""
    if mechanism not in theory:
        theory[mechanism] = bounds_for(mechanism)
    return theory[mechanism]
