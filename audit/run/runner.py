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

When every shard is on disk, every attack of a training key scores the same observations (or its
stored scores are gathered) into ``runs/<name>/scores/<cell>.npz`` (:mod:`audit.run.scoring`), and
:mod:`audit.report.multi_run` turns the scores into the summary, the report and the plots. The run
folder's layout, atomic writes and fingerprinted files are :mod:`audit.run.store`. The flow is one
way: this module calls the scoring and the report, which never import it.

Parallelism is joblib's: ``loky`` (worker processes), ``threading``, ``dask`` (a Dask
cluster at ``scheduler``, or a local one) or ``ray`` (joblib's Ray backend: the Ray cluster
at ``scheduler``, e.g. ``"auto"``, or a local Ray), with one torch thread per worker.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from audit.plugins.contract import run_implementation_shard
from audit.report.multi_run import write_report
from audit.run.fingerprint import changes, encode, shard_fingerprint
from audit.run.resources import check_fits, estimate_resources, release_freed_memory
from audit.run.scoring import (
    check_runnable,
    score_all,
    shard_scores,
)
from audit.run.spec import AuditSpec, load_spec
from audit.run.store import (
    FINGERPRINT_KEY,
    MANIFEST,
    RUN_FILE,
    SCORES_DIR,
    SECONDS_KEY,
    SHARDS_DIR,
    ShardTask,
    plan,
    run_folder,
    stale_error,
    stored_fingerprint,
    write_atomically,
)
from audit.training.simulate import simulate_one_run_shard, simulate_shard

__all__ = ["RunResult", "compute_shard", "run_audit"]





@dataclass(frozen=True)
class RunResult:
    """What one call of :func:`run_audit` did."""

    run_dir: Path
    shards_total: int
    shards_computed: int
    shards_reused: int
    wall_seconds: float
    cells: list[dict[str, Any]]
    estimate: Any = None
    """The :class:`audit.run.resources.ResourceEstimate` (set by ``dry_run``)."""


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


class _ShardCoordinates(TypedDict):
    """Where a shard sits: the keyword arguments every shard function takes."""

    seed: int
    shard: int
    trials: int
    cell: str


def compute_shard(spec: AuditSpec, task: ShardTask) -> dict[str, np.ndarray]:
    """The observations of one shard: ``{"y_in": ..., "y_out": ..., ...}``.

    ``mode="simulate"``: :func:`audit.training.simulate.simulate_shard` of the key's mechanism;
    ``mode="train"``: :func:`audit.training.trials.run_shard` of the key's training config, or the
    spec's ``implementation`` through :func:`audit.plugins.contract.run_implementation_shard`.
    """
    common: _ShardCoordinates = {
        "seed": spec.seed, "shard": task.index, "trials": task.trials, "cell": task.key.name
    }
    if spec.mode == "simulate" and spec.audit == "one_run":
        assert spec.canaries is not None  # one_run specs name m (spec.py checks)
        arrays = simulate_one_run_shard(
            spec.mechanism(task.key), **common, canaries=spec.canaries, shard_size=spec.shard_size
        )
    elif spec.mode == "simulate":
        arrays = simulate_shard(spec.mechanism(task.key), **common)
    elif spec.audit == "one_run":
        # the training modules import torch: loaded only in train mode (simulations need no torch)
        from audit.run.one_run_trials import run_one_run_shard, run_opacus_one_run_shard

        one_run = run_opacus_one_run_shard if spec.implementation == "opacus" else run_one_run_shard
        assert spec.canaries is not None  # one_run specs name m (spec.py checks)
        arrays = one_run(
            spec.training_config(task.key),
            **common,
            canaries=spec.canaries,
            shard_size=spec.shard_size,
        )
    else:
        config = spec.training_config(task.key)
        if spec.implementation is not None:
            arrays = run_implementation_shard(spec.implementation, config, **common)
        else:
            from audit.training.trials import run_shard  # imports torch: train mode only

            arrays = run_shard(config, **common)
    arrays = {name: np.asarray(value) for name, value in arrays.items() if value is not None}
    return shard_scores(spec, task, arrays) if spec.store == "scores" else arrays






def _work(spec: AuditSpec, task: ShardTask) -> tuple[ShardTask, dict[str, np.ndarray], float]:
    """Worker entry point: one torch thread per worker (docs/design.md §12), then the shard."""
    if spec.mode == "train":
        import torch

        torch.set_num_threads(1)
    start = time.perf_counter()
    arrays = compute_shard(spec, task)
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
    current = {
        "shard_hash": spec.shard_hash(),
        "identity": spec.shard_identity(),
        "fingerprint": fingerprint,
    }
    if manifest.exists():
        stored = json.loads(manifest.read_text())
        changed = changes(stored.get("fingerprint"), fingerprint)
        if changed:
            raise ValueError(
                f"{run_dir}: changed since its shards were computed: {'; '.join(changed)}; the "
                "stored shards would mix two versions. Run again with --fresh to discard them"
            )
    elif any(shards.glob("*.npz")):
        raise ValueError(f"{shards} holds shards but no {MANIFEST}; run again with --fresh")
    else:
        manifest.write_text(json.dumps(current, indent=2, sort_keys=True) + "\n")
    # each shard's own fingerprint: the manifest may have been rewritten
    for name in sorted(_stored_tasks(spec, shards)):
        path = shards / name
        if changed := changes(stored_fingerprint(path), fingerprint):
            raise stale_error(path, "shard", changed, run_dir)
    return shards


@contextlib.contextmanager
def _parallel_backend(spec: AuditSpec, backend: str, n_jobs: int) -> Iterator[None]:
    """joblib's backend for the run; for ``dask``, a client of the spec's scheduler or of
    a local cluster with ``n_jobs`` single-threaded workers."""
    import joblib

    if backend == "ray":
        with _ray_backend(spec, n_jobs):
            yield
        return
    if backend != "dask":
        with joblib.parallel_config(backend=backend, n_jobs=n_jobs):
            yield
        return
    from distributed import Client, LocalCluster

    with contextlib.ExitStack() as stack:
        if spec.scheduler is not None:
            client = stack.enter_context(Client(spec.scheduler))
        else:
            workers = (os.cpu_count() or 1) if n_jobs == -1 else n_jobs
            cluster = stack.enter_context(
                LocalCluster(n_workers=workers, threads_per_worker=1, dashboard_address=None)
            )
            client = stack.enter_context(Client(cluster))
        with joblib.parallel_config(backend="dask", wait_for_workers_timeout=60, client=client):
            yield


def _shard_results(
    spec: AuditSpec, todo: Iterator[ShardTask], backend: str, n_jobs: int
) -> Iterator[Any]:
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
    workers = (os.cpu_count() or 1) if n_jobs == -1 else n_jobs
    size = 2 * max(1, workers)
    while batch := list(itertools.islice(todo, size)):
        yield from Parallel(return_as="list")(delayed(_work)(spec, task) for task in batch)


@contextlib.contextmanager
def _ray_backend(spec: AuditSpec, n_jobs: int) -> Iterator[None]:
    """joblib's Ray backend (``ray.util.joblib``): the cluster at ``spec.scheduler`` or a
    local Ray with ``n_jobs`` CPUs, shut down afterwards if this run started it."""
    import joblib
    import ray
    from ray.util.joblib import register_ray

    started = not ray.is_initialized()
    if started:
        if spec.scheduler is not None:
            ray.init(address=spec.scheduler, log_to_driver=False)
        else:
            cpus = (os.cpu_count() or 1) if n_jobs == -1 else n_jobs
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
    report: bool = True,
    plots: bool = True,
    on_shard: Callable[[ShardTask], None] | None = None,
    dry_run: bool = False,
) -> RunResult:
    """Run (or resume) the audit in ``run_dir``: shards, scores, then the report.

    Args:
        run_dir: the run folder holding ``audit.toml``.
        fresh: discard stored shards and scores and start over.
        n_jobs, backend: override the spec's (they never change a result).
        progress: show a progress bar on stderr.
        report: write summary.json and report.md when done; ``plots``: and the plots.
        on_shard: called in the main process after each shard is stored.
        dry_run: only estimate (:func:`audit.run.resources.estimate_resources`): the result's
            ``estimate`` holds it; nothing is computed or written.

    Before any work, :func:`audit.run.resources.check_fits` refuses (ValueError naming the key and
    the estimate) a spec whose disk or memory needs exceed what the machine has.

    With ``backend = "dask"`` and no ``scheduler``, a local cluster of worker processes is
    started; as with any spawned processes, a script that calls this must guard its entry
    point with ``if __name__ == "__main__":`` (the ``audit run`` command does).

    The flow and the stores are docs/design.md §2 (fingerprints §2.3), the statistics §8.

    Returns:
        :class:`RunResult`: the run folder, the shards in all / computed now / reused from
        disk, the wall time, and ``cells``, the summary entries of every cell (empty when
        ``report`` is False). Shards are written to ``<run_dir>/shards/`` as they finish (a
        shard on disk survives an interruption) and the timings to run.json; with ``report``,
        the scores (``<run_dir>/scores/``), summary.json, report.md and (with ``plots``) the
        plots.

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
    n_jobs, backend = spec.n_jobs, spec.backend
    check_runnable(spec)
    if dry_run:
        return RunResult(
            run_dir, 0, 0, 0, time.perf_counter() - start, [], estimate_resources(spec)
        )
    stored = {} if fresh else _stored_tasks(spec, run_dir / SHARDS_DIR)
    check_fits(
        spec, run_dir, stored_bytes=sum((run_dir / SHARDS_DIR / n).stat().st_size for n in stored)
    )
    shards = _prepare(run_dir, spec, fresh=fresh)
    stamp = np.array(encode(shard_fingerprint(spec)))

    total = len(spec.training_keys()) * spec.shard_count()
    stored = _stored_tasks(spec, shards)
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
        if len(stored) < total:
            with _parallel_backend(spec, backend, n_jobs):
                for task, arrays, seconds in _shard_results(spec, todo, backend, n_jobs):
                    write_atomically(
                        shards / task.filename,
                        {**arrays, SECONDS_KEY: np.float64(seconds), FINGERPRINT_KEY: stamp},
                    )
                    computed += 1
                    bar.update(1)
                    if on_shard is not None:
                        on_shard(task)

    score_all(spec, run_dir)
    wall = time.perf_counter() - start
    record = {
        "wall_seconds": round(wall, 3),
        "shards_total": total,
        "shards_computed": computed,
        "shards_reused": len(stored),
        "compute_seconds": round(_compute_seconds(shards, plan(spec)), 3),
        "n_jobs": n_jobs,
        "backend": backend,
        "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (run_dir / RUN_FILE).write_text(json.dumps(record, indent=2) + "\n")
    cells: list[dict[str, Any]] = []
    if report:
        cells = write_report(run_dir, spec, plots=plots)["cells"]
    return RunResult(run_dir, total, computed, len(stored), wall, cells)


def _compute_seconds(shards: Path, tasks: Iterator[ShardTask]) -> float:
    total = 0.0
    for task in tasks:
        with np.load(shards / task.filename) as data:
            if SECONDS_KEY in data.files:
                total += float(data[SECONDS_KEY])
    return total
