"""The one-run audit's part of the report: the sentence and the accuracy plot.

A one-run cell's statistics are computed in the run stage
(:func:`audit.run.summary.one_run_statistics`, :class:`audit.run.results.OneRunCellResult`:
``epsilon_lb`` from the f-DP recursion with the
(eps, delta) curve, sound at 1 - alpha; ``epsilon_optimistic``, the best candidate rule's bound
at alpha, not a bound; the verdict against the claimed curve; the canaries, the guesses (k+,
k-) and the correct ones); this module words and draws them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from audit.report.figures import legend_below, wrap_label
from audit.report.formatting import bound_level, pyplot, save_figure, verdict_level
from audit.report.formatting import fmt as _fmt
from audit.run.results import OneRunCellResult, accuracy_file
from audit.run.summary import canary_scores
from audit.stats.one_run import fdp_rejects, tabulated_power

__all__ = [
    "accuracy_file",
    "critical_correct",
    "one_run_reason",
    "one_run_sentence",
    "plot_accuracy",
]


def one_run_sentence(
    cell: OneRunCellResult,
    fmt: Callable[..., str],
    *,
    refuted: Sequence[str] = (),
    findings_alpha: float = 0.0,
) -> tuple[str, str]:
    """(head, body) of a one-run cell's sentence; ``fmt`` is the report's number format.

    eps_lb is stated at :func:`audit.report.formatting.bound_level` (the level report.md's
    header states); a violated verdict names what refuted the claim (the curve test, eps_lb
    above the claimed eps, the ``refuted`` findings: a deployed audit's, at family-wise
    ``findings_alpha``) and its level (:func:`audit.report.formatting.verdict_level`)."""
    level = bound_level(cell.confidence)
    b = cell.bound
    kp, km = cell.guesses
    rule = f"IN for the {kp} highest scores" + (f" and OUT for the {km} lowest" if km else "")
    head = (
        f"**{cell.cell.sampler} / {cell.cell.threat_model} / {cell.cell.attack}** (one run): of "
        f"{cell.canaries} canaries ({cell.trials_in} IN), guessing {rule} gets {cell.correct} "
        f"of {kp + km} right ({b.strategy} choice of the rule"
        + (
            (
                f", {b.candidates} rules at α/{b.candidates}"
                if b.strategy != "split"
                else f", tested at α/{b.candidates}: the selection picks one of {b.candidates} "
                     "numbers of guesses"
            )
            if b.candidates > 1
            else ""
        )
        + f"), which shows ε ≥ {fmt(cell.epsilon_lb, side='lower')} at δ = {cell.delta:g} "
        f"({level})"
    )
    claim = f"{cell.claim_description} claim ε = {fmt(cell.claimed_epsilon)}"
    if cell.violated or refuted:
        body = f"; {claim} is **violated**, refuted by " + "; ".join(_reasons(cell, fmt, refuted))
        if not cell.violated:
            body += ", though the canaries' scores alone do not refute it (ε_lb stays as computed)"
        body += f"; the verdict holds at {verdict_level(cell.confidence, findings_alpha)}"
    else:
        body = (
            f"; the canaries are **consistent** with {claim}: no tested rule refutes its "
            f"trade-off curve and ε_lb does not exceed the claimed ε at {level}, which does not "
            "prove it"
        )
    body += _family_price(cell, fmt)
    if cell.gdp is not None and cell.gdp.mu_lb > 0:
        g = cell.gdp
        where = " of the evaluation half" if g.strategy == "split" else ""
        body += (
            f". Every μ-GDP claim with μ < {fmt(g.mu_lb, side='lower')} is refuted at {level} "
            f"(§8.19; {g.strategy} rule ({g.k_plus}, {g.k_minus}), {g.correct} of "
            f"{g.guesses} right{where})"
        )
        if _gaussian_theory(cell) and cell.gdp_epsilon is not None:
            body += (
                f"; were the implementation's trade-off curve exactly Gaussian, as the theory's "
                f"is here (an assumption this audit does not test), ε at δ = {cell.delta:g} would "
                f"be at least {fmt(cell.gdp_epsilon)}: an estimate, not a bound"
            )
    return head, body


def _reasons(
    cell: OneRunCellResult, fmt: Callable[..., str], refuted: Sequence[str]
) -> list[str]:
    """What refuted the claim: the curve test, the eps_lb test, the refuting findings."""
    ev, tests = cell.evidence, cell.verdict_tests
    reasons = []
    if tests.curve:
        reasons.append(
            f"the curve test: under the claim, {ev.correct} or more correct of {ev.guesses} "
            f"guesses (its rule) has probability below {ev.alpha_per_test:.3g}"
        )
    if tests.epsilon:
        reasons.append(
            f"the ε_lb test: ε_lb = {fmt(cell.epsilon_lb, side='lower')} exceeds the claimed ε = "
            f"{fmt(cell.claimed_epsilon)} at δ = {cell.delta:g}"
        )
    if refuted:
        reasons.append(f"the findings {', '.join(refuted)} refute the claimed mechanism")
    return reasons


def one_run_reason(
    cell: OneRunCellResult,
    fmt: Callable[..., str],
    *,
    refuted: Sequence[str] = (),
    findings_alpha: float = 0.0,
    with_level: bool = True,
) -> str:
    """Why a one-run verdict is what it is, in one clause (a CLI's verdict line): what refuted
    the claim and (``with_level``) the verdict's level, or that nothing did at eps_lb's
    level."""
    if not cell.violated and not refuted:
        return (
            f"no test refutes the claim at {bound_level(cell.confidence)}: ε_lb "
            f"{fmt(cell.epsilon_lb, side='lower')} ≤ claimed {fmt(cell.claimed_epsilon)} and no "
            "tested rule rejects its curve"
        )
    level = verdict_level(cell.confidence, findings_alpha)
    return f"refuted by {'; '.join(_reasons(cell, fmt, refuted))}" + (
        f" (verdict at {level})" if with_level else ""
    )


def _family_price(cell: OneRunCellResult, fmt: Callable[..., str]) -> str:
    """The price of the rule family (issue 44): the best of its G rules tested alone at alpha
    (``epsilon_optimistic``: picked after the scores, not a bound) against ε_lb at alpha / G;
    empty unless the bound came from a ``bonferroni`` family and the price is positive."""
    b = cell.bound
    optimistic = cell.epsilon_optimistic
    if b.strategy != "bonferroni" or b.candidates < 2 or not optimistic > cell.epsilon_lb:
        return ""
    return (
        f". The {b.candidates}-rule family's price: the best of its rules tested alone at α "
        f"would show ε ≥ {fmt(optimistic)} (picked after seeing the scores: optimistic, not a "
        f"bound), so α/{b.candidates} costs {100 * (1 - cell.epsilon_lb / optimistic):.0f}% of "
        "it here; a rule fixed before the run (`guesses = [k_plus, k_minus]`, which `audit plan "
        "--one-run` proposes from the theory curve) is tested at α"
    )


def _gaussian_theory(cell: OneRunCellResult) -> bool:
    """Whether the theory's lower and upper curves of the cell are both Gaussian DP (as
    deterministic batches'): the only cells where eps of mu_lb-GDP is worth printing."""
    methods = (cell.theory_lower_method or "", cell.theory_upper_method or "")
    return all(m.startswith("Gaussian DP") for m in methods)


def critical_correct(
    claim: Callable[[np.ndarray], np.ndarray], m: int, guesses: np.ndarray, alpha: float
) -> np.ndarray:
    """For each number of IN guesses r, the fewest correct guesses that refute ``claim`` at
    level alpha (f-DP recursion, IN-only guesses); r + 1 where none does."""
    power = tabulated_power(claim, "in")
    r = np.asarray(guesses, dtype=np.int64)
    lo, hi = np.full(r.shape, -1), r + 1  # refutation is monotone in c: bisection, all r at once
    while np.any(hi - lo > 1):
        mid = (lo + hi) // 2
        rejected = fdp_rejects(power, m, r, np.clip(mid, 0, r), alpha) & (hi - lo > 1)
        hi = np.where(rejected, mid, hi)
        lo = np.where(rejected | (hi - lo <= 1), lo, mid)
    return hi


def plot_accuracy(
    path: str | Path,
    cell: OneRunCellResult,
    scores_in: np.ndarray,
    scores_out: np.ndarray,
    claim: Callable[[np.ndarray], np.ndarray],
    formats: Sequence[str] = ("png",),
) -> None:
    """Accuracy of the top-r IN guesses against the accuracy that refutes the claim at alpha
    and at the Bonferroni level alpha / G, r on a log scale; the chosen rule marked. Saved as
    :func:`audit.report.formatting.save_figure` does (PNG, and SVG/PDF in ``formats``)."""
    plt = pyplot()
    scores, included = canary_scores(scores_in, scores_out)
    m = scores.size
    ranked = included[np.argsort(-scores, kind="stable")]
    r_all = np.arange(1, m + 1)
    accuracy = np.cumsum(ranked) / r_all
    r_grid = np.unique(np.round(np.geomspace(1, max(2, m // 2), 14)).astype(int))
    alpha = cell.alpha
    level = cell.bound.alpha_per_test
    fig, ax = plt.subplots(figsize=(7.5, 6.2), layout="constrained")
    ax.plot(
        r_all,
        accuracy,
        color="black",
        lw=1,
        label="observed accuracy of the r highest scores (IN guesses)",
    )
    for a, style, text in (
        (alpha, ":", f"α = {alpha:g}"),
        (level, "--", f"α per rule = {level:.3g}"),
    ):
        crit = critical_correct(claim, m, r_grid, a)
        ok = crit <= r_grid
        if a == level:
            ax.fill_between(r_grid[ok], crit[ok] / r_grid[ok], 1.02, color="tab:red", alpha=0.08,
                            lw=0, label="above the dashed line: refutes the claim (at α per rule)")
        ax.plot(r_grid[ok], crit[ok] / r_grid[ok], style, color="tab:red",
                label=f"accuracy that refutes the claim ({text})")
    kp, km = cell.guesses
    ax.plot([kp + km], [cell.correct / max(kp + km, 1)], "*", ms=12,
            color="tab:red" if cell.violated else "tab:gray",
            label=f"chosen rule (k+ = {kp}, k- = {km}): {cell.verdict}")
    ax.axhline(0.5, color="gray", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlim(1, m)
    ax.set_ylim(0.4, 1.02)
    ax.set_xlabel("number of guesses r (log scale)")
    ax.set_ylabel("fraction of guesses correct")
    ax.grid(alpha=0.3)
    legend_below(fig, ax, ncol=1)
    ax.set_title(wrap_label(
        f"{cell.cell.sampler} / {cell.cell.threat_model} / {cell.cell.attack} (one run, m = {m}): "
        f"ε_lb = {_fmt(cell.epsilon_lb, side='lower')}, claimed ε = {_fmt(cell.claimed_epsilon)}",
        90), fontsize=9)
    save_figure(fig, path, formats)
    plt.close(fig)
