"""The whole audit of a run folder: the run stage's shards, scores and results, then the report.

:func:`run_audit` is what ``audit run`` does: :func:`audit.run.runner.run_audit` (shards, scores,
the typed results of every cell, summary.json), then :func:`audit.report.multi_run.write_report`
from those results (report.md and the plots), so the runner never imports the report
(docs/design.md §2.1, §2.5).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from audit.report.multi_run import write_report
from audit.run import runner
from audit.run.lock import run_lock
from audit.run.runner import RunResult
from audit.run.store import ShardTask, run_folder

__all__ = ["run_audit"]


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
    until_decided: bool = False,
    formats: Sequence[str] = ("png",),
) -> RunResult:
    """Run (or resume) the audit in ``run_dir``: shards, scores, results, then the report.

    Args:
        run_dir: the run folder holding ``audit.toml``.
        fresh: discard stored shards and scores and start over.
        n_jobs: overrides the spec's (it never changes a result).
        backend: overrides the spec's (it never changes a result).
        progress: show a progress bar on stderr.
        report: write summary.json, report.md and (with ``plots``) the plots when done;
            without it, shards and scores only.
        on_shard: called in the main process after each shard is stored.
        dry_run: only estimate (the result's ``estimate``); nothing is computed or written.
        until_decided: a sequential audit (``stop = "decided"``, docs/design.md §8.18), the
            spec's trials the budget (:func:`audit.run.runner.run_audit`).
        formats: the plots' file formats (:data:`audit.report.multi_run.PLOT_FORMATS`): PNG always
            (report.md shows it), SVG and PDF beside it when named.

    The run itself is :func:`audit.run.runner.run_audit` (docs/design.md §2.1); the report is
    written from its records (:func:`audit.report.multi_run.write_report`, §2.5). Both under the
    run folder's lock (:func:`audit.run.lock.run_lock`, §15.3): a second run on the folder fails
    at once, naming the holder. With
    ``backend = "dask"`` and no ``scheduler`` a script that calls this must guard its entry
    point with ``if __name__ == "__main__":``.

    Returns:
        :class:`audit.run.runner.RunResult`: the run folder, the shards in all / computed now
        / reused from disk, the wall time, and ``result`` (its ``cells``: one
        :class:`audit.run.results.CellResult` per cell; None without ``report``).

    Raises:
        ValueError: the folder has no valid ``audit.toml`` (naming the key and the allowed
            values); a spec that cannot run; stored shards or scores of another fingerprint
            (naming each change and asking for ``--fresh``); shards without a manifest; a
            spec whose disk or memory needs exceed the machine's. Errors raised by a plug-in
            implementation or an engine worker propagate; the shards already stored stay
            valid for the next run.
    """
    def run(**more: bool) -> RunResult:
        return runner.run_audit(
            run_dir, fresh=fresh, n_jobs=n_jobs, backend=backend, progress=progress,
            summary=report, on_shard=on_shard, **more,
        )

    if dry_run:  # writes nothing: no lock
        return run(dry_run=True)
    # the run and its report, one writer at a time (audit.run.lock)
    with run_lock(run_folder(run_dir)):
        result = run(locked=True, until_decided=until_decided)
        if result.result is not None:
            write_report(result.run_dir, plots=plots, result=result.result, formats=formats)
    return result
