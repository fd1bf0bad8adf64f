"""What an attacker observes from IN and OUT trainings, one container for every source.

The DP-SGD engine (real trainings), the mechanism simulator and user-supplied training
implementations all return :class:`Observations`, so every attack and every statistic
works on any of them. Conventions (docs/design.md §3.1): observations are normalised by the
clipping norm C, so one participation of the canary shifts its projection by 1.

- ``all_iterates``: ``y_in``/``y_out``, float arrays ``(trials, total_steps)``; y_t is the
  noisy summed gradient at step t projected on the canary direction u, divided by C,
  minus what the attacker knows (the known contribution of the other examples).
- ``last_iterate``: ``final_in``/``final_out``, ``(trials,)``, the last iterate's
  displacement along u in the same units: (b / (lr C)) <theta_0 - theta_T, u> plus the
  known co-batch part, which for plain SGD equals sum_t y_t (so higher = canary IN);
  optionally ``params_in``/``params_out`` ``(trials, n_params)``, the final parameters.
- ``black_box``: ``loss_in``/``loss_out`` ``(trials,)`` the canary's loss on the final
  model; optionally ``logits_in``/``logits_out`` ``(trials, classes)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from audit.core.mechanism import Mechanism
from audit.core.names import OBSERVATIONS

__all__ = ["Observations"]

_FIELDS: dict[str, tuple[str, str]] = {
    "all_iterates": ("y_in", "y_out"),
    "last_iterate": ("final_in", "final_out"),
    "black_box": ("loss_in", "loss_out"),
}
assert tuple(_FIELDS) == OBSERVATIONS


@dataclass
class Observations:
    """IN and OUT observations of one audit cell (any subset of the three kinds)."""

    mechanism: Mechanism
    y_in: np.ndarray | None = None
    y_out: np.ndarray | None = None
    final_in: np.ndarray | None = None
    final_out: np.ndarray | None = None
    loss_in: np.ndarray | None = None
    loss_out: np.ndarray | None = None
    params_in: np.ndarray | None = None
    params_out: np.ndarray | None = None
    logits_in: np.ndarray | None = None
    logits_out: np.ndarray | None = None
    metadata: dict[str, object] = field(default_factory=dict)

    @property
    def available(self) -> tuple[str, ...]:
        """The observation kinds present (both IN and OUT), in the order of docs/design.md §3.5."""
        return tuple(
            kind
            for kind, (a, b) in _FIELDS.items()
            if getattr(self, a) is not None and getattr(self, b) is not None
        )

    def pair(self, kind: str) -> tuple[np.ndarray, np.ndarray]:
        """The (IN, OUT) arrays of observation ``kind``; a clear error if absent."""
        if kind not in _FIELDS:
            raise ValueError(
                f"observation={kind!r} is not valid; allowed: {', '.join(OBSERVATIONS)}"
            )
        a, b = _FIELDS[kind]
        value_in, value_out = getattr(self, a), getattr(self, b)
        if value_in is None or value_out is None:
            have = ", ".join(self.available) or "none"
            raise ValueError(f"observation {kind!r} was not recorded (available: {have})")
        return value_in, value_out

    @property
    def trials_in(self) -> int:
        """Number of IN trials (of the first available kind)."""
        return len(self.pair(self.available[0])[0]) if self.available else 0

    @property
    def trials_out(self) -> int:
        """Number of OUT trials (of the first available kind)."""
        return len(self.pair(self.available[0])[1]) if self.available else 0
