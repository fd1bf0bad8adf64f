"""Scores: every attack of a training key scores the stored observations of its shards.

When every shard of a training key is on disk, each attack of the spec scores the same observations
(or, with ``store = "scores"``, the scores the shards kept are gathered) into ``scores/<cell>.npz``
(:mod:`audit.run.store`), read by the summary (:mod:`audit.report.multi_run`). Only shards and
scores of the current fingerprint are ever read. Also the checks made before any shard runs
(:func:`check_runnable`).

With the score family on (``family=True``, or the spec's ``[experiment] score_family = true``
once the spec has that key: :func:`family_enabled`), every training key also gets the cell
``<sampler>/<threat model>/score_family`` (:class:`audit.run.score_selection.ScoreFamilyAttack`):
the family's statistics chosen on a selection half of the trainings, its scores those of the
confirmation half, and the choice written beside them in ``scores/<cell>.selection.json``
(docs/design/attacks.md §7.4). Opt-in: the spec's other cells and their results do not change.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

import attacks
from audit.core.observations import Observations
from audit.run.claims import claim_for
from audit.run.fingerprint import (
    ShardFingerprint,
    changes,
    encode,
    scores_fingerprint,
    shard_fingerprint,
)
from audit.run.score_selection import ScoreFamilyAttack, ScoreSelection
from audit.run.spec import DEFAULT_ATTACK, AuditSpec, Cell, TrainingKey
from audit.run.store import (
    SCORES_DIR,
    SCORES_IN,
    SCORES_OUT,
    SHARDS_DIR,
    ShardTask,
    plan,
    read_shard,
    stale_error,
    stored_fingerprint,
    write_scores,
    write_streamed,
    write_text_atomically,
)

SELECTION_SUFFIX = ".selection.json"
"""``scores/<cell>.selection.json``: how the score_family cell chose its statistic."""

__all__ = [
    "SELECTION_SUFFIX",
    "check_runnable",
    "family_enabled",
    "load_observations",
    "observations_of",
    "read_selection",
    "resolve_attacks",
    "score_all",
    "score_key",
    "shard_scores",
]


def shard_scores(
    spec: AuditSpec, task: ShardTask, arrays: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """What a ``store = "scores"`` shard keeps: the scores of every attack of the spec on the
    shard's observations and a script's canary records (for the multi-run findings), nothing
    else (the statistics need only the scores).

    Every attack scores each trial from its own observations alone
    (:meth:`attacks.base.Attack.scores` scores rows in chunks), so a shard's scores equal the rows
    of the scores of the concatenated observations that ``store = "observations"`` computes.
    """
    observations = observations_of(spec, task.key, arrays)
    out = {}
    for cell, attack in resolve_attacks(spec, task.key):
        scores_in, scores_out = attack.scores(observations)
        out[SCORES_IN + cell.attack] = np.asarray(scores_in, dtype=float)
        out[SCORES_OUT + cell.attack] = np.asarray(scores_out, dtype=float)
    # A script's canary records (audit.plugins.contract.CanaryRecord) stay beside the scores:
    # the multi-run findings (audit.deployed.multi_run) read them from the shard.
    from audit.plugins.contract import RECORD_PREFIX

    out.update({name: value for name, value in arrays.items() if name.startswith(RECORD_PREFIX)})
    return out


def family_enabled(spec: AuditSpec, family: bool | None = None) -> bool:
    """Whether the score_family cell is scored: ``family`` when given, else the spec's
    ``[experiment] score_family`` (False while the spec has no such key)."""
    if family is not None:
        return bool(family)
    return bool(getattr(spec.experiment, "score_family", False))


def check_runnable(spec: AuditSpec, *, family: bool | None = None) -> None:
    """The checks that need the engine and the attacks, made before any shard runs: every
    training config builds, every attack exists and reads the spec's observation, and the
    claim can be computed for every cell (a missing upper bound for claim='sampler', an
    implementation that reports no epsilon for claim='implementation')."""
    if spec.mode.trains:
        for key in spec.training_keys():
            try:
                spec.training_config(key)
            except ValueError as error:
                raise ValueError(f"{spec.source}: {key.name}: {error}") from None
    theory: dict[Any, Any] = {}
    for key in spec.training_keys():
        try:
            resolve_attacks(spec, key, family=family)
            claim_for(spec, spec.mechanism(key), theory)
        except ValueError as error:
            raise ValueError(f"{spec.source}: {error}") from None


def resolve_attacks(
    spec: AuditSpec, key: TrainingKey, *, family: bool | None = None
) -> list[tuple[Cell, Any]]:
    """The cells of ``key`` with their attack objects; ``default`` becomes the sampler's own
    attack (:func:`attacks.default_attack`), named by its resolved name; the score_family cell
    last when :func:`family_enabled` (a ValueError where it cannot be scored)."""
    mechanism = spec.mechanism(key)
    resolved: dict[str, tuple[Cell, Any]] = {}
    for name in spec.experiment.attacks:
        attack: Any  # a name, then the attack it names
        if name == DEFAULT_ATTACK:
            attack = attacks.default_attack(mechanism, spec.experiment.observation)
        else:
            attack = name
        if isinstance(attack, str):
            attack = attacks.get_attack(attack)
        attack_name = getattr(attack, "name", name)
        observation = getattr(attack, "observation", spec.experiment.observation)
        if observation != spec.experiment.observation:
            raise ValueError(
                f"attacks: {attack_name!r} reads observation {observation!r}, but the spec records "
                f"observation={spec.experiment.observation!r}; set observation={observation!r} or "
                "pick another attack"
            )
        cell = Cell(key.sampler, key.threat_model, attack_name)
        resolved.setdefault(cell.name, (cell, attack))
    if family_enabled(spec, family):
        cell = Cell(key.sampler, key.threat_model, ScoreFamilyAttack.name)
        resolved.setdefault(cell.name, (cell, _family_attack(spec)))
    return list(resolved.values())


def _family_attack(spec: AuditSpec) -> ScoreFamilyAttack:
    """The score_family cell's scorer, or a ValueError naming what prevents it."""
    where = "score_family"
    if spec.experiment.observation != ScoreFamilyAttack.observation:
        raise ValueError(
            f"{where}: needs observation='all_iterates' (the statistics read every step); the "
            f"spec records observation={spec.experiment.observation!r}"
        )
    if spec.evidence.store == "scores":
        raise ValueError(
            f'{where}: store = "scores" scores each shard alone, and the family is chosen on '
            'half of all trainings; set store = "observations"'
        )
    if spec.evidence.stop is not None:
        raise ValueError(
            f"{where}: a sequential audit (stop = {spec.evidence.stop!r}) reads its shards in "
            "order, which the held-out split does not keep; remove stop"
        )
    group = 1 if spec.kind.one_run else spec.evidence.canaries_per_training
    return ScoreFamilyAttack(seed=spec.experiment.seed, group=group, delta=spec.claim.delta,
                             alpha=spec.claim.alpha)


def load_observations(
    spec: AuditSpec,
    run_dir: str | Path,
    key: TrainingKey,
    fingerprint: ShardFingerprint | None = None,
) -> Observations:
    """All shards of ``key`` concatenated in index order: the first ``trials_in`` IN and the
    first ``trials_out`` OUT trials.

    Every shard must carry ``fingerprint`` (default: :func:`audit.run.fingerprint.shard_fingerprint`
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
            f"{shards}: {len(missing)} of the {len(tasks)} shards of {key.name} are missing "
            f"({missing[0]}"
            f"{', ...' if len(missing) > 1 else ''}); run `audit run {run_dir}` to compute them"
        )
    if spec.evidence.store == "scores":
        raise ValueError(
            f'{shards}: store = "scores": the shards keep the attacks\' scores, not the '
            'observations; set store = "observations" and run `audit run --fresh` to keep them'
        )
    parts: dict[str, list[np.ndarray]] = {}
    for task in tasks:
        for name, value in read_shard(shards / task.filename).items():
            parts.setdefault(name, []).append(value)
    fields: dict[str, np.ndarray] = {}
    k = spec.evidence.canaries_per_training  # rows per training (docs/design.md §8.17)
    for name, values in parts.items():
        if name.endswith("_in"):
            fields[name] = np.concatenate(values)[: spec.evidence.trials_in * k]
        elif name.endswith("_out"):
            fields[name] = np.concatenate(values)[: spec.evidence.trials_out * k]
    return observations_of(spec, key, fields)


def observations_of(
    spec: AuditSpec, key: TrainingKey, fields: dict[str, np.ndarray]
) -> Observations:
    """:class:`Observations` of ``key`` from named arrays (unknown ``*_in``/``*_out`` arrays
    go to its metadata)."""
    fields = {k: v for k, v in fields.items() if k.endswith(("_in", "_out"))}
    known = set(Observations.__dataclass_fields__) - {"mechanism", "metadata"}
    extra = {k: v for k, v in fields.items() if k not in known}
    return Observations(
        mechanism=spec.mechanism(key), metadata=dict(extra),
        **{k: v for k, v in fields.items() if k in known},
    )


def score_key(
    spec: AuditSpec, run_dir: str | Path, key: TrainingKey, *, family: bool | None = None
) -> list[Cell]:
    """Score every attack of ``key`` on the same observations (shards of the current
    fingerprint only); write ``scores/<cell>.npz`` (``scores_in``, ``scores_out`` and the
    scores' fingerprint), and for the score_family cell its choice,
    ``scores/<cell>.selection.json`` (:class:`audit.run.score_selection.ScoreSelection`).
    Returns the cells of ``key``.

    With ``store = "scores"`` the shards' scores are copied into the score files shard by shard
    (memory: one shard, whatever the trial count)."""
    out = Path(run_dir) / SCORES_DIR
    fingerprint = shard_fingerprint(spec)
    if spec.evidence.store == "scores":
        return _gather_scores(spec, run_dir, key, fingerprint, family=family)
    observations = load_observations(spec, run_dir, key, fingerprint)
    out.mkdir(exist_ok=True)
    cells = []
    for cell, attack in resolve_attacks(spec, key, family=family):
        if isinstance(attack, ScoreFamilyAttack):
            choice = attack.choose(observations)
            scores_in, scores_out = choice.scores_in, choice.scores_out
            write_text_atomically(
                out / f"{cell.name}{SELECTION_SUFFIX}",
                json.dumps(choice.selection.to_json(), indent=2) + "\n",
            )
        else:
            scores_in, scores_out = attack.scores(observations)
        write_scores(
            run_dir, spec, cell, scores_in, scores_out, scores_fingerprint(spec, fingerprint)
        )
        cells.append(cell)
    return cells


def _gather_scores(
    spec: AuditSpec, run_dir: str | Path, key: TrainingKey, fingerprint: ShardFingerprint, *,
    family: bool | None = None,
) -> list[Cell]:
    """Write ``scores/<cell>.npz`` of every cell of ``key`` from its ``store = "scores"`` shards
    (index order, the first ``trials_in`` IN and ``trials_out`` OUT), streamed shard by shard;
    a ValueError when a shard is missing or stale, or when an attack the spec names was not
    scored when the shards were computed (its scores need the observations)."""
    shards = Path(run_dir) / SHARDS_DIR
    tasks = list(plan(spec, key))
    for task in tasks:  # every stale shard is refused before a missing one is reported
        path = shards / task.filename
        if path.exists() and (changed := changes(stored_fingerprint(path), fingerprint)):
            raise stale_error(path, "shard", changed, run_dir)
    missing = [task.filename for task in tasks if not (shards / task.filename).exists()]
    if missing:
        raise ValueError(
            f"{shards}: {len(missing)} of the {len(tasks)} shards of {key.name} are missing "
            f"({missing[0]}"
            f"{', ...' if len(missing) > 1 else ''}); run `audit run {run_dir}` to compute them"
        )
    cells = resolve_attacks(spec, key, family=family)
    for task in tasks:
        path = shards / task.filename
        with np.load(path, allow_pickle=False) as data:
            kept = sorted(n[len(SCORES_IN):] for n in data.files if n.startswith(SCORES_IN))
        for cell, _ in cells:
            if cell.attack not in kept:
                raise ValueError(
                    f"{path}: attack {cell.attack!r}: its scores were not stored (store = "
                    '"scores" keeps the scores of '
                    f"the attacks named when the shards were computed: {', '.join(kept)}); "
                    "re-scoring with another "
                    'attack needs the observations: set store = "observations" and run `audit '
                    f'run {run_dir} --fresh`'
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
    k = spec.evidence.canaries_per_training
    n_in, n_out = spec.evidence.trials_in * k, spec.evidence.trials_out * k
    for cell, _ in cells:
        write_streamed(out / f"{cell.name}.npz", {
            "scores_in": (n_in, parts(SCORES_IN + cell.attack, n_in)),
            "scores_out": (n_out, parts(SCORES_OUT + cell.attack, n_out)),
        }, stamp)
    return [cell for cell, _ in cells]


def read_selection(run_dir: str | Path, cell: Cell) -> ScoreSelection | None:
    """How the score_family ``cell`` chose its statistic (``scores/<cell>.selection.json``,
    written by :func:`score_key`); None for another cell or before it was scored. The report
    states it beside the cell's bound (:meth:`ScoreSelection.sentence`)."""
    path = Path(run_dir) / SCORES_DIR / f"{cell.name}{SELECTION_SUFFIX}"
    if cell.attack != ScoreFamilyAttack.name or not path.exists():
        return None
    return ScoreSelection.from_json(json.loads(path.read_text(encoding="utf-8")))


def score_all(
    spec: AuditSpec, run_dir: str | Path, *, family: bool | None = None
) -> list[Cell]:
    """:func:`score_key` for every training key; the cells in spec order."""
    return [cell for key in spec.training_keys()
            for cell in score_key(spec, run_dir, key, family=family)]
