"""Passing a significance level on as ``confidence=``, bit for bit (the internal callers).

The spec, the command-line flags and the per-test building blocks (Clopper-Pearson, the planned
joint tests, docs/design.md §8.1) carry ``alpha = 1 - confidence``; the bound and verdict
functions take ``confidence=`` and turn it back into alpha with
:func:`audit.core.confidence.significance`, ``float(Decimal(1) - Decimal(repr(confidence)))``.
An internal caller holding alpha may pass ``confidence = 1 - alpha`` only when that round trip
gives back the same float: it does for every alpha of at most about 15 significant digits after
``1 -`` (0.05, 0.01, 0.025, 1e-6: any value a person types), not for a Bonferroni share such as
0.05 / 3 = 0.016666666666666666, whose 1 - alpha has more digits than a float near 1 holds.
:func:`levels` says which spelling keeps the caller's numbers exactly as they were.
"""

from __future__ import annotations

from decimal import Decimal

from audit.core.confidence import significance

__all__ = ["levels"]


def levels(alpha: float) -> tuple[float | None, float | None]:
    """``(confidence, None)`` with ``confidence = 1 - alpha`` (in decimal) when
    :func:`audit.core.confidence.significance` maps it back to exactly ``alpha``; else
    ``(None, alpha)``: the deprecated spelling, which a callee takes as it is. Pass the pair as
    ``confidence=..., alpha=...``: the callee computes with the same alpha either way.

    Raises:
        ValueError: ``alpha`` outside (0, 1), naming it.
    """
    alpha = float(alpha)
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1) (1 - confidence), got {alpha!r}")
    confidence = float(Decimal(1) - Decimal(repr(alpha)))
    if 0.0 < confidence < 1.0 and significance(confidence, None, where="levels") == alpha:
        return confidence, None  # (a confidence= never warns)
    return None, alpha
