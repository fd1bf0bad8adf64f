"""The result type of the theory layer: :class:`Bounds`, one cell's upper and lower curves.

Its own module so that the per-sampler theory modules (e.g. :mod:`audit.theory.shuffle`) can
build it without importing the dispatcher :mod:`audit.theory.bounds`, which imports them.
"""

from __future__ import annotations

from dataclasses import dataclass

from audit.core.mechanism import Mechanism
from audit.theory.curve import TradeOffCurve

__all__ = ["Bounds"]


@dataclass(frozen=True)
class Bounds:
    """The theory side of one cell: ``upper`` (guarantee) and ``lower`` (achieved) curves.

    Either is None where no bound is known; where the curve is known exactly both are the
    same object. ``exact`` holds an exact curve when one is available beside the bounds;
    ``approximation`` an asymptotic approximation (kind ``approximation``: not a bound, not
    among :meth:`curves`, never a claim).
    """

    mechanism: Mechanism
    upper: TradeOffCurve | None
    lower: TradeOffCurve | None
    exact: TradeOffCurve | None = None
    notes: tuple[str, ...] = ()
    approximation: TradeOffCurve | None = None

    def curves(self) -> list[TradeOffCurve]:
        """The distinct curves (upper, lower, exact), in that order."""
        out: list[TradeOffCurve] = []
        for c in (self.upper, self.lower, self.exact):
            if c is not None and all(c is not o for o in out):
                out.append(c)
        return out
