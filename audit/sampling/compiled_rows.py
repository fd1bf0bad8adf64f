"""The Poisson batch sampler's rows, sorted by a compiled pass (numba), and the numba switch.

:func:`sorted_rows`: each Poisson batch's indices sorted and checked for repeats in one
compiled pass instead of numpy's padded sort (the same integers: a sort has one answer).

numba is an optional speed-up, the ``fast`` extra (``pip install "dpsgd-audit[fast]"``; the
``test`` extra has it too): without it, with a numba that fails to import (one built for
another numpy, say), or with ``AUDIT_COMPILED=0`` in the environment, the sampler sorts with
numpy and the engine keeps its torch routes, with the same results (the sampler's exactly; the
engine's up to float32 rounding under the same noise, though its default route then draws
torch's noise instead of Philox's: another stream of the same law) at a cost in time on the
CPU (bench/optional_numba.py). :func:`available` is the one switch for every numba path: the
engine's compiled routes (:mod:`audit.training.compiled`, :mod:`audit.training.compiled_mlp`),
the convolutional networks' compiled clipped sums (:mod:`audit.training.compiled_cnn`) and a
shard's fingerprint (:func:`audit.training.compiled.default_routes`) read it from here.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
from collections.abc import Callable

import numpy as np

__all__ = ["available", "sorted_rows"]


def available() -> bool:
    """Whether numba kernels can run here: numba installed (it is imported, and a kernel
    compiled, only when first asked) and not disabled by ``AUDIT_COMPILED=0``."""
    return os.environ.get("AUDIT_COMPILED", "1") != "0" and _numba_installed()


_LOG = logging.getLogger(__name__)


@functools.cache
def _numba_installed() -> bool:
    """Whether numba imports here (tried once per process, when first asked: about 0.4 s, spent
    only by a path that would then compile or load a kernel). A numba that is present but fails
    to import (an ImportError: built for another numpy or llvmlite) counts as absent, so the
    torch/numpy routes run instead of failing mid-run; the reason is logged once."""
    if importlib.util.find_spec("numba") is None:
        _LOG.info("numba not installed: the torch/numpy routes run (pip extra 'fast' adds it)")
        return False
    try:
        import numba  # noqa: F401
    except ImportError as error:
        _LOG.warning("numba is installed but does not import (%s): the torch/numpy routes run",
                     error)
        return False
    return True


def _sorted_rows(
    draws: np.ndarray, sizes: np.ndarray, padding: int, out: np.ndarray, repeated: np.ndarray
) -> None:
    """Row r of ``out`` (rows, slots) gets the next ``sizes[r]`` entries of ``draws`` (consumed
    in row order) sorted ascending, then ``padding`` in its remaining slots;
    ``repeated[r]`` says whether an index appears twice among its real entries. Insertion sort:
    the rows are short (a batch, about b entries)."""
    rows, slots = out.shape
    position = 0
    for r in range(rows):
        row = out[r]
        size = sizes[r]
        for i in range(size):
            value = draws[position + i]
            j = i
            while j > 0 and row[j - 1] > value:
                row[j] = row[j - 1]
                j -= 1
            row[j] = value
        position += size
        for i in range(size, slots):
            row[i] = padding
        repeat = False
        for i in range(1, size):
            if row[i] == row[i - 1]:
                repeat = True
        repeated[r] = repeat


@functools.cache
def _compiled_sorted_rows() -> Callable[..., None]:
    """:func:`_sorted_rows` compiled by numba (once per process; numba's on-disk cache spares
    the compilation in later processes)."""
    import numba

    return numba.njit(nogil=True, boundscheck=False, error_model="numpy", cache=True)(_sorted_rows)


def sorted_rows(
    draws: np.ndarray, sizes: np.ndarray, n: int, slots: int, padding: int
) -> tuple[np.ndarray, np.ndarray]:
    """(rows, slots) int32: row r holds the next ``sizes[r]`` of ``draws`` (values in 0..n-1,
    consumed in row order) sorted ascending, then ``padding``; and whether each row repeats
    an index. Compiled when numba is available (:func:`_sorted_rows`), else numpy (padding
    slots hold the distinct sentinels n, n+1, ..., which sort last and never look like a
    repeat); the same result either way: sorting integers has one answer."""
    rows = sizes.shape[0]
    if available() and rows:
        out = np.empty((rows, slots), dtype=np.int32)
        repeated = np.empty(rows, dtype=np.bool_)
        _compiled_sorted_rows()(
            draws.astype(np.int32, copy=False),
            sizes.astype(np.int64, copy=False),
            padding,
            out,
            repeated,
        )
        return out, repeated
    out = np.broadcast_to(np.arange(n, n + slots, dtype=np.int32), (rows, slots)).copy()
    out[np.arange(slots) < sizes[:, None]] = draws
    out.sort(axis=1)
    repeated = (out[:, 1:] == out[:, :-1]).any(axis=1)
    np.copyto(out, np.int32(padding), where=out >= n)
    return out, repeated
