"""Dispatch for the two shuffles (persistent, dynamic) under both threat models."""

from __future__ import annotations

from audit.mechanism import Mechanism
from audit.theory.bounds import Bounds
from audit.theory.deterministic import deterministic_curve

__all__ = ["shuffle_bounds"]


def shuffle_bounds(m: Mechanism) -> Bounds:
    """Upper: the deterministic curve (shuffling is never less private). Lower: see modules."""
    upper = deterministic_curve(m.sigma, m.epochs, sampler=m.sampler,
                                threat_model=m.threat_model, kind="upper")
    return Bounds(m, upper, None)
