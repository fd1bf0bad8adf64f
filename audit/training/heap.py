"""Keep freed memory in the process's heap instead of handing it back to the kernel (glibc).

The torch.func engine allocates and frees the same few-megabyte tensors (activations, output
gradients, unfolded patches, formed per-example layer gradients of a chunk of models) hundreds
of times per step. glibc's ``malloc`` serves blocks above its *mmap threshold* (128 KiB, raised
dynamically up to 32 MiB) with fresh ``mmap`` pages and unmaps them on ``free``, and trims the
heap's top above its *trim threshold*: every step then page-faults the same memory in again and
the kernel zeroes it. Measured on a chunk of 108 CNN models (1,080 examples, the ``batched``
method, one thread, the shared 2-core machine): 4,136 minor page faults per call and 49 ms of CPU
(14 ms of it in the kernel); with the thresholds below, 0 faults and 30 ms.

:func:`retain_freed_memory` sets ``M_MMAP_THRESHOLD`` to 32 MiB (glibc's upper limit for it on
64-bit systems; larger blocks are still mapped and unmapped) and ``M_TRIM_THRESHOLD`` to 1 GiB,
with ``mallopt(3)``, once per process: the peak memory is unchanged, freed blocks are reused
instead of returned. Elsewhere than glibc (macOS, musl) it does nothing. docs/design.md §12.4.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "retain_freed_memory"]

MMAP_THRESHOLD = 32 * 2**20
"""Blocks at least this large are mapped and unmapped by glibc (its maximum, 64-bit)."""
TRIM_THRESHOLD = 2**30
"""Free memory at the heap's top kept before glibc returns it to the kernel."""

_M_TRIM_THRESHOLD = -1  # <malloc.h>
_M_MMAP_THRESHOLD = -3


@functools.cache
def retain_freed_memory() -> bool:
    """Set glibc's mmap and trim thresholds (:data:`MMAP_THRESHOLD`, :data:`TRIM_THRESHOLD`) once
    per process; True when both were set, False where ``mallopt`` is unavailable (not glibc)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
