"""Reports of an audit: ``report.md``, ``tradeoff_<cell>.png``, ``overview.png``.

Written from the typed results of the run stage (:class:`audit.run.results.AuditResult`,
computed from the stored scores by :func:`audit.run.summary.summarize`; docs/design.md §2.5,
§10), never from a dict: report.md states what was audited, one table, one sentence per cell
and the plots; ``summary.json`` is the same records' JSON (:func:`write_report` writes both). A
multi-run audit of a script whose trainings returned canary records
(:class:`audit.run.summary.FindingsAuditResult`) states its findings first, each failed one in
the sentence a user acts on (docs/design/multi-run-diagnostics.md); a score_family cell states
how its statistic was chosen (:func:`audit.run.scoring.read_selection`).

Plots are drawn with matplotlib's Agg backend (no display needed), written as PNG at
:data:`audit.report.formatting.PLOT_DPI` and, when asked (``formats``, ``audit report --format
png,svg``), as SVG or PDF beside it; summary.json's cells are also written flat, one row each, to
``cells.csv`` (:data:`audit.run.summary.CELLS_FILE`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from audit.report.figures import legend_below
from audit.report.formatting import (
    bound_level,
    check_formats,
    format_bound,
    save_figure,
    verdict_level,
)
from audit.report.formatting import fmt as _fmt
from audit.report.formatting import pyplot as _pyplot
from audit.report.one_run import one_run_reason, one_run_sentence, plot_accuracy
from audit.report.roc import THEORY_STYLES, plot_roc, roc_file, theory_curves
from audit.run.claims import Claim
from audit.run.multi_run_findings import findings_level
from audit.run.results import THRESHOLD_TEXT, AuditResult, CellResult, Confidence, OneRunCellResult
from audit.run.scoring import read_selection
from audit.run.spec import AuditSpec, load_spec
from audit.run.store import run_folder, write_text_atomically
from audit.run.summary import (
    SUMMARY_FILE,
    FindingsAuditResult,
    FindingsVerdictTests,
    summarize,
    write_summary,
)
from audit.stats.binary import Verdict, clopper_pearson_lower, clopper_pearson_upper
from audit.stats.score_files import plotted_tradeoff
from audit.stats.sequential import SequentialVerdict
from audit.theory import Bounds

__all__ = [
    "OVERVIEW_FILE",
    "REPORT_FILE",
    "SUMMARY_FILE",
    "check_formats",
    "confidence_text",
    "findings_lines",
    "format_bound",
    "render_markdown",
    "verdict_lines",
    "verdict_reason",
    "write_report",
]

REPORT_FILE = "report.md"
OVERVIEW_FILE = "overview.png"


def confidence_text(confidence: Confidence) -> str:
    """The confidence in words, e.g. ``95% per cell`` or ``95% for all 4 cells at once
    (Bonferroni: alpha / 4 = 0.0125 per cell)``."""
    level = f"{100 * confidence.level:g}%"
    if not confidence.family:
        return (
            f'{level} per cell (confidence = "cell": each cell\'s statement alone, not all at once)'
        )
    return (
        f"{level} for all {confidence.cells} cells at once (confidence = \"family\", Bonferroni: "
        f"α / {confidence.cells} = {confidence.alpha:.3g} per cell)"
    )


def write_report(
    run_dir: str | Path,
    spec: AuditSpec | None = None,
    *,
    plots: bool = True,
    result: AuditResult | None = None,
    formats: str | Sequence[str] = ("png",),
) -> AuditResult:
    """Write summary.json and cells.csv (:func:`audit.run.summary.write_summary`), report.md and
    (unless ``plots`` is False) tradeoff_<cell>.png and roc_<cell>.png (the same evidence on
    ROC axes, :func:`audit.report.roc.plot_roc`; accuracy_<cell>.png for a one-run cell) and
    overview.png;
    return the results. ``result``: the results to write (default:
    :func:`audit.run.summary.summarize` of the stored scores). ``formats``: the plots' formats
    (:data:`audit.report.formatting.PLOT_FORMATS`, e.g. ``"png,svg"``): PNG always, at
    :data:`audit.report.formatting.PLOT_DPI`; SVG and PDF beside it when named.

    Raises:
        ValueError: an unknown format in ``formats`` (before anything is written).
    """
    formats = check_formats(formats)
    run_dir = run_folder(run_dir)
    if result is None:
        result = summarize(load_spec(run_dir) if spec is None else spec, run_dir)
    write_summary(run_dir, result)
    if plots:
        for cell in result.cells:
            inputs = result.inputs[cell.name]
            if isinstance(cell, OneRunCellResult):
                plot_accuracy(
                    run_dir / cell.plot,
                    cell,
                    inputs.scores_in,
                    inputs.scores_out,
                    inputs.claim.curve,
                    formats,
                )
                continue
            plot_tradeoff(
                run_dir / cell.plot,
                cell,
                inputs.scores_in,
                inputs.scores_out,
                inputs.bounds,
                inputs.claim,
                formats,
            )
            plot_roc(
                run_dir / roc_file(cell.plot),
                cell,
                inputs.scores_in,
                inputs.scores_out,
                inputs.bounds,
                inputs.claim,
                formats,
            )
        plot_overview(run_dir / OVERVIEW_FILE, result, formats)
    write_text_atomically(run_dir / REPORT_FILE, render_markdown(result, run_dir=run_dir))
    return result


# ---------------------------------------------------------------------------------------
# report.md
# ---------------------------------------------------------------------------------------


def cell_sentence(cell: CellResult) -> str:
    """One plain sentence on one cell: eps_lb at the report's level (:func:`bound_level`, as
    the header states it), the verdict, what made it (:func:`verdict_reason`) and, when
    violated, its level (:func:`verdict_level`)."""
    if isinstance(cell, OneRunCellResult):
        return "".join(one_run_sentence(cell, _fmt)) + _theory_sentence(cell)
    level = bound_level(cell.confidence)
    head = (
        f"**{cell.cell.sampler} / {cell.cell.threat_model} / {cell.cell.attack}**: with "
        f"{cell.trials_in} IN and {cell.trials_out} OUT trials{_canaries_text(cell)} the attack "
        "shows "
        f"ε ≥ {_fmt(cell.epsilon_lb, side='lower')} at δ = {cell.delta:g} ({level})"
    )
    ev = cell.evidence
    claim = f"{cell.claim_description} claim ε = {_fmt(cell.claimed_epsilon)}"
    if cell.sequential is not None:  # docs/design.md §8.18
        seq = cell.sequential
        return (
            head
            + (
                f" (anytime-valid); sequential audit, {seq.outcome} after {seq.trainings_used} "
                "trainings "
                f"(budget {2 * seq.max_trials}): {claim} is **{cell.verdict}** (e-value "
                f"{seq.e_value:.3g}{' >= ' if cell.violated else ' < '}1/α = {1 / cell.alpha:g})"
            )
            + _theory_sentence(cell)
        )
    assert isinstance(ev, Verdict)
    tests = cell.verdict_tests
    if tests.curve:
        body = f"; {claim} is **violated**: {_curve_reason(cell)}"
        if tests.epsilon:
            body += f", and {_epsilon_reason(cell)}"
        else:
            # the curve fails at one FPR; the (eps, delta) summary of the claim may still hold
            body += (
                f". The claim fails there, at FPR ≤ {_fmt(ev.fpr_hi, side='upper')}, not in its ε "
                "at "
                f"δ = {cell.delta:g} (ε_lb does not exceed the claimed ε)"
            )
    elif tests.epsilon:
        body = (
            f"; {claim} is **violated**: ε_lb exceeds the claimed ε at the same δ (the ε bound's "
            "threshold "
            "refutes every curve with that (ε, δ)), though the verdict's own threshold does not "
            "refute the "
            "claimed curve"
        )
    elif isinstance(tests, FindingsVerdictTests) and tests.findings:
        body = (
            f"; {claim} is **violated** by the multi-run findings ({', '.join(tests.refuted)}: "
            "above), though the scores alone do not refute it (ε_lb and the curve test stay as "
            "computed)"
        )
    else:
        body = (
            f"; the trials are **consistent** with {claim}: neither the curve test (the "
            "verdict's soundly chosen threshold) nor the ε_lb test refutes its trade-off curve "
            f"at {level}, which does not prove it"
        )
    if cell.violated:
        body += f"; the verdict holds at {verdict_level(cell.confidence, _findings_alpha(cell))}"
    return head + body + _theory_sentence(cell)


def _run_findings_alpha(result: AuditResult) -> float:
    """The findings' family-wise alpha over a run (0 without findings): the one its cells'
    verdicts were given (the trainings' findings and the pre-flight's), else
    :func:`audit.run.multi_run_findings.findings_level`."""
    if not isinstance(result, FindingsAuditResult):
        return 0.0
    return max((_findings_alpha(c) for c in result.cells), default=0.0) or findings_level(
        result.spec)


def _findings_alpha(cell: CellResult) -> float:
    """The findings' family-wise alpha in a cell's verdict (0 without findings)."""
    tests = cell.verdict_tests
    return tests.findings_alpha if isinstance(tests, FindingsVerdictTests) else 0.0


def _curve_reason(cell: CellResult) -> str:
    ev = cell.evidence
    assert isinstance(ev, Verdict)
    return (
        f"at FPR ≤ {_fmt(ev.fpr_hi, side='upper')} the attack's FNR is ≤ "
        f"{_fmt(ev.fnr_hi, side='upper')}, below the {_fmt(ev.f_of_fpr_hi, side='lower')} that "
        "the claimed trade-off curve guarantees"
    )


def _epsilon_reason(cell: CellResult) -> str:
    return (
        f"ε_lb = {_fmt(cell.epsilon_lb, side='lower')} exceeds the claimed ε = "
        f"{_fmt(cell.claimed_epsilon)} at δ = {cell.delta:g}"
    )


def verdict_reason(cell: CellResult, *, with_level: bool = True) -> str:
    """Why the cell's verdict is what it is, in one clause (the CLI's verdict line): which test
    refuted the claim (the curve test at its FPR, ε_lb above the claimed ε, the refuting
    findings, the sequential e-value) with the verdict's level (unless ``with_level`` is False:
    a caller that states it once, as ``audit run``'s confidence line), or that none did."""
    if isinstance(cell, OneRunCellResult):
        return one_run_reason(cell, _fmt, with_level=with_level)
    if cell.sequential is not None:
        seq = cell.sequential
        return (f"sequential: e-value {seq.e_value:.3g}{' >= ' if cell.violated else ' < '}"
                f"1/α = {1 / cell.alpha:g}")
    tests = cell.verdict_tests
    if not cell.violated:
        return (
            f"no test refutes the claim at {bound_level(cell.confidence)}: ε_lb "
            f"{_fmt(cell.epsilon_lb, side='lower')} ≤ claimed {_fmt(cell.claimed_epsilon)} and "
            "the curve test does not reject"
        )
    reasons = []
    if tests.epsilon:
        reasons.append(f"the ε_lb test: {_epsilon_reason(cell)}")
    if tests.curve:
        reasons.append(f"the curve test: {_curve_reason(cell)}")
    if isinstance(tests, FindingsVerdictTests) and tests.findings:
        reasons.append(f"the findings {', '.join(tests.refuted)}")
    level = verdict_level(cell.confidence, _findings_alpha(cell))
    return f"refuted by {'; '.join(reasons)}" + (f" (verdict at {level})" if with_level else "")


def verdict_lines(result: AuditResult) -> list[str]:
    """What ``audit run`` and ``audit report`` print after the findings: the confidence line
    (eps_lb's level, :func:`confidence_text`, and a violated verdict's, :func:`verdict_level`),
    then one line per cell, its eps_lb, the claim and the verdict with why
    (:func:`verdict_reason`); [] without cells."""
    if not result.cells:
        return []
    scope = result.confidence
    findings_alpha = _run_findings_alpha(result)
    lines = [f"confidence: {confidence_text(scope)}; a violated verdict: "
             f"{verdict_level(scope, findings_alpha)}"]
    for cell in result.cells:
        lines.append(
            f"  {cell.name}: eps_lb {format_bound(cell.epsilon_lb, 'lower')} (claimed "
            f"{_fmt(cell.claimed_epsilon)}) -> {cell.verdict}: "
            f"{verdict_reason(cell, with_level=False)}"
        )
    return lines


def findings_lines(result: AuditResult) -> list[str]:
    """report.md's first lines for a multi-run audit with findings
    (:class:`audit.run.summary.FindingsAuditResult`): each failed finding in the sentence a user
    acts on (those that refute the claimed mechanism first), then how many passed; [] for
    another result."""
    if not isinstance(result, FindingsAuditResult):
        return []
    found = [f for each in result.findings.values() for f in each]
    failed = sorted((f for f in found if not f.passed), key=lambda f: not f.refutes)
    alpha = _run_findings_alpha(result)
    lines = [
        f"**Findings from the trainings' canary records and the pre-flight (replay, unit of "
        f"privacy): {len(found) - len(failed)} of {len(found)} passed** (each accuses at "
        f"family-wise level {alpha:.3g} over the run, i.e. {100 * (1 - alpha):.4g}% confidence; "
        "docs/design/multi-run-diagnostics.md).",
        "",
    ]
    for f in failed:
        kind = "VIOLATED" if f.refutes else "note"
        lines.append(f"- **{kind}: {f.name}**: {f.message.rstrip('.')}.")
    if failed:
        lines += ["", "A failed finding that refutes the claimed mechanism makes the cells of its "
                  "training key violated, whatever their ε_lb.", ""]
    return lines


def _selection_sentence(cell: CellResult, run_dir: Path | None) -> str:
    """A score_family cell's choice of statistic (:meth:`ScoreSelection.sentence`), else ''."""
    if run_dir is None:
        return ""
    selection = read_selection(run_dir, cell.cell)
    return "" if selection is None else f" {selection.sentence()}."


def _canaries_text(cell: CellResult) -> str:
    """`` (N and M trainings x k canaries, independent: each a trial)`` for k > 1
    (docs/design.md §8.17)."""
    many = cell.many_canaries
    if many is None:
        return ""
    how = "independent: each a trial" if many.independent else "dependent: bounds per training"
    return (
        f" ({many.trainings_in} and {many.trainings_out} trainings x {many.canaries_per_training} "
        f"canaries, {how})"
    )


def _theory_sentence(cell: CellResult) -> str:
    lo, hi = cell.theory_lower_epsilon, cell.theory_upper_epsilon
    # Theory speaks of the mechanism's worst case over neighbouring datasets: the upper ε is
    # guaranteed, the lower ε is achieved by a known pair (not always this cell's co-batch data).
    if lo is not None and hi is not None and _fmt(lo) == _fmt(hi):
        theory = f". Theory: the mechanism's worst-case ε is {_fmt(hi)}."
    elif lo is not None and hi is not None:
        theory = (
            f". Theory: the mechanism's worst-case ε is at least {_fmt(lo, side='lower')} "
            "(achieved by a known "
            f"pair of datasets) and at most {_fmt(hi, side='upper')} (guaranteed)."
        )
    elif hi is not None:
        theory = f". Theory guarantees ε ≤ {_fmt(hi, side='upper')}; no lower bound is known."
    elif lo is not None:
        theory = (
            f". Theory: a known pair of datasets achieves ε ≥ {_fmt(lo, side='lower')}; no upper "
            "bound is known."
        )
    else:
        theory = "."
    return theory


def render_markdown(result: AuditResult, *, run_dir: str | Path | None = None) -> str:
    """report.md: the findings first (a multi-run audit's, :func:`findings_lines`), what was
    audited, one table, one sentence per cell (a score_family cell's with how its statistic was
    chosen, read from ``run_dir``'s scores), the plots."""
    spec = result.spec
    t = spec.training
    alpha = spec.claim.alpha
    confidence = f"{100 * (1 - alpha):g}%"
    scope = result.confidence
    family = scope.family
    train = spec.mode.trains
    lines = [f"# Audit `{spec.name}`", "", *findings_lines(result)]
    folder = None if run_dir is None else Path(run_dir)
    if spec.experiment.description:
        lines += [spec.experiment.description, ""]
    what = "real DP-SGD trainings" if train else "the mechanism simulated, no training"
    model = f"{spec.experiment.model} on {spec.experiment.dataset}, " if train else ""
    lines += [
        f"Mode `{spec.mode.value}` ({what}); {model}n = {t.n}, batch size {t.batch_size}, "
        f"{t.epochs} epoch(s), σ = {t.sigma:g}; canary `{spec.experiment.canary}`, observation "
        f"`{spec.experiment.observation}`; δ = {spec.claim.delta:g}, confidence {confidence} "
        f"({'all cells at once' if family else 'per cell'}); seed {spec.experiment.seed}.",
        "",
    ]
    if spec.evidence.store == "scores":
        lines += [
            'Shards keep the scores of the attacks named, not the observations (store = "scores", '
            "the default "
            'in mode `simulate` and in mode `train` above 1e5 trials): scoring another attack '
            'needs store = "observations" and a fresh run.',
            "",
        ]
    if result.scores_version is not None:
        lines += [f"**This report was {result.scores_version.text}.**", ""]
    run = result.run
    if run:
        lines += [
            f"Last `audit run`: {run.wall_seconds:.1f} s wall time ({run.shards_computed} shards "
            "computed, "
            f"{run.shards_reused} reused; {run.compute_seconds:.1f} s of compute in all shards), "
            f"backend {run.backend}, n_jobs {run.n_jobs}.",
            "",
        ]
    findings_alpha = _run_findings_alpha(result)
    lines += [
        f"**Confidence of every ε_lb below: {bound_level(scope)}; of every `violated` verdict: "
        f"{verdict_level(scope, findings_alpha)}.**",
        "",
        f"| sampler | threat model | attack | trials in/out | ε_lb (sound, {confidence} "
        f"{'all cells at once' if family else 'per cell'}) | ε optimistic (not a bound) "
        "| claimed ε | theory ε lower – upper | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for e in result.cells:
        lines.append(
            f"| {e.cell.sampler} | {e.cell.threat_model} | {e.cell.attack} | "
            f"{e.trials_in}/{e.trials_out} "
            f"| {_fmt(e.epsilon_lb, side='lower')} | {_fmt(e.epsilon_optimistic)} | "
            f"{_fmt(e.claimed_epsilon)} "
            f"| {_fmt(e.theory_lower_epsilon, side='lower')} – "
            f"{_fmt(e.theory_upper_epsilon, side='upper')} "
            f"| {e.verdict} |"
        )
    lines += [""]
    for e in result.cells:
        lines += [f"- {cell_sentence(e)}{_selection_sentence(e, folder)}"]
    lines += [
        "",
        (
            "ε_lb is a lower bound at the stated confidence (one run: "
            "Mahloujifar-Melis-Chaudhuri's f-DP bound "
            "on the number of correct guesses, the (ε, δ) curve refuted; the optimistic ε is the "
            "best rule's "
            "bound without the correction for choosing it). "
            if spec.kind.one_run
            else "ε_lb is a lower bound at the stated confidence, at any stopping time "
            "(sequential audit, docs/design.md §8.18: confidence sequences at the pilot shard's "
            "threshold; the verdict an e-process). The fixed-size whole-curve band is not "
            "computed for it; the boxes in its plots and the ROC and estimates in summary.json "
            "are at the data-dependent stopping size: not anytime-valid. "
            if spec.evidence.stop is not None
            else "ε_lb is a lower bound at the stated confidence "
            f"({THRESHOLD_TEXT[spec.claim.threshold]}). "
        )
        + "The optimistic ε picks the best threshold on the same scores and is not a bound. The "
        "theory "
        "upper ε is a guarantee; the theory lower ε is achieved by a known pair of datasets. "
        + (
            f'With confidence = "family", α is split over the {scope.cells} cells (Bonferroni): '
            f"every ε_lb holds at once with {confidence} confidence; a `violated` verdict is the "
            "union of two tests (and the findings, where there are), so the verdicts hold at "
            f"{verdict_level(scope, findings_alpha)}."
            if family
            else f"The {confidence} confidence holds for each statement alone (each cell's ε_lb; "
            "each `violated` verdict, the union of its two tests, at "
            f"{verdict_level(scope, findings_alpha)}), "
            'not for all of them at once (confidence = "family" in the spec makes them hold at '
            'once).'
        ),
        "",
        f"![overview]({OVERVIEW_FILE})",
        "",
    ]
    for e in result.cells:
        lines += [f"![{e.name}]({e.plot})", ""]
        if not isinstance(e, OneRunCellResult):  # the same evidence on ROC axes, beside it
            lines += [f"ROC view (TPR against FPR, log-log): [{roc_file(e.plot)}]"
                      f"({roc_file(e.plot)})", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# plots
# ---------------------------------------------------------------------------------------


def _box_indices(fpr: np.ndarray, n_out: int, count: int = 8) -> np.ndarray:
    """Indices of the empirical points nearest to geometrically spaced FPRs in [1/n_out, 0.5]."""
    targets = np.geomspace(max(1.0 / max(n_out, 1), 1e-6), 0.5, count)
    idx = np.unique([int(np.argmin(np.abs(fpr - t))) for t in targets])
    return idx


def plot_tradeoff(
    path: str | Path,
    cell: CellResult,
    scores_in: np.ndarray,
    scores_out: np.ndarray,
    bounds: Bounds | None,
    claim: Claim,
    formats: Sequence[str] = ("png",),
) -> None:
    """Theory curves (none when ``bounds`` is None: scores without a mechanism), the claim, the
    empirical trade-off with Clopper-Pearson boxes, and the
    verdict's (FPR_hi, FNR_hi) point; left panel linear, right panel log-FPR. Saved as
    :func:`audit.report.formatting.save_figure` does (PNG, and SVG/PDF in ``formats``)."""
    plt = _pyplot()
    # every distinct score up to 8000, then 4000 per tail
    emp = plotted_tradeoff(scores_in, scores_out)
    alpha = cell.alpha
    idx = _box_indices(emp.fpr, emp.n_out)
    fp, fn = emp.false_positives[idx], emp.false_negatives[idx]
    fpr_lo, fpr_hi = (
        clopper_pearson_lower(fp, emp.n_out, alpha / 2),
        clopper_pearson_upper(fp, emp.n_out, alpha / 2),
    )
    fnr_lo, fnr_hi = (
        clopper_pearson_lower(fn, emp.n_in, alpha / 2),
        clopper_pearson_upper(fn, emp.n_in, alpha / 2),
    )
    floor = 0.5 / max(emp.n_out, 1)
    grid_lin = np.linspace(0.0, 1.0, 501)
    grid_log = np.geomspace(min(floor, 1e-4), 1.0, 501)

    fig, axes = plt.subplots(1, 2, figsize=(12, 7.2), layout="constrained")
    for ax, grid, log in ((axes[0], grid_lin, False), (axes[1], grid_log, True)):
        ax.fill_between(grid, 0.0, np.asarray(claim.curve(grid)), color="tab:red", alpha=0.10,
                        lw=0, label="below the claim's curve: no training that keeps the claim "
                        "gets here (a box wholly inside refutes it)")
        for curve in theory_curves(bounds):
            style, color = THEORY_STYLES[curve.kind]
            ax.plot(
                grid,
                np.asarray(curve(grid)),
                style,
                color=color,
                label=f"theory {curve.kind}: {curve.method}",
            )
        ax.plot(
            grid,
            np.asarray(claim.curve(grid)),
            ":",
            color="tab:red",
            lw=2,
            label=(
                f"claim '{claim.name}': ε = {_fmt(claim.epsilon)} at δ = {cell.delta:g}; "
                f"{claim.curve.method}"
            ),
        )
        ax.step(
            emp.fpr, emp.fnr, where="post", color="black", lw=1, label="empirical (point estimates)"
        )
        for i in range(len(idx)):
            ax.add_patch(
                plt.Rectangle(
                    (fpr_lo[i], fnr_lo[i]),
                    fpr_hi[i] - fpr_lo[i],
                    fnr_hi[i] - fnr_lo[i],
                    fill=False,
                    edgecolor="gray",
                    lw=0.8,
                    # Each side at alpha/2: each rate's interval is 1 - alpha, the box only >= 1 - 2
                    # alpha.
                    label=f"Clopper-Pearson boxes ({100 * (1 - alpha):g}% per rate, pointwise"
                    f"{'; fixed-size, not anytime-valid' if cell.sequential else ''})"
                    if i == 0
                    else None,
                )
            )
        ev = cell.evidence
        assert isinstance(ev, Verdict | SequentialVerdict)  # both bound (FPR, FNR) at a threshold
        ax.plot(
            [ev.fpr_hi],
            [ev.fnr_hi],
            marker="*",
            ms=12,
            color="tab:red" if cell.violated else "tab:gray",
            ls="none",
            label=f"verdict point (FPR_hi, FNR_hi): {cell.verdict}",
        )
        ax.set_xlabel("false-positive rate (FPR)" + (", log scale" if log else ""))
        ax.set_ylabel("false-negative rate (FNR)")
        ax.set_ylim(0, 1.02)
        if log:
            ax.set_xscale("log")
            ax.set_xlim(grid_log[0], 1.0)
        else:
            ax.set_xlim(0, 1.0)
        ax.grid(alpha=0.3)
    legend_below(fig, axes[0], ncol=2)
    fig.suptitle(
        f"{cell.cell.sampler} / {cell.cell.threat_model} / {cell.cell.attack}: ε_lb = "
        f"{_fmt(cell.epsilon_lb, side='lower')} "
        f"(sound, δ = {cell.delta:g}), claimed ε = {_fmt(cell.claimed_epsilon)}, {cell.verdict}",
        fontsize=10,
    )
    save_figure(fig, path, formats)
    plt.close(fig)


def _num(value: float | None) -> float:
    """A plotted eps: +inf kept (drawn at the top), None, -inf and nan not drawn."""
    if value is None or (not math.isfinite(value) and value != math.inf):
        return math.nan
    return float(value)


def plot_overview(
    path: str | Path, result: AuditResult, formats: Sequence[str] = ("png",)
) -> None:
    """Per cell, grouped by sampler: eps_lb (sound) and the optimistic eps, against the
    claimed eps and the theory range [lower, upper]; saved as :func:`plot_tradeoff`."""
    plt = _pyplot()
    cells = result.cells
    fig, ax = plt.subplots(figsize=(max(7.0, 1.3 * len(cells) + 2.0), 5.8), layout="constrained")
    finite = [v for e in cells for v in (
        _num(e.epsilon_lb), _num(e.epsilon_optimistic), _num(e.claimed_epsilon),
        _num(e.theory_lower_epsilon), _num(e.theory_upper_epsilon),
    ) if math.isfinite(v)]
    top = 1.15 * max(finite, default=1.0) or 1.0
    first: set[str] = set()

    def label(name: str) -> str | None:
        if name in first:
            return None
        first.add(name)
        return name

    # one sub-column per quantity, so a claim equal to the theory's upper epsilon (a Poisson
    # claim and the PLD upper curve) never hides it: theory, claim, eps_lb, optimistic eps
    x_theory, x_claim, x_lb, x_opt = -0.27, -0.09, 0.09, 0.27
    for i, e in enumerate(cells):
        lo, hi = _num(e.theory_lower_epsilon), _num(e.theory_upper_epsilon)
        if not math.isnan(lo) and not math.isnan(hi):
            ax.plot([i + x_theory] * 2, [lo, min(hi, top)], color="tab:blue", lw=1, alpha=0.6)
        if not math.isnan(hi):
            # wider and thicker than the lower mark: an exact curve (lower = upper) shows both
            ax.plot(i + x_theory, min(hi, top), marker="_", ms=17, mew=4, color="tab:blue",
                    ls="none", label=label("theory upper ε (guarantee)"))
        if not math.isnan(lo):
            ax.plot(i + x_theory, lo, marker="_", ms=10, mew=1.5, color="tab:green", ls="none",
                    label=label("theory lower ε (achieved by a known pair)"))
        ax.plot(i + x_claim, _num(e.claimed_epsilon), marker="_", ms=14, mew=2.5,
                color="tab:red", ls="none", label=label("claimed ε"))
        violated = e.violated
        ax.plot(
            i + x_lb,
            _num(e.epsilon_lb),
            marker="^",
            ms=9,
            ls="none",
            color="tab:red" if violated else "black",
            label=label("ε_lb (sound), claim violated" if violated else "ε_lb (sound), consistent"),
        )
        ax.plot(
            i + x_opt,
            _num(e.epsilon_optimistic),
            marker="o",
            mfc="none",
            ms=7,
            ls="none",
            color="gray",
            label=label("optimistic ε (not a bound)"),
        )
        if i:
            ax.axvline(i - 0.5, color="lightgray", lw=0.6)
    ax.set_xticks(
        np.arange(len(cells)),
        [f"{e.cell.sampler}\n{e.cell.threat_model}\n{e.cell.attack}" for e in cells],
        fontsize=7,
    )
    ax.set_xlim(-0.6, len(cells) - 0.4)
    ax.set_ylabel(f"ε at δ = {result.spec.claim.delta:g}")
    ax.set_ylim(0, top)
    ax.grid(axis="y", alpha=0.3)
    legend_below(fig, ax, ncol=2)
    fig.suptitle(f"audit {result.spec.name}: empirical ε lower bounds against the claim and theory",
                 fontsize=10)
    save_figure(fig, path, formats)
    plt.close(fig)
