"""Rebuild the report of a run folder from its stored scores (no training).

``audit report runs/<name>`` recomputes ``summary.json``, ``cells.csv``, ``report.md``,
``tradeoff_<cell>.png`` and ``overview.png`` (``--format png,svg,pdf``: also as SVG or PDF) from
``runs/<name>/scores/`` (scoring from the
shards any cell whose scores are missing or stale), e.g. after changing ``delta``, ``alpha``,
``confidence`` or the ``claim`` in the spec. Stored scores and shards are used only if their
fingerprint matches the spec and the code running now (:mod:`audit.run.fingerprint`); otherwise it
stops with one line naming what changed (run ``audit run --fresh`` to recompute).
"""

from __future__ import annotations

import argparse

HELP = "rebuild summary.json, report.md and the plots of runs/<name> from stored scores"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dir", metavar="RUN_DIR", help="run folder holding audit.toml, e.g. runs/quickstart"
    )
    from audit.cli import add_format_argument

    add_format_argument(parser)


def run(args: argparse.Namespace) -> int:
    from audit.cli import plot_formats
    from audit.report.multi_run import REPORT_FILE, verdict_lines, write_report
    from audit.run.lock import run_lock
    from audit.run.store import run_folder
    from audit.run.summary import CELLS_FILE

    formats = plot_formats(args)  # before any work
    with run_lock(run_folder(args.run_dir)):  # not while `audit run` writes the folder
        result = write_report(args.run_dir, formats=formats)
    if result.scores_version is not None:
        print(f"note: {result.scores_version.text}")
    for line in verdict_lines(result):  # the confidence line, each cell's verdict and why
        print(line)
    print(f"report: {run_folder(args.run_dir) / REPORT_FILE}")
    print(f"cells: {run_folder(args.run_dir) / CELLS_FILE} (one row per cell, for pandas.read_csv)")
    return 0
