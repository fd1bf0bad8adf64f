"""The two shuffles (persistent, dynamic) under both threat models: which bound applies.

- upper: the deterministic curve (shuffling is never less private, Chua et al. 2024), and
  for the isolated pair also the Berry-Esseen guarantee where it applies; the pointwise
  maximum of two guarantees is a guarantee;
- lower: the max test (:mod:`audit.theory.shuffle_adversarial`), on MoG_T(2) vs MoG_T(1)
  (adversarial) or MoG_T(1) vs N(0, I) (isolated);
- exact (isolated only, small M): the lattice/FFT curve of :mod:`audit.theory.shuffle_isolated`;
- approximation (isolated only): the Edgeworth curve of :mod:`audit.theory.edgeworth`.
"""

from __future__ import annotations

from audit.mechanism import Mechanism
from audit.theory.bounds import Bounds
from audit.theory.curve import TradeOffCurve
from audit.theory.deterministic import deterministic_curve
from audit.theory.shuffle_adversarial import shuffle_max_test_lower
from audit.theory.shuffle_isolated import (
    berry_esseen_curve,
    isolated_exact_curve,
)

__all__ = ["shuffle_bounds"]


def shuffle_bounds(m: Mechanism) -> Bounds:
    """Bounds for ``persistent_shuffle`` / ``dynamic_shuffle`` (see the module docstring)."""
    upper = deterministic_curve(
        m.sigma, m.epochs, sampler=m.sampler, threat_model=m.threat_model, kind="upper"
    )
    lower = shuffle_max_test_lower(m.sampler, m.sigma, m.steps_per_epoch, m.epochs, m.threat_model)
    notes: list[str] = []
    exact = None
    if m.threat_model == "isolated":
        be = berry_esseen_curve(m.sigma, m.steps_per_epoch, m.epochs, sampler=m.sampler)
        if be is None:
            notes.append(
                "Berry-Esseen bound does not apply (needs sigma_eff >= sqrt(3 / ln M)); "
                "upper is the deterministic curve alone"
            )
        else:
            upper = upper.maximum(
                be, method=f"max of [{upper.method}] and [{be.method}]",
                short="deterministic GDP + Berry-Esseen",
            )
        try:
            exact = isolated_exact_curve(m.sigma, m.steps_per_epoch, m.epochs, sampler=m.sampler)
        except ValueError as err:
            notes.append(f"no exact curve: {err}")
    approximation = _edgeworth(m, notes) if m.threat_model == "isolated" else None
    return Bounds(m, upper, lower, exact, tuple(notes), approximation)


def _edgeworth(m: Mechanism, notes: list[str]) -> TradeOffCurve | None:
    """The Edgeworth approximation of an isolated shuffle (kind ``approximation``), or None."""
    from audit.theory.edgeworth import edgeworth_curve

    try:
        return edgeworth_curve(m.sigma, m.steps_per_epoch, m.epochs, sampler=m.sampler)
    except ValueError as err:
        notes.append(f"no Edgeworth approximation: {err}")
        return None
