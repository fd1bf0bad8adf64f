"""The harness's failures and their exit codes: one vocabulary for every command
(docs/design.md §15).

Every failure the ``audit`` command can meet ends in one line that names the culprit (the cell,
shard, trial, file or spec key) and says what to do, with an exit code that tells the kind of
failure apart from a verdict:

====  =======================================================================================
code  meaning
====  =======================================================================================
0     done (``audit run``: whatever the verdicts; they are in the report)
1     ``audit check-accountant``: some cell is unsound (a finding, not a failure)
2     bad input: a spec key, a command-line option, a plug-in (model factory, implementation,
      accountant) that raises, a training that diverges (:class:`AuditInputError`)
3     environment and I/O: an unreadable, unwritable or full disk, a damaged file, a run
      folder held by another run, a missing backend, an unreachable scheduler
      (:class:`AuditEnvironmentError`)
4     internal error: a bug of the harness itself (please report it, with ``--debug``)
130   interrupted (Ctrl-C, SIGTERM): every finished shard is kept
====  =======================================================================================

:class:`AuditInputError` subclasses :class:`ValueError`, so code (and tests) that catch a
ValueError for bad input keep working. Both error classes carry ``culprit`` (what is at fault:
a file, a key, a shard) and ``fix`` (what to do), which the one-line message ends with.
"""

from __future__ import annotations

__all__ = [
    "EXIT_ENVIRONMENT",
    "EXIT_FINDING",
    "EXIT_INPUT",
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "AuditEnvironmentError",
    "AuditError",
    "AuditInputError",
    "DamagedFileError",
    "exit_code",
    "one_line",
]

EXIT_OK = 0
EXIT_FINDING = 1
EXIT_INPUT = 2
EXIT_ENVIRONMENT = 3
EXIT_INTERNAL = 4
EXIT_INTERRUPTED = 130


class AuditError(Exception):
    """A failure with a culprit and a fix, printed by the command line as one line.

    Args:
        message: what went wrong, naming the culprit.
        culprit: the file, key, cell or shard at fault (kept for programs; already in the message).
        fix: what to do; appended to the message after ``"; "`` unless it is already there.
    """

    exit_code: int = EXIT_INTERNAL

    def __init__(self, message: str, *, culprit: str | None = None, fix: str | None = None) -> None:
        text = message if not fix or fix in message else f"{message}; {fix}"
        super().__init__(text)
        self.culprit = culprit
        self.fix = fix

    def __reduce__(self) -> tuple[object, ...]:
        # keyword-only fields survive pickling (a worker process raises, the parent re-raises)
        return (_rebuild, (type(self), str(self), self.culprit, self.fix))


def _rebuild(cls: type[AuditError], text: str, culprit: str | None, fix: str | None) -> AuditError:
    error = cls.__new__(cls)
    Exception.__init__(error, text)
    error.culprit, error.fix = culprit, fix
    return error


class AuditInputError(AuditError, ValueError):
    """Bad input (exit code 2): a spec key, an option, a plug-in that raises, a diverging
    training."""

    exit_code = EXIT_INPUT


class AuditEnvironmentError(AuditError):
    """The machine, not the input (exit code 3): disk, files, locks, backends, schedulers."""

    exit_code = EXIT_ENVIRONMENT


def exit_code(error: BaseException) -> int:
    """The exit code of the command line for ``error`` (see the table above)."""
    if isinstance(error, AuditError):
        return error.exit_code
    if isinstance(error, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    if isinstance(error, (OSError, MemoryError, EOFError)):
        return EXIT_ENVIRONMENT
    if isinstance(error, ValueError):
        return EXIT_INPUT
    return EXIT_INTERNAL


def one_line(error: BaseException) -> str:
    """``error`` as one line: its message with newlines folded; an OSError names its file, and
    an error of another type than those above names its type (it is unexpected)."""
    if isinstance(error, OSError) and not isinstance(error, AuditError):
        where = f"{error.filename}: " if error.filename else ""
        text = f"{where}{error.strerror or error}"
        if error.filename2:
            text += f" (-> {error.filename2})"
    elif isinstance(error, MemoryError):
        text = f"out of memory ({error or 'MemoryError'}); lower n_jobs or shard_size"
    elif isinstance(error, (AuditError, ValueError)):
        text = str(error)
    else:
        text = f"{type(error).__name__}: {error}"
    return " ".join(text.split())


class DamagedFileError(AuditEnvironmentError):
    """A stored file (shard, score file, manifest) that cannot be read back: truncated, empty,
    or failing its checksum. ``audit run`` moves it aside and recomputes it."""
