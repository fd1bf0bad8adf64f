"""The run-folder store: where an audit's shards and scores live on disk, and how they are
written and read.

Layout of a run folder: ``audit.toml`` (the spec), ``shards/<key>.<index>.n<trials>.npz`` (one per
shard, :class:`ShardTask`), ``shards/manifest.json``, ``scores/<cell>.npz`` and ``run.json``. Every
file is written atomically (a temporary file, then :func:`os.replace`), so it is either absent or
complete (a write that fails, a full disk included, removes its temporary file and raises
:class:`audit.core.errors.AuditEnvironmentError` naming the file), and every shard and score file
carries its fingerprint (:mod:`audit.run.fingerprint`) in an extra array, read back by
:func:`stored_fingerprint`. A file that cannot be read back (truncated, empty, failing its zip
CRC-32 check: :func:`verify`) raises :class:`audit.core.errors.DamagedFileError` naming it;
:func:`quarantine` moves it to ``<run>/damaged/`` so that it is recomputed (docs/design.md §15.2).
:mod:`audit.run.runner` computes what goes in; :mod:`audit.run.scoring` and :mod:`audit.run.summary`
read it.
"""

from __future__ import annotations

import io
import logging
import os
import time
import zipfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

from audit.core.errors import AuditEnvironmentError, AuditInputError, DamagedFileError
from audit.run.fingerprint import (
    StoredFingerprint,
    decode,
    encode,
    scores_fingerprint,
    shard_fingerprint,
)
from audit.run.spec import SPEC_FILE, AuditSpec, Cell, TrainingKey

__all__ = [
    "DAMAGED_DIR",
    "FINGERPRINT_KEY",
    "MANIFEST",
    "RUN_FILE",
    "SCORES_DIR",
    "SCORES_IN",
    "SCORES_OUT",
    "SECONDS_KEY",
    "SHARDS_DIR",
    "Manifest",
    "ShardTask",
    "load_scores",
    "plan",
    "quarantine",
    "read_shard",
    "run_folder",
    "stale_error",
    "stored_fingerprint",
    "verify",
    "write_atomically",
    "write_scores",
    "write_streamed",
    "write_text_atomically",
]

SHARDS_DIR = "shards"
SCORES_DIR = "scores"
MANIFEST = "manifest.json"
RUN_FILE = "run.json"
DAMAGED_DIR = "damaged"
"""Where :func:`quarantine` moves a damaged shard or score file (kept for inspection, never
read)."""
SECONDS_KEY = "_seconds"
"""Extra array in each shard file: the seconds its computation took (not a result)."""
FINGERPRINT_KEY = "_fingerprint"
"""Extra array in each shard and score file: its fingerprint as JSON
(:mod:`audit.run.fingerprint`)."""

logger = logging.getLogger(__name__)
"""Where the store's notes go (a damaged file moved aside, a warning): the ``audit`` command line
configures logging to print them on stderr; a library user's own configuration decides."""

Fingerprint = StoredFingerprint
"""A fingerprint as stored (:mod:`audit.run.fingerprint`): a JSON object of the spec values, the
package and library versions and the source hashes a shard or score file was computed with."""


@dataclass(frozen=True)
class Manifest:
    """``shards/manifest.json``: the hash of the spec values that change a shard's content
    (:meth:`AuditSpec.shard_hash`), those values (:meth:`AuditSpec.shard_identity`) and the shard
    fingerprint (:func:`audit.run.fingerprint.shard_fingerprint`) the shards were computed with.
    Read back tolerantly (a manifest of an older version may lack a key: None), so that the
    fingerprint comparison, not a KeyError, names what changed."""

    shard_hash: str | None
    identity: Mapping[str, object] | None
    fingerprint: Fingerprint | None

    @classmethod
    def of(cls, spec: AuditSpec) -> Manifest:
        """The manifest of ``spec`` and the code running now."""
        return cls(spec.shard_hash(), spec.shard_identity(), shard_fingerprint(spec))

    @classmethod
    def from_json(cls, data: object) -> Manifest:
        """The manifest in ``data`` (parsed JSON).

        Raises:
            ValueError: ``data`` is not a JSON object.
        """
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        hash_, identity, fingerprint = (data.get(k) for k in ("shard_hash", "identity",
                                                               "fingerprint"))
        return cls(
            hash_ if isinstance(hash_, str) else None,
            identity if isinstance(identity, dict) else None,
            fingerprint if isinstance(fingerprint, dict) else None,
        )

    def to_json(self) -> dict[str, object]:
        """The manifest file's object (written with sorted keys)."""
        return {"shard_hash": self.shard_hash, "identity": self.identity,
                "fingerprint": self.fingerprint}


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


def plan(spec: AuditSpec, key: TrainingKey | None = None) -> Iterator[ShardTask]:
    """Every shard of the audit (or of training ``key``), training key by training key, in
    index order, lazily: a shard is arithmetic on its index (:meth:`AuditSpec.shard_trials`),
    never an item of a list of all shards."""
    for each in spec.training_keys() if key is None else [key]:
        for index in range(spec.shard_count()):
            yield ShardTask(each, index, spec.shard_trials(index))


SCORES_IN, SCORES_OUT = "scores_in.", "scores_out."
"""Prefixes of the arrays of a ``store = "scores"`` shard: ``scores_in.<attack>`` and
``scores_out.<attack>``, one float64 per trial, for every attack the spec names (resolved)."""


def _save(handle: IO[bytes], arrays: dict[str, np.ndarray]) -> None:
    np.savez(handle, **arrays)  # type: ignore[arg-type]  # numpy's stub reads **kwds as allow_pickle


def write_atomically(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` to ``path`` so that ``path`` is either absent or complete.

    Raises:
        AuditEnvironmentError: the write failed (a full disk, a read-only folder): the message
            names ``path`` and the reason, and no temporary file is left behind.
    """
    _atomic(path, lambda handle: _save(handle, arrays))


def write_text_atomically(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically, as :func:`write_atomically`."""
    _atomic(path, lambda handle: handle.write(text.encode()))


def _atomic(path: Path, write: Callable[[IO[bytes]], object]) -> None:
    """Write through ``write(handle)`` to a temporary file beside ``path``, flush it to disk and
    rename it over ``path``; on any failure remove the temporary file (so a full disk leaves
    nothing half-written) and raise an :class:`AuditEnvironmentError` naming ``path``."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as error:
        tmp.unlink(missing_ok=True)
        raise AuditEnvironmentError(
            f"{path}: cannot write ({error.strerror or error}); nothing was left half-written",
            culprit=str(path),
            fix="free disk space or make the folder writable, then run again (every finished "
                "shard is kept)",
        ) from error
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def read_shard(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as data:
            return {
                name: data[name]
                for name in data.files
                if name not in (SECONDS_KEY, FINGERPRINT_KEY)
            }
    except (zipfile.BadZipFile, EOFError, ValueError) as error:
        raise _damaged(path, error) from None


def stored_fingerprint(path: Path) -> Fingerprint | None:
    """The fingerprint stored in a shard or score file (None: written before fingerprints).

    Raises:
        DamagedFileError: the file cannot be read (truncated, empty, not an ``.npz``).
    """
    try:
        with np.load(path, allow_pickle=False) as data:
            return decode(str(data[FINGERPRINT_KEY])) if FINGERPRINT_KEY in data.files else None
    except (zipfile.BadZipFile, EOFError, ValueError) as error:
        raise _damaged(path, error) from None


def verify(path: Path) -> None:
    """Check that the ``.npz`` at ``path`` reads back whole: its zip directory, and every
    member's bytes against the CRC-32 the zip stores for it (so a bit flip is caught, not
    only a truncation).

    Raises:
        DamagedFileError: naming ``path`` and what is wrong.
    """
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, EOFError, ValueError) as error:
        raise _damaged(path, error) from None
    if bad is not None:
        raise _damaged(path, f"member {bad} fails its CRC-32 check")


def _damaged(path: Path, reason: object) -> DamagedFileError:
    size = path.stat().st_size if path.exists() else 0
    what = "empty" if size == 0 else f"damaged: {reason}"
    return DamagedFileError(
        f"{path}: {what}",
        culprit=str(path),
        fix=f"run `audit run {_run_dir_of(path)}` again: it moves a damaged file aside and "
            "recomputes it",
    )


def _run_dir_of(path: Path) -> Path:
    return path.parent.parent if path.parent.name in (SHARDS_DIR, SCORES_DIR) else path.parent


def quarantine(path: Path, run_dir: str | Path, reason: DamagedFileError | str) -> Path:
    """Move the damaged file ``path`` to ``<run_dir>/damaged/`` (named after its folder, its name
    and the time), say so in one warning (:data:`logger`; the command line prints it on stderr),
    and return where it went: it is then missing, so it is recomputed (a shard) or rescored from
    the shards (a score file)."""
    target_dir = Path(run_dir) / DAMAGED_DIR
    target_dir.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = target_dir / f"{path.parent.name}.{path.name}.{stamp}"
    os.replace(path, target)
    text = str(reason).split("; run `audit run")[0]
    logger.warning("%s; moved to %s; it will be recomputed", text, target)
    return target


def stale_error(
    where: str | Path, what: str, changed: list[str], run_dir: str | Path
) -> ValueError:
    """The one-line error for stored results of another fingerprint."""
    return ValueError(
        f"{where}: {what} computed by another version ({'; '.join(changed)}); reusing them would "
        f"mix two versions. Run `audit run {run_dir} --fresh` to discard them and recompute"
    )


def run_folder(path: str | Path) -> Path:
    """The run folder of ``path``: the folder itself, or the folder of its ``audit.toml``."""
    path = Path(path)
    return path.parent if path.name == SPEC_FILE and path.is_file() else path


def write_streamed(
    path: Path, arrays: dict[str, tuple[int, Iterator[np.ndarray]]], fingerprint: str
) -> None:
    """Write an ``.npz`` (as :func:`numpy.savez` does: members stored, not compressed) of float64
    1-D arrays given as (size, chunks), chunk by chunk, plus the fingerprint; atomically."""
    _atomic(path, lambda handle: _write_zip(handle, path, arrays, fingerprint))


def _write_zip(
    handle: IO[bytes],
    path: Path,
    arrays: dict[str, tuple[int, Iterator[np.ndarray]]],
    fingerprint: str,
) -> None:
    with zipfile.ZipFile(handle, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, (size, chunks) in arrays.items():
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                header = {
                    "descr": np.lib.format.dtype_to_descr(np.dtype(float)),
                    "fortran_order": False,
                    "shape": (size,),
                }
                np.lib.format.write_array_header_1_0(member, header)
                written = 0
                for chunk in chunks:
                    member.write(np.ascontiguousarray(chunk, dtype=float).tobytes())
                    written += chunk.size
                if written != size:
                    raise ValueError(f"{path}: {name} has {written} scores, expected {size}")
        buffer = io.BytesIO()
        np.lib.format.write_array(buffer, np.array(fingerprint), allow_pickle=False)
        archive.writestr(f"{FINGERPRINT_KEY}.npy", buffer.getvalue())


def write_scores(
    run_dir: str | Path,
    spec: AuditSpec,
    cell: Cell,
    scores_in: np.ndarray,
    scores_out: np.ndarray,
    fingerprint: Mapping[str, object] | None = None,
) -> Path:
    """Store ``scores/<cell>.npz`` with its fingerprint (default: that of ``spec`` and the
    code running now, :func:`audit.run.fingerprint.scores_fingerprint`)."""
    out = Path(run_dir) / SCORES_DIR
    out.mkdir(exist_ok=True)
    stamp = scores_fingerprint(spec) if fingerprint is None else dict(fingerprint)
    path = out / f"{cell.name}.npz"
    write_atomically(path, {
        "scores_in": np.asarray(scores_in, dtype=float),
        "scores_out": np.asarray(scores_out, dtype=float),
        FINGERPRINT_KEY: np.array(encode(stamp)),
    })
    return path


def load_scores(run_dir: str | Path, cell: Cell) -> tuple[np.ndarray, np.ndarray]:
    """The stored (scores_in, scores_out) of ``cell``."""
    path = Path(run_dir) / SCORES_DIR / f"{cell.name}.npz"
    if not path.exists():
        raise AuditInputError(
            f"{path} is missing", culprit=str(path), fix=f"run `audit run {Path(run_dir)}` first"
        )
    try:
        with np.load(path, allow_pickle=False) as data:
            return data["scores_in"], data["scores_out"]
    except (zipfile.BadZipFile, EOFError, ValueError) as error:
        raise _damaged(path, error) from None
