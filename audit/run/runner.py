"""The resumable parallel runner: every shard of every (sampler, threat model), on disk.

An audit's work is a list of **shards**: ``shard_size`` IN and ``shard_size`` OUT trainings
(or simulated mechanisms) of one training key (sampler, threat model). A shard is a pure
function of (spec, training key, shard index, trial count): its seeds come from
:mod:`audit.core.seeding` through the audit seed, the key's name and the index, so a result never
depends on n_jobs, the backend, or how often the run was interrupted.

Each finished shard is written at once to ``runs/<name>/shards/<key>.<index>.n<trials>.npz``,
atomically (a temporary file, then :func:`os.replace`), by the main process as results
arrive, so Ctrl-C or a killed process loses only the shards in flight. A re-run loads what is
on disk and computes only what is missing; ``fresh=True`` discards it. ``shards/manifest.json``
stores the hash of every spec value that changes a shard's content (:meth:`AuditSpec.shard_hash`)
and the shard **fingerprint** (:mod:`audit.run.fingerprint`: those spec values, the package version,
the hash of the harness's own source and of a plug-in implementation's source); every shard and
score file carries its own fingerprint too. A changed spec or changed code refuses to resume
(naming what changed) unless ``fresh``, and stored shards or scores of another fingerprint are
never read: a result is never built from two versions.

What a shard keeps is the spec's ``store``: every observation (``observations``), or only the
scores of every attack the spec names (``scores``, computed in the worker by
:func:`shard_scores`: 8 bytes per training and attack, the default for ``mode = "train"`` above
1e5 trials); re-scoring with another attack needs the observations, and asking for one whose
scores were not stored is refused naming it. ``store`` is part of the shard identity.

When every shard is on disk, every attack of a training key scores the same observations (or
its stored scores are gathered) into ``runs/<name>/scores/<cell>.npz`` (:mod:`audit.run.scoring`),
and :mod:`audit.run.summary` turns the scores into the typed results of every cell
(:class:`audit.run.results.AuditResult`), written to summary.json. The report (report.md and the
plots, :mod:`audit.report`) is written from those records by the stage above, which calls this
module (:func:`audit.report.run_audit`); this module never imports it. The run folder's layout,
atomic writes and fingerprinted files are :mod:`audit.run.store`.

Parallelism is joblib's: ``loky`` (worker processes), ``threading``, ``dask`` (a Dask
cluster at ``scheduler``, or a local one) or ``ray`` (joblib's Ray backend: the Ray cluster
at ``scheduler``, e.g. ``"auto"``, or a local Ray), with one torch thread per worker.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from audit.core.errors import AuditEnvironmentError, AuditError, AuditInputError, DamagedFileError
from audit.core.exact_confidence import exact_confidence
from audit.core.mechanism import Mechanism
from audit.plugins.contract import run_implementation_shard
from audit.run.fingerprint import changes, encode, shard_fingerprint
from audit.run.lock import run_lock
from audit.run.resources import (
    ResourceEstimate,
    check_fits,
    estimate_resources,
    release_freed_memory,
    worker_count,
)
from audit.run.results import AuditResult, CellResult, RunRecord
from audit.run.scoring import (
    check_runnable,
    resolve_attacks,
    score_all,
    shard_scores,
)
from audit.run.spec import AuditKind, AuditSpec, Mode, TrainingKey, load_spec
from audit.run.store import (
    FINGERPRINT_KEY,
    MANIFEST,
    RUN_FILE,
    SCORES_DIR,
    SECONDS_KEY,
    SHARDS_DIR,
    Manifest,
    ShardTask,
    plan,
    quarantine,
    run_folder,
    stale_error,
    stored_fingerprint,
    verify,
    write_atomically,
    write_text_atomically,
)
from audit.run.summary import summarize, write_summary
from audit.run.watchdog import worker_initializer
from audit.theory import Bounds
from audit.training.simulate import simulate_one_run_shard, simulate_shard

__all__ = ["RunResult", "compute_shard", "run_audit"]

logger = logging.getLogger(__name__)
"""The runner's notes (a resumed run, the shards left to compute): the ``audit`` command line
configures logging to show them on stderr; a library caller's configuration decides."""


@dataclass(frozen=True)
class RunResult:
    """What one call of :func:`run_audit` did."""

    run_dir: Path
    shards_total: int
    shards_computed: int
    shards_reused: int
    wall_seconds: float
    result: AuditResult | None = None
    """The results of every cell (None without ``summary``, or with ``dry_run``)."""
    estimate: ResourceEstimate | None = None
    """The resources the run needs (set by ``dry_run``)."""

    @property
    def cells(self) -> tuple[CellResult, ...]:
        """The result of every cell, in spec order (empty when none were computed)."""
        return () if self.result is None else self.result.cells


# ---------------------------------------------------------------------------------------
# planning and computing shards
# ---------------------------------------------------------------------------------------


def _stored_tasks(spec: AuditSpec, shards: Path) -> dict[str, ShardTask]:
    """The shard files in ``shards`` that belong to the plan of ``spec``, by file name (one
    directory listing: as many entries as files on disk, not as shards planned)."""
    keys = {key.name: key for key in spec.training_keys()}
    found = {}
    for entry in os.scandir(shards) if shards.is_dir() else ():
        parts = entry.name.split(".")
        if len(parts) != 4 or parts[3] != "npz" or parts[0] not in keys or not parts[1].isdigit():
            continue
        index = int(parts[1])
        if index < spec.shard_count():
            task = ShardTask(keys[parts[0]], index, spec.shard_trials(index))
            if task.filename == entry.name:
                found[entry.name] = task
    return found


class ShardArguments(TypedDict):
    """What a shard's seeds derive from (docs/design.md §3.6): the audit seed, the shard's
    index and trial count, and its training key's name."""

    seed: int
    shard: int
    trials: int
    cell: str


ShardArrays = Mapping[str, np.ndarray | None]
ShardSource = Callable[[AuditSpec, ShardTask, ShardArguments], ShardArrays]
"""Computes the arrays of one shard from the spec, the task and the shard's seed arguments."""


def _many_canaries(spec: AuditSpec) -> dict[str, int]:
    """``canaries_per_training`` = k for the shard functions when k > 1 (docs/design.md §8.17);
    nothing at k = 1, whose shards are drawn exactly as before the key existed."""
    k = spec.evidence.canaries_per_training
    return {"canaries_per_training": k} if k > 1 else {}


def _simulated(spec: AuditSpec, task: ShardTask, common: ShardArguments) -> ShardArrays:
    """:func:`audit.training.simulate.simulate_shard` of the key's mechanism."""
    return simulate_shard(spec.mechanism(task.key), **common, **_many_canaries(spec))


def _one_run_canaries(spec: AuditSpec) -> int:
    """The one-run audit's m (a one-run spec always names it: :mod:`audit.run.spec`)."""
    canaries = spec.one_run.canaries
    assert canaries is not None  # read with the spec: audit = "one_run" without m is refused
    return canaries


def _simulated_one_run(spec: AuditSpec, task: ShardTask, common: ShardArguments) -> ShardArrays:
    """:func:`audit.training.simulate.simulate_one_run_shard`: the shard's canaries of the m."""
    return simulate_one_run_shard(
        spec.mechanism(task.key),
        **common,
        canaries=_one_run_canaries(spec),
        shard_size=spec.evidence.shard_size,
    )


def _trained(spec: AuditSpec, task: ShardTask, common: ShardArguments) -> ShardArrays:
    """:func:`audit.training.trials.run_shard` of the key's training config, or the spec's
    ``implementation`` through :func:`audit.plugins.contract.run_implementation_shard`."""
    config = spec.training_config(task.key)
    if spec.experiment.implementation is not None:
        return run_implementation_shard(spec.experiment.implementation, config, **common)
    from audit.training.trials import run_shard  # imports torch: train mode only

    return run_shard(config, **common, **_many_canaries(spec))


def _trained_one_run(spec: AuditSpec, task: ShardTask, common: ShardArguments) -> ShardArrays:
    """One training holding the shard's canaries (:mod:`audit.run.one_run_trials`; Opacus with
    ``implementation = "opacus"``)."""
    # the training modules import torch: loaded only in train mode (simulations need no torch)
    from audit.run.one_run_trials import run_one_run_shard, run_opacus_one_run_shard

    one_run = (
        run_opacus_one_run_shard
        if spec.experiment.implementation == "opacus"
        else run_one_run_shard
    )
    return one_run(
        spec.training_config(task.key),
        **common,
        canaries=_one_run_canaries(spec),
        shard_size=spec.evidence.shard_size,
    )


SHARD_SOURCES: dict[tuple[AuditKind, Mode], ShardSource] = {
    (AuditKind.MULTI_RUN, Mode.SIMULATE): _simulated,
    (AuditKind.ONE_RUN, Mode.SIMULATE): _simulated_one_run,
    (AuditKind.MULTI_RUN, Mode.TRAIN): _trained,
    (AuditKind.ONE_RUN, Mode.TRAIN): _trained_one_run,
}
"""Where the shards of each (audit kind, mode) come from."""


def compute_shard(spec: AuditSpec, task: ShardTask) -> dict[str, np.ndarray]:
    """The observations of one shard: ``{"y_in": ..., "y_out": ..., ...}``, from the source of
    the spec's (audit kind, mode) (:data:`SHARD_SOURCES`): ``mode="simulate"``,
    :func:`audit.training.simulate.simulate_shard` of the key's mechanism; ``mode="train"``,
    :func:`audit.training.trials.run_shard` of the key's training config, or the spec's
    ``implementation`` through :func:`audit.plugins.contract.run_implementation_shard`; their
    one-run twins for ``audit = "one_run"``.
    """
    common = ShardArguments(
        seed=spec.experiment.seed, shard=task.index, trials=task.trials, cell=task.key.name
    )
    produced = SHARD_SOURCES[spec.kind, spec.mode](spec, task, common)
    arrays = {name: np.asarray(value) for name, value in produced.items() if value is not None}
    if spec.mode.trains:
        check_finite_training(spec, arrays)
    return shard_scores(spec, task, arrays) if spec.evidence.store == "scores" else arrays


def check_finite_training(spec: AuditSpec, arrays: Mapping[str, np.ndarray]) -> None:
    """Refuse a shard whose trainings diverged: a non-finite parameter, loss or logit in any
    observation (an exploding learning rate, an unclipped gradient) would give scores of inf
    or NaN and a meaningless cell, so it is an error naming the arrays, how many trainings
    and the spec keys to change (the caller adds the shard)."""
    bad = {}
    for name, value in arrays.items():
        if value.dtype.kind in "fc" and value.size and not np.isfinite(value).all():
            rows = value.reshape(value.shape[0], -1) if value.ndim > 1 else value.reshape(-1, 1)
            bad[name] = (int((~np.isfinite(rows)).any(axis=1).sum()), rows.shape[0])
    if not bad:
        return
    training = spec.training.to_dict()
    keys = ", ".join(
        f"{key} = {training[key]!r}" for key in ("lr", "clip", "sigma") if key in training
    )
    what = ", ".join(
        f"{name} in {count} of {total} trainings" for name, (count, total) in sorted(bad.items())
    )
    raise AuditInputError(
        f"the training diverged (non-finite parameters or losses: {what}); [training] {keys}",
        culprit="[training] lr",
        fix="lower [training] lr (or clip) until the trainings stay finite",
    )


def shard_error(spec: AuditSpec, task: ShardTask, error: Exception) -> AuditError:
    """The one-line error of a shard that failed, naming its cell, index and trial count and
    the code at fault (the plug-in implementation or model factory, else the harness):
    an :class:`AuditEnvironmentError` for memory and I/O, an :class:`AuditInputError` when
    the input is at fault (a plug-in, a ValueError), else an internal :class:`AuditError`."""
    where = (
        f"{task.key.name} shard {task.index} ({task.trials} IN + {task.trials} OUT trials, file "
        f"{task.filename})"
    )
    if isinstance(error, AuditError):
        return type(error)(f"{where}: {error}", culprit=error.culprit or where)
    implementation = spec.experiment.implementation
    plugin = implementation if implementation not in (None, "opacus") else None
    model = spec.experiment.model
    plugin = plugin or (model if isinstance(model, str) and ":" in model else None)
    what = f"{type(error).__name__}: {' '.join(str(error).split())}"
    if isinstance(error, (MemoryError, OSError)):
        return AuditEnvironmentError(f"{where}: {what}", culprit=where,
                                     fix="lower n_jobs or shard_size, or free memory or disk")
    # the harness's checks of the input and of a plug-in's results
    if isinstance(error, ValueError):
        by = f" (plug-in {plugin!r})" if plugin is not None else ""
        return AuditInputError(
            f"{where}{by}: {' '.join(str(error).split())}", culprit=plugin or where
        )
    if plugin is not None:
        return AuditInputError(f"{where}: the plug-in {plugin!r} raised {what}", culprit=plugin,
                               fix="fix the plug-in (run with --debug for its traceback)")
    return AuditError(f"{where}: {what}", culprit=where)


def _work(spec: AuditSpec, task: ShardTask) -> tuple[ShardTask, dict[str, np.ndarray], float]:
    """Worker entry point: one torch thread per worker (docs/design.md §12), then the shard."""
    if spec.mode.trains:
        import torch

        torch.set_num_threads(1)
    start = time.perf_counter()
    try:
        arrays = compute_shard(spec, task)
    # named by cell, shard and trials (the worker's traceback names none)
    except Exception as error:
        raise shard_error(spec, task, error) from error
    seconds = time.perf_counter() - start
    release_freed_memory()  # a worker's size stays flat from shard to shard (no loky restarts)
    return task, arrays, seconds


# ---------------------------------------------------------------------------------------
# the run folder
# ---------------------------------------------------------------------------------------


def _prepare(run_dir: Path, spec: AuditSpec, *, fresh: bool) -> Path:
    """Create (or, with ``fresh``, empty) the shard folder; refuse a changed spec."""
    shards = run_dir / SHARDS_DIR
    if fresh:
        for name in (SHARDS_DIR, SCORES_DIR):
            shutil.rmtree(run_dir / name, ignore_errors=True)
    shards.mkdir(parents=True, exist_ok=True)
    for stale in shards.glob(".*.tmp"):
        stale.unlink(missing_ok=True)
    manifest = shards / MANIFEST
    fingerprint = shard_fingerprint(spec)
    current = Manifest(spec.shard_hash(), spec.shard_identity(), fingerprint)
    stored_manifest, damaged = _read_manifest(manifest, run_dir)
    if stored_manifest is not None:
        changed = changes(stored_manifest.fingerprint, fingerprint)
        if changed:
            raise ValueError(
                f"{run_dir}: changed since its shards were computed: {'; '.join(changed)}; the "
                "stored shards would mix two versions. Run again with --fresh to discard them"
            )
    elif any(shards.glob("*.npz")) and not damaged:
        raise ValueError(f"{shards} holds shards but no {MANIFEST}; run again with --fresh")
    else:  # a new folder, or a damaged manifest moved aside: each shard's own fingerprint decides
        write_text_atomically(
            manifest, json.dumps(current.to_json(), indent=2, sort_keys=True) + "\n"
        )
    # each shard's own fingerprint: the manifest may have been rewritten
    for name in sorted(_stored_tasks(spec, shards)):
        path = shards / name
        try:
            verify(path)  # a truncated, empty or bit-flipped shard is moved aside and recomputed
            stamp = stored_fingerprint(path)
        except DamagedFileError as error:
            quarantine(path, run_dir, error)
            continue
        if changed := changes(stamp, fingerprint):
            raise stale_error(path, "shard", changed, run_dir)
    return shards


def _read_manifest(manifest: Path, run_dir: Path) -> tuple[Manifest | None, bool]:
    """(the stored manifest or None when there is none, whether it was damaged). A damaged one
    (not UTF-8 JSON, not an object) is moved aside and rewritten: every shard carries its own
    fingerprint, which is then checked alone."""
    if not manifest.exists():
        return None, False
    try:
        return Manifest.from_json(json.loads(manifest.read_text(encoding="utf-8"))), False
    except ValueError as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        quarantine(manifest, run_dir, f"{manifest}: damaged ({' '.join(str(error).split())})")
        return None, True


@contextlib.contextmanager
def _parallel_backend(spec: AuditSpec, backend: str, n_jobs: int) -> Iterator[None]:
    """joblib's backend for the run; for ``dask``, a client of the spec's scheduler or of
    a local cluster with ``n_jobs`` single-threaded workers."""
    import joblib

    if backend == "ray":
        with _ray_backend(spec, n_jobs):
            yield
        return
    # its workers end with this process, even killed by SIGKILL (audit.run.watchdog)
    if backend == "loky":
        initializer, initargs = worker_initializer()
        with joblib.parallel_config(
            backend=backend, n_jobs=n_jobs, initializer=initializer, initargs=initargs
        ):
            yield
        return
    if backend != "dask":
        with joblib.parallel_config(backend=backend, n_jobs=n_jobs):
            yield
        return
    from distributed import Client, LocalCluster

    with contextlib.ExitStack() as stack:
        if spec.execution.scheduler is not None:
            try:
                client = stack.enter_context(Client(spec.execution.scheduler))
            except (OSError, TimeoutError) as error:  # unreachable: one line naming the address
                raise AuditEnvironmentError(
                    f"scheduler={spec.execution.scheduler!r}: cannot connect "
                    f"({' '.join(str(error).split())})",
                    culprit="scheduler",
                    fix="start the Dask scheduler there, or correct the address",
                ) from None
        else:
            workers = worker_count(n_jobs)
            cluster = stack.enter_context(
                LocalCluster(n_workers=workers, threads_per_worker=1, dashboard_address=None)
            )
            client = stack.enter_context(Client(cluster))
        with joblib.parallel_config(backend="dask", wait_for_workers_timeout=60, client=client):
            yield


def _shard_results(
    spec: AuditSpec, todo: Iterator[ShardTask], backend: str, n_jobs: int
) -> Iterator[tuple[ShardTask, dict[str, np.ndarray], float]]:
    """(task, arrays, seconds) for every task, as the shards finish.

    joblib returns results as they complete (``generator_unordered``); its Ray backend only
    returns whole lists, so there the tasks go in rounds of 2 * n_jobs and each round's
    shards are yielded (and stored) as soon as the round ends.
    """
    from joblib import Parallel, delayed

    if backend != "ray":
        yield from Parallel(return_as="generator_unordered")(
            delayed(_work)(spec, task) for task in todo
        )
        return
    workers = worker_count(n_jobs)
    size = 2 * max(1, workers)
    while batch := list(itertools.islice(todo, size)):
        yield from Parallel(return_as="list")(delayed(_work)(spec, task) for task in batch)


@contextlib.contextmanager
def _ray_backend(spec: AuditSpec, n_jobs: int) -> Iterator[None]:
    """joblib's Ray backend (``ray.util.joblib``): the cluster at ``spec.execution.scheduler`` or a
    local Ray with ``n_jobs`` CPUs, shut down afterwards if this run started it."""
    import joblib
    import ray
    from ray.util.joblib import register_ray

    started = not ray.is_initialized()
    if started:
        if spec.execution.scheduler is not None:
            ray.init(address=spec.execution.scheduler, log_to_driver=False)
        else:
            cpus = worker_count(n_jobs)
            ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    try:
        register_ray()
        with joblib.parallel_config(backend="ray", n_jobs=n_jobs):
            yield
    finally:
        if started:
            ray.shutdown()


def run_audit(
    run_dir: str | Path,
    *,
    fresh: bool = False,
    n_jobs: int | None = None,
    backend: str | None = None,
    progress: bool = True,
    summary: bool = True,
    on_shard: Callable[[ShardTask], None] | None = None,
    dry_run: bool = False,
    until_decided: bool = False,
    locked: bool = False,
) -> RunResult:
    """Run (or resume) the audit in ``run_dir``: shards, scores, then the results of every
    cell (summary.json), holding the run folder's lock (:func:`audit.run.lock.run_lock`; with
    ``locked``, the caller holds it already, as :func:`audit.report.run_audit` does around the
    run and its report). :func:`audit.report.run_audit` writes report.md and the plots too.

    Args:
        run_dir: the run folder holding ``audit.toml``.
        fresh: discard stored shards and scores and start over.
        n_jobs: overrides the spec's (it never changes a result).
        backend: overrides the spec's (it never changes a result).
        progress: show a progress bar on stderr.
        summary: compute the results of every cell and write summary.json when done.
        on_shard: called in the main process after each shard is stored.
        dry_run: only estimate (:func:`audit.run.resources.estimate_resources`): the result's
            ``estimate`` holds it; nothing is computed or written.
        until_decided: run the spec sequentially (:meth:`AuditSpec.until_decided`, as
            ``stop = "decided"`` in the spec): shards in index order, waves of n_jobs, until every
            cell's verdict is decided at anytime-valid confidence or the trials are spent
            (docs/design.md §8.18); the report covers the shards used.

    Before any work, :func:`audit.run.resources.check_fits` refuses (ValueError naming the key and
    the estimate) a spec whose disk or memory needs exceed what the machine has.

    With ``backend = "dask"`` and no ``scheduler``, a local cluster of worker processes is
    started; as with any spawned processes, a script that calls this must guard its entry
    point with ``if __name__ == "__main__":`` (the ``audit run`` command does).

    The flow and the stores are docs/design.md §2 (fingerprints §2.3), the statistics §8.

    Returns:
        :class:`RunResult`: the run folder, the shards in all / computed now / reused from
        disk, the wall time, and ``result``, the :class:`audit.run.results.AuditResult` of
        every cell (None when ``summary`` is False). Shards are written to
        ``<run_dir>/shards/`` as they finish (a shard on disk survives an interruption), the
        scores to ``<run_dir>/scores/``, the timings to run.json; with ``summary``,
        summary.json.

    Raises:
        ValueError: the folder has no valid ``audit.toml`` (the message names the key and the
            allowed values); a spec that cannot run (a training configuration that does not
            build, an unknown attack or one that cannot read the observation, a claim that
            cannot be computed); stored shards or scores of another fingerprint (a changed
            spec, package version, harness source or implementation source; the message
            names each change and asks for ``--fresh``); shards without a manifest. Errors
            raised by a plug-in implementation or an engine worker propagate; the shards
            already stored stay valid for the next run.
    """
    start = time.perf_counter()
    run_dir = run_folder(run_dir)
    spec = load_spec(run_dir)
    spec = spec.with_execution(n_jobs=n_jobs, backend=backend)
    if until_decided:
        spec = spec.until_decided()
    n_jobs, backend = spec.execution.n_jobs, spec.execution.backend
    check_runnable(spec)
    check_backend_installed(backend)
    if dry_run:
        return RunResult(
            run_dir, 0, 0, 0, time.perf_counter() - start, None, estimate_resources(spec)
        )
    lock = contextlib.nullcontext() if locked else run_lock(run_dir)
    with lock:  # one run writes to a folder at a time (audit.run.lock)
        stored = {} if fresh else _stored_tasks(spec, run_dir / SHARDS_DIR)
        check_fits(
            spec,
            run_dir,
            stored_bytes=sum((run_dir / SHARDS_DIR / n).stat().st_size for n in stored),
        )
        shards = _prepare(run_dir, spec, fresh=fresh)
        stamp = np.array(encode(shard_fingerprint(spec)))

        total = len(spec.training_keys()) * spec.shard_count()
        stored = _stored_tasks(spec, shards)
        if stored:
            logger.info(
                "%s: resuming: %d of %d shards on disk (the same fingerprint), %d to compute",
                run_dir, len(stored), total, max(0, total - len(stored)),
            )
        todo = (t for t in plan(spec) if t.filename not in stored)
        computed = 0
        from tqdm.auto import tqdm

        with tqdm(
            total=total,
            initial=len(stored),
            desc=f"audit {spec.name}",
            unit="shard",
            disable=not progress,
            file=sys.stderr,
        ) as bar:
            if spec.evidence.stop is not None:
                with _parallel_backend(spec, backend, n_jobs), _ticking(bar, spec, progress):
                    computed, used = _run_until_decided(
                        spec, shards, stamp, stored, backend, n_jobs, bar, on_shard
                    )
                spec = spec.with_trials_used(used)
            elif len(stored) < total:
                with _parallel_backend(spec, backend, n_jobs), _ticking(bar, spec, progress):
                    for task, arrays, seconds in _shard_results(spec, todo, backend, n_jobs):
                        write_atomically(
                            shards / task.filename,
                            {**arrays, SECONDS_KEY: np.float64(seconds), FINGERPRINT_KEY: stamp},
                        )
                        computed += 1
                        bar.set_postfix_str("", refresh=False)
                        bar.update(1)
                        if on_shard is not None:
                            on_shard(task)

        score_all(spec, run_dir)
        wall = time.perf_counter() - start
        RunRecord(
            wall_seconds=round(wall, 3),
            shards_total=total,
            shards_computed=computed,
            shards_reused=len(stored),
            compute_seconds=round(_compute_seconds(shards, plan(spec)), 3),
            n_jobs=n_jobs,
            backend=backend,
            finished_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            trials_used_per_side=spec.trials if spec.evidence.stop is not None else None,
            max_trials=spec.evidence.max_trials,
        ).write(run_dir / RUN_FILE)
        result = None
        if summary:
            result = summarize(spec, run_dir)
            write_summary(run_dir, result)
        return RunResult(run_dir, total, computed, len(stored), wall, result)


@contextlib.contextmanager
def _ticking(bar: Any, spec: AuditSpec, progress: bool) -> Iterator[None]:
    """Until the first shard lands, say what is running and refresh the bar every second, so
    that its elapsed time moves (a first shard of thousands of trainings takes a while)."""
    if not progress:
        yield
        return
    bar.set_postfix_str(
        f"first shards running ({spec.evidence.shard_size} IN + {spec.evidence.shard_size} OUT "
        "trials each)"
    )
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(1.0):
            bar.refresh()

    thread = threading.Thread(target=tick, name="audit-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def check_backend_installed(backend: str) -> None:
    """Refuse a backend whose package is not installed (the ``distributed`` or ``ray`` extra),
    before any work: an :class:`AuditEnvironmentError` naming the pip command."""
    package, extra = {"dask": ("distributed", "distributed"), "ray": ("ray", "ray")}.get(
        backend, (None, None)
    )
    if package is None:
        return
    import importlib.util

    if importlib.util.find_spec(package) is None:
        raise AuditEnvironmentError(
            f"backend={backend!r} needs the {extra} extra, which is not installed",
            culprit="backend",
            fix=f"pip install 'dpsgd-audit[{extra}]', or run with --backend loky",
        )


def _run_until_decided(
    spec: AuditSpec,
    shards: Path,
    stamp: np.ndarray,
    stored: dict[str, ShardTask],
    backend: str,
    n_jobs: int,
    bar: Any,
    on_shard: Callable[[ShardTask], None] | None,
) -> tuple[int, int]:
    """``stop = "decided"``: compute the shards in index order (every training key, waves of n_jobs
    shard indices) until every cell's sequential verdict is decided or the budget is spent
    (:func:`audit.stats.sequential_audit.sequential_outcome` on the shards so far,
    docs/design.md §8.18). Returns (shards computed, trials used per side). The decision reads the
    shards in index order, so it does not depend on n_jobs (a wave may compute shards beyond the
    stopping one: they stay on disk, unused)."""
    keys = spec.training_keys()
    wave = max(1, worker_count(n_jobs))
    scores: dict[tuple[str, int], dict[str, np.ndarray]] = {}
    theory: dict[Mechanism, Bounds] = {}  # each key's theory curves, computed once
    computed, index = 0, 0
    while index < spec.shard_count():
        indices = range(index, min(index + wave, spec.shard_count()))
        tasks = [ShardTask(key, i, spec.shard_trials(i)) for i in indices for key in keys]
        todo = iter([t for t in tasks if t.filename not in stored])
        for task, arrays, seconds in _shard_results(spec, todo, backend, n_jobs):
            write_atomically(
                shards / task.filename,
                {**arrays, SECONDS_KEY: np.float64(seconds), FINGERPRINT_KEY: stamp},
            )
            computed += 1
            bar.update(1)
            if on_shard is not None:
                on_shard(task)
        for i in indices:
            for key in keys:
                scores[key.name, i] = _shard_scores_of(
                    spec, shards, ShardTask(key, i, spec.shard_trials(i))
                )
            index = i + 1
            if index >= 2 and all(_decided(spec, key, scores, index, theory) for key in keys):
                return computed, min(spec.trials, index * spec.evidence.shard_size)
    return computed, spec.trials


def _shard_scores_of(spec: AuditSpec, shards: Path, task: ShardTask) -> dict[str, np.ndarray]:
    """Every attack's scores of one stored shard (kept, or computed from its observations)."""
    from audit.run.store import read_shard

    arrays = read_shard(shards / task.filename)
    if spec.evidence.store == "scores":
        return arrays
    return shard_scores(spec, task, arrays)


def _decided(
    spec: AuditSpec,
    key: TrainingKey,
    scores: dict[tuple[str, int], dict[str, np.ndarray]],
    count: int,
    theory: dict[Mechanism, Bounds],
) -> bool:
    """Whether every cell of ``key`` is decided on its first ``count`` shards."""
    from audit.run.claims import claim_for
    from audit.run.store import SCORES_IN, SCORES_OUT
    from audit.sampling import canaries_independent
    from audit.stats.sequential_audit import sequential_outcome

    k = spec.evidence.canaries_per_training
    claim = claim_for(spec, spec.mechanism(key), theory)
    # the cell's alpha (a family's alpha / cells included), bit for bit as confidence=
    confidence = exact_confidence(
        spec.cell_alpha(sum(len(resolve_attacks(spec, other)) for other in spec.training_keys()))
    )
    for cell, _ in resolve_attacks(spec, key):
        parts = [scores[key.name, i] for i in range(count)]
        outcome = sequential_outcome(
            np.concatenate([p[SCORES_IN + cell.attack] for p in parts]),
            np.concatenate([p[SCORES_OUT + cell.attack] for p in parts]),
            claim.curve,
            shard_size=spec.evidence.shard_size,
            canaries=k,
            independent=k == 1 or canaries_independent(key.sampler),
            confidence=confidence,
            delta=spec.claim.delta,
        )
        if not outcome.verdict.decided:
            return False
    return True


def _compute_seconds(shards: Path, tasks: Iterator[ShardTask]) -> float:
    total = 0.0
    for task in tasks:
        with np.load(shards / task.filename) as data:
            if SECONDS_KEY in data.files:
                total += float(data[SECONDS_KEY])
    return total
