"""Run (or resume) the audit of a run folder: every cell, shard by shard, then its report.

``audit run runs/<name>`` reads ``runs/<name>/audit.toml``, computes every shard that is not yet in
``runs/<name>/shards/`` (a re-run resumes; Ctrl-C loses only the shards in flight), scores every
attack, and writes ``summary.json``, ``cells.csv``, ``report.md`` and the plots (PNG at 150 dpi;
``--format png,svg,pdf`` adds SVG or PDF). ``--fresh`` discards stored shards
and starts over. ``--dry-run`` prints the estimate (shards, trainings, disk, peak memory per worker,
store; :mod:`audit.run.resources`) and exits 0 without computing; a spec the machine cannot hold is
refused before any work, naming the key and the estimate. A run refuses to resume when the spec, the
harness code, the package version or a plug-in implementation's source changed since its shards were
computed (:mod:`audit.run.fingerprint`), naming what changed; ``--fresh`` recomputes.

A multi-run script (``implementation = "script.py:train"``) is first replayed once per training
key, and its dataset checked for the unit of privacy (the pre-flight,
:mod:`audit.deployed.multi_run_preflight`, written to ``preflight.json`` and reused while the
run's fingerprint is unchanged): a failed replay makes the key's cells ``violated``.
``--no-replay`` skips it, ``--no-dataset-check`` skips only the dataset check.
"""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "run or resume the audit of runs/<name> (shards, scores, report)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from audit.core.names import BACKENDS

    parser.add_argument(
        "run_dir", metavar="RUN_DIR", help="run folder holding audit.toml, e.g. runs/quickstart"
    )
    parser.add_argument(
        "--fresh", action="store_true", help="discard stored shards and scores, start over"
    )
    parser.add_argument(
        "--n-jobs",
        type=int,
        default=None,
        help="override the spec's n_jobs (never changes results)",
    )
    parser.add_argument(
        "--backend", choices=BACKENDS, default=None,
        help="override the spec's joblib backend (never changes results)",
    )
    from audit.cli import add_format_argument

    add_format_argument(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--no-report", action="store_true", help="compute shards and scores only")
    parser.add_argument(
        "--until-decided",
        action="store_true",
        help="sequential: add shards until every verdict is decided at anytime-valid confidence, "
             "the spec's "
        'trials the budget (as stop = "decided" in the spec)',
    )
    parser.add_argument(
        "--no-replay", action="store_true",
        help="skip the pre-flight of a multi-run script (implementation = 'script.py:train'): "
             "the record-replay of train once per training key (noise on every trained tensor, "
             "the example's data wherever it is used, clipping) and the unit-of-privacy check "
             "of its dataset; on by default (about 12 trainings of the script per key)",
    )
    parser.add_argument(
        "--no-dataset-check", action="store_true",
        help="skip only the pre-flight's unit-of-privacy check (one person in several rows)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the estimate (shards, trainings, disk, peak memory per worker, store) and "
             "exit, computing nothing",
    )


#: The multi-run path's findings, beside summary.json (written by :func:`_print_findings`).
FINDINGS_FILE = "findings.json"


def run(args: argparse.Namespace) -> int:
    import sys

    from audit.report import run_audit
    from audit.report.multi_run import REPORT_FILE, verdict_lines
    from audit.run.store import SHARDS_DIR
    from audit.run.summary import CELLS_FILE

    if args.dry_run:
        return _dry_run(args)

    from audit.cli import plot_formats

    formats = plot_formats(args)  # before any work
    try:
        _preflight(args)
        result = run_audit(
            args.run_dir,
            fresh=args.fresh,
            n_jobs=args.n_jobs,
            backend=args.backend,
            progress=not args.quiet,
            report=not args.no_report,
            until_decided=args.until_decided,
            formats=formats,
        )
    except KeyboardInterrupt:
        print(
            "audit run: interrupted; every finished shard is kept in "
            f"{args.run_dir}/{SHARDS_DIR}/, "
            f"run `audit run {args.run_dir}` again to resume",
            file=sys.stderr,
        )
        return 130
    print(
        f"{result.shards_computed} shards computed, {result.shards_reused} reused, "
        f"{result.wall_seconds:.1f} s"
    )
    _print_findings(result.run_dir, result.result)
    if result.result is not None:  # the verdict lines say why (the level: the confidence line)
        for line in verdict_lines(result.result):
            print(line)
    for cell in result.cells:
        if cell.sequential is not None:
            seq = cell.sequential
            print(f"  {cell.name}: sequential, {seq.outcome}: {seq.trainings_used} trainings used "
                  f"(budget {2 * seq.max_trials})")
    if result.cells:
        print(f"report: {result.run_dir / REPORT_FILE}")
        print(f"cells: {result.run_dir / CELLS_FILE} (one row per cell, for pandas.read_csv)")
    return 0


def _preflight(args: argparse.Namespace) -> None:
    """The pre-flight of a multi-run script, before its trainings
    (:func:`audit.deployed.multi_run_preflight.run_preflight`; docs/design/multi-run-diagnostics.md
    §16.6): the replay and the unit-of-privacy check once per training key, written to
    ``preflight.json`` (reused while the run's fingerprint is unchanged), read by the summary."""
    from audit.deployed.multi_run_preflight import run_preflight

    outcome = run_preflight(
        args.run_dir, replay=not args.no_replay, dataset_check=not args.no_dataset_check,
        fresh=args.fresh,
    )
    for line in outcome.lines():
        print(line)


def _dry_run(args: argparse.Namespace) -> int:
    """``--dry-run``: the estimate, and whether the machine holds it (exit 0 either way)."""
    from audit.run.resources import check_fits
    from audit.run.runner import run_audit
    from audit.run.store import run_folder

    result = run_audit(
        args.run_dir, n_jobs=args.n_jobs, backend=args.backend, progress=False, dry_run=True
    )
    print(f"audit run --dry-run {args.run_dir}: nothing computed; estimate:")
    assert result.estimate is not None  # dry_run=True: the result holds the estimate
    for line in result.estimate.lines():
        print(f"  {line}")
    try:
        check_fits(run_audit_spec(args), run_folder(args.run_dir))
    except ValueError as error:
        print(f"  would be refused: {error}")
    else:
        print("  fits: the free disk and the available memory of this machine hold the estimate")
    return 0


def _print_findings(run_dir: Path, result: object) -> None:
    """The multi-run path's findings (docs/design/multi-run-diagnostics.md), before the epsilon.

    Read from the run's results (:class:`audit.run.summary.FindingsAuditResult`, computed by
    :func:`audit.run.summary.summarize`, which also makes a cell ``violated`` when a finding of
    its key refutes the claimed mechanism); computed here only with ``--no-report`` (no
    summary). Also written to ``findings.json`` in the run folder (a list of
    :class:`audit.core.findings.Finding` records with their ``training`` key, as summary.json's
    ``findings``); nothing is printed or written when no training returned a canary record (the
    engine's own trainings, an old script, ``store = "scores"``).
    """
    import json

    from audit.core.findings import Finding
    from audit.run.summary import FindingsAuditResult

    records: list[dict[str, object]]
    if isinstance(result, FindingsAuditResult):
        records = result.finding_records()
        findings: list[Finding] = [f for found in result.findings.values() for f in found]
    elif result is None:  # --no-report: no summary to read them from
        from audit.run.multi_run_findings import key_findings
        from audit.run.preflight import joined, preflight_findings
        from audit.run.spec import load_spec
        from audit.run.store import run_folder

        folder = run_folder(run_dir)
        spec = load_spec(folder)
        by_key = joined(key_findings(spec, folder), preflight_findings(spec, folder))
        records = [{**f.to_dict(), "training": key} for key, found in by_key.items()
                   for f in found]
        findings = [f for found in by_key.values() for f in found]
    else:
        return
    if not findings:
        return
    (Path(run_dir) / FINDINGS_FILE).write_text(
        json.dumps(records, indent=2, default=str) + "\n"
    )
    failed = [finding for finding in findings if not finding.passed]
    print(f"findings: {len(findings) - len(failed)} of {len(findings)} passed "
          f"({Path(run_dir) / FINDINGS_FILE})")
    for finding in failed:
        kind = "VIOLATED" if finding.refutes else "note"
        print(f"  {kind}: {finding.name}: {finding.message}")


def run_audit_spec(args: argparse.Namespace) -> object:
    """The spec of ``args.run_dir`` with the command line's n_jobs and backend."""
    from audit.run.spec import load_spec
    from audit.run.store import run_folder

    return load_spec(run_folder(args.run_dir)).with_execution(
        n_jobs=args.n_jobs, backend=args.backend
    )

