"""Passing a significance level on as ``confidence=``, bit for bit (the internal callers).

The spec, the command-line flags and the per-test building blocks (Clopper-Pearson, the planned
joint tests, docs/design.md §8.1) carry ``alpha = 1 - confidence``; the bound and verdict
functions take ``confidence=`` and turn it back into alpha with
:func:`audit.core.confidence.significance`. A plain float ``1 - alpha`` does not always give the
same alpha back: a Bonferroni share such as 0.05 / 3 = 0.016666666666666666 has more digits after
``1 -`` than a float near 1 holds. :func:`exact_confidence` returns an
:class:`audit.core.confidence.ExactConfidence`, the float ``1 - alpha`` that carries ``alpha``
itself, so the callee computes with the caller's alpha exactly and no deprecated ``alpha=`` (nor
its warning, which would point a user at a call they did not write) is needed.
"""

from __future__ import annotations

from audit.core.confidence import ExactConfidence

__all__ = ["exact_confidence"]


def exact_confidence(alpha: float) -> ExactConfidence:
    """The confidence ``1 - alpha`` to pass as ``confidence=``, ``alpha`` kept bit for bit.

    Args:
        alpha: the significance level, in (0, 1).

    Returns:
        An :class:`audit.core.confidence.ExactConfidence` (a float).

    Raises:
        ValueError: ``alpha`` outside (0, 1), naming it.
    """
    return ExactConfidence.of(alpha)
