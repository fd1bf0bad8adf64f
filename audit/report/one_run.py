"""The one-run audit's part of the report: summary keys, the sentence, the accuracy plot.

A one-run cell stores, like a multi-run cell, ``scores_in`` (the IN canaries' scores) and
``scores_out`` (the OUT canaries'), from one training (or one per shard of ``shard_size``
canaries). :func:`one_run_fields` replaces the multi-run statistics of the summary entry by
:mod:`audit.stats.one_run`'s: ``epsilon_lb`` (f-DP recursion with the (eps, delta) curve, sound at
1 - alpha), ``epsilon_optimistic`` (the best candidate rule's bound at alpha, not corrected
for the choice: optimistic, not a bound), ``verdict`` (:func:`audit.stats.one_run.one_run_verdict`
against the claimed curve), and ``canaries``, ``guesses`` (k+, k-), ``correct``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from audit.report.formatting import fmt as _fmt
from audit.report.formatting import pyplot
from audit.stats.one_run import (
    candidate_guesses,
    count_correct,
    fdp_epsilon_lb,
    fdp_rejects,
    one_run_epsilon_lb,
    one_run_verdict,
    tabulated_power,
)

__all__ = [
    "accuracy_file",
    "critical_correct",
    "one_run_fields",
    "one_run_sentence",
    "plot_accuracy",
]


def accuracy_file(cell_name: str) -> str:
    """``accuracy_<cell>.png``: the one-run plot of a cell."""
    return f"accuracy_{cell_name}.png"


def _canaries(scores_in: np.ndarray, scores_out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # IN first: among tied scores the stable ranking puts IN canaries lowest, so ties are
    # broken against the auditor (never more correct guesses than a bit-blind tie-break).
    scores = np.concatenate([np.asarray(scores_in, float), np.asarray(scores_out, float)])
    included = np.concatenate(
        [np.ones(np.size(scores_in), bool), np.zeros(np.size(scores_out), bool)]
    )
    return scores, included


def one_run_fields(
    scores_in: np.ndarray, scores_out: np.ndarray, claim: Callable[[np.ndarray], np.ndarray], *,
    delta: float, alpha: float, guesses: str | Sequence[int], seed: int, cell: str,
) -> dict[str, Any]:
    """The summary keys of a one-run cell (module docstring)."""
    scores, included = _canaries(scores_in, scores_out)
    bound = one_run_epsilon_lb(
        scores, included, delta=delta, alpha=alpha, guesses=guesses, method="fdp", seed=seed
    )
    decision = one_run_verdict(scores, included, claim, alpha, guesses=guesses, seed=seed)
    pairs = candidate_guesses(scores.size)
    counts = [count_correct(scores, included, kp, km) for kp, km in pairs]
    optimistic = fdp_epsilon_lb(
        scores.size,
        [c.guesses for c in counts],
        [c.correct for c in counts],
        delta=delta,
        alpha=alpha,
    )
    return {
        "audit": "one_run",
        "canaries": int(scores.size),
        "guesses": [bound.k_plus, bound.k_minus],
        "correct": bound.correct,
        "epsilon_lb": bound.epsilon_lb,
        "epsilon_optimistic": float(np.max(optimistic)),
        "verdict": "violated" if decision.violated else "consistent",
        "evidence": decision.to_dict(),
        "bound": bound.to_dict(),
        "plot": accuracy_file(cell),
    }


def one_run_sentence(entry: dict[str, Any], fmt: Callable[..., str]) -> tuple[str, str]:
    """(head, body) of a one-run cell's sentence; ``fmt`` is the report's number format."""
    confidence = f"{100 * (1 - entry['alpha']):g}%"
    b = entry["bound"]
    kp, km = entry["guesses"]
    rule = f"IN for the {kp} highest scores" + (f" and OUT for the {km} lowest" if km else "")
    head = (
        f"**{entry['sampler']} / {entry['threat_model']} / {entry['attack']}** (one run): of "
        f"{entry['canaries']} canaries ({entry['trials_in']} IN), guessing {rule} gets "
        f"{entry['correct']} of {kp + km} right ({b['strategy']} choice of the rule"
        + (
            (
                f", {b['candidates']} rules at α/{b['candidates']}"
                if b["strategy"] != "split"
                else f", tested at α/{b['candidates']}: the selection picks one of "
                     f"{b['candidates']} numbers of guesses"
            )
            if b["candidates"] > 1
            else ""
        )
        + f"), which shows ε ≥ {fmt(entry['epsilon_lb'], side='lower')} at δ = {entry['delta']:g} "
        f"({confidence} confidence)"
    )
    claim = f"{entry['claim_description']} claim ε = {fmt(entry['claimed_epsilon'])}"
    ev = entry["evidence"]
    if entry["verdict"] == "violated":
        body = (
            f"; {claim} is **violated**: under it, {ev['correct']} or more correct of "
            f"{ev['guesses']} guesses has probability below {ev['alpha_per_test']:.3g}"
        )
    else:
        body = (
            f"; the canaries are **consistent** with {claim}: no tested rule refutes its "
            f"trade-off curve at {confidence} confidence, which does not prove it"
        )
    return head, body


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
    entry: dict[str, Any],
    scores_in: np.ndarray,
    scores_out: np.ndarray,
    claim: Callable[[np.ndarray], np.ndarray],
) -> None:
    """Accuracy of the top-r IN guesses against the accuracy that refutes the claim at alpha
    and at the Bonferroni level alpha / G, r on a log scale; the chosen rule marked."""
    plt = pyplot()
    scores, included = _canaries(scores_in, scores_out)
    m = scores.size
    ranked = included[np.argsort(-scores, kind="stable")]
    r_all = np.arange(1, m + 1)
    accuracy = np.cumsum(ranked) / r_all
    r_grid = np.unique(np.round(np.geomspace(1, max(2, m // 2), 14)).astype(int))
    alpha = entry["alpha"]
    level = entry["bound"]["alpha_per_test"]
    fig, ax = plt.subplots(figsize=(7.5, 5))
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
        ax.plot(r_grid[ok], crit[ok] / r_grid[ok], style, color="tab:red",
                label=f"accuracy that refutes the claim ({text})")
    kp, km = entry["guesses"]
    ax.plot([kp + km], [entry["correct"] / max(kp + km, 1)], "*", ms=12,
            color="tab:red" if entry["verdict"] == "violated" else "tab:gray",
            label=f"chosen rule (k+ = {kp}, k- = {km}): {entry['verdict']}")
    ax.axhline(0.5, color="gray", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlim(1, m)
    ax.set_ylim(0.4, 1.02)
    ax.set_xlabel("number of guesses r (log scale)")
    ax.set_ylabel("fraction of guesses correct")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower left")
    ax.set_title(
        f"{entry['sampler']} / {entry['threat_model']} / {entry['attack']} (one run, m = {m}): "
        f"ε_lb = {_fmt(entry['epsilon_lb'], side='lower')}, claimed ε = "
        f"{_fmt(entry['claimed_epsilon'])}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
