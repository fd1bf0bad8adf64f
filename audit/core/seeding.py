"""Deterministic seeding: one integer seed per audit, split per cell, shard and trial.

docs/design.md §3.6: randomness comes from one seed, split with ``numpy.random.SeedSequence`` so
that any shard can be recomputed alone and a re-run gives identical results, whatever the
number of workers. A child is addressed by a path of integers or names (a cell's name is
hashed to an integer with SHA-256, so adding a cell never changes another cell's seeds).
"""

from __future__ import annotations

import hashlib

import numpy as np

__all__ = ["rng_for", "seed_sequence", "torch_seed"]


def _key(part: int | str) -> int:
    if isinstance(part, bool):
        raise TypeError("a seed path part must be an int or a str, not bool")
    if isinstance(part, int | np.integer):
        if part < 0:
            raise ValueError(f"seed path part {part} must be >= 0")
        return int(part)
    if isinstance(part, str):
        return int.from_bytes(hashlib.sha256(part.encode()).digest()[:8], "little")
    raise TypeError(f"a seed path part must be an int or a str, got {type(part).__name__}")


def seed_sequence(seed: int, *path: int | str) -> np.random.SeedSequence:
    """The SeedSequence of the child at ``path`` under the audit ``seed``.

    ``seed_sequence(s, a, b)`` equals ``SeedSequence(s).spawn(...)``'s child with spawn key
    ``(a, b)``, i.e. ``SeedSequence(s, spawn_key=(a, b))``.
    """
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed={seed!r} must be a non-negative integer")
    return np.random.SeedSequence(int(seed), spawn_key=tuple(_key(p) for p in path))


def rng_for(seed: int, *path: int | str) -> np.random.Generator:
    """A numpy Generator (PCG64) for the child at ``path``."""
    return np.random.default_rng(seed_sequence(seed, *path))


def torch_seed(sequence: np.random.SeedSequence) -> int:
    """A 63-bit integer seed from a SeedSequence: for ``torch.Generator.manual_seed``, or any int
    seed.

    The first two 32-bit words of its state, little-endian (= ``generate_state(1, uint64)``),
    top bit cleared.
    """
    return int(
        sequence.generate_state(2, dtype=np.uint32).astype(np.uint64)
        @ np.array([1, 2**32], dtype=np.uint64)
    ) & (2**63 - 1)
