"""Reports of an audit: ``summary.json``, ``report.md``, ``tradeoff_<cell>.png``, ``overview.png``.

For every cell (sampler, threat model, attack) the stored scores give

- ``epsilon_lb``: a sound lower bound on eps at ``delta``, confidence 1 - alpha
  (:func:`audit.stats.binary.epsilon_lower_bound`, the threshold chosen soundly: on a held-out
  half of the trials (``threshold = "split"``) or on a Bonferroni-corrected fixed grid);
- ``epsilon_optimistic``: the naive maximum over all thresholds: optimistic, not a bound;
- ``verdict``: ``violated`` when, at a soundly chosen threshold, the attack's FNR upper
  bound lies below the claimed trade-off curve at its FPR upper bound
  (FNR_hi < f_claim(FPR_hi), :func:`audit.stats.binary.verdict`); else ``consistent``, which means
  only that the verdict's threshold does not refute the claim (``epsilon_lb`` picks its own
  threshold and can, rarely, exceed the claimed eps while the verdict is ``consistent``);
- ``confidence``: ``{"level", "scope", "alpha", "cells"}``, what 1 - alpha covers: this cell
  alone (``confidence = "cell"``, the default) or every cell of the report at once
  (``"family"``: by Bonferroni's inequality each of the m cells is computed at alpha / m, so
  P(any eps_lb is wrong) <= alpha, and likewise for the verdicts);

beside the eps of the cell's theoretical curves (``theory_upper_epsilon``: a guarantee;
``theory_lower_epsilon``: achieved by a known pair of datasets; :func:`audit.theory.bounds_for`)
and of the claim:

- ``poisson``: the curve a Poisson accountant certifies for the same q = b/n, sigma and
  T*E steps (the PLD upper bound of the Poisson mechanism), which is what most shuffled
  trainings report;
- ``sampler``: the upper bound of the sampler actually used;
- an explicit eps: (eps, delta)-DP, f(a) = max(0, 1 - delta - e^eps a, e^-eps (1 - delta - a)).

Stored scores are read only if their fingerprint (:mod:`audit.run.fingerprint`) matches the spec
and the code running now; stale ones are rescored from valid shards or refused (a ValueError
naming what changed), never mixed.

Plots are drawn with matplotlib's Agg backend (no display needed).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from audit.core.mechanism import Mechanism
from audit.report.formatting import fmt as _fmt
from audit.report.formatting import format_bound
from audit.report.formatting import pyplot as _pyplot
from audit.report.one_run import one_run_fields, one_run_sentence, plot_accuracy
from audit.run.claims import Claim, cell_bounds, claim_for, curve_epsilon
from audit.run.fingerprint import changes, scores_fingerprint, shard_fingerprint
from audit.run.scoring import resolve_attacks, score_key
from audit.run.spec import AuditSpec, Cell, TrainingKey, load_spec
from audit.run.store import (
    RUN_FILE,
    SCORES_DIR,
    SHARDS_DIR,
    load_scores,
    run_folder,
    stored_fingerprint,
)
from audit.stats.binary import (
    clopper_pearson_lower,
    clopper_pearson_upper,
    epsilon_lower_bound,
    roc_summary,
    verdict,
)
from audit.stats.score_files import plotted_tradeoff, sorted_scores

__all__ = [
    "OVERVIEW_FILE",
    "REPORT_FILE",
    "SUMMARY_FILE",
    "Claim",
    "build_summary",
    "claim_for",
    "format_bound",
    "render_markdown",
    "write_report",
]

_THRESHOLD_TEXT = {
    "split": "threshold chosen on one half of the trials, Clopper-Pearson bounds on the other half",
    "bonferroni": "thresholds on a grid fixed in advance, Clopper-Pearson bounds "
                  "Bonferroni-corrected over it",
    "multisplit": "median of 11 split bounds, each at alpha/2 (Markov: the median holds at alpha)",
}

SUMMARY_FILE = "summary.json"
REPORT_FILE = "report.md"
OVERVIEW_FILE = "overview.png"


def tradeoff_file(cell_name: str) -> str:
    """``tradeoff_<cell>.png``."""
    return f"tradeoff_{cell_name}.png"


# ---------------------------------------------------------------------------------------
# the summary
# ---------------------------------------------------------------------------------------


def _cells_with_scores(spec: AuditSpec, run_dir: Path) -> list[tuple[Cell, np.ndarray, np.ndarray]]:
    """Every cell with its stored scores, only if they carry the fingerprint of ``spec`` and
    the code running now (:mod:`audit.run.fingerprint`); a training key whose scores are missing or
    stale is rescored from its shards when they are all on disk with that fingerprint, and
    otherwise refused with a ValueError naming what is missing or what changed."""
    if not (run_dir / SCORES_DIR).is_dir() and not (run_dir / SHARDS_DIR).is_dir():
        raise ValueError(
            f"{run_dir} holds no stored scores ({SCORES_DIR}/) and no shards ({SHARDS_DIR}/), "
            f"which are not kept in git; run `audit run {run_dir}` to compute them"
        )
    current = scores_fingerprint(spec)
    out = []
    for key in spec.training_keys():
        cells = [cell for cell, _ in resolve_attacks(spec, key)]
        paths = [run_dir / SCORES_DIR / f"{c.name}.npz" for c in cells]
        stale = {p: changes(stored_fingerprint(p), current) for p in paths if p.exists()}
        if len(stale) < len(paths) or any(stale.values()):
            try:
                score_key(spec, run_dir, key)  # only from shards of the current fingerprint
            except ValueError as error:
                if stale and any(stale.values()) and not (run_dir / SHARDS_DIR).is_dir():
                    path, changed = next((p, c) for p, c in stale.items() if c)
                    raise ValueError(
                        f"{path}: scores computed by another version ({'; '.join(changed)}) and "
                        f"no shards to rescore from; run `audit run {run_dir}` to recompute them"
                    ) from None
                raise error from None
        out += [(cell, *_stored_scores(spec, run_dir, cell)) for cell in cells]
    return out


def _stored_scores(spec: AuditSpec, run_dir: Path, cell: Cell) -> tuple[np.ndarray, np.ndarray]:
    """The stored (scores_in, scores_out) of ``cell``, sorted on disk and memory-mapped
    (:mod:`audit.stats.score_files`: memory bounded whatever the trial count, statistics
    bit-identical); in memory for a one-run audit, whose statistics read the scores in their
    order."""
    path = run_dir / SCORES_DIR / f"{cell.name}.npz"
    if getattr(spec, "audit", None) == "one_run" or not path.exists():
        return load_scores(run_dir, cell)
    return sorted_scores(path, "scores_in"), sorted_scores(path, "scores_out")


def cell_summary(
    spec: AuditSpec,
    cell: Cell,
    scores_in: np.ndarray,
    scores_out: np.ndarray,
    theory: dict[Mechanism, Any],
    *,
    cells: int = 1,
) -> dict[str, Any]:
    """The summary.json entry of one cell (see the module docstring for the keys).

    ``cells``: the number of cells of the report; with ``confidence = "family"`` the cell's
    eps_lb and verdict are computed at alpha / cells (:meth:`AuditSpec.cell_alpha`), stated in
    the entry's ``confidence`` (and its ``alpha`` is that per-cell alpha).
    """
    mechanism = spec.mechanism(TrainingKey(cell.sampler, cell.threat_model))
    bounds = cell_bounds(mechanism, theory)
    claim = claim_for(spec, mechanism, theory)
    alpha = spec.cell_alpha(cells)
    bound = epsilon_lower_bound(
        scores_in,
        scores_out,
        delta=spec.delta,
        alpha=alpha,
        threshold=spec.threshold,
        seed=spec.seed,
    )
    decision = verdict(
        scores_in, scores_out, claim.curve, alpha, threshold=spec.threshold, seed=spec.seed
    )
    upper, lower = bounds.upper, getattr(bounds, "lower", None)
    entry = {
        "cell": cell.name,
        "sampler": cell.sampler,
        "threat_model": cell.threat_model,
        "attack": cell.attack,
        "observation": spec.observation,
        "trials_in": int(np.size(scores_in)),
        "trials_out": int(np.size(scores_out)),
        "delta": spec.delta,
        "alpha": alpha,
        "confidence": confidence_of(spec, cells),
        "epsilon_lb": bound.epsilon_lb,
        "epsilon_optimistic": bound.epsilon_optimistic,
        "claim": claim.name,
        "claim_description": claim.description,
        "claimed_epsilon": claim.epsilon,
        "theory_upper_epsilon": curve_epsilon(upper, spec.delta),
        "theory_lower_epsilon": curve_epsilon(lower, spec.delta),
        "theory_upper_method": upper.method if upper is not None else None,
        "theory_lower_method": lower.method if lower is not None else None,
        "verdict": "violated" if decision.violated else "consistent",
        "evidence": decision.to_dict(),
        "bound": bound.to_dict(),
        "roc": roc_summary(scores_in, scores_out, alpha=spec.alpha),
        "plot": tradeoff_file(cell.name),
    }
    if spec.audit == "one_run":  # the canaries' scores: one-run statistics (audit.report.one_run)
        entry.update(
            one_run_fields(
                scores_in,
                scores_out,
                claim.curve,
                delta=spec.delta,
                alpha=alpha,
                guesses=spec.guesses,
                seed=spec.seed,
                cell=cell.name,
            )
        )
    return entry


def confidence_of(spec: AuditSpec, cells: int) -> dict[str, Any]:
    """``{"level", "scope", "alpha", "cells"}``: the confidence ``level`` = 1 - alpha holds for
    each cell alone (``scope = "cell"``, ``cells = 1``) or for all ``cells`` cells at once
    (``scope = "family"``); ``alpha`` is what each cell's eps_lb and verdict are computed at."""
    family = spec.confidence == "family"
    return {"level": 1 - spec.alpha, "scope": spec.confidence, "alpha": spec.cell_alpha(cells),
            "cells": cells if family else 1}


def confidence_text(confidence: dict[str, Any]) -> str:
    """The confidence in words, e.g. ``95% per cell`` or ``95% for all 4 cells at once
    (Bonferroni: alpha / 4 = 0.0125 per cell)``."""
    level = f"{100 * confidence['level']:g}%"
    if confidence["scope"] != "family":
        return (
            f'{level} per cell (confidence = "cell": each cell\'s statement alone, not all at once)'
        )
    return (
        f'{level} for all {confidence["cells"]} cells at once (confidence = "family", Bonferroni: '
        f"α / {confidence['cells']} = {confidence['alpha']:.3g} per cell)"
    )


def build_summary(spec: AuditSpec, run_dir: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(summary, plotting data): the summary of every cell, from the stored scores."""
    run_dir = Path(run_dir)
    theory: dict[Mechanism, Any] = {}
    cells, plotting = [], {}
    scored = _cells_with_scores(spec, run_dir)
    for cell, scores_in, scores_out in scored:
        entry = cell_summary(spec, cell, scores_in, scores_out, theory, cells=len(scored))
        cells.append(entry)
        mechanism = spec.mechanism(cell.training)
        plotting[cell.name] = (
            scores_in,
            scores_out,
            cell_bounds(mechanism, theory),
            claim_for(spec, mechanism, theory),
        )
    run_file = run_dir / RUN_FILE
    summary = {
        "name": spec.name,
        "description": spec.description,
        "mode": spec.mode,
        "seed": spec.seed,
        "claim": spec.claim,
        "delta": spec.delta,
        "alpha": spec.alpha,
        "confidence": confidence_of(spec, len(scored)),
        "spec": spec.to_dict(),
        "fingerprint": {k: v for k, v in shard_fingerprint(spec).items() if k != "spec"},
        "run": json.loads(run_file.read_text()) if run_file.exists() else None,
        "labels": {
            "epsilon_lb": "sound lower bound on eps at delta, confidence 1 - alpha "
            f"({_THRESHOLD_TEXT[spec.threshold]})",
            "confidence": "per cell: level = 1 - alpha of the spec, for the cell alone (scope "
            "'cell') or for all "
            "cells at once (scope 'family'); alpha = what the cell's eps_lb and verdict are "
            "computed at",
            "epsilon_optimistic": "optimistic, not a bound (best threshold chosen on the same "
            "scores)",
            "theory_upper_epsilon": "guarantee: the mechanism's true eps is at most this",
            "theory_lower_epsilon": "achieved by a known pair of datasets: the true eps is at "
            "least this",
            "verdict": "violated: FNR_hi < f_claim(FPR_hi) at a soundly chosen threshold, "
            "confidence 1 - alpha",
            "roc": "estimates, not bounds: TPR at an empirical FPR <= 0.1% and 1% "
            "(Clopper-Pearson interval on the TPR at confidence 1 - alpha) and the AUROC",
            **(
                {
                    "epsilon_lb": "sound lower bound on eps at delta, confidence 1 - alpha, from "
                    "one run's canaries "
                    "(f-DP bound on the number of correct guesses, rule chosen soundly)",
                    "epsilon_optimistic": "optimistic, not a bound (the best guessing rule's "
                    "bound, not corrected for choosing it)",
                    "verdict": "violated: under the claimed curve the observed number of correct "
                    "guesses has probability below alpha (per rule: alpha / rules)",
                    "canaries": "m canaries in the training(s), each IN with probability 1/2; "
                                "guesses = [k+, k-]; correct: of the k+ + k- guesses",
                }
                if spec.audit == "one_run"
                else {}
            ),
        },
        "cells": cells,
    }
    return _jsonable(summary), plotting


def _jsonable(value: Any) -> Any:
    """Plain JSON: numpy scalars to Python, non-finite floats to the strings "inf"/"-inf"/"nan"."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def write_report(
    run_dir: str | Path, spec: AuditSpec | None = None, *, plots: bool = True
) -> dict[str, Any]:
    """Write summary.json, report.md and (unless ``plots`` is False) tradeoff_<cell>.png and
    overview.png; return the summary."""
    run_dir = run_folder(run_dir)
    spec = load_spec(run_dir) if spec is None else spec
    summary, plotting = build_summary(spec, run_dir)
    (run_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n")
    if plots:
        for entry in summary["cells"]:
            scores_in, scores_out, bounds, claim = plotting[entry["cell"]]
            if entry.get("audit") == "one_run":
                plot_accuracy(run_dir / entry["plot"], entry, scores_in, scores_out, claim.curve)
                continue
            plot_tradeoff(run_dir / entry["plot"], entry, scores_in, scores_out, bounds, claim)
        plot_overview(run_dir / OVERVIEW_FILE, summary)
    (run_dir / REPORT_FILE).write_text(render_markdown(summary))
    return summary


# ---------------------------------------------------------------------------------------
# report.md
# ---------------------------------------------------------------------------------------


def cell_sentence(entry: dict[str, Any]) -> str:
    """One plain sentence on one cell."""
    confidence = f"{100 * (1 - entry['alpha']):g}%"
    scope = entry.get("confidence") or {}
    joint = (
        f", {100 * scope['level']:g}% for all {scope['cells']} cells at once"
        if scope.get("scope") == "family"
        else ""
    )
    if entry.get("audit") == "one_run":
        return "".join(one_run_sentence(entry, _fmt)) + _theory_sentence(entry)
    head = (
        f"**{entry['sampler']} / {entry['threat_model']} / {entry['attack']}**: with "
        f"{entry['trials_in']} IN and {entry['trials_out']} OUT trials the attack shows "
        f"ε ≥ {_fmt(entry['epsilon_lb'], side='lower')} at δ = {entry['delta']:g} ({confidence} "
        f"confidence{joint})"
    )
    ev = entry["evidence"]
    claim = f"{entry['claim_description']} claim ε = {_fmt(entry['claimed_epsilon'])}"
    if entry["verdict"] == "violated":
        body = (
            f"; {claim} is **violated**: at FPR ≤ {_fmt(ev['fpr_hi'], side='upper')} the attack's "
            f"FNR is ≤ {_fmt(ev['fnr_hi'], side='upper')}, below the "
            f"{_fmt(ev['f_of_fpr_hi'], side='lower')} that the "
            "claimed trade-off curve guarantees"
        )
    else:
        body = (
            f"; the trials are **consistent** with {claim}: the verdict's soundly chosen "
            "threshold does not "
            f"refute its trade-off curve at {confidence} confidence, which does not prove it"
        )
        claimed = entry["claimed_epsilon"]
        if (
            isinstance(claimed, int | float)
            and isinstance(entry["epsilon_lb"], int | float)
            and entry["epsilon_lb"] > claimed
        ):
            # The eps bound picks its own threshold; it refutes the claim's (eps, delta) on its own,
            # but reading "either test refutes" as one test holds only at 1 - 2 alpha.
            body += (
                " (yet ε_lb exceeds the claimed ε: that separate test refutes the claim's (ε, δ) "
                f"at {confidence} confidence; the two tests together hold at "
                f"{100 * (1 - 2 * entry['alpha']):g}%)"
            )
    return head + body + _theory_sentence(entry)


def _theory_sentence(entry: dict[str, Any]) -> str:
    lo, hi = entry["theory_lower_epsilon"], entry["theory_upper_epsilon"]
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


def render_markdown(summary: dict[str, Any]) -> str:
    """report.md: what was audited, one table, one sentence per cell, the plots."""
    spec = summary["spec"]
    t = spec["training"]
    confidence = f"{100 * (1 - summary['alpha']):g}%"
    scope = summary.get("confidence") or {
        "level": 1 - summary["alpha"],
        "scope": "cell",
        "alpha": summary["alpha"],
        "cells": 1,
    }
    family = scope["scope"] == "family"
    lines = [f"# Audit `{summary['name']}`", ""]
    if summary["description"]:
        lines += [summary["description"], ""]
    what = (
        "real DP-SGD trainings"
        if summary["mode"] == "train"
        else "the mechanism simulated, no training"
    )
    model = f"{spec['model']} on {spec['dataset']}, " if summary["mode"] == "train" else ""
    lines += [
        f"Mode `{summary['mode']}` ({what}); {model}n = {t['n']}, batch size {t['batch_size']}, "
        f"{t['epochs']} epoch(s), σ = {t['sigma']:g}; canary `{spec['canary']}`, observation "
        f"`{spec['observation']}`; δ = {summary['delta']:g}, confidence {confidence} "
        f"({'all cells at once' if family else 'per cell'}); seed {summary['seed']}.",
        "",
    ]
    if spec.get("store") == "scores":
        lines += [
            'Shards keep the scores of the attacks named, not the observations (store = "scores", '
            "the default "
            'for mode `train` above 1e5 trials): scoring another attack needs store = '
            '"observations" and a fresh run.',
            "",
        ]
    run = summary.get("run")
    if run:
        lines += [
            f"Last `audit run`: {run['wall_seconds']:.1f} s wall time ({run['shards_computed']} "
            "shards computed, "
            f"{run['shards_reused']} reused; {run['compute_seconds']:.1f} s of compute in all "
            f"shards), backend {run['backend']}, n_jobs {run['n_jobs']}.",
            "",
        ]
    lines += [
        f"**Confidence of every ε_lb and verdict below: {confidence_text(scope)}.**",
        "",
        f"| sampler | threat model | attack | trials in/out | ε_lb (sound, {confidence} "
        f"{'all cells at once' if family else 'per cell'}) | ε optimistic (not a bound) "
        "| claimed ε | theory ε lower – upper | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for e in summary["cells"]:
        lines.append(
            f"| {e['sampler']} | {e['threat_model']} | {e['attack']} | "
            f"{e['trials_in']}/{e['trials_out']} "
            f"| {_fmt(e['epsilon_lb'], side='lower')} | {_fmt(e['epsilon_optimistic'])} | "
            f"{_fmt(e['claimed_epsilon'])} "
            f"| {_fmt(e['theory_lower_epsilon'], side='lower')} – "
            f"{_fmt(e['theory_upper_epsilon'], side='upper')} "
            f"| {e['verdict']} |"
        )
    lines += [""]
    for e in summary["cells"]:
        lines += [f"- {cell_sentence(e)}"]
    lines += [
        "",
        (
            "ε_lb is a lower bound at the stated confidence (one run: "
            "Mahloujifar-Melis-Chaudhuri's f-DP bound "
            "on the number of correct guesses, the (ε, δ) curve refuted; the optimistic ε is the "
            "best rule's bound without the correction for choosing it). "
            if spec.get("audit") == "one_run"
            else "ε_lb is a lower bound at the stated confidence "
            f"({_THRESHOLD_TEXT[spec.get('threshold', 'split')]}). "
        )
        + "The optimistic ε picks the best threshold on the same scores and is not a bound. The "
        "theory "
        "upper ε is a guarantee; the theory lower ε is achieved by a known pair of datasets. "
        + (
            f'With confidence = "family", α is split over the {scope["cells"]} cells '
            "(Bonferroni): every ε_lb "
            f"holds at once with {confidence} confidence, and so does every verdict; all ε_lb and "
            f"all verdicts together hold at {100 * (1 - 2 * summary['alpha']):g}%."
            if family
            else f"The {confidence} confidence holds for each statement alone (each cell's ε_lb, "
            "each verdict), "
            'not for all of them at once (confidence = "family" in the spec makes them hold at '
            'once).'
        ),
        "",
        f"![overview]({OVERVIEW_FILE})",
        "",
    ]
    for e in summary["cells"]:
        lines += [f"![{e['cell']}]({e['plot']})", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# plots
# ---------------------------------------------------------------------------------------


def _box_indices(fpr: np.ndarray, n_out: int, count: int = 8) -> np.ndarray:
    """Indices of the empirical points nearest to geometrically spaced FPRs in [1/n_out, 0.5]."""
    targets = np.geomspace(max(1.0 / max(n_out, 1), 1e-6), 0.5, count)
    idx = np.unique([int(np.argmin(np.abs(fpr - t))) for t in targets])
    return idx


_STYLES = {"upper": ("-", "tab:blue"), "lower": ("--", "tab:green"), "exact": ("-", "tab:purple")}


def _theory_curves(bounds: Any) -> list[Any]:
    """The distinct theory curves of a cell (upper, lower, exact), the same object once."""
    out: list[Any] = []
    for curve in (bounds.upper, getattr(bounds, "lower", None), getattr(bounds, "exact", None)):
        if curve is not None and all(curve is not other for other in out):
            out.append(curve)
    return out


def plot_tradeoff(
    path: str | Path,
    entry: dict[str, Any],
    scores_in: np.ndarray,
    scores_out: np.ndarray,
    bounds: Any,
    claim: Claim,
) -> None:
    """Theory curves, the claim, the empirical trade-off with Clopper-Pearson boxes, and the
    verdict's (FPR_hi, FNR_hi) point; left panel linear, right panel log-FPR."""
    plt = _pyplot()
    # every distinct score up to 8000, then 4000 per tail
    emp = plotted_tradeoff(scores_in, scores_out)
    alpha = entry["alpha"]
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

    fig, axes = plt.subplots(1, 2, figsize=(12, 6.2))
    for ax, grid, log in ((axes[0], grid_lin, False), (axes[1], grid_log, True)):
        for curve in _theory_curves(bounds):
            style, color = _STYLES[curve.kind]
            ax.plot(
                grid,
                np.asarray(curve(grid)),
                style,
                color=color,
                label=_short(f"theory {curve.kind}: {curve.method}"),
            )
        ax.plot(
            grid,
            np.asarray(claim.curve(grid)),
            ":",
            color="tab:red",
            lw=2,
            label=_short(
                f"claim '{claim.name}': ε = {_fmt(claim.epsilon)} at δ = {entry['delta']:g}; "
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
                    label=f"Clopper-Pearson boxes ({100 * (1 - alpha):g}% per rate, pointwise)"
                    if i == 0
                    else None,
                )
            )
        ev = entry["evidence"]
        ax.plot(
            [ev["fpr_hi"]],
            [ev["fnr_hi"]],
            marker="*",
            ms=12,
            color="tab:red" if entry["verdict"] == "violated" else "tab:gray",
            ls="none",
            label=f"verdict point (FPR_hi, FNR_hi): {entry['verdict']}",
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
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=7, frameon=False)
    fig.suptitle(
        f"{entry['sampler']} / {entry['threat_model']} / {entry['attack']}: ε_lb = "
        f"{_fmt(entry['epsilon_lb'], side='lower')} "
        f"(sound, δ = {entry['delta']:g}), claimed ε = {_fmt(entry['claimed_epsilon'])}, "
        f"{entry['verdict']}",
        fontsize=10,
    )
    fig.subplots_adjust(left=0.06, right=0.98, bottom=0.27, top=0.92, wspace=0.18)
    fig.savefig(path, dpi=80)
    plt.close(fig)


def _short(text: str, limit: int = 95) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _num(value: Any) -> float:
    if value is None:
        return math.nan
    if isinstance(value, str):
        return math.inf if value == "inf" else math.nan
    return float(value)


def plot_overview(path: str | Path, summary: dict[str, Any]) -> None:
    """Per cell, grouped by sampler: eps_lb (sound) and the optimistic eps, against the
    claimed eps and the theory range [lower, upper]."""
    plt = _pyplot()
    cells = summary["cells"]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(cells) + 4.5), 4.8))
    finite = [v for e in cells for v in (
        _num(e["epsilon_lb"]), _num(e["epsilon_optimistic"]), _num(e["claimed_epsilon"]),
        _num(e["theory_lower_epsilon"]), _num(e["theory_upper_epsilon"]),
    ) if math.isfinite(v)]
    top = 1.15 * max(finite, default=1.0) or 1.0
    first: set[str] = set()

    def label(name: str) -> str | None:
        if name in first:
            return None
        first.add(name)
        return name

    for i, e in enumerate(cells):
        lo, hi = _num(e["theory_lower_epsilon"]), _num(e["theory_upper_epsilon"])
        if not math.isnan(lo) and not math.isnan(hi):
            ax.plot([i, i], [lo, min(hi, top)], color="tab:blue", lw=1, alpha=0.6)
        if not math.isnan(hi):
            ax.plot(i, min(hi, top), marker="_", ms=22, mew=2, color="tab:blue", ls="none",
                    label=label("theory upper ε (guarantee)"))
        if not math.isnan(lo):
            ax.plot(i, lo, marker="_", ms=22, mew=2, color="tab:green", ls="none",
                    label=label("theory lower ε (achieved by a known pair)"))
        ax.plot(
            i,
            _num(e["claimed_epsilon"]),
            marker="_",
            ms=30,
            mew=2.5,
            color="tab:red",
            ls="none",
            label=label("claimed ε"),
        )
        violated = e["verdict"] == "violated"
        ax.plot(
            i,
            _num(e["epsilon_lb"]),
            marker="^",
            ms=10,
            ls="none",
            color="tab:red" if violated else "black",
            label=label("ε_lb (sound), claim violated" if violated else "ε_lb (sound), consistent"),
        )
        ax.plot(
            i,
            _num(e["epsilon_optimistic"]),
            marker="o",
            mfc="none",
            ms=7,
            ls="none",
            color="gray",
            label=label("optimistic ε (not a bound)"),
        )
    ax.set_xticks(
        np.arange(len(cells)),
        [f"{e['sampler']}\n{e['threat_model']}\n{e['attack']}" for e in cells],
        fontsize=7,
    )
    ax.set_xlim(-0.6, len(cells) - 0.4)
    ax.set_ylabel(f"ε at δ = {summary['delta']:g}")
    ax.set_ylim(0, top)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False,
              markerscale=0.6, handlelength=2.5)  # the wide '_' markers stay inside the handles
    # a figure title from the left edge: the axes are narrow when there are few cells
    fig.suptitle(f"audit {summary['name']}: empirical ε lower bounds against the claim and theory",
                 fontsize=10, x=0.01, ha="left")
    width = fig.get_size_inches()[0]
    fig.subplots_adjust(left=0.6 / width, right=1 - 3.1 / width, bottom=0.2, top=0.92)
    fig.savefig(path, dpi=80)
    plt.close(fig)
