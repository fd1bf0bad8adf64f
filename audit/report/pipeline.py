"""The whole audit of a run folder: the run stage's shards, scores and results, then the report.

:func:`run_audit` is what ``audit run`` does: :func:`audit.run.runner.run_audit` (shards,
scores, the typed results of every cell, summary.json), then :func:`audit.report.multi_run.write_report`
from those results (report.md and the plots), so the runner never imports the report
(docs/design.md §2.1, §2.5).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from audit.report.multi_run import write_report
from audit.run import runner
from audit.run.runner import RunResult
from audit.run.store import ShardTask

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
) -> RunResult:
    """Run (or resume) the audit in ``run_dir``: shards, scores, results, then the report.

    The arguments are :func:`audit.run.runner.run_audit`'s (which documents the run, its
    errors and its result), and ``report``: write summary.json, report.md and (with
    ``plots``) the plots when done; without it, shards and scores only.
    """
    result = runner.run_audit(
        run_dir, fresh=fresh, n_jobs=n_jobs, backend=backend, progress=progress, summary=report,
        on_shard=on_shard, dry_run=dry_run,
    )
    if result.result is not None:
        write_report(result.run_dir, plots=plots, result=result.result)
    return result
