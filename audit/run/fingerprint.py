"""Fingerprints of stored results: what code and which spec values produced a shard or a score.

A shard (:mod:`audit.run.runner`) is a pure function of the spec's shard-relevant values
(:meth:`audit.run.spec.AuditSpec.shard_identity`) *and of the code that computed it*: the engine,
the simulator, the attacks, and, for a plug-in, the implementation. Its **fingerprint** records
all of them:

- ``spec``: :meth:`~audit.run.spec.AuditSpec.shard_identity` (the values, so that a change can be
  named key by key);
- ``package_version``: the installed version of the harness (``importlib.metadata``);
- ``harness_source``: SHA-256 over the ``.py`` files under ``audit/`` and ``attacks/`` that can
  compute a shard or a score, i.e. all but :data:`NOT_SHARD_CODE` (the CLI, the report and the
  run modules that only turn scores into statistics and summaries; ``audit/deployed/`` and
  ``audit/accounting/`` stay hashed: a user's training script trains with
  :class:`audit.deployed.instrument.DiracCanaries`, the Opacus plug-in reads an accountant),
  each entered as its path relative to the repository root and its bytes (:func:`source_hash`),
  computed once per process; ``tests/test_fingerprint.py`` checks that every module the shard
  computation imports is hashed;
- ``libraries``: the installed version of each library in :data:`LIBRARIES` (``"absent"`` when
  not installed), since an upgrade of torch or numba can change a shard's floats;
- ``engine``: the engine's default route per closed-form model on the spec's device
  (:func:`audit.training.compiled.default_routes`: on the CPU, whether the compiled kernel of
  :mod:`audit.training.compiled` is usable here): the routes agree only up to float32 rounding, so
  shards of two routes are not mixed;
- ``implementation``: for ``implementation = ...``, the name and the SHA-256 of the source
  file(s) of the callable that :func:`audit.plugins.contract.load_implementation` resolves (the
  module named in the spec and the module that defines the callable), hashed from disk each
  time it is asked.

A stored score adds ``scoring``: the values that change scores but not shards (the trial counts,
which truncate the shards, and the observation). The manifest and every shard and score file
carry their fingerprint as JSON, so a mixed set is caught even when the manifest was rewritten;
:func:`changes` names what differs, for the one-line errors of ``audit run`` and ``audit report``.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import inspect
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TypedDict

from audit.plugins.contract import BUILTINS, load_implementation
from audit.run.spec import AuditSpec
from audit.training.compiled import default_routes

__all__ = [
    "HARNESS_PACKAGES",
    "LIBRARIES",
    "NOT_SHARD_CODE",
    "ImplementationSource",
    "ScoresFingerprint",
    "Scoring",
    "ShardFingerprint",
    "StoredFingerprint",
    "changes",
    "decode",
    "encode",
    "harness_source_hash",
    "hashed_files",
    "implementation_source",
    "library_versions",
    "package_version",
    "portable_implementation",
    "portable_path",
    "scores_fingerprint",
    "shard_fingerprint",
    "source_hash",
]

HARNESS_PACKAGES: tuple[str, ...] = ("audit", "attacks")
"""The packages whose source determines a shard or a score."""

NOT_SHARD_CODE: tuple[str, ...] = (
    "audit/cli/",
    "audit/report/",
    "audit/run/summary.py",
    "audit/run/results.py",
    "audit/run/proof_report.py",
    "audit/run/planning.py",
    "audit/run/preflight.py",
)
"""Paths (relative to the repository root; a trailing ``/``: a whole folder) whose code never
computes a shard or a score: the command line and the report (above :mod:`audit.run`), and the
run modules that turn stored
scores into statistics and summary records (recomputed by every ``audit report``, §15.5) or plan
sizes. Editing them keeps the stored shards (docs/design.md §2.3). The runner imports
:mod:`audit.run.summary` only to decide when a sequential audit stops, which chooses how many
shards are computed, never what a shard holds."""

LIBRARIES: tuple[str, ...] = ("torch", "numpy", "scipy", "numba", "opacus", "dp-accounting")
"""The distributions whose versions enter the fingerprint: those that compute a shard."""

DISTRIBUTION = "dpsgd-audit"
"""The distribution name of the harness (pyproject.toml)."""


StoredFingerprint = Mapping[str, object]
"""A fingerprint as read back from a file (:func:`decode`): a JSON object, possibly written by an
older version (a key missing or of another shape), so every value is checked before use."""


class ImplementationSource(TypedDict):
    """:func:`implementation_source`: a plug-in's name, its source files (:func:`portable_path`)
    and the SHA-256 over them."""

    name: str
    files: list[str]
    sha256: str


class ShardFingerprint(TypedDict):
    """:func:`shard_fingerprint`: everything that determines a shard (the module docstring)."""

    spec: dict[str, object]
    package_version: str
    harness_source: str
    libraries: dict[str, str]
    engine: dict[str, str]
    implementation: ImplementationSource | None


class Scoring(TypedDict):
    """The values that change scores but not shards (:func:`scores_fingerprint`)."""

    trials_in: int
    trials_out: int
    observation: str


class ScoresFingerprint(ShardFingerprint):
    """:func:`scores_fingerprint`: the shard fingerprint plus ``scoring``."""

    scoring: Scoring


def _excluded(relative: str) -> bool:
    """Whether the file at POSIX path ``relative`` is in :data:`NOT_SHARD_CODE`."""
    return any(
        relative.startswith(item) if item.endswith("/") else relative == item
        for item in NOT_SHARD_CODE
    )


def hashed_files(
    root: Path, packages: tuple[str, ...] = HARNESS_PACKAGES
) -> list[tuple[str, Path]]:
    """(POSIX path relative to ``root``, path) of every ``.py`` file under ``root/<package>``
    that can compute a shard (all but :data:`NOT_SHARD_CODE`), sorted by the relative path."""
    return sorted(
        (relative, path)
        for package in packages
        for path in (root / package).rglob("*.py")
        if "__pycache__" not in path.parts
        and not _excluded(relative := path.relative_to(root).as_posix())
    )


def source_hash(root: Path, packages: tuple[str, ...] = HARNESS_PACKAGES) -> str:
    """SHA-256 over the files of :func:`hashed_files`, in their order; each file enters as its
    path, a NUL byte, its length and its bytes, so that renaming or moving code changes the hash
    too."""
    digest = hashlib.sha256()
    for relative, path in hashed_files(root, packages):
        data = path.read_bytes()
        digest.update(f"{relative}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


@functools.cache
def harness_source_hash() -> str:
    """:func:`source_hash` of the harness this process imported (``audit/`` and ``attacks/``
    beside each other), computed once per process."""
    root = Path(__file__).resolve().parents[2]
    return source_hash(root)


@functools.cache
def package_version() -> str:
    """The installed version of the harness, or ``"unknown"`` when it is not installed."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


@functools.cache
def library_versions() -> dict[str, str]:
    """``{distribution: version}`` of each of :data:`LIBRARIES` (``importlib.metadata``;
    ``"absent"`` when not installed), read once per process."""
    out = {}
    for name in LIBRARIES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


def portable_path(path: Path | str) -> str:
    """``path`` as summary.json may state it, naming no absolute path of the machine that wrote
    it: relative to the repository root (or the working directory) when it lies under it; a
    relative path as it is; else (an absolute path of another checkout) from its last
    ``audit/``, ``attacks/`` or ``examples/`` folder on, or its file name."""
    path = Path(path)
    if not path.is_absolute():
        return path.as_posix()
    for base in (Path(__file__).resolve().parents[2], Path.cwd().resolve()):
        try:
            return path.resolve().relative_to(base).as_posix()
        except ValueError:
            continue
    parts = path.parts
    for index in range(len(parts) - 2, 0, -1):
        if parts[index] in (*HARNESS_PACKAGES, "examples"):
            return "/".join(parts[index:])
    return path.name


def portable_implementation(value: object) -> object:
    """A fingerprint's ``implementation`` entry with :func:`portable_path` files (as stored by
    an older version, possibly with absolute paths); anything else as it is."""
    if not isinstance(value, dict) or not isinstance(value.get("files"), list):
        return value
    return {**value, "files": [portable_path(str(f)) for f in value["files"]]}


def implementation_source(name: str) -> ImplementationSource:
    """``{"name", "files", "sha256"}`` of implementation ``name``: the source files of the
    module named in the spec and of the module defining the callable (resolved by
    :func:`audit.plugins.contract.load_implementation`), hashed from disk; for a script
    (``path/to/train.py:train``) also every loaded module of the script's folder.

    Raises:
        ValueError: no source file can be found, so a changed implementation could not be told
            from the one that computed the stored shards.
    """
    function = load_implementation(name)
    module_name = BUILTINS.get(name, name).partition(":")[0]
    files = set()
    for module in (sys.modules.get(module_name), inspect.getmodule(inspect.unwrap(function))):
        path = getattr(module, "__file__", None)
        if path:
            files.add(Path(path).resolve())
    # a user's script: also the modules it imported from its own folder
    if module_name.endswith(".py"):
        folder = Path(module_name).resolve().parent
        for module in list(sys.modules.values()):
            path = getattr(module, "__file__", None)
            if path and Path(path).resolve().parent == folder and path.endswith(".py"):
                files.add(Path(path).resolve())
    if not files:
        raise ValueError(
            f"implementation={name!r}: no source file found for it, so a changed implementation "
            "could not be detected; define it in a module file ('package.module:function')"
        )
    digest = hashlib.sha256()
    for path in sorted(files):
        data = path.read_bytes()
        digest.update(f"{path.name}\0{len(data)}\0".encode())
        digest.update(data)
    portable = [portable_path(p) for p in sorted(files)]
    return {"name": name, "files": portable, "sha256": digest.hexdigest()}


def shard_fingerprint(spec: AuditSpec) -> ShardFingerprint:
    """Everything that determines a shard of ``spec`` (see the module docstring)."""
    return {
        "spec": spec.shard_identity(),
        "package_version": package_version(),
        "harness_source": harness_source_hash(),
        "libraries": library_versions(),
        "engine": default_routes(spec.execution.device),
        "implementation": None
        if spec.experiment.implementation is None
        else implementation_source(spec.experiment.implementation),
    }


def scores_fingerprint(
    spec: AuditSpec, shards: ShardFingerprint | None = None
) -> ScoresFingerprint:
    """Everything that determines a stored score of ``spec``: the shard fingerprint (``shards``
    if already computed) and the values that change scores only."""
    base = shard_fingerprint(spec) if shards is None else shards
    scoring: Scoring = {
        "trials_in": spec.evidence.trials_in,
        "trials_out": spec.evidence.trials_out,
        "observation": spec.experiment.observation,
    }
    return {**base, "scoring": scoring}


def encode(fingerprint: StoredFingerprint) -> str:
    """Canonical JSON of a fingerprint (sorted keys), as stored in shard and score files."""
    return json.dumps(fingerprint, sort_keys=True, separators=(",", ":"))


def decode(text: str | None) -> StoredFingerprint | None:
    """A stored fingerprint, or None for a file written before fingerprints (or unreadable)."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def changes(stored: StoredFingerprint | None, current: ShardFingerprint) -> list[str]:
    """What differs between a stored fingerprint and the current one, in words (empty: the same).

    Spec and scoring keys are named with their old and new values; code as ``harness code``,
    ``package version`` and ``implementation <name> source``. ``current`` is compared and named
    as it is stored (:func:`encode`: tuples as lists, keys sorted).
    """
    if stored is None:
        return ["no fingerprint (stored before fingerprints were recorded, by an older harness)"]
    now = _json_object(json.loads(encode(current)))
    out = [
        f"spec key {item}"
        for part in ("spec", "scoring")
        if part in now
        for item in _changed_keys(_json_object(stored.get(part)), _json_object(now[part]))
    ]
    if stored.get("package_version") != now["package_version"]:
        out.append(f"package version {stored.get('package_version')} -> {now['package_version']}")
    if stored.get("harness_source") != now["harness_source"]:
        out.append("harness code (the source of audit/ or attacks/)")
    old_libraries = stored.get("libraries")
    if not isinstance(old_libraries, dict):
        out.append("library versions (not recorded by the version that computed them)")
    else:
        out += [
            f"library {name} {old_libraries.get(name, 'absent')} -> {version}"
            for name, version in _json_object(now["libraries"]).items()
            if old_libraries.get(name, "absent") != version
        ]
    if stored.get("engine") != now["engine"]:
        out.append(
            f"engine routes {stored.get('engine')} -> {now['engine']} (numba installed or "
            "removed?)"
        )
    old, new = _json_object(stored.get("implementation")), current["implementation"]
    if new is not None and old.get("name") == new["name"] and old.get("sha256") != new["sha256"]:
        out.append(f"implementation {new['name']} source ({', '.join(new['files'])})")
    return out


def _json_object(value: object) -> Mapping[str, object]:
    """``value`` when it is a JSON object (a dict), else an empty one: a stored fingerprint's part
    that is missing (None) or of another shape compares as no keys."""
    return value if isinstance(value, dict) else {}


def _changed_keys(
    old: Mapping[str, object], new: Mapping[str, object], prefix: str = ""
) -> list[str]:
    """``"<key>: <old> -> <new>"`` for every differing (nested) key."""
    changed = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            changed += _changed_keys(a, b, f"{prefix}{key}.")
        elif a != b:
            changed.append(f"{prefix}{key}: {a!r} -> {b!r}")
    return changed
