"""Moved to :mod:`audit.stats.diagnostics` (pure statistics on arrays, below :mod:`audit.run`,
so that a multi-run audit's summary can run them; docs/design/multi-run-diagnostics.md). This
module re-exports its names, the private helpers included, so that ``audit.deployed.diagnostics``
keeps working; any other name is looked up there on first use."""

from __future__ import annotations

from typing import Any

import audit.stats.diagnostics as _moved
from audit.stats.diagnostics import (
    DIAGNOSTICS,
    MAX_LAGS,
    Observed,
    _batch_sizes,
    _canary_signal,
    _fresh_coordinates,
    _fresh_steps,
    _noise,
    _noise_law,
    _noise_multiplier,
    _noise_scale,
    _sampling_rate,
    batch_alignment,
    diagnose,
    in_batch_mask,
    steps_composed,
)

__all__ = ["DIAGNOSTICS", "Observed", "diagnose", "in_batch_mask"]

_REEXPORTED = (
    MAX_LAGS, _batch_sizes, _canary_signal, _fresh_coordinates, _fresh_steps, _noise,
    _noise_law, _noise_multiplier, _noise_scale, _sampling_rate, batch_alignment, steps_composed,
)  # the names outside __all__ that callers import from here


def __getattr__(name: str) -> Any:
    """A name added to :mod:`audit.stats.diagnostics` after the move."""
    return getattr(_moved, name)
