"""Score files read in bounded memory: the statistics of an audit from sorted score files.

Every statistic of :mod:`audit.stats.binary` (the empirical trade-off, the eps lower bound with a
``split`` or ``bonferroni`` threshold, the verdict, the optimistic maximum) needs only counts of
scores above thresholds, and the thresholds themselves are order statistics of sorted scores. So
instead of holding every score in memory, a cell's scores are **sorted on disk** (an external merge
sort: runs of :data:`CHUNK` scores sorted in memory, then merged block by block, reading and writing
plain files). The statistics read the sorted file through :class:`SortedScores`, an array mapped on
the file whose two operations that :mod:`audit.stats.binary` uses on large inputs read the file
instead of the map: ``searchsorted`` (the counts above thresholds) streams it in blocks, and
integer-array indexing (the at most 2 x 4000 candidate thresholds, order statistics at given ranks)
reads those values only. Thousands of binary searches through a map would make nearly every page of
it resident (bench/README.md), and numpy's own searchsorted would copy a read-only
array whole.

:class:`SortedScores` is marked ``presorted``: :mod:`audit.stats.binary` uses it as it is (no copy,
no sort) and asks it for the ``split`` halves (:meth:`SortedScores.halves`), which are streamed from
the score file in the same way. The halves are exactly those of
:func:`audit.stats.binary.split_scores`: ``np.random.default_rng(seed)`` permutes 0..n-1
(Fisher-Yates; the same draws shuffle an int32 range, at 4 bytes per trial instead of 8) and the
first floor(n/2) indices of the permutation form the selection half; a one-byte-per-trial mask says
which trial goes where. The statistics then see the same multisets of scores, sorted: results are
bit-identical to :mod:`audit.stats.binary` on the whole arrays. That permutation is the only part
whose memory grows with the trial count (5 bytes per trial, transient: 50 MB at 1e7 trials); it is
what reproducing today's split exactly costs (a split computed per shard would need none, but would
change every ``split`` result).

Score files are the uncompressed ``.npz`` files of :mod:`audit.run.runner` (``np.savez``, members
stored, not deflated): a member's bytes are read chunk by chunk through :mod:`zipfile` without
loading the array.
"""

from __future__ import annotations

import functools
import os
import tempfile
import weakref
import zipfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any, BinaryIO, Literal

import numpy as np
from numpy.typing import ArrayLike

from audit.stats.binary import EmpiricalTradeOff, _as_scores, _candidate_thresholds, _counts

__all__ = [
    "CHUNK",
    "SortedScores",
    "count",
    "plotted_tradeoff",
    "read_chunks",
    "selection_mask",
    "sorted_scores",
    "sorted_scores_from_chunks",
]

CHUNK = 1 << 20
"""Scores held in memory at once while reading or sorting (8 MB of float64)."""

MERGE_BLOCK = 1 << 16
"""Scores read from each sorted run at once while merging."""


class SortedScores(np.ndarray):
    """A read-only memory map of scores sorted ascending, checked free of NaN, marked
    ``presorted`` (only this object: arrays derived from it are plain), with the ``split``
    halves of the trials in their original order (:meth:`halves`)."""

    presorted: bool
    _halves: Callable[[int], tuple[SortedScores, SortedScores]] | None
    _fd: int | None
    _offset: int

    def __array_finalize__(self, obj: object) -> None:
        self.presorted = False
        self._halves = None
        self._fd = None
        self._offset = 0

    def searchsorted(
        self, v: ArrayLike, side: Literal["left", "right"] = "left", sorter: ArrayLike | None = None
    ) -> Any:  # numpy's: an index for a scalar v, an array of them for an array
        """:meth:`numpy.ndarray.searchsorted`, computed by reading the file in blocks of
        :data:`CHUNK` (the index of t is the sum over blocks of its index in each block), so that
        no page of the map becomes resident: a binary search for each of thousands of thresholds
        would touch nearly every page of the file (bench/README.md)."""
        if self._fd is None or sorter is not None:
            # numpy's overloads take narrower array-likes than ArrayLike: any is passed through
            return super().searchsorted(v, side=side, sorter=sorter)  # type: ignore[arg-type]
        keys = np.asarray(v, dtype=float)
        order = np.argsort(keys.ravel(), kind="stable")
        ordered = keys.ravel()[order]
        counts = np.zeros(ordered.size, dtype=np.intp)
        whole = np.zeros(ordered.size + 1, dtype=np.intp)  # + block size from this key on
        # keys that count nothing of a block / all of it
        below: Literal["left", "right"] = "right" if side == "left" else "left"
        for start in range(0, self.size, CHUNK):
            block = self._read(start, min(CHUNK, self.size - start))
            # Keys at or below the block's first value (side left) count none of it, keys above
            # its last value count all of it; only the keys in between are searched: with many
            # keys (every score as a threshold) each is searched in about one block.
            first = int(np.searchsorted(ordered, block[0], side=below))
            last = int(np.searchsorted(ordered, block[-1], side=below))
            counts[first:last] += np.searchsorted(block, ordered[first:last], side=side)
            whole[max(first, last)] += block.size
        counts += np.cumsum(whole)[:-1]
        out = np.empty(ordered.size, dtype=np.intp)
        out[order] = counts
        return out.reshape(keys.shape)

    def __getitem__(self, index: Any) -> Any:  # numpy's: any index, an array or a value
        """Integer-array indexing (order statistics at given ranks) reads those values from the
        file; anything else is numpy's."""
        if self._fd is not None and isinstance(index, np.ndarray) and index.dtype.kind in "iu":
            positions = np.where(index < 0, index + self.size, index).astype(np.int64)
            if positions.size and (positions.min() < 0 or positions.max() >= self.size):
                raise IndexError(f"index out of bounds for {self.size} sorted scores")
            return np.array(
                [self._read(int(i), 1)[0] for i in positions.ravel()], dtype=float
            ).reshape(index.shape)
        return super().__getitem__(index)

    def blocks(self, size: int) -> Iterator[np.ndarray]:
        """The sorted scores in blocks of ``size``, read from the file (no page of the map)."""
        for start in range(0, self.size, size):
            yield (
                self._read(start, min(size, self.size - start))
                if self._fd is not None
                else self[start : start + size]
            )

    def _read(self, start: int, size: int) -> np.ndarray:
        # called only where the map holds its file's descriptor (_fd is not None)
        data = os.pread(self._fd, 8 * size, self._offset + 8 * start)  # type: ignore[arg-type]
        return np.frombuffer(data, dtype=float)

    def halves(self, seed: int) -> tuple[SortedScores, SortedScores]:
        """(selection half, evaluation half), each sorted, as
        :func:`audit.stats.binary.split_scores` would split the scores in their original order with
        ``seed``."""
        if self._halves is None:
            raise ValueError(
                "these sorted scores do not know their original order, so they cannot be split"
            )
        return self._halves(seed)


# ---------------------------------------------------------------------------------------
# reading score files
# ---------------------------------------------------------------------------------------


def _member(archive: zipfile.ZipFile, name: str) -> zipfile.ZipInfo:
    try:
        return archive.getinfo(f"{name}.npy")
    except KeyError:
        raise ValueError(f"{archive.filename} has no array {name!r}") from None


def _open_array(archive: zipfile.ZipFile, name: str) -> tuple[IO[bytes], int, np.dtype]:
    """(open member, element count, dtype) of the 1-D array ``name`` of an ``.npz``."""
    handle = archive.open(_member(archive, name))
    version = np.lib.format.read_magic(handle)
    reader = (
        np.lib.format.read_array_header_1_0
        if version == (1, 0)
        else np.lib.format.read_array_header_2_0
    )
    shape, _, dtype = reader(handle)
    if len(shape) != 1 or dtype.hasobject:
        raise ValueError(
            f"{archive.filename}: {name} must be a 1-D numeric array, one score per trial (each "
            f"trial one independent training), has shape {shape}"
            + (
                "; several values per trial would be counted as trials (pseudo-replication): "
                "reduce each row to one score first (e.g. .mean(axis=1) or .max(axis=1))"
                if len(shape) > 1 else ""
            )
        )
    return handle, int(shape[0]), dtype


def count(path: str | Path, name: str) -> int:
    """Number of values of the 1-D array ``name`` stored in the ``.npz`` at ``path``."""
    with zipfile.ZipFile(path) as archive:
        handle, size, _ = _open_array(archive, name)
        handle.close()
    return size


def read_chunks(path: str | Path, name: str, chunk: int | None = None) -> Iterator[np.ndarray]:
    """The 1-D array ``name`` of the ``.npz`` at ``path``, as float64 chunks of ``chunk`` values
    (default :data:`CHUNK`), read without loading the array."""
    chunk = CHUNK if chunk is None else chunk
    with zipfile.ZipFile(path) as archive:
        handle, size, dtype = _open_array(archive, name)
        with handle:
            done = 0
            while done < size:
                take = min(chunk, size - done)
                data = handle.read(take * dtype.itemsize)
                yield np.frombuffer(data, dtype=dtype).astype(float, copy=False)
                done += take


# ---------------------------------------------------------------------------------------
# external merge sort
# ---------------------------------------------------------------------------------------


def _write_npy_header(handle: BinaryIO, size: int) -> None:
    header = {
        "descr": np.lib.format.dtype_to_descr(np.dtype(float)),
        "fortran_order": False,
        "shape": (size,),
    }
    np.lib.format.write_array_header_1_0(handle, header)


def _merge(runs: list[Path], sizes: list[int], out: Path) -> None:
    """Merge sorted float64 runs (raw files) into the ``.npy`` file ``out``, block by block:
    per round, every run's next block, the smallest of their last values as the cut, and the
    values <= the cut of every block, sorted, written (each round empties at least one block)."""
    handles = [run.open("rb") for run in runs]
    left = list(sizes)
    blocks = [np.empty(0) for _ in runs]
    try:
        with out.open("wb") as target:
            _write_npy_header(target, sum(sizes))
            while True:
                for i, handle in enumerate(handles):
                    if blocks[i].size == 0 and left[i]:
                        take = min(MERGE_BLOCK, left[i])
                        blocks[i] = np.fromfile(handle, dtype=float, count=take)
                        left[i] -= take
                live = [i for i in range(len(runs)) if blocks[i].size]
                if not live:
                    break
                cut = min(blocks[i][-1] for i in live)
                parts = []
                for i in live:
                    k = int(np.searchsorted(blocks[i], cut, side="right"))
                    parts.append(blocks[i][:k])
                    blocks[i] = blocks[i][k:]
                merged = np.concatenate(parts)
                merged.sort()
                merged.tofile(target)
    finally:
        for handle in handles:
            handle.close()


def _map(
    path: Path, halves: Callable[[int], tuple[SortedScores, SortedScores]] | None
) -> SortedScores:
    """The ``.npy`` at ``path`` as :class:`SortedScores`: memory-mapped (for any use) with an open
    descriptor for :meth:`SortedScores.searchsorted` and integer indexing; the file is unlinked at
    once (the map and the descriptor keep its data until they are dropped)."""
    mapping = np.load(path, mmap_mode="r")
    mapped = mapping.view(SortedScores)
    mapped.presorted = True
    mapped._halves = halves
    mapped._fd = os.open(path, os.O_RDONLY)
    mapped._offset = int(mapping.offset)
    weakref.finalize(mapped, os.close, mapped._fd)
    path.unlink()
    return mapped


def sorted_scores_from_chunks(
    chunks: Iterable[np.ndarray],
    folder: str | Path,
    *,
    name: str = "scores",
    halves: Callable[[int], tuple[SortedScores, SortedScores]] | None = None,
) -> SortedScores:
    """The scores of ``chunks`` sorted on disk in ``folder`` (external merge sort), mapped
    read-only.

    Raises:
        ValueError: no score at all, or a NaN (named ``name``, as :mod:`audit.stats.binary` does).
    """
    with tempfile.TemporaryDirectory(dir=folder, prefix=".sort-") as work:
        runs: list[Path] = []
        sizes: list[int] = []
        buffer: list[np.ndarray] = []
        held = 0

        def flush() -> None:
            nonlocal buffer, held
            if not held:
                return
            run = np.concatenate(buffer) if len(buffer) > 1 else np.array(buffer[0], dtype=float)
            run.sort()
            path = Path(work) / f"run{len(runs)}.f8"
            run.tofile(path)
            runs.append(path)
            sizes.append(run.size)
            buffer, held = [], 0

        for chunk in chunks:
            chunk = np.asarray(chunk, dtype=float).ravel()
            if np.isnan(chunk).any():
                raise ValueError(f"{name} contains NaN; every trial needs a score")
            buffer.append(chunk)
            held += chunk.size
            if held >= CHUNK:
                flush()
        flush()
        if not sizes:
            raise ValueError(f"{name} is empty; need at least one score")
        out = Path(work) / "sorted.npy"
        _merge(runs, sizes, out)
        for run in runs:
            run.unlink()
        return _map(out, halves)


# ---------------------------------------------------------------------------------------
# the split halves, streamed
# ---------------------------------------------------------------------------------------


def selection_mask(size: int, seed: int) -> np.ndarray:
    """bool (size,): True for the trials of the selection half of
    :func:`audit.stats.binary.split_scores` (the first floor(size/2) entries of
    ``np.random.default_rng(seed).permutation(size)``)."""
    order = np.arange(size, dtype=np.int32 if size < 2**31 else np.int64)
    np.random.default_rng(seed).shuffle(order)  # the same draws as permutation(size)
    mask = np.zeros(size, dtype=bool)
    mask[order[: size // 2]] = True
    return mask


def _split_chunks(
    chunks: Callable[[], Iterable[np.ndarray]], mask: np.ndarray, selection: bool
) -> Iterator[np.ndarray]:
    start = 0
    for chunk in chunks():
        part = mask[start : start + chunk.size]
        yield chunk[part if selection else ~part]
        start += chunk.size


def sorted_scores(path: str | Path, name: str, folder: str | Path | None = None) -> SortedScores:
    """The 1-D array ``name`` of the score file ``path`` (an uncompressed ``.npz``) sorted on
    disk in ``folder`` (default: beside ``path``) and mapped read-only, with its ``split`` halves
    streamed on demand (cached per seed)."""
    path = Path(path)
    folder = Path(folder) if folder is not None else path.parent
    size = count(path, name)

    @functools.lru_cache(maxsize=4)
    def halves(seed: int) -> tuple[SortedScores, SortedScores]:
        mask = selection_mask(size, seed)
        pick = [
            sorted_scores_from_chunks(
                _split_chunks(lambda: read_chunks(path, name), mask, side), folder, name=name
            )
            if (size // 2 if side else size - size // 2)
            else np.empty(0).view(SortedScores)
            for side in (True, False)
        ]
        for array in pick:
            array.presorted = True
        return pick[0], pick[1]

    return sorted_scores_from_chunks(read_chunks(path, name), folder, name=name, halves=halves)


def plotted_tradeoff(scores_in: np.ndarray, scores_out: np.ndarray) -> EmpiricalTradeOff:
    """The empirical trade-off at the candidate thresholds of :mod:`audit.stats.binary` (every
    distinct score up to 8000 scores, else 4000 order statistics per tail, geometric in rank)
    and +inf: exact counts at each, in memory bounded by the thresholds, for plots (the same as
    :func:`audit.stats.binary.empirical_tradeoff` up to 8000 scores)."""
    sorted_in, sorted_out = _as_scores("scores_in", scores_in), _as_scores("scores_out", scores_out)
    thresholds = _candidate_thresholds(sorted_in, sorted_out)  # ascending, +inf last
    fp, fn = _counts(thresholds, sorted_in, sorted_out)
    return EmpiricalTradeOff(thresholds, fp, fn, sorted_in.size, sorted_out.size)
