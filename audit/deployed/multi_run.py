"""Moved to :mod:`audit.run.multi_run_findings` (in :mod:`audit.run`, so that a run's summary
computes the findings and a refuting one sets the cell's verdict;
docs/design/multi-run-diagnostics.md). This module re-exports its names, the private helpers
included, so that ``audit.deployed.multi_run`` keeps working; any other name is looked up there
on first use."""

from __future__ import annotations

from typing import Any

import audit.run.multi_run_findings as _moved
from audit.run.multi_run_findings import (
    MULTI_RUN_FINDINGS,
    _across_trials,
    _divisor,
    _findings,
    _inclusion,
    _steps,
    multi_run_findings,
    observed_of,
    shard_findings,
    trial_findings,
)

__all__ = [
    "MULTI_RUN_FINDINGS",
    "multi_run_findings",
    "observed_of",
    "shard_findings",
    "trial_findings",
]

_REEXPORTED = (_across_trials, _divisor, _findings, _inclusion, _steps)
"""The private names callers import from here."""


def __getattr__(name: str) -> Any:
    """A name added to :mod:`audit.run.multi_run_findings` after the move."""
    return getattr(_moved, name)
