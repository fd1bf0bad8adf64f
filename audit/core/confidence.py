"""One name for the confidence level, another for the FPR axis (issue 34 item 3).

Trade-off curves use ``alpha`` for the false-positive rate, as in Dong, Roth and Su (2022):
``f(alpha) = beta``. The statistics used ``alpha`` too, for 1 - confidence. Public signatures now
take ``confidence`` (the probability that a stated bound holds, default 0.95) and keep ``alpha=``
as a deprecated spelling of ``1 - confidence`` (a :class:`DeprecationWarning`; never removed
without a version bump in CHANGELOG.md). Internally the statistics keep working with
``alpha = 1 - confidence``, the number the Clopper-Pearson formulas take.
"""

from __future__ import annotations

import math
import warnings
from decimal import Decimal

__all__ = ["DEFAULT_CONFIDENCE", "ExactConfidence", "significance"]

#: The confidence of every bound unless a caller says otherwise (1 - alpha = 0.95).
DEFAULT_CONFIDENCE = 0.95


class ExactConfidence(float):
    """A confidence level ``1 - alpha`` that remembers its ``alpha`` exactly.

    ``1 - alpha`` as a float64 near 1 keeps about 16 digits, so a Bonferroni share such as
    ``alpha = 0.05 / 3 = 0.016666666666666666`` does not survive ``confidence = 1 - alpha``
    and back. An internal caller that holds alpha passes ``confidence=ExactConfidence.of(alpha)``:
    it reads as the float ``1 - alpha`` (decimal difference) everywhere, and
    :func:`significance` returns the stored ``alpha`` itself, so the callee computes with the
    caller's alpha bit for bit and no deprecated ``alpha=`` (and no warning) is needed.
    """

    alpha: float

    def __new__(cls, value: float, alpha: float) -> ExactConfidence:
        level = super().__new__(cls, value)
        level.alpha = float(alpha)
        return level

    @classmethod
    def of(cls, alpha: float) -> ExactConfidence:
        """The confidence ``1 - alpha`` (``alpha`` in (0, 1), else a ValueError naming it)."""
        _check_open_unit("alpha", alpha)
        return cls(float(Decimal(1) - Decimal(repr(float(alpha)))), alpha)

    def __reduce__(self) -> tuple[object, tuple[float]]:  # pickled into joblib workers
        return (ExactConfidence.of, (self.alpha,))

    def __repr__(self) -> str:
        return repr(float(self))


def significance(confidence: float | None, alpha: float | None, *, where: str,
                 stacklevel: int = 3) -> float:
    """``1 - confidence`` from a call that passed ``confidence=``, the deprecated ``alpha=``, or
    neither.

    The difference is taken in decimal on the shortest repr of ``confidence`` (``0.95`` gives
    exactly ``0.05``, not float64's ``0.050000000000000044``), so ``confidence=0.95`` and the
    old ``alpha=0.05`` compute bit-identical bounds.

    Args:
        confidence: the probability that the stated bound holds, in (0, 1), or None.
        alpha: the deprecated spelling, ``1 - confidence``, or None.
        where: the function's name, for the messages.
        stacklevel: passed to :func:`warnings.warn` so the warning points at the user's line.

    Returns:
        alpha = 1 - confidence, the significance level the formulas take.

    Raises:
        ValueError: both given, or a value outside (0, 1), naming the argument.
    """
    if confidence is not None and alpha is not None:
        raise ValueError(
            f"{where}: pass confidence= or alpha= (the deprecated 1 - confidence), not both; "
            f"got confidence={confidence!r}, alpha={alpha!r}")
    if alpha is not None:
        _check_open_unit(f"{where}: alpha", alpha)
        warnings.warn(
            f"{where}(alpha=...) means 1 - confidence and is deprecated (alpha is the FPR axis "
            f"of trade-off curves); pass confidence={1.0 - float(alpha):.6g} instead",
            DeprecationWarning, stacklevel=stacklevel)
        return float(alpha)
    level = DEFAULT_CONFIDENCE if confidence is None else confidence
    _check_open_unit(f"{where}: confidence", level)
    if isinstance(level, ExactConfidence):
        return level.alpha
    return float(Decimal(1) - Decimal(repr(float(level))))


def _check_open_unit(name: str, value: object) -> None:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number in (0, 1), got {value!r}") from None
    if not (0.0 < number < 1.0) or math.isnan(number):
        raise ValueError(f"{name} must be in (0, 1) (e.g. confidence=0.95), got {value!r}")
