"""Reports: report.md and the plots of the multi-run audit (:mod:`.multi_run`), the one-run
report (:mod:`.one_run`), number formatting (:mod:`.formatting`), written from the run stage's
typed results (:mod:`audit.run.results`); :func:`run_audit` runs an audit, then reports it
(:mod:`.pipeline`) (docs/design.md §2)."""

from audit.report.pipeline import run_audit

__all__ = ["run_audit"]
