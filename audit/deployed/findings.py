"""Moved to :mod:`audit.core.findings` (below :mod:`audit.run`, so that a run's summary can
carry the findings of a multi-run audit; docs/design/multi-run-diagnostics.md). This module
re-exports its names so that ``audit.deployed.findings`` keeps working."""

from __future__ import annotations

from audit.core.findings import Finding

__all__ = ["Finding"]
