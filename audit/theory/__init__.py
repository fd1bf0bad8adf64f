"""Theoretical trade-off curves for every sampler and threat model (docs/design.md §6).

``privacy_bounds`` / ``bounds_for`` give a mechanism's ``upper`` (guarantee) and ``lower``
(achieved by a known pair) :class:`TradeOffCurve`; ``sigma_for`` calibrates the noise for a
target (eps, delta); ``berry_esseen_rounds`` plans the rounds the Berry-Esseen shuffle bound
needs.
"""

from __future__ import annotations

from audit.theory.bounds import Bounds, bounds_for, privacy_bounds
from audit.theory.curve import TradeOffCurve

__all__ = [
    "Bounds",
    "TradeOffCurve",
    "berry_esseen_rounds",
    "bounds_for",
    "privacy_bounds",
    "sigma_for",
]


def __getattr__(name: str):  # calibration imports the bounds; load it lazily
    if name in ("sigma_for", "berry_esseen_rounds"):
        from audit.theory import calibration

        return getattr(calibration, name)
    raise AttributeError(f"module 'audit.theory' has no attribute {name!r}")
