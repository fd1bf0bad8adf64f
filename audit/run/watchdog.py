"""Worker processes end with the process that started them, however it ends (docs/design.md §15.4).

joblib's loky backend keeps a pool of worker processes for reuse; when ``audit run`` ends
normally, or by Ctrl-C or SIGTERM (which the command line turns into the same interruption),
joblib and loky shut them down. But a parent killed with SIGKILL runs no code at all: its
workers, re-parented to init, used to keep running their shard (and holding its memory) for
minutes. So every loky worker of a run starts :func:`exit_with_parent` as its initializer: a
daemon thread polls ``os.getppid()`` every :data:`POLL_SECONDS` and ends the worker with SIGKILL
once its parent is no longer the process that started the run (a process whose parent ended
is re-parented, to init or a subreaper). The worker ends within about half a second, or, if a
compiled kernel holds the GIL, when it releases it.

Linux's ``prctl(PR_SET_PDEATHSIG)`` is not used: it fires when the *thread* that spawned the
worker ends, and loky respawns workers from its manager thread, so it could kill a live run's
workers; polling is portable and has no such case. The loky resource tracker, whose pipe the
workers held, sees its end of file once they are gone and exits too.
"""

from __future__ import annotations

import os
import signal
import threading
import time

__all__ = ["POLL_SECONDS", "exit_with_parent", "worker_initializer"]

POLL_SECONDS = 0.5
"""How often a worker checks that its parent is alive."""


def exit_with_parent(parent_pid: int) -> None:
    """Make this process end (SIGKILL) when the process ``parent_pid`` that started it ends.

    Meant as a worker initializer: ``parent_pid`` is ``os.getpid()`` of the parent, passed when
    the pool is made. If the parent has already gone, this process ends at once.
    """
    if os.getppid() != parent_pid:  # the parent ended before the worker started
        os.kill(os.getpid(), signal.SIGKILL)
    thread = threading.Thread(
        target=_watch, args=(parent_pid,), name="audit-parent-watchdog", daemon=True
    )
    thread.start()


def worker_initializer() -> tuple[object, tuple[int]]:
    """``(initializer, initargs)`` for a pool of workers started by this process."""
    return exit_with_parent, (os.getpid(),)


def _watch(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(POLL_SECONDS)
    os.kill(os.getpid(), signal.SIGKILL)
