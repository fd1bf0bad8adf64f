"""Audit attack scores you already have (LiRA, your own canaries): no spec, no training.

``audit scores FILE --delta 1e-5`` reads FILE, an ``.npz`` with the arrays ``scores_in`` and
``scores_out`` (one score per trial, higher = member), or a CSV with a score column and a label
column (``score`` / ``label``, ``member``, ``is_member``, ``in``; labels 1/0 or true/false;
``--score-column`` / ``--label-column`` name others), and prints a sound lower bound on eps at
delta (``epsilon_lb``, at ``1 - --alpha`` confidence), the optimistic eps (not a bound) and,
with ``--claim EPS``, the verdict on the (eps, delta)-DP claim and why (which test, the numbers).
``--lower-is-member`` declares losses and other lower-is-member scores; a separation the other way
than declared is warned about in the output and report.md (the bound stays the declared
direction's). ``--reduce mean|max|min`` makes one score per trial of an array with several.
``--json`` prints the cell's JSON (the keys of a summary.json cell); ``--out DIR`` writes
report.md, tradeoff.png, result.json and cells.csv.

The threshold is ``planned_ranks`` unless ``--threshold`` says otherwise: with scores alone there
is no theory curve to plan from, so the rules are fixed by the trial counts alone (ranks 1, 4,
16, ... up to an eighth of the trials, on both tails, each joint test at alpha / K; every trial
is tested; ``--threshold planned`` plans the rank on a pilot tenth instead). The same as
``audit.audit_scores(scores_in, scores_out, delta=...)`` (:mod:`audit.report.scores_audit`).
"""

from __future__ import annotations

import argparse

from audit.core.names import SCORES_THRESHOLD, THRESHOLD_STRATEGIES

HELP = "audit given attack scores (.npz with scores_in/scores_out, or a CSV with a label column)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "file", metavar="FILE",
        help=".npz with scores_in and scores_out, or a CSV/TSV with a score and a label column",
    )
    parser.add_argument("--delta", type=float, required=True,
                        help="the delta at which eps is bounded, e.g. 1e-5")
    level = parser.add_mutually_exclusive_group()
    level.add_argument("--alpha", type=float, default=None,
                       help="1 - confidence of the bound and of each test (default 0.05), as a "
                            "spec's alpha")
    level.add_argument("--confidence", type=float, default=None,
                       help="the confidence, 1 - alpha (default 0.95)")
    parser.add_argument(
        "--claim", default=None,
        help="the claim to test: EPS (the (eps, delta)-DP curve at --delta), EPS@DELTA or gdp:MU; "
             "without it, no verdict",
    )
    parser.add_argument(
        "--threshold", choices=THRESHOLD_STRATEGIES, default=SCORES_THRESHOLD,
        help=f"how the threshold is chosen soundly (default {SCORES_THRESHOLD}: ranks 1, 4, 16, "
             "... on both tails fixed by the trial counts, each at alpha / K; planned: the rank "
             "planned on a pilot of a tenth of the trials, left out of the test)",
    )
    parser.add_argument("--seed", type=int, default=0,
                        help="seeds the pilot and the split (default 0); tied scores are counted "
                             "against the claim, never broken at random")
    parser.add_argument(
        "--lower-is-member", action="store_true",
        help="lower scores mean member (losses, distances): the scores are negated before the "
             "audit; without it higher = member, and a separation the other way is warned about",
    )
    parser.add_argument(
        "--reduce", choices=("mean", "max", "min"), default=None,
        help="an .npz array with several values per trial (shape (n, k), rows = trials): reduce "
             "each row to its mean, max or min (default: refused; each trial is one training)",
    )
    parser.add_argument("--score-column", default=None,
                        help="the CSV column (or .npz array) of scores (default: score, scores, "
                             "membership_score, mia_score or logit)")
    parser.add_argument("--label-column", default=None,
                        help="the CSV column (or .npz array) of labels, 1 = member (default: "
                             "label, member, is_member, membership, in or is_in)")
    parser.add_argument("--json", action="store_true",
                        help="print the cell's JSON (summary.json's keys: epsilon_lb, "
                             "verdict, ...)")
    parser.add_argument("--out", metavar="DIR", default=None,
                        help="write report.md, tradeoff.png, result.json and cells.csv into DIR")
    parser.add_argument("--no-plot", action="store_true", help="with --out: no tradeoff.png")
    parser.add_argument(
        "--no-estimates", action="store_true",
        help="skip the labelled estimates (bootstrap AUROC and TPR, Bayesian eps, GDP fit: about "
             "half the time on large files); the bound and the verdict are the same",
    )


def run(args: argparse.Namespace) -> int:
    import dataclasses
    import json
    import warnings

    from audit.core.errors import AuditInputError
    from audit.report.scores_audit import (
        audit_scores,
        out_folder,
        scores_summary,
        write_scores_report,
    )
    from audit.report.scores_input import read_scores

    if args.alpha is not None and not 0 < args.alpha < 1:
        raise AuditInputError(f"--alpha={args.alpha:g} must be in (0, 1), e.g. 0.05",
                              culprit="--alpha")
    if args.confidence is not None and not 0 < args.confidence < 1:
        raise AuditInputError(f"--confidence={args.confidence:g} must be in (0, 1), e.g. 0.95",
                              culprit="--confidence")
    if args.out is not None:
        out_folder(args.out)  # before any work
    given = read_scores(args.file, score_column=args.score_column, label_column=args.label_column,
                        reduce=args.reduce)
    with warnings.catch_warnings():
        # on the command line --alpha is the contract (a spec's alpha), not deprecated: passed
        # as it is, so that --alpha 0.05 computes what alpha = 0.05 in a spec does
        warnings.simplefilter("ignore", DeprecationWarning)
        result = audit_scores(
            given.scores_in, given.scores_out, delta=args.delta, confidence=args.confidence,
            alpha=args.alpha, claim=args.claim, threshold=args.threshold, seed=args.seed,
            name=given.label, source=given.source, estimates=not args.no_estimates,
            higher_is_member=not args.lower_is_member,
        )
    if given.reduce is not None:  # applied while reading: the report says so
        result = dataclasses.replace(result, reduce=given.reduce)
    written = []
    if args.out is not None:
        written = write_scores_report(args.out, result, given.scores_in, given.scores_out,
                                      plots=not args.no_plot)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
        return 0
    for line in scores_summary(result):
        print(line)
    for path in written:
        print(f"wrote {path}")
    return 0

