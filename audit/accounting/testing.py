"""Helpers for users' own test suites.

``assert_accountant_sound`` turns the accountant checker into one pytest assertion::

    from audit.accounting.testing import assert_accountant_sound

    def my_accountant(mechanism, delta):  # -> eps, or audit.accounting.adapters.Unsupported(reason)
        ...

    def test_my_accountant_is_sound():
        assert_accountant_sound(my_accountant)                  # the default grid
        assert_accountant_sound(my_accountant, grid="grid.toml")

It fails when a claimed eps(delta) is below a proven lower bound (beyond the numerical
tolerance stated in :mod:`audit.accounting.check`), listing the offending cells in a table, and
when an answer is ``invalid`` (nan, negative, an exception, a second answer that differs).
"""

from __future__ import annotations

from audit.accounting.adapters import Accountant, AccountantSpec
from audit.accounting.check import (
    CheckReport,
    GridSpec,
    ReferenceFunction,
    check_accountant,
    format_table,
)

__all__ = ["AccountantUnsoundError", "assert_accountant_sound"]


class AccountantUnsoundError(AssertionError):
    """An accountant claimed less than a proven lower bound on some cells (``report`` has them)."""

    def __init__(self, message: str, report: CheckReport) -> None:
        super().__init__(message)
        self.report = report


def assert_accountant_sound(
    accountant: str | Accountant | AccountantSpec,
    grid: GridSpec = "default",
    *,
    require_supported: bool = True,
    reference: ReferenceFunction | None = None,
) -> CheckReport:
    """Raise :class:`AccountantUnsoundError` (an ``AssertionError``) if any cell is ``unsound``
    or ``invalid``.

    Args:
        accountant: a callable ``(mechanism, delta) -> float | Unsupported``, a registered
            name, or ``"package.module:function"``.
        grid: ``"default"``, a ``.toml``/``.json`` grid file, or a sequence of entries
            (``GridCell``, ``(Mechanism, delta)`` pairs, or dicts of Mechanism fields and delta).
        require_supported: also fail when the accountant supports none of the cells (so that
            a test cannot pass vacuously).
        reference: the bracket per cell; default: the theory (:mod:`audit.theory`).

    Returns the :class:`audit.accounting.check.CheckReport` when the accountant is sound.
    ``loose`` cells do not fail the assertion (a loose claim is still a valid guarantee).
    """
    report = check_accountant(accountant, grid, reference=reference)
    if report.invalid:
        raise AccountantUnsoundError(
            f"accountant {report.accountant!r} gave invalid answers on {len(report.invalid)} of "
            f"{len(report.cells)} supported cells:\n"
            + "\n".join(f"  {c.sentence()}" for c in report.invalid),
            report,
        )
    if report.unsound:
        raise AccountantUnsoundError(
            f"accountant {report.accountant!r} claims eps below a proven lower bound on "
            f"{len(report.unsound)} of {len(report.cells)} supported cells:\n"
            + format_table(report.unsound)
            + f"\n(unsound: {report.tolerances()['unsound']})",
            report,
        )
    if require_supported and not report.cells:
        reasons = sorted({u.reason for u in report.unsupported})
        raise AccountantUnsoundError(
            f"accountant {report.accountant!r} supports none of the {len(report.unsupported)} grid "
            "cells, so nothing was checked; reasons: " + "; ".join(reasons),
            report,
        )
    return report
