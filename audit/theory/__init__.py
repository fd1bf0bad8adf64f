"""Theoretical trade-off curves for every sampler and threat model (docs/design.md §6).

``privacy_bounds`` / ``bounds_for`` give a mechanism's ``upper`` (guarantee) and ``lower``
(achieved by a known pair) :class:`TradeOffCurve`; ``sigma_for`` calibrates the noise for a
target (eps, delta); ``berry_esseen_rounds`` plans the rounds the Berry-Esseen shuffle bound
needs. Each sampler's theory is registered in :data:`audit.theory.registry.THEORIES` (the
built-ins' by :mod:`audit.theory.samplers`, here).
"""

from __future__ import annotations

from audit.theory.bounds import Bounds, bounds_for, privacy_bounds
from audit.theory.calibration import berry_esseen_rounds, sigma_for
from audit.theory.curve import TradeOffCurve
from audit.theory.samplers import register_builtin_theories

__all__ = [
    "Bounds",
    "TradeOffCurve",
    "berry_esseen_rounds",
    "bounds_for",
    "privacy_bounds",
    "sigma_for",
]

register_builtin_theories()
