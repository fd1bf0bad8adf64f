"""The run-folder store: where an audit's shards and scores live on disk, and how they are
written and read.

Layout of a run folder: ``audit.toml`` (the spec), ``shards/<key>.<index>.n<trials>.npz`` (one per
shard, :class:`ShardTask`), ``shards/manifest.json``, ``scores/<cell>.npz`` and ``run.json``. Every
file is written atomically (a temporary file, then :func:`os.replace`), so it is either absent or
complete, and every shard and score file carries its fingerprint (:mod:`audit.run.fingerprint`) in
an extra array, read back by :func:`stored_fingerprint`. :mod:`audit.run.runner` computes what goes
in; :mod:`audit.run.scoring` and :mod:`audit.report.multi_run` read it.
"""

from __future__ import annotations

import io
import os
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from audit.run.fingerprint import decode, encode, scores_fingerprint
from audit.run.spec import SPEC_FILE, AuditSpec, Cell, TrainingKey

__all__ = [
    "FINGERPRINT_KEY",
    "MANIFEST",
    "RUN_FILE",
    "SCORES_DIR",
    "SCORES_IN",
    "SCORES_OUT",
    "SECONDS_KEY",
    "SHARDS_DIR",
    "ShardTask",
    "load_scores",
    "plan",
    "read_shard",
    "run_folder",
    "stale_error",
    "stored_fingerprint",
    "write_atomically",
    "write_scores",
    "write_streamed",
]

SHARDS_DIR = "shards"
SCORES_DIR = "scores"
MANIFEST = "manifest.json"
RUN_FILE = "run.json"
SECONDS_KEY = "_seconds"
"""Extra array in each shard file: the seconds its computation took (not a result)."""
FINGERPRINT_KEY = "_fingerprint"
"""Extra array in each shard and score file: its fingerprint as JSON
(:mod:`audit.run.fingerprint`)."""


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


def write_atomically(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` to ``path`` so that ``path`` is either absent or complete."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("wb") as handle:
        np.savez(handle, allow_pickle=True, **arrays)  # numpy's default, named for the checker
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def read_shard(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as data:
        return {
            name: data[name] for name in data.files if name not in (SECONDS_KEY, FINGERPRINT_KEY)
        }


def stored_fingerprint(path: Path) -> dict[str, Any] | None:
    """The fingerprint stored in a shard or score file (None: written before fingerprints)."""
    with np.load(path, allow_pickle=False) as data:
        return decode(str(data[FINGERPRINT_KEY])) if FINGERPRINT_KEY in data.files else None


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
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
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
    code running now, :func:`audit.run.fingerprint.scores_fingerprint`)."""
    out = Path(run_dir) / SCORES_DIR
    out.mkdir(exist_ok=True)
    fingerprint = scores_fingerprint(spec) if fingerprint is None else fingerprint
    path = out / f"{cell.name}.npz"
    write_atomically(path, {
        "scores_in": np.asarray(scores_in, dtype=float),
        "scores_out": np.asarray(scores_out, dtype=float),
        FINGERPRINT_KEY: np.array(encode(fingerprint)),
    })
    return path


def load_scores(run_dir: str | Path, cell: Cell) -> tuple[np.ndarray, np.ndarray]:
    """The stored (scores_in, scores_out) of ``cell``."""
    path = Path(run_dir) / SCORES_DIR / f"{cell.name}.npz"
    if not path.exists():
        raise ValueError(f"{path} is missing; run `audit run {Path(run_dir)}` first")
    with np.load(path) as data:
        return data["scores_in"], data["scores_out"]
