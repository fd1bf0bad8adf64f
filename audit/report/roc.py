"""The ROC view of a cell: true-positive rate against false-positive rate, both on log axes.

The membership-inference literature reads an attack on ROC axes at low false-positive rates
(Carlini et al. 2022, "Membership Inference Attacks From First Principles", §III-B): TPR = 1 - FNR
against FPR, log-log. This is the same evidence as the trade-off plot
(:func:`audit.report.multi_run.plot_tradeoff`, FNR against FPR) turned into those axes:

* the claim's curve f becomes its power 1 - f(FPR) (:meth:`audit.theory.curve.TradeOffCurve.power`,
  computed where it is small, not as 1 minus a number near 1); every test of a training that
  keeps the claim has TPR <= 1 - f(FPR), so the region above it is shaded: a point there (its
  whole Clopper-Pearson box) refutes the claim;
* the theory curves likewise (the upper curve's power bounds every attack's TPR, the lower
  curve's is achieved by a known pair);
* the empirical ROC from the counts (TPR = TP / n_in from the true-positive count, exact), with
  Clopper-Pearson boxes on the true-positive and false-positive counts at alpha / 2 each;
* the verdict's point (FPR_hi, TPR_lo = 1 - FNR_hi).

Points at FPR = 0 or TPR = 0 have no place on log axes: the axes start at half a count
(0.5 / n), and the plot says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from audit.report.figures import legend_below, wrap_label
from audit.report.formatting import fmt, pyplot, save_figure
from audit.run.claims import Claim
from audit.run.results import CellResult
from audit.stats.binary import Verdict, clopper_pearson_lower, clopper_pearson_upper
from audit.stats.score_files import plotted_tradeoff
from audit.stats.sequential import SequentialVerdict
from audit.theory import Bounds
from audit.theory.curve import TradeOffCurve

__all__ = ["THEORY_STYLES", "plot_roc", "roc_file", "theory_curves"]

THEORY_STYLES = {
    "upper": ("-", "tab:blue"), "lower": ("--", "tab:green"), "exact": ("-", "tab:purple")
}
"""Line style and colour of a theory curve by its kind, in every plot of the report stage."""


def roc_file(tradeoff_file: str) -> str:
    """The ROC plot's file name beside a cell's trade-off plot: ``tradeoff_<cell>.png`` ->
    ``roc_<cell>.png``."""
    name = Path(tradeoff_file).name
    stem = name[len("tradeoff_"):] if name.startswith("tradeoff_") else name
    return str(Path(tradeoff_file).with_name("roc_" + stem))


def theory_curves(bounds: Bounds | None) -> list[TradeOffCurve]:
    """The distinct theory curves of a cell (upper, lower, exact), the same object once; none
    without a mechanism (``bounds`` None: given scores)."""
    out: list[TradeOffCurve] = []
    if bounds is None:
        return out
    for curve in (bounds.upper, getattr(bounds, "lower", None), getattr(bounds, "exact", None)):
        if curve is not None and all(curve is not other for other in out):
            out.append(curve)
    return out


def plot_roc(
    path: str | Path,
    cell: CellResult,
    scores_in: np.ndarray,
    scores_out: np.ndarray,
    bounds: Bounds | None,
    claim: Claim,
    formats: Sequence[str] = ("png",),
) -> None:
    """Write the cell's ROC view (module docstring) to ``path`` (PNG, and SVG/PDF in
    ``formats``, as :func:`audit.report.formatting.save_figure` does)."""
    plt = pyplot()
    emp = plotted_tradeoff(scores_in, scores_out)
    n_in, n_out = emp.n_in, emp.n_out
    true_pos = n_in - emp.false_negatives
    fpr = emp.false_positives / n_out
    tpr = true_pos / n_in
    alpha = cell.alpha
    floor_x, floor_y = 0.5 / max(n_out, 1), 0.5 / max(n_in, 1)
    grid = np.geomspace(min(floor_x, 1e-4), 1.0, 600)

    fig, ax = plt.subplots(figsize=(7.5, 6.6), layout="constrained")
    claim_power = np.asarray(claim.curve.power(grid), dtype=float)
    ax.fill_between(grid, np.maximum(claim_power, floor_y * 0.5), 1.0, color="tab:red",
                    alpha=0.10, lw=0,
                    label="above the claim's curve: no training that keeps the claim gets here "
                    "(a box wholly inside refutes it)")
    ax.plot(grid, claim_power, ":", color="tab:red", lw=2,
            label=f"claim '{claim.name}': ε = {fmt(claim.epsilon)} at δ = {cell.delta:g}; "
                  f"{claim.curve.method}")
    for curve in theory_curves(bounds):
        style, color = THEORY_STYLES[curve.kind]
        ax.plot(grid, np.asarray(curve.power(grid), dtype=float), style, color=color,
                label=f"theory {curve.kind}: {curve.method}")
    ax.plot(grid, grid, color="gray", lw=0.8, label="chance (TPR = FPR)")
    shown = (fpr > 0) & (tpr > 0)
    ax.step(fpr[shown], tpr[shown], where="post", color="black", lw=1,
            label="empirical ROC (point estimates from the counts)")
    step = max(1, int(shown.sum()) // 12)
    for i in np.flatnonzero(shown)[::step]:
        x_lo = max(float(clopper_pearson_lower(emp.false_positives[i], n_out, alpha / 2)), floor_x)
        x_hi = float(clopper_pearson_upper(emp.false_positives[i], n_out, alpha / 2))
        y_lo = max(float(clopper_pearson_lower(true_pos[i], n_in, alpha / 2)), floor_y)
        y_hi = float(clopper_pearson_upper(true_pos[i], n_in, alpha / 2))
        ax.add_patch(plt.Rectangle((x_lo, y_lo), x_hi - x_lo, y_hi - y_lo, fill=False,
                                   edgecolor="gray", lw=0.8,
                                   label=f"Clopper-Pearson boxes ({100 * (1 - alpha):g}% per "
                                   "rate, pointwise)" if i == np.flatnonzero(shown)[0] else None))
    ev = cell.evidence
    if isinstance(ev, Verdict | SequentialVerdict):
        ax.plot([max(ev.fpr_hi, floor_x)], [max(1.0 - ev.fnr_hi, floor_y)], marker="*", ms=12,
                ls="none", color="tab:red" if cell.violated else "tab:gray",
                label=f"verdict point (FPR_hi, 1 - FNR_hi): {cell.verdict}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(grid[0], 1.0)
    ax.set_ylim(min(floor_y, 1e-4), 1.05)
    ax.set_xlabel(f"false-positive rate (FPR), log scale; from 0.5 / n_out = {floor_x:.2g}")
    ax.set_ylabel("true-positive rate (TPR = 1 - FNR), log scale")
    ax.grid(alpha=0.3, which="both")
    ax.set_title(wrap_label(
        f"{cell.cell.sampler} / {cell.cell.threat_model} / {cell.cell.attack}: ε_lb = "
        f"{fmt(cell.epsilon_lb, side='lower')} (sound, δ = {cell.delta:g}), claimed ε = "
        f"{fmt(cell.claimed_epsilon)}, {cell.verdict}", 90), fontsize=9)
    legend_below(fig, ax, ncol=1)
    save_figure(fig, path, formats)
    plt.close(fig)
