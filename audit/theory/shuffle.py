"""The two shuffles (persistent, dynamic) under both threat models: which bound applies.

- upper: the deterministic curve (shuffling is never less private, Chua et al. 2024), and
  for the isolated pair also the Berry-Esseen guarantee where it applies and the numerical
  random-allocation guarantee (:mod:`audit.theory.random_allocation_octave`: a pessimistic
  PLD of the one-epoch pair on the octave lattice at every sigma, and where the linear lattice
  of :mod:`audit.theory.random_allocation` fits, its guarantee too; composed over E epochs for
  dynamic shuffling, one epoch at sigma / sqrt(E) for persistent); the pointwise maximum of
  guarantees is a guarantee;
- lower: the max test (:mod:`audit.theory.shuffle_adversarial`), on MoG_T(2) vs MoG_T(1)
  (adversarial) or MoG_T(1) vs N(0, I) (isolated); for the isolated pair also the random-allocation
  lattice test where the linear lattice fits. Both are achieved by tests of the same pair, so the
  convex hull of their minimum is achieved (by randomising between them);
- exact (isolated only, small M): the lattice/FFT curve of :mod:`audit.theory.shuffle_isolated`;
- approximation (isolated only): the Edgeworth curve of :mod:`audit.theory.edgeworth`.
"""

from __future__ import annotations

import numpy as np

from audit.core.mechanism import Mechanism
from audit.theory.curve import TradeOffCurve
from audit.theory.deterministic import deterministic_curve
from audit.theory.edgeworth import edgeworth_curve
from audit.theory.random_allocation_octave import random_allocation_bounds
from audit.theory.shuffle_adversarial import shuffle_max_test_lower
from audit.theory.shuffle_isolated import (
    berry_esseen_curve,
    isolated_exact_curve,
)
from audit.theory.types import Bounds

__all__ = ["RA_MAX_CELLS", "shuffle_bounds"]

RA_MAX_CELLS = 2**20
"""FFT window of the random-allocation lattice used here (about 1 s; for finer curves call
:func:`audit.theory.random_allocation.random_allocation_curves` directly)."""


def _better_lower(first: TradeOffCurve, second: TradeOffCurve) -> TradeOffCurve:
    """conv(min(f1, f2)) of two symmetric curves achieved by tests of the same pair: achieved.

    Its fixed point is at most either curve's, so its head is the hull of both heads' vertices
    (all achieved points), kept in (alpha, power) where they are accurate.
    """
    return TradeOffCurve(
        np.concatenate((first.head_alphas, second.head_alphas)),
        powers=np.concatenate((first.head_powers, second.head_powers)),
        sampler=first.sampler, threat_model=first.threat_model, kind="lower", symmetric=True,
        method=f"convex hull of the minimum of [{first.method}] and [{second.method}]",
        short=f"best of {first.short} and {second.short}",
    )


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
                "Berry-Esseen bound does not apply (needs sigma_eff >= sqrt(3 / ln M))"
            )
        else:
            upper = upper.maximum(
                be, method=f"max of [{upper.method}] and [{be.method}]",
                short="deterministic GDP + Berry-Esseen",
            )
        ra = random_allocation_bounds(
            m.sigma, m.steps_per_epoch, m.epochs, sampler=m.sampler, max_cells=RA_MAX_CELLS
        )
        notes.extend(ra.notes)
        upper = upper.maximum(
            ra.upper, method=f"max of [{upper.method}] and [{ra.upper.method}]",
            short=f"{upper.short} + random allocation",
        )
        if ra.lower is not None:
            lower = _better_lower(lower, ra.lower)
        try:
            exact = isolated_exact_curve(m.sigma, m.steps_per_epoch, m.epochs, sampler=m.sampler)
        except ValueError as err:
            notes.append(f"no exact curve: {err}")
    approximation = _edgeworth(m, notes) if m.threat_model == "isolated" else None
    return Bounds(m, upper, lower, exact, tuple(notes), approximation)


def _edgeworth(m: Mechanism, notes: list[str]) -> TradeOffCurve | None:
    """The Edgeworth approximation of an isolated shuffle (kind ``approximation``), or None."""
    try:
        return edgeworth_curve(m.sigma, m.steps_per_epoch, m.epochs, sampler=m.sampler)
    except ValueError as err:
        notes.append(f"no Edgeworth approximation: {err}")
        return None
