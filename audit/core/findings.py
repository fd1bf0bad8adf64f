"""The findings of a deployed audit: typed records of what the canaries' observations refute
(docs/design.md §14.5).

A :class:`Finding` is one diagnostic's outcome: an exact observation or a test at a stated
level (``level``: the probability that a correct training fails it; 0 for an exact
observation). ``passed=False`` with ``refutes=True`` refutes the claimed mechanism at that
level (the audit's verdict is then ``violated``); a finding with ``passed=True`` may carry a
note (e.g. more noise than claimed: the claim is conservative, not refuted).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Finding"]


@dataclass(frozen=True)
class Finding:
    """One diagnostic's outcome.

    Attributes:
        name: a stable name (``noise_scale``, ``fresh_noise_steps``, ``steps_composed``, ...).
        passed: False when the observations refute what the claim assumes.
        level: the probability that a correct training fails it (0: an exact observation).
        message: one sentence a user can act on (what was observed, where, what to fix).
        steps: the optimizer steps concerned (0-based), empty when all or none.
        tensors: the parameter tensors concerned, empty when not known.
        refutes: whether a failure refutes the claimed mechanism (verdict ``violated``).
    """

    name: str
    passed: bool
    level: float
    message: str
    steps: tuple[int, ...] = ()
    tensors: tuple[str, ...] = ()
    refutes: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
