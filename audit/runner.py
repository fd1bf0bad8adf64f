"""The resumable parallel runner: every shard of every (sampler, threat model), on disk.

An audit's work is a list of **shards**: ``shard_size`` IN and ``shard_size`` OUT trainings
(or simulated mechanisms) of one training key (sampler, threat model). A shard is a pure
function of (spec, training key, shard index, trial count): its seeds come from
:mod:`audit.seeding` through the audit seed, the key's name and the index, so a result never
depends on n_jobs, the backend, or how often the run was interrupted.

Each finished shard is written at once to ``runs/<name>/shards/<key>.<index>.n<trials>.npz``,
atomically (a temporary file, then :func:`os.replace`), by the main process as results
arrive, so Ctrl-C or a killed process loses only the shards in flight. A re-run loads what is
on disk and computes only what is missing; ``fresh=True`` discards it. ``shards/manifest.json``
stores the hash of every spec value that changes a shard's content (:meth:`AuditSpec.shard_hash`)
and the shard **fingerprint** (:mod:`audit.fingerprint`: those spec values, the package version,
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
its stored scores are gathered) into ``runs/<name>/scores/<cell>.npz``, and :mod:`audit.report` turns the scores into the summary,
the report and the plots.

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
from typing import Any

import numpy as np

from audit.fingerprint import changes, encode, scores_fingerprint, shard_fingerprint
from audit.observations import Observations
from audit.spec import DEFAULT_ATTACK, SPEC_FILE, AuditSpec, Cell, TrainingKey, load_spec

__all__ = [
    "MANIFEST",
    "RUN_FILE",
    "SCORES_DIR",
    "SHARDS_DIR",
    "RunResult",
    "ShardTask",
    "compute_shard",
    "load_observations",
    "load_scores",
    "plan",
    "resolve_attacks",
    "run_audit",
    "run_folder",
    "score_all",
    "score_key",
    "shard_scores",
    "stored_fingerprint",
    "write_scores",
]

SHARDS_DIR = "shards"
SCORES_DIR = "scores"
MANIFEST = "manifest.json"
RUN_FILE = "run.json"
_SECONDS = "_seconds"
"""Extra array in each shard file: the seconds its computation took (not a result)."""
_FINGERPRINT = "_fingerprint"
"""Extra array in each shard and score file: its fingerprint as JSON (:mod:`audit.fingerprint`)."""


@dataclass(frozen=True)
class ShardTask:
    """One unit of work: shard ``index`` (``trials`` IN and OUT) of training key ``key``."""

    key: TrainingKey
    index: int
    trials: int

    @property
    def filename(self) -> str:
        """``<sampler>-<threat_model>.<index>.n<trials>.npz``."""
        return f"{self.key.name}.{self.index:05d}.n{self.trials}.npz"


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
    """The :class:`audit.resources.ResourceEstimate` (set by ``dry_run``)."""


# ---------------------------------------------------------------------------------------
# planning and computing shards
# ---------------------------------------------------------------------------------------


def plan(spec: AuditSpec, key: TrainingKey | None = None) -> Iterator[ShardTask]:
    """Every shard of the audit (or of training ``key``), training key by training key, in
    index order, lazily: a shard is arithmetic on its index (:meth:`AuditSpec.shard_trials`),
    never an item of a list of all shards."""
    for each in spec.training_keys() if key is None else [key]:
        for index in range(spec.shard_count()):
            yield ShardTask(each, index, spec.shard_trials(index))


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


def compute_shard(spec: AuditSpec, task: ShardTask) -> dict[str, np.ndarray]:
    """The observations of one shard: ``{"y_in": ..., "y_out": ..., ...}``.

    ``mode="simulate"``: :func:`audit.simulate.simulate_shard` of the key's mechanism;
    ``mode="train"``: :func:`audit.trials.run_shard` of the key's training config, or the
    spec's ``implementation`` through :func:`audit.implementations.run_implementation_shard`.
    """
    common = {"seed": spec.seed, "shard": task.index, "trials": task.trials, "cell": task.key.name}
    if spec.mode == "simulate" and spec.audit == "one_run":
        from audit.simulate import simulate_one_run_shard

        arrays = simulate_one_run_shard(
            spec.mechanism(task.key), **common, canaries=spec.canaries, shard_size=spec.shard_size
        )
    elif spec.mode == "simulate":
        from audit.simulate import simulate_shard

        arrays = simulate_shard(spec.mechanism(task.key), **common)
    elif spec.audit == "one_run":
        from audit.one_run_trials import run_one_run_shard, run_opacus_one_run_shard

        one_run = run_opacus_one_run_shard if spec.implementation == "opacus" else run_one_run_shard
        arrays = one_run(spec.training_config(task.key), **common, canaries=spec.canaries, shard_size=spec.shard_size)
    else:
        config = spec.training_config(task.key)
        if spec.implementation is not None:
            from audit.implementations import run_implementation_shard

            arrays = run_implementation_shard(spec.implementation, config, **common)
        else:
            from audit.trials import run_shard

            arrays = run_shard(config, **common)
    arrays = {name: np.asarray(value) for name, value in arrays.items() if value is not None}
    return shard_scores(spec, task, arrays) if spec.store == "scores" else arrays


SCORES_IN, SCORES_OUT = "scores_in.", "scores_out."
"""Prefixes of the arrays of a ``store = "scores"`` shard: ``scores_in.<attack>`` and
``scores_out.<attack>``, one float64 per trial, for every attack the spec names (resolved)."""


def shard_scores(spec: AuditSpec, task: ShardTask, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What a ``store = "scores"`` shard keeps: the scores of every attack of the spec on the
    shard's observations, and nothing else (the statistics need only the scores).

    Every attack scores each trial from its own observations alone (:meth:`attacks.base.Attack.scores`
    scores rows in chunks), so a shard's scores equal the rows of the scores of the
    concatenated observations that ``store = "observations"`` computes.
    """
    observations = _observations(spec, task.key, arrays)
    out = {}
    for cell, attack in resolve_attacks(spec, task.key):
        scores_in, scores_out = attack.scores(observations)
        out[SCORES_IN + cell.attack] = np.asarray(scores_in, dtype=float)
        out[SCORES_OUT + cell.attack] = np.asarray(scores_out, dtype=float)
    return out


def _work(spec: AuditSpec, task: ShardTask) -> tuple[ShardTask, dict[str, np.ndarray], float]:
    """Worker entry point: one torch thread per worker (docs/design.md §12), then the shard."""
    if spec.mode == "train":
        import torch

        torch.set_num_threads(1)
    start = time.perf_counter()
    arrays = compute_shard(spec, task)
    return task, arrays, time.perf_counter() - start


def _write_atomically(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` to ``path`` so that ``path`` is either absent or complete."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("wb") as handle:
        np.savez(handle, **arrays)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def _read_shard(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as data:
        return {name: data[name] for name in data.files if name not in (_SECONDS, _FINGERPRINT)}


def stored_fingerprint(path: Path) -> dict[str, Any] | None:
    """The fingerprint stored in a shard or score file (None: written before fingerprints)."""
    from audit.fingerprint import decode

    with np.load(path, allow_pickle=False) as data:
        return decode(str(data[_FINGERPRINT])) if _FINGERPRINT in data.files else None


def stale_error(where: str | Path, what: str, changed: list[str], run_dir: str | Path) -> ValueError:
    """The one-line error for stored results of another fingerprint."""
    return ValueError(
        f"{where}: {what} computed by another version ({'; '.join(changed)}); reusing them would mix two "
        f"versions. Run `audit run {run_dir} --fresh` to discard them and recompute"
    )


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
    current = {"shard_hash": spec.shard_hash(), "identity": spec.shard_identity(), "fingerprint": fingerprint}
    if manifest.exists():
        stored = json.loads(manifest.read_text())
        changed = changes(stored.get("fingerprint"), fingerprint)
        if changed:
            raise ValueError(
                f"{run_dir}: changed since its shards were computed: {'; '.join(changed)}; the stored shards "
                "would mix two versions. Run again with --fresh to discard them"
            )
    elif any(shards.glob("*.npz")):
        raise ValueError(f"{shards} holds shards but no {MANIFEST}; run again with --fresh")
    else:
        manifest.write_text(json.dumps(current, indent=2, sort_keys=True) + "\n")
    for name in sorted(_stored_tasks(spec, shards)):  # each shard's own fingerprint: the manifest may have been rewritten
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


def _shard_results(spec: AuditSpec, todo: Iterator[ShardTask], backend: str, n_jobs: int) -> Iterator[Any]:
    """(task, arrays, seconds) for every task, as the shards finish.

    joblib returns results as they complete (``generator_unordered``); its Ray backend only
    returns whole lists, so there the tasks go in rounds of 2 * n_jobs and each round's
    shards are yielded (and stored) as soon as the round ends.
    """
    from joblib import Parallel, delayed

    if backend != "ray":
        yield from Parallel(return_as="generator_unordered")(delayed(_work)(spec, task) for task in todo)
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


def run_folder(path: str | Path) -> Path:
    """The run folder of ``path``: the folder itself, or the folder of its ``audit.toml``."""
    path = Path(path)
    return path.parent if path.name == SPEC_FILE and path.is_file() else path


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
        dry_run: only estimate (:func:`audit.resources.estimate_resources`): the result's
            ``estimate`` holds it; nothing is computed or written.

    Before any work, :func:`audit.resources.check_fits` refuses (ValueError naming the key and
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
    from audit.resources import check_fits, estimate_resources

    if dry_run:
        return RunResult(run_dir, 0, 0, 0, time.perf_counter() - start, [], estimate_resources(spec))
    stored = {} if fresh else _stored_tasks(spec, run_dir / SHARDS_DIR)
    check_fits(spec, run_dir, stored_bytes=sum((run_dir / SHARDS_DIR / n).stat().st_size for n in stored))
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
                    _write_atomically(
                        shards / task.filename, {**arrays, _SECONDS: np.float64(seconds), _FINGERPRINT: stamp}
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
        from audit.report import write_report

        cells = write_report(run_dir, spec, plots=plots)["cells"]
    return RunResult(run_dir, total, computed, len(stored), wall, cells)


def _compute_seconds(shards: Path, tasks: Iterator[ShardTask]) -> float:
    total = 0.0
    for task in tasks:
        with np.load(shards / task.filename) as data:
            if _SECONDS in data.files:
                total += float(data[_SECONDS])
    return total


# ---------------------------------------------------------------------------------------
# observations and scores
# ---------------------------------------------------------------------------------------


def check_runnable(spec: AuditSpec) -> None:
    """The checks that need the engine and the attacks, made before any shard runs: every
    training config builds, every attack exists and reads the spec's observation, and the
    claim can be computed for every cell (a missing upper bound for claim='sampler', an
    implementation that reports no epsilon for claim='implementation')."""
    if spec.mode == "train":
        for key in spec.training_keys():
            try:
                spec.training_config(key)
            except ValueError as error:
                raise ValueError(f"{spec.source}: {key.name}: {error}") from None
    from audit.report import claim_for

    theory: dict[Any, Any] = {}
    for key in spec.training_keys():
        try:
            resolve_attacks(spec, key)
            claim_for(spec, spec.mechanism(key), theory)
        except ValueError as error:
            raise ValueError(f"{spec.source}: {error}") from None


def resolve_attacks(spec: AuditSpec, key: TrainingKey) -> list[tuple[Cell, Any]]:
    """The cells of ``key`` with their attack objects; ``default`` becomes the sampler's own
    attack (:func:`attacks.default_attack`), named by its resolved name."""
    import attacks

    mechanism = spec.mechanism(key)
    resolved: dict[str, tuple[Cell, Any]] = {}
    for name in spec.attacks:
        if name == DEFAULT_ATTACK:
            attack = attacks.default_attack(mechanism, spec.observation)
        else:
            attack = name
        if isinstance(attack, str):
            attack = attacks.get_attack(attack)
        attack_name = getattr(attack, "name", name)
        observation = getattr(attack, "observation", spec.observation)
        if observation != spec.observation:
            raise ValueError(
                f"attacks: {attack_name!r} reads observation {observation!r}, but the spec records "
                f"observation={spec.observation!r}; set observation={observation!r} or pick another attack"
            )
        cell = Cell(key.sampler, key.threat_model, attack_name)
        resolved.setdefault(cell.name, (cell, attack))
    return list(resolved.values())


def load_observations(
    spec: AuditSpec, run_dir: str | Path, key: TrainingKey, fingerprint: dict[str, Any] | None = None
) -> Observations:
    """All shards of ``key`` concatenated in index order: the first ``trials_in`` IN and the
    first ``trials_out`` OUT trials.

    Every shard must carry ``fingerprint`` (default: :func:`audit.fingerprint.shard_fingerprint`
    of ``spec`` and the code running now); a shard of another fingerprint raises a ValueError
    naming what changed, a missing shard one naming the missing files.
    """
    shards = Path(run_dir) / SHARDS_DIR
    fingerprint = shard_fingerprint(spec) if fingerprint is None else fingerprint
    tasks = list(plan(spec, key))
    for task in tasks:  # every stale shard is refused before a missing one is reported
        path = shards / task.filename
        if path.exists() and (changed := changes(stored_fingerprint(path), fingerprint)):
            raise stale_error(path, "shard", changed, run_dir)
    missing = [task.filename for task in tasks if not (shards / task.filename).exists()]
    if missing:
        raise ValueError(
            f"{shards}: {len(missing)} of the {len(tasks)} shards of {key.name} are missing ({missing[0]}"
            f"{', ...' if len(missing) > 1 else ''}); run `audit run {run_dir}` to compute them"
        )
    if spec.store == "scores":
        raise ValueError(
            f"{shards}: store = \"scores\": the shards keep the attacks' scores, not the observations; "
            "set store = \"observations\" and run `audit run --fresh` to keep them"
        )
    parts: dict[str, list[np.ndarray]] = {}
    for task in tasks:
        for name, value in _read_shard(shards / task.filename).items():
            parts.setdefault(name, []).append(value)
    fields: dict[str, np.ndarray] = {}
    for name, values in parts.items():
        if name.endswith("_in"):
            fields[name] = np.concatenate(values)[: spec.trials_in]
        elif name.endswith("_out"):
            fields[name] = np.concatenate(values)[: spec.trials_out]
    return _observations(spec, key, fields)


def _observations(spec: AuditSpec, key: TrainingKey, fields: dict[str, np.ndarray]) -> Observations:
    """:class:`Observations` of ``key`` from named arrays (unknown ``*_in``/``*_out`` arrays
    go to its metadata)."""
    fields = {k: v for k, v in fields.items() if k.endswith(("_in", "_out"))}
    known = set(Observations.__dataclass_fields__) - {"mechanism", "metadata"}
    extra = {k: v for k, v in fields.items() if k not in known}
    obs = Observations(mechanism=spec.mechanism(key), **{k: v for k, v in fields.items() if k in known})
    obs.metadata.update(extra)
    return obs


def score_key(spec: AuditSpec, run_dir: str | Path, key: TrainingKey) -> list[Cell]:
    """Score every attack of ``key`` on the same observations (shards of the current
    fingerprint only); write ``scores/<cell>.npz`` (``scores_in``, ``scores_out`` and the
    scores' fingerprint). Returns the cells of ``key``.

    With ``store = "scores"`` the shards' scores are copied into the score files shard by shard
    (memory: one shard, whatever the trial count)."""
    out = Path(run_dir) / SCORES_DIR
    fingerprint = shard_fingerprint(spec)
    if spec.store == "scores":
        return _gather_scores(spec, run_dir, key, fingerprint)
    observations = load_observations(spec, run_dir, key, fingerprint)
    out.mkdir(exist_ok=True)
    cells = []
    for cell, attack in resolve_attacks(spec, key):
        scores_in, scores_out = attack.scores(observations)
        write_scores(run_dir, spec, cell, scores_in, scores_out, scores_fingerprint(spec, fingerprint))
        cells.append(cell)
    return cells


def _gather_scores(spec: AuditSpec, run_dir: str | Path, key: TrainingKey, fingerprint: dict[str, Any]) -> list[Cell]:
    """Write ``scores/<cell>.npz`` of every cell of ``key`` from its ``store = "scores"`` shards
    (index order, the first ``trials_in`` IN and ``trials_out`` OUT), streamed shard by shard;
    a ValueError when a shard is missing or stale, or when an attack the spec names was not
    scored when the shards were computed (its scores need the observations)."""
    shards = Path(run_dir) / SHARDS_DIR
    tasks = list(plan(spec, key))
    missing = [task.filename for task in tasks if not (shards / task.filename).exists()]
    if missing:
        raise ValueError(
            f"{shards}: {len(missing)} of the {len(tasks)} shards of {key.name} are missing ({missing[0]}"
            f"{', ...' if len(missing) > 1 else ''}); run `audit run {run_dir}` to compute them"
        )
    cells = resolve_attacks(spec, key)
    for task in tasks:
        path = shards / task.filename
        if changed := changes(stored_fingerprint(path), fingerprint):
            raise stale_error(path, "shard", changed, run_dir)
        with np.load(path, allow_pickle=False) as data:
            kept = sorted(n[len(SCORES_IN):] for n in data.files if n.startswith(SCORES_IN))
        for cell, _ in cells:
            if cell.attack not in kept:
                raise ValueError(
                    f"{path}: attack {cell.attack!r}: its scores were not stored (store = \"scores\" keeps the scores of "
                    f"the attacks named when the shards were computed: {', '.join(kept)}); re-scoring with another "
                    f"attack needs the observations: set store = \"observations\" and run `audit run {run_dir} --fresh`"
                )

    def parts(name: str, limit: int) -> Iterator[np.ndarray]:
        left = limit
        for task in tasks:
            if left <= 0:
                return
            with np.load(shards / task.filename, allow_pickle=False) as data:
                part = data[name][:left]
            left -= part.size
            yield part

    out = Path(run_dir) / SCORES_DIR
    out.mkdir(exist_ok=True)
    stamp = encode(scores_fingerprint(spec, fingerprint))
    for cell, _ in cells:
        _write_streamed(out / f"{cell.name}.npz", {
            "scores_in": (spec.trials_in, parts(SCORES_IN + cell.attack, spec.trials_in)),
            "scores_out": (spec.trials_out, parts(SCORES_OUT + cell.attack, spec.trials_out)),
        }, stamp)
    return [cell for cell, _ in cells]


def _write_streamed(path: Path, arrays: dict[str, tuple[int, Iterator[np.ndarray]]], fingerprint: str) -> None:
    """Write an ``.npz`` (as :func:`numpy.savez` does: members stored, not compressed) of float64
    1-D arrays given as (size, chunks), chunk by chunk, plus the fingerprint; atomically."""
    import io
    import zipfile

    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, (size, chunks) in arrays.items():
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                header = {"descr": np.lib.format.dtype_to_descr(np.dtype(float)), "fortran_order": False, "shape": (size,)}
                np.lib.format.write_array_header_1_0(member, header)
                written = 0
                for chunk in chunks:
                    member.write(np.ascontiguousarray(chunk, dtype=float).tobytes())
                    written += chunk.size
                if written != size:
                    raise ValueError(f"{path}: {name} has {written} scores, expected {size}")
        buffer = io.BytesIO()
        np.lib.format.write_array(buffer, np.array(fingerprint), allow_pickle=False)
        archive.writestr(f"{_FINGERPRINT}.npy", buffer.getvalue())
    with tmp.open("rb+") as handle:
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def write_scores(
    run_dir: str | Path,
    spec: AuditSpec,
    cell: Cell,
    scores_in: np.ndarray,
    scores_out: np.ndarray,
    fingerprint: dict[str, Any] | None = None,
) -> Path:
    """Store ``scores/<cell>.npz`` with its fingerprint (default: that of ``spec`` and the
    code running now, :func:`audit.fingerprint.scores_fingerprint`)."""
    out = Path(run_dir) / SCORES_DIR
    out.mkdir(exist_ok=True)
    fingerprint = scores_fingerprint(spec) if fingerprint is None else fingerprint
    path = out / f"{cell.name}.npz"
    _write_atomically(path, {
        "scores_in": np.asarray(scores_in, dtype=float),
        "scores_out": np.asarray(scores_out, dtype=float),
        _FINGERPRINT: np.array(encode(fingerprint)),
    })
    return path


def score_all(spec: AuditSpec, run_dir: str | Path) -> list[Cell]:
    """:func:`score_key` for every training key; the cells in spec order."""
    return [cell for key in spec.training_keys() for cell in score_key(spec, run_dir, key)]


def load_scores(run_dir: str | Path, cell: Cell) -> tuple[np.ndarray, np.ndarray]:
    """The stored (scores_in, scores_out) of ``cell``."""
    path = Path(run_dir) / SCORES_DIR / f"{cell.name}.npz"
    if not path.exists():
        raise ValueError(f"{path} is missing; run `audit run {Path(run_dir)}` first")
    with np.load(path) as data:
        return data["scores_in"], data["scores_out"]
