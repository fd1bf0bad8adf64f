"""The multi-run pre-flight: the replay and the unit-of-privacy check of a multi-run script, once
per training key, before its trainings (docs/design/multi-run-diagnostics.md §16.6; issue 42
item 6).

A multi-run audit (``implementation = "script.py:train"``) trains the script thousands of times,
and the findings read from its canary records (:mod:`audit.run.multi_run_findings`) see only
the canary block. A bug that never touches that block (noise missing on a bias, a second
optimizer on a head, a loss on training rows after the noise, a dataset holding each person
twice) passes them all. The one-run path's replay (:func:`audit.deployed.record_replay.replay`,
with its ``noise`` probe on every trained tensor and its ``data`` probe changing the example in
the dataset itself) and its dataset check
(:func:`audit.deployed.dataset_inspection.inspect_dataset`) see them; this module runs both on
the script the trainings call:

- **the replay**: ``train(data, canary, setup, seed)`` run as :mod:`audit.deployed.replay_script`
  runs it (the script's ``DiracCanaries(...)`` is the replay's, under
  :func:`audit.deployed.instrument.stand_in`; one slot, so the script's data set keeps the
  setup's n rows), C = ``setup.clip``, b = ``setup.batch_size``, with the seed
  ``(audit seed, key, "preflight", 0)``; about 12 trainings of the script per key (another
  seed, up to :data:`REPLAY_SEEDS`, while the slot was in no batch);
- **the unit of privacy**: the dataset the script hands to ``canaries.wrap`` in the replay's
  first run (what the trainings train on; nothing is inspected when it wraps none),
  inspected for rows that are one person (:func:`inspect_dataset`; the person's epsilon for a
  group of k from the Poisson mixture for a Poisson sampler, else from the claimed epsilon).

Each key's outcome becomes findings (:func:`replay_finding`: ``replay``, refuting when the replay
failed, a note when it was inconclusive or could not run; the inspection's
``unit_of_privacy``, a note: the row-level claim stands, the person's does not) in
``<run>/preflight.json`` (:class:`audit.run.preflight.PreflightRecord`), which the run's summary
reads: a failed replay makes the key's cells ``violated``, its sentence naming the cause.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from audit.core.findings import Finding
from audit.core.seeding import seed_sequence, torch_seed
from audit.deployed.dataset_inspection import inspect_dataset
from audit.deployed.record_replay import NOISE_LEVEL, PROBES, ReplayResult
from audit.deployed.replay_script import NoCanariesError, replay_script
from audit.plugins.contract import (
    TrainingSetup,
    load_implementation,
    setup_from,
)
from audit.run.claims import claim_for
from audit.run.lock import run_lock
from audit.run.preflight import (
    REPLAY_NOT_RUN,
    KeyPreflight,
    PreflightOptions,
    PreflightRecord,
    read_record,
    stale_reasons,
    write_record,
)
from audit.run.spec import AuditSpec, TrainingKey, load_spec
from audit.run.store import run_folder
from audit.sampling import Poisson, get_sampler

__all__ = [
    "REPLAY_LEVEL",
    "REPLAY_SEEDS",
    "PreflightOutcome",
    "preflight_key",
    "replay_finding",
    "run_preflight",
]

REPLAY_LEVEL = 2 * NOISE_LEVEL
"""The probability that a correct training fails the replay: its two statistical checks (fresh
noise on the canary block, the noise on every trained tensor), each at
:data:`audit.deployed.record_replay.NOISE_LEVEL` (Bonferroni); its sensitivity, data and
control-flow comparisons are exact beyond float rounding (level 0)."""


REPLAY_SEEDS = 4
"""Seeds the replay tries at most per key while nothing could be tested because the canary's one
slot was in no batch (probability (1 - q)^S per seed under Poisson sampling: 11% at q = 1/6,
S = 12; 37% at q = 0.01, S = 100, so 2% after four seeds). A probe needs the slot in a batch (the
``data`` probe changes the slot's rows, the sensitivity probes its gradient); another seed draws
other batches. A replay that is inconclusive for another reason is not retried."""


def _seed(spec: AuditSpec, key: TrainingKey, attempt: int) -> int:
    """The replay's seed: the child ``(key, "preflight", attempt)`` of the audit seed."""
    return torch_seed(seed_sequence(spec.experiment.seed, key.name, "preflight", attempt))


def _nothing_tested(result: ReplayResult) -> bool:
    """The replay concluded nothing only because the slot was in no batch (module docstring)."""
    return (result.inconclusive and result.reproducible and bool(result.probes)
            and all(p.tested_steps == 0 and p.inconclusive_steps == 0 for p in result.probes))


@dataclass(frozen=True)
class PreflightOutcome:
    """What :func:`run_preflight` did.

    Attributes:
        record: the run's pre-flight record (None: the audit has no pre-flight: no plug-in
            implementation, a one-run audit, simulate mode).
        computed: the keys computed now.
        reused: the keys read from a record of the current fingerprint.
        stale: why a stored record was not used (empty when none was stored or it was current).
        seconds: wall time of this call.
    """

    record: PreflightRecord | None
    computed: tuple[str, ...] = ()
    reused: tuple[str, ...] = ()
    stale: tuple[str, ...] = ()
    seconds: float = 0.0

    def lines(self) -> list[str]:
        """What ``audit run`` prints: per key, the replay's verdict and the failed findings."""
        if self.record is None:
            return []
        if not self.record.options.replay:
            return ["pre-flight: skipped (--no-replay): the replay and the unit-of-privacy check "
                    "did not run"]
        out = [f"pre-flight (replay + unit of privacy, once per training key): "
               f"{len(self.computed)} computed ({self.seconds:.1f} s), {len(self.reused)} reused"
               + (f"; the stored record was stale: {'; '.join(self.stale)}" if self.stale
                  and self.computed else "")]
        for key in self.record.keys:
            out.append(f"  {key.training}: replay {key.replay} ({key.seconds:.1f} s); "
                       f"dataset: {key.dataset}")
            if key.replay == REPLAY_NOT_RUN and not any(f.name == "replay" for f in key.findings):
                out.append(f"    replay: {key.replay_summary}")  # e.g. no DiracCanaries
            failed = [f.name for f in key.findings if not f.passed]
            if failed:  # printed in full with the run's findings, after the trainings
                out.append(f"    failed: {', '.join(failed)} (its sentence: with the run's "
                           "findings, and in preflight.json)")
            out += [f"    {f.name}: {f.message}" for f in key.findings
                    if f.passed and (not f.refutes or f.message.startswith("note"))]
            # inconclusive, not run (why), or a note (a few identical rows)
        return out


def replay_finding(result: ReplayResult) -> Finding:
    """The ``replay`` finding of a :class:`ReplayResult`: failed and refuting when the replay
    failed (its message names the cause: the first probe's kind, the tensors, the step);
    passed when it passed; passed, not refuting and saying why when it was inconclusive (never
    a failure: not reproducible from the seed, nothing tested, a step not comparable)."""
    if result.failed:
        failure = result.first_failure
        return Finding(
            "replay", False, REPLAY_LEVEL, result.message,
            steps=() if failure is None else (failure.step,),
            tensors=() if failure is None else failure.tensors,
        )
    if result.inconclusive:
        return Finding("replay", True, 0.0,
                       f"inconclusive (not a failure): {result.message}", refutes=False)
    return Finding("replay", True, REPLAY_LEVEL, result.message)


def _not_run(why: str) -> Finding:
    return Finding("replay", True, 0.0, f"not run (not a failure): {why}", refutes=False)


def _replay(
    train: Callable[..., Any], setup: TrainingSetup, seed: int, probes: Sequence[str]
) -> tuple[ReplayResult, Any]:
    """:func:`audit.deployed.replay_script.replay_script` of ``train`` with one slot, and the
    dataset the script handed to ``canaries.wrap`` in the first run (None when it wrapped
    none)."""
    seen: list[Any] = []
    result = replay_script(train, setup, seed=seed, slots=1, probes=probes, wrapped=seen)
    return result, (seen[0] if seen else None)


def _unit_of_privacy(
    dataset: Any, setup: TrainingSetup, spec: AuditSpec, key: TrainingKey
) -> Finding:
    """:func:`inspect_dataset`'s ``unit_of_privacy`` with the person's epsilon for a group of k:
    from the Poisson-subsampled Gaussian's mixture (sigma, q = b / n, S = T E) for a Poisson
    sampler, else generic group privacy from the cell's claimed epsilon
    (:func:`audit.run.claims.claim_for`; none when it cannot be computed: k stated alone)."""
    delta = float(spec.claim.delta)
    if isinstance(get_sampler(setup.sampler), Poisson):
        return inspect_dataset(
            dataset, delta=delta, noise_multiplier=float(setup.sigma),
            sample_rate=setup.batch_size / setup.n, steps=int(setup.total_steps),
        ).finding
    try:
        epsilon: float | None = claim_for(spec, spec.mechanism(key), {}).epsilon
    except ValueError:  # e.g. claim = "implementation" without its claimed_epsilon
        epsilon = None
    return inspect_dataset(dataset, epsilon=epsilon, delta=delta).finding


def preflight_key(
    spec: AuditSpec, key: TrainingKey, options: PreflightOptions | None = None
) -> KeyPreflight:
    """The pre-flight of one training key of ``spec`` (module docstring)."""
    from audit.training.trials import one_torch_thread  # torch, one thread as in a shard

    options = options or PreflightOptions(probes=PROBES)
    start = time.perf_counter()
    seed = _seed(spec, key, 0)
    if not options.replay:
        return KeyPreflight(key.name, seed, 0.0, REPLAY_NOT_RUN, "skipped (--no-replay)",
                            "not inspected (--no-replay)")
    setup = setup_from(spec.training_config(key))
    implementation = spec.experiment.implementation
    assert implementation is not None  # run_preflight covers plug-in implementations only
    train = load_implementation(implementation)
    findings: list[Finding] = []
    dataset: Any = None
    replays = 0
    with one_torch_thread():
        try:
            for attempt in range(REPLAY_SEEDS):
                seed = _seed(spec, key, attempt)
                result, seen = _replay(train, setup, seed, options.probes or PROBES)
                dataset = seen if dataset is None else dataset
                replays = attempt + 1
                if not _nothing_tested(result):
                    break
        except NoCanariesError as error:  # e.g. a built-in: no finding, the record says why
            verdict, summary = REPLAY_NOT_RUN, str(error)
        except Exception as error:  # the script under the replay's probes: a limitation
            verdict = REPLAY_NOT_RUN
            summary = (f"the replay raised {type(error).__name__}: "
                       f"{' '.join(str(error).split())}")
            findings.append(_not_run(summary))
        else:
            verdict, summary = result.verdict, result.summary()
            found = replay_finding(result)
            if replays > 1:
                tried = (f" (replay seed {replays} of at most {REPLAY_SEEDS}: under the first "
                         f"{replays - 1} the canary's slot was in no batch)")
                found = replace(found, message=found.message + tried)
                summary += "\n" + tried.strip()
            findings.append(found)
    if not options.dataset_check:
        where = "not inspected (--no-dataset-check)"
    elif dataset is None:  # the harness's own rows are not the script's data: nothing to say
        where = ("not inspected: the script's dataset was not seen (the replay did not run, or "
                 "train calls no canaries.wrap)")
    else:
        findings.append(_unit_of_privacy(dataset, setup, spec, key))
        where = f"the {len(dataset)} rows the script wraps"
    return KeyPreflight(key.name, seed, round(time.perf_counter() - start, 3), verdict, summary,
                        where, tuple(findings), replays)


def run_preflight(
    run_dir: str | Path,
    *,
    replay: bool = True,
    dataset_check: bool = True,
    probes: Sequence[str] = PROBES,
    fresh: bool = False,
    locked: bool = False,
) -> PreflightOutcome:
    """Run (or resume) the pre-flight of the run folder ``run_dir`` (module docstring) and write
    ``preflight.json``, key by key (an interrupted call keeps the keys it finished).

    Args:
        run_dir: the run folder holding ``audit.toml``.
        replay: run the replay (False: a record saying it was skipped, no findings).
        dataset_check: run the unit-of-privacy check.
        probes: the replay's probes (:data:`audit.deployed.record_replay.PROBES`).
        fresh: recompute every key even when a current record is stored.
        locked: the caller holds the run folder's lock (:func:`audit.run.lock.run_lock`).

    Returns:
        A :class:`PreflightOutcome`; its ``record`` is None (nothing done) for an audit without
        a plug-in implementation, a one-run audit or simulate mode.
    """
    start = time.perf_counter()
    folder = run_folder(run_dir)
    spec = load_spec(folder)
    if spec.experiment.implementation is None or spec.kind.one_run or not spec.mode.trains:
        return PreflightOutcome(None)
    options = (PreflightOptions(replay=True, dataset_check=bool(dataset_check),
                                probes=tuple(probes))
               if replay else PreflightOptions(replay=False, dataset_check=False))
    from audit.run.fingerprint import shard_fingerprint

    stored = None if fresh else read_record(folder)
    stale = () if stored is None else tuple(stale_reasons(stored, spec, options))
    record = (stored if stored is not None and not stale
              else PreflightRecord(fingerprint=shard_fingerprint(spec), options=options))
    computed, reused = [], []
    with contextlib.nullcontext() if locked else run_lock(folder):
        for key in spec.training_keys():
            if record.key(key.name) is not None:
                reused.append(key.name)
                continue
            record = record.with_key(preflight_key(spec, key, options))
            write_record(folder, record)  # key by key: an interruption keeps the finished keys
            computed.append(key.name)
    order = {k.name: i for i, k in enumerate(spec.training_keys())}
    record = replace(record, keys=tuple(sorted(
        (k for k in record.keys if k.training in order), key=lambda k: order[k.training])))
    return PreflightOutcome(record, tuple(computed), tuple(reused), stale,
                            time.perf_counter() - start)
