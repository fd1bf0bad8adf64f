"""What an audit needs from the machine: shards, trainings, disk and memory, estimated before any
work.

A spec names its size (``trials_in``, ``trials_out``, ``shard_size``, the grid of training keys
and attacks) long before anything runs, so the runner can refuse a spec the machine cannot hold
with a clear error instead of a ``MemoryError`` traceback hours later. Everything here is
arithmetic on the spec (plus the model's parameter count, read from the built-in model without
training); every figure is an **estimate**, labelled so:

- **disk**: per training, what a shard file keeps (``store``, :mod:`audit.run.runner`): every
  observation (``observations``: the all-iterates projections, T*E float64 values for a
  training, float32 for the simulator, plus the final projection, the canary's loss and logits,
  and the final parameters when recorded) or one float64 score per attack (``scores``); plus the
  score files (one float64 per trial and attack) and a few kB per shard (zip headers, the
  fingerprint);
- **memory per worker** (train mode, the batched engine :mod:`audit.training.engine`): K = 2 *
  shard_size models in lock-step hold the batch indices (K x steps x slots int32, built once by
  the sampler and copied once by the engine), parameters, gradients and noise (K x P float32, a
  few of each), the per-example blocks of one step (K x slots x (D + 1 + classes) float32, a few
  temporaries), the slot masks (bounded by the engine's chunk of 2**22 slots) and the returned
  observations; plus :data:`BASE_PROCESS_BYTES` for the interpreter, numpy and torch. On the high
  side of measured peaks, mostly from the Poisson batch width (b + 6 sqrt(b) + 6 slots assumed;
  the figures: bench/README.md);
- **memory of the main process** while scoring: with ``store = "observations"`` one training key's
  observations are concatenated (twice their size: the shards and the concatenation) and scored;
  with ``store = "scores"`` one shard's scores at a time; plus the report's ``split`` permutation, 5
  bytes per trial (:mod:`audit.stats.score_files`); plus :data:`MAIN_PROCESS_BYTES` for what the
  main process imports (torch, matplotlib for the report and, with ``backend = "dask"``, the
  scheduler it runs). Checked by bench/run_memory.py: flat in the trial count (bench/README.md).

:func:`check_fits` compares them with the free space of the run folder's file system
(:func:`shutil.disk_usage`) and the memory available now (:func:`available_memory`: the least of
``MemAvailable`` of /proc/meminfo, else ``os.sysconf``, and what the process's memory cgroup still
allows, limit minus usage, cgroup v2 ``memory.max`` or v1 ``memory.limit_in_bytes``, so that a
container's limit is honoured) and raises a ValueError naming the key to change and the estimate.
``n_jobs = -1`` means :func:`cpu_count` workers (:func:`worker_count`): :func:`joblib.cpu_count`,
which honours the CPU affinity mask and a cgroup CPU quota where :func:`os.cpu_count` counts every
core of the host.
The worker formula lives in :mod:`audit.run.sizing`, which also sizes shards for a train spec that
does not set ``shard_size`` (:func:`audit.run.sizing.auto_shard_size`).
"""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from audit.run.sizing import (
    AUTO_SHARD_WORKER_BYTES,
    BASE_PROCESS_BYTES,
    MASK_CHUNK_SLOTS,
    _model_shape,
    _observation_bytes,
    _worker_bytes,
)

__all__ = [
    "AUTO_SHARD_WORKER_BYTES",
    "BASE_PROCESS_BYTES",
    "MAIN_PROCESS_BYTES",
    "MASK_CHUNK_SLOTS",
    "ResourceEstimate",
    "available_memory",
    "cgroup_memory_available",
    "check_fits",
    "cpu_count",
    "estimate_resources",
    "format_bytes",
    "release_freed_memory",
    "worker_count",
]

MAIN_PROCESS_BYTES = 512 * 2**20
"""What the main process of ``audit run`` holds besides the scoring arrays: the interpreter, numpy,
torch, matplotlib and the joblib or Dask client (sized from the peaks that bench/run_memory.py
measured, with the scoring arrays, at 1e6-1e7 trainings: bench/README.md)."""

SHARD_OVERHEAD_BYTES = 4096
"""Bytes of a shard file beyond its arrays: zip headers and the fingerprint JSON (about 2 kB)."""


@dataclass(frozen=True)
class ResourceEstimate:
    """Estimates of what a spec needs (bytes); see the module docstring for the formulas."""

    training_keys: int
    shards_per_key: int
    shards: int
    trainings: int
    store: str
    attacks: int
    bytes_per_training: float
    shard_bytes: int
    disk_bytes: int
    worker_bytes: int
    workers: int
    scoring_bytes: int

    def lines(self) -> list[str]:
        """The estimate in words, one line per figure (``audit run --dry-run``)."""
        kept = (
            "every observation"
            if self.store == "observations"
            else f"{self.attacks} score(s) per training"
        )
        return [
            f"shards: {self.shards} ({self.training_keys} training key(s) x {self.shards_per_key})",
            f"trainings: {self.trainings} (IN and OUT)" if self.trainings else "trainings: 0",
            f"store: {self.store} ({kept}; {format_bytes(self.bytes_per_training)} per training, "
            "estimate)",
            f"disk: {format_bytes(self.disk_bytes)} in all, {format_bytes(self.shard_bytes)} per "
            "shard (estimate)",
            f"peak memory per worker: {format_bytes(self.worker_bytes)} x {self.workers} "
            "worker(s) (estimate)",
            "peak memory of the main process (imports and scoring): "
            f"{format_bytes(self.scoring_bytes)} (estimate)",
        ]


def format_bytes(value: float) -> str:
    """``value`` bytes in B, kB, MB, GB, TB or PB (powers of 1000, 3 significant digits)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(value) < 1000:
            return f"{value:.3g} {unit}"
        value /= 1000
    return f"{value:.3g} PB"


def estimate_resources(spec: Any) -> ResourceEstimate:
    """Shards, trainings, disk and memory of ``spec`` (estimates; module docstring)."""
    keys = len(spec.training_keys())
    per_key = spec.shard_count()
    shards = keys * per_key
    trainings = 2 * spec.trials * keys
    store = spec.evidence.store
    attacks = len(spec.experiment.attacks)
    if spec.mode.trains:
        params, features, classes = _model_shape(spec)
    else:
        params, features, classes = 0, 0, 0
    rows = spec.evidence.canaries_per_training  # observations per training (docs/design.md §8.17)
    observation = _observation_bytes(spec, params, classes) * rows
    per_training = observation if store == "observations" else 8.0 * attacks * rows
    shard_bytes = int(2 * spec.evidence.shard_size * per_training + SHARD_OVERHEAD_BYTES)
    scores = keys * attacks * (spec.evidence.trials_in + spec.evidence.trials_out) * 8 * rows
    disk = int(trainings * per_training + shards * SHARD_OVERHEAD_BYTES + scores)
    worker = _worker_bytes(spec, spec.evidence.shard_size, (params, features, classes))
    workers = worker_count(spec.execution.n_jobs)
    # the report's split permutation (int32) and selection mask: 5 bytes per trial
    # (audit.stats.score_files)
    split = 5 * spec.trials * rows
    if store == "observations":  # one key's observations, concatenated, and its scores
        scoring = (
            MAIN_PROCESS_BYTES
            + 2 * (2 * spec.trials * observation)
            + 2 * spec.trials * rows * 8 * 2
            + split
        )
    else:  # the score files are written shard by shard
        scoring = (
            MAIN_PROCESS_BYTES + 2 * (2 * spec.evidence.shard_size * rows * 8 * attacks) + split
        )
    scoring = int(scoring)
    return ResourceEstimate(
        training_keys=keys, shards_per_key=per_key, shards=shards, trainings=trainings, store=store,
        attacks=attacks, bytes_per_training=per_training, shard_bytes=shard_bytes, disk_bytes=disk,
        worker_bytes=int(worker), workers=workers, scoring_bytes=scoring,
    )


def cpu_count() -> int:
    """The CPUs this process may use: :func:`joblib.cpu_count`, which honours the CPU affinity
    mask (``os.sched_getaffinity``), a cgroup CPU quota (a container's ``--cpus``) and
    ``LOKY_MAX_CPU_COUNT``, where :func:`os.cpu_count` counts every core of the host. What joblib
    itself starts for ``n_jobs = -1``."""
    import joblib  # imported on first use: `audit --help` imports no joblib

    return max(1, int(joblib.cpu_count()))


def worker_count(n_jobs: int) -> int:
    """The workers ``n_jobs`` stands for: :func:`cpu_count` for -1 (all the CPUs this process may
    use), else ``n_jobs`` itself (the spec refuses 0 and values below -1)."""
    return cpu_count() if n_jobs == -1 else n_jobs


CGROUP_ROOT = Path("/sys/fs/cgroup")
"""Where the cgroup file systems are mounted (v2: the unified hierarchy itself; v1: one folder per
controller, ``memory/`` among them)."""
MEMINFO = Path("/proc/meminfo")
SELF_CGROUP = Path("/proc/self/cgroup")
UNLIMITED_BYTES = 2**62
"""A cgroup v1 limit at or above this is no limit (the kernel writes PAGE_COUNTER_MAX times the page
size, 9223372036854771712 on 4 kB pages)."""


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def _cgroup_dirs(mount: Path, relative: str | None) -> list[Path]:
    """The cgroup folders whose limits bind this process, innermost first: its own cgroup (the path
    of /proc/self/cgroup below ``mount``, where that folder exists: inside a container with a
    cgroup namespace the path is ``/`` and the mount is the container's own cgroup) and each of its
    parents up to ``mount``."""
    own = mount / relative.strip("/") if relative else mount
    if not own.is_dir():
        own = mount
    dirs = [own]
    while dirs[-1] != mount and mount in dirs[-1].parents:
        dirs.append(dirs[-1].parent)
    return dirs


def _inactive_file(stat: str | None, key: str) -> int:
    """The reclaimable page cache (``inactive_file``) of a cgroup's memory.stat (0 if absent):
    counted in the usage, but given back under pressure."""
    for line in (stat or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


def cgroup_memory_available(
    root: Path | None = None, self_cgroup: Path | None = None
) -> int | None:
    """What the memory cgroups of this process still allow (bytes), None where none sets a limit.

    For each cgroup from the process's own up to the mount (a parent's limit binds its children
    too): limit minus usage, the usage less its reclaimable page cache (``inactive_file`` of
    memory.stat); the least of them. cgroup v2: ``memory.max`` (``max`` is no limit) and
    ``memory.current`` in the unified hierarchy at ``root``; v1: ``memory.limit_in_bytes``
    (:data:`UNLIMITED_BYTES` and above is no limit) and ``memory.usage_in_bytes`` under
    ``root/memory``. The cgroup paths are read from ``self_cgroup`` (/proc/self/cgroup: ``0::path``
    for v2, ``N:memory:path`` for v1). Defaults: :data:`CGROUP_ROOT`, :data:`SELF_CGROUP`."""
    root = CGROUP_ROOT if root is None else root
    self_cgroup = SELF_CGROUP if self_cgroup is None else self_cgroup
    lines = (_read_text(self_cgroup) or "").splitlines()
    paths = {}
    for line in lines:
        _, controllers, path = [*line.split(":", 2), "", ""][:3]
        for name in controllers.split(",") if controllers else [""]:
            paths[name] = path
    layouts = (  # (mount, own path, limit file, usage file, memory.stat key)
        (root, paths.get(""), "memory.max", "memory.current", "inactive_file"),
        (root / "memory", paths.get("memory"), "memory.limit_in_bytes", "memory.usage_in_bytes",
         "total_inactive_file"),
    )
    allowed: list[int] = []
    for mount, relative, limit_file, usage_file, cache_key in layouts:
        if not (mount / limit_file).exists() and not (
            relative and (mount / relative.strip("/") / limit_file).exists()
        ):
            continue
        for folder in _cgroup_dirs(mount, relative):
            limit = (_read_text(folder / limit_file) or "max").strip()
            if not limit.isdigit() or int(limit) >= UNLIMITED_BYTES:
                continue
            usage = (_read_text(folder / usage_file) or "0").strip()
            used = int(usage) if usage.isdigit() else 0
            used -= min(used, _inactive_file(_read_text(folder / "memory.stat"), cache_key))
            allowed.append(max(0, int(limit) - used))
    return min(allowed) if allowed else None


def available_memory(
    *,
    meminfo: Path | None = None,
    cgroup_root: Path | None = None,
    self_cgroup: Path | None = None,
) -> int:
    """Memory available to new work now (bytes): the least of ``MemAvailable`` of /proc/meminfo
    (else the free physical pages, ``os.sysconf``) and what the process's memory cgroup still
    allows (:func:`cgroup_memory_available`: a container's limit, which /proc/meminfo does not
    show: it reports the host's memory). Defaults: :data:`MEMINFO`, :data:`CGROUP_ROOT`,
    :data:`SELF_CGROUP`."""
    host = None
    for line in (_read_text(MEMINFO if meminfo is None else meminfo) or "").splitlines():
        if line.startswith("MemAvailable:"):
            host = int(line.split()[1]) * 1024
            break
    if host is None:
        host = int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    cgroup = cgroup_memory_available(cgroup_root, self_cgroup)
    return host if cgroup is None else min(host, cgroup)


def free_disk(run_dir: str | Path) -> int:
    """Free bytes on the file system of ``run_dir`` (its nearest existing parent)."""
    path = Path(run_dir).resolve()
    while not path.exists() and path != path.parent:
        path = path.parent
    return int(shutil.disk_usage(path).free)


def check_fits(spec: Any, run_dir: str | Path, *, stored_bytes: int = 0) -> ResourceEstimate:
    """The estimate of ``spec``, or a ValueError naming the key to change and the estimate when
    the disk still needed (``disk - stored_bytes``, what resumed shards already hold) exceeds the
    free space of ``run_dir``'s file system, or the workers' memory (unless they run on a remote
    cluster: ``scheduler``) or the scoring process's exceeds the memory available."""
    est = estimate_resources(spec)
    where = getattr(spec, "source", "audit.toml")
    free = free_disk(run_dir)
    needed = est.disk_bytes - stored_bytes
    if needed > free:
        fix = (
            'lower trials_in/trials_out, or set store = "scores" (one score per attack instead of '
            'every observation)'
            if est.store == "observations"
            else "lower trials_in/trials_out"
        )
        raise ValueError(
            f"{where}: trials_in={spec.evidence.trials_in}, trials_out={spec.evidence.trials_out} "
            "need about "
            f"{format_bytes(needed)} of disk (estimate: {est.trainings} trainings x "
            f"{format_bytes(est.bytes_per_training)} with store = {est.store!r}), but {run_dir} "
            f"has {format_bytes(free)} free; {fix}"
        )
    memory = available_memory()
    cgroup = " (the limit of this process's memory cgroup: a container's)" if (
        cgroup_memory_available() == memory
    ) else ""
    # workers on a remote cluster (a scheduler address) do not use this machine's memory
    if spec.execution.scheduler is None and est.worker_bytes * est.workers > memory:
        raise ValueError(
            f"{where}: shard_size={spec.evidence.shard_size} needs about "
            f"{format_bytes(est.worker_bytes)} per worker "
            f"(estimate, {2 * spec.evidence.shard_size} models in lock-step) x "
            f"n_jobs={est.workers}, but "
            f"{format_bytes(memory)} of memory is available{cgroup}; lower shard_size or n_jobs"
        )
    if est.scoring_bytes > memory:
        raise ValueError(
            f"{where}: trials_in={spec.evidence.trials_in}, trials_out={spec.evidence.trials_out} "
            "need about "
            f"{format_bytes(est.scoring_bytes)} of memory to score one training key with store = "
            f"{est.store!r} (estimate), but {format_bytes(memory)} is available{cgroup}; "
            + (
                'set store = "scores" or lower the trial counts'
                if est.store == "observations"
                else "lower the trial counts"
            )
        )
    return est


TRIM_GROWTH_BYTES = 192 * 2**20
"""A worker trims its heap when its resident size exceeds its size after the first trim by this
much (:func:`release_freed_memory`): below loky's 300 MB (286 MiB) leak threshold."""

_rss_after_first_trim: list[int] = []


def _resident_bytes() -> int | None:
    """This process's resident set size from /proc/self/statm (None where there is no /proc)."""
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def release_freed_memory() -> None:
    """Hand the C heap's freed pages back to the operating system (glibc ``malloc_trim(0)``)
    when the process has grown :data:`TRIM_GROWTH_BYTES` past its size after the first trim.

    Called by a worker after each shard. Without it a worker's resident size after a shard wanders
    upward (flat when trimmed), because the engine's per-step buffers of varying widths leave freed
    but unreturned heap; joblib's loky backend, with psutil installed (as dask.distributed installs
    it), then takes the growth for a leak past 300 MB and restarts the worker, which costs a fresh
    torch import and prints a warning. Trimming after every shard is not free (the next shard faults
    its pages in again), hence the growth rule, which keeps the worker's size bounded at the
    untrimmed system time (the figures: bench/README.md). A no-op where the C library has no
    ``malloc_trim`` (macOS, musl, Windows).
    """
    rss = _resident_bytes()
    if (
        _rss_after_first_trim
        and rss is not None
        and rss - _rss_after_first_trim[0] <= TRIM_GROWTH_BYTES
    ):
        return
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
    if not _rss_after_first_trim:
        _rss_after_first_trim.append(_resident_bytes() or 0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """The C library's ``malloc_trim`` (None where it has none), looked up once per process."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return getattr(libc, "malloc_trim", None)
