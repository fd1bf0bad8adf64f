"""Re-exports :mod:`audit.canaries` (the canaries moved there: the engine and the trainings
insert them, below the attacks; the attacks themselves do not use them)."""

from audit import canaries as _canaries
from audit.canaries import *  # noqa: F403 - the facade: every public name of audit.canaries

__all__ = list(_canaries.__all__)
