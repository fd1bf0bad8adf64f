"""The multi-run pre-flight record: the replay and the unit-of-privacy check of each training key,
as data (docs/design/multi-run-diagnostics.md §16.6; issue 42 item 6).

The findings read from the trainings' canary records (:mod:`audit.run.multi_run_findings`) see
the canary block only. What the rest of the training does (noise on every trained tensor, the
example's data used outside its clipped gradient, one person in several rows) is seen by
:func:`audit.deployed.record_replay.replay` and
:func:`audit.deployed.dataset_inspection.inspect_dataset`, which live above this package
(pyproject.toml [tool.importlinter]). ``audit run`` runs them once per training key before the
trainings (:func:`audit.deployed.multi_run_preflight.run_preflight`) and writes their outcome
here, ``<run>/preflight.json``: a :class:`PreflightRecord` holding, per key, the findings
(:class:`audit.core.findings.Finding`: ``replay`` and ``unit_of_privacy``) and what was run. This
module only reads and writes that record; the summary (:func:`audit.run.summary.summarize`)
adds its findings to the key's, so a failed replay makes the key's cells ``violated`` as a
refuting canary-record finding does.

A record is **fingerprinted**: it carries the run's shard fingerprint
(:func:`audit.run.fingerprint.shard_fingerprint`: the spec's shard values, the harness code, the
libraries and the implementation's source) and the pre-flight's options. A record whose
fingerprint differs is never used (:func:`current_record` returns None, :func:`stale_reasons`
says why), so a changed script or spec recomputes it; a record of the current fingerprint is
reused key by key, so an interrupted ``audit run`` does not redo a finished key.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from audit.core.findings import Finding
from audit.run.fingerprint import changes, decode, encode, shard_fingerprint
from audit.run.spec import AuditSpec
from audit.run.store import write_text_atomically

__all__ = [
    "PREFLIGHT_FILE",
    "PREFLIGHT_VERSION",
    "KeyPreflight",
    "PreflightOptions",
    "PreflightRecord",
    "current_record",
    "joined",
    "preflight_alpha",
    "preflight_findings",
    "read_record",
    "stale_reasons",
    "write_record",
]

PREFLIGHT_FILE = "preflight.json"
"""The pre-flight record in a run folder, beside summary.json."""

PREFLIGHT_VERSION = 1
"""The record's format; a record of another version is recomputed."""

REPLAY_NOT_RUN = "not run"


@dataclass(frozen=True)
class PreflightOptions:
    """What the pre-flight was asked to run (part of the record's fingerprint).

    Attributes:
        replay: the record-replay of the script (``audit run --no-replay``: False, nothing run).
        dataset_check: the unit-of-privacy check of the script's dataset
            (``--no-dataset-check``: False).
        probes: the replay's probes (:data:`audit.deployed.record_replay.PROBES`).
    """

    replay: bool = True
    dataset_check: bool = True
    probes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {"replay": self.replay, "dataset_check": self.dataset_check,
                "probes": list(self.probes)}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> PreflightOptions:
        probes = data.get("probes", ())
        return cls(replay=bool(data.get("replay", True)),
                   dataset_check=bool(data.get("dataset_check", True)),
                   probes=tuple(str(p) for p in probes) if isinstance(probes, list) else ())


@dataclass(frozen=True)
class KeyPreflight:
    """The pre-flight of one training key.

    Attributes:
        training: the key's name (``<sampler>-<threat_model>``).
        seed: the reported replay's seed (the child ``(key, "preflight", replays - 1)`` of the
            audit seed).
        seconds: wall time of the key's pre-flight.
        replay: ``"passed"``, ``"failed"``, ``"inconclusive"`` or ``"not run"``.
        replay_summary: the replay's :meth:`ReplayResult.summary` lines, or why it did not run.
        dataset: which rows the unit-of-privacy check read, or why it did not run.
        findings: ``replay`` (when the replay ran) and ``unit_of_privacy`` (when the dataset was
            inspected), as the summary adds them to the key's findings.
        replays: the replays run (another seed while the canary's slot was in no batch).
    """

    training: str
    seed: int
    seconds: float
    replay: str
    replay_summary: str
    dataset: str
    findings: tuple[Finding, ...] = ()
    replays: int = 1

    def to_json(self) -> dict[str, object]:
        return {**{k: v for k, v in asdict(self).items() if k != "findings"},
                "findings": [f.to_dict() for f in self.findings]}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> KeyPreflight:
        found = data.get("findings", [])
        if not isinstance(found, list):
            raise ValueError("findings: not a list")
        return cls(
            training=str(data["training"]), seed=int(str(data["seed"])),
            seconds=float(str(data["seconds"])), replay=str(data["replay"]),
            replay_summary=str(data["replay_summary"]), dataset=str(data["dataset"]),
            findings=tuple(_finding(f) for f in found),
            replays=int(str(data.get("replays", 1))),
        )


def _finding(data: object) -> Finding:
    if not isinstance(data, dict):
        raise ValueError("a finding: not an object")
    return Finding(
        name=str(data["name"]), passed=bool(data["passed"]), level=float(data["level"]),
        message=str(data["message"]), steps=tuple(int(s) for s in data.get("steps", ())),
        tensors=tuple(str(t) for t in data.get("tensors", ())),
        refutes=bool(data.get("refutes", True)),
    )


@dataclass(frozen=True)
class PreflightRecord:
    """``preflight.json``: the fingerprint it was computed under, its options, and each key's
    :class:`KeyPreflight` (in the spec's key order; a record being written holds the keys
    finished so far)."""

    fingerprint: Mapping[str, object]
    options: PreflightOptions
    keys: tuple[KeyPreflight, ...] = field(default_factory=tuple)
    version: int = PREFLIGHT_VERSION

    def key(self, name: str) -> KeyPreflight | None:
        """The pre-flight of training key ``name``, or None when not (yet) computed."""
        return next((k for k in self.keys if k.training == name), None)

    def with_key(self, done: KeyPreflight) -> PreflightRecord:
        """This record with ``done`` added (replacing an older entry of its key)."""
        kept = tuple(k for k in self.keys if k.training != done.training)
        return replace(self, keys=(*kept, done))

    def to_json(self) -> dict[str, object]:
        return {
            "version": self.version,
            "fingerprint": json.loads(encode(self.fingerprint)),
            "options": self.options.to_json(),
            "keys": [k.to_json() for k in self.keys],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> PreflightRecord:
        fingerprint = decode(json.dumps(data.get("fingerprint")))
        options, keys = data.get("options"), data.get("keys")
        if fingerprint is None or not isinstance(options, dict) or not isinstance(keys, list):
            raise ValueError("not a pre-flight record")
        return cls(
            fingerprint=fingerprint, options=PreflightOptions.from_json(options),
            keys=tuple(KeyPreflight.from_json(k) for k in keys),
            version=int(str(data.get("version", 0))),
        )


def read_record(run_dir: str | Path) -> PreflightRecord | None:
    """The run folder's pre-flight record, or None (none written, or unreadable: a damaged
    record is recomputed, never trusted)."""
    path = Path(run_dir) / PREFLIGHT_FILE
    try:
        return PreflightRecord.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_record(run_dir: str | Path, record: PreflightRecord) -> Path:
    """Write ``record`` to ``<run_dir>/preflight.json`` atomically; its path."""
    path = Path(run_dir) / PREFLIGHT_FILE
    write_text_atomically(path, json.dumps(record.to_json(), indent=2) + "\n")
    return path


def stale_reasons(
    record: PreflightRecord, spec: AuditSpec, options: PreflightOptions | None = None
) -> list[str]:
    """Why ``record`` is not the pre-flight of ``spec`` now (empty: it is): a fingerprint change
    (:func:`audit.run.fingerprint.changes`, e.g. ``implementation <name> source``), another
    format, or (when ``options`` is given) other options."""
    out = []
    if record.version != PREFLIGHT_VERSION:
        out.append(f"record format {record.version} -> {PREFLIGHT_VERSION}")
    out += changes(record.fingerprint, shard_fingerprint(spec))
    if options is not None and record.options != options:
        out.append(f"options {record.options.to_json()} -> {options.to_json()}")
    return out


def current_record(
    spec: AuditSpec, run_dir: str | Path, options: PreflightOptions | None = None
) -> PreflightRecord | None:
    """The run folder's pre-flight record when it is that of ``spec`` now (same fingerprint,
    and ``options`` when given), else None: a stale record is never used."""
    record = read_record(run_dir)
    if record is None or stale_reasons(record, spec, options):
        return None
    return record


def preflight_findings(spec: AuditSpec, run_dir: str | Path) -> dict[str, tuple[Finding, ...]]:
    """The current pre-flight record's findings by training key name (only the keys of
    ``spec`` with findings), each message prefixed by its key's name when the spec has several
    keys (as :func:`audit.run.multi_run_findings.key_findings`); {} without a current record or
    for an audit the pre-flight does not cover (no plug-in implementation, one-run)."""
    if spec.experiment.implementation is None or spec.kind.one_run:
        return {}
    record = current_record(spec, run_dir)
    if record is None:
        return {}
    keys = spec.training_keys()
    out: dict[str, tuple[Finding, ...]] = {}
    for key in keys:
        done = record.key(key.name)
        if done is None or not done.findings:
            continue
        found: Sequence[Finding] = done.findings
        if len(keys) > 1:
            found = [replace(f, message=f"{key.name}: {f.message}") for f in found]
        out[key.name] = tuple(found)
    return out


def joined(
    found: Mapping[str, tuple[Finding, ...]], before: Mapping[str, tuple[Finding, ...]]
) -> dict[str, tuple[Finding, ...]]:
    """The trainings' findings by training key with the pre-flight's (``before``:
    :func:`preflight_findings`) after each key's, as the summary and ``audit run`` list them."""
    out = dict(found)
    for name, extra in before.items():
        out[name] = (*out.get(name, ()), *extra)
    return out


def preflight_alpha(findings: Mapping[str, Sequence[Finding]]) -> float:
    """The probability that a correct training fails any of ``findings`` that can refute (the
    replay's statistical checks, e.g. its noise tests at level 1e-6 each; the sensitivity
    comparisons are exact beyond rounding): the sum of their levels (Bonferroni), added to the
    canary-record findings' alpha in a cell's verdict level."""
    return float(sum(f.level for found in findings.values() for f in found if f.refutes))
