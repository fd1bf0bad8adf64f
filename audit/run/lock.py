"""The run-folder lock: one ``audit run`` writes to a run folder at a time (docs/design.md §15.3).

``audit run`` holds an exclusive advisory lock (:func:`fcntl.flock`) on ``<run>/.lock`` while it
writes shards, scores and the report. The lock file holds the holder's pid, host, start time
(UTC) and command line as JSON, written once the lock is held; a second run on the same folder
fails at once with :class:`audit.core.errors.AuditEnvironmentError` naming that holder, instead of
computing every shard a second time (the last writer would win).

The kernel drops a flock when its process ends, however it ends (kill -9 included), so a lock
never outlives its holder and there is nothing stale to clean: the file stays, unlocked, and
the next run takes it. flock is Linux's and the BSDs' (as is :func:`os.pread`, which the score
files already use); on a network file system without flock support the lock raises, naming the
folder, rather than pretending to hold.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from audit.core.errors import AuditEnvironmentError, AuditInputError

__all__ = ["LOCK_FILE", "holder_of", "run_lock"]

LOCK_FILE = ".lock"
"""The lock file in a run folder."""


def holder_of(run_dir: str | Path) -> str:
    """The holder of the lock of ``run_dir`` in words (pid, host, start time, command), as
    written by the holder; ``"another process"`` when it has not written itself yet."""
    try:
        record = json.loads((Path(run_dir) / LOCK_FILE).read_text())
        return (
            f"pid {record['pid']} on {record['host']}, started {record['started_utc']} "
            f"({record['command']})"
        )
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"


@contextlib.contextmanager
def run_lock(run_dir: str | Path) -> Iterator[None]:
    """Hold the lock of ``run_dir`` for the ``with`` block.

    Raises:
        AuditInputError: ``run_dir`` is not a folder.
        AuditEnvironmentError: another process holds it (named), or the folder cannot be
            locked (unwritable, or a file system without flock).
    """
    if not Path(run_dir).is_dir():
        raise AuditInputError(
            f"{run_dir}: not a run folder",
            culprit=str(run_dir),
            fix="give a folder holding audit.toml",
        )
    path = Path(run_dir) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as error:
        raise AuditEnvironmentError(
            f"{path}: cannot create the run folder's lock ({error.strerror})",
            culprit=str(path),
            fix="make the run folder writable, or copy it somewhere writable",
        ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise AuditEnvironmentError(
                    f"{Path(run_dir)}: another audit run holds this run folder: "
                    f"{holder_of(run_dir)}",
                    culprit=str(path),
                    fix="wait for it to finish (or stop it); two runs on one folder would compute "
                        "every shard twice",
                ) from None
            raise AuditEnvironmentError(
                f"{path}: cannot lock the run folder ({error.strerror})",
                culprit=str(path),
                fix="put the run folder on a local file system",
            ) from None
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": " ".join(["audit", *sys.argv[1:]]) if sys.argv else "audit",
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the flock
