"""Re-exports :mod:`audit.canaries` (the canaries moved there: the engine and the trainings
insert them, below the attacks; the attacks themselves do not use them)."""

from audit.canaries import (
    CANARIES,
    CANARY_INDEX,
    INPUT_CANARIES,
    Canary,
    known_offset,
    make_canary,
    private_coordinate,
)

__all__ = [
    "CANARIES",
    "CANARY_INDEX",
    "INPUT_CANARIES",
    "Canary",
    "known_offset",
    "make_canary",
    "private_coordinate",
]
