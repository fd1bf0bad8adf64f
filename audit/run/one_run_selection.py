"""The one-run audit of a score family's scores: the statistic chosen soundly among them
(:mod:`audit.run.score_selection`'s ``bonferroni`` or ``split``; docs/design/attacks.md §7.4),
and the stated statistics of the chosen one (:func:`audit.run.summary.canary_statistics`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from audit.core.validation import check_choice
from audit.run.score_selection import (
    SELECTIONS,
    ScoreSelection,
    StatisticOutcome,
    best_outcome,
    split_halves,
)
from audit.run.summary import (
    OneRunStatistics,
    canary_scores,
    canary_statistics,
    epsilon_refutes,
)
from audit.stats.one_run import one_run_epsilon_lb, one_run_verdict
from audit.theory.curve import TradeOffCurve

__all__ = ["OneRunChoice", "choose_one_run", "select_statistic"]


@dataclass(frozen=True)
class OneRunChoice:
    """A one-run family audit: the stated statistics and how they were chosen.

    Attributes:
        statistics: the stated :class:`audit.run.summary.OneRunStatistics` (the chosen score, at
            ``selection.alpha_each``, on the canaries ``used``).
        selection: the :class:`ScoreSelection`.
        scores: the chosen statistic's score of every canary.
        used: the indices of the canaries the stated bound is computed on.
    """

    statistics: OneRunStatistics
    selection: ScoreSelection
    scores: np.ndarray
    used: np.ndarray


def choose_one_run(
    scores: Mapping[str, np.ndarray],
    included: np.ndarray,
    claimed_curve: TradeOffCurve,
    claimed_epsilon: float | None,
    *,
    delta: float,
    alpha: float,
    guesses: str | tuple[int, int] | list[int] = "bonferroni",
    seed: int = 0,
    method: str = "bonferroni",
    split_seed: int = 0,
) -> OneRunChoice:
    """The one-run audit of a family's scores of the same canaries
    (:mod:`audit.run.score_selection`).

    Args:
        scores: statistic name -> one score per canary (higher = IN), in the family's order;
            each a function of the training's output alone.
        included: the canaries' IN bits.
        claimed_curve: the claim's trade-off curve.
        claimed_epsilon: the claim's eps at ``delta``.
        delta: as :func:`audit.run.summary.canary_statistics`.
        alpha: as :func:`audit.run.summary.canary_statistics`.
        guesses: as :func:`audit.run.summary.canary_statistics`.
        seed: as :func:`audit.run.summary.canary_statistics`.
        method: ``bonferroni`` or ``split``.
        split_seed: the ``split`` halves' seed.
    """
    method = check_choice("selection", method, SELECTIONS)
    if not scores:
        raise ValueError("choose_one_run: no statistic's scores given")
    b = np.asarray(included, dtype=bool).ravel()
    named = {name: np.asarray(s, dtype=float).ravel() for name, s in scores.items()}
    for name, s in named.items():
        if s.size != b.size:
            raise ValueError(f"statistic {name!r}: {s.size} scores for {b.size} canaries")
    selection, used = select_statistic(
        named, b, claimed_curve, claimed_epsilon, delta=delta, alpha=alpha, guesses=guesses,
        seed=seed, method=method, split_seed=split_seed,
    )
    s = named[selection.chosen]
    stats = canary_statistics(
        s[used][b[used]], s[used][~b[used]], claimed_curve, delta=delta,
        alpha=selection.alpha_each, guesses=guesses, seed=seed,
    )
    return OneRunChoice(statistics=stats, selection=selection, scores=s, used=used)


def select_statistic(
    scores: Mapping[str, np.ndarray],
    included: np.ndarray,
    claimed_curve: TradeOffCurve,
    claimed_epsilon: float | None,
    *,
    delta: float,
    alpha: float,
    guesses: str | tuple[int, int] | list[int] = "bonferroni",
    seed: int = 0,
    method: str = "bonferroni",
    split_seed: int = 0,
) -> tuple[ScoreSelection, np.ndarray]:
    """The choice of :func:`choose_one_run` alone: the :class:`ScoreSelection` and the indices
    of the canaries the stated bound is computed on. With ``bonferroni`` the chosen outcome's
    ``epsilon_lb`` and ``refutes`` are the stated bound's and verdict's (same scores, same
    order, same alpha / K)."""
    method = check_choice("selection", method, SELECTIONS)
    b = np.asarray(included, dtype=bool).ravel()
    k = len(scores)
    if method == "bonferroni":
        pick, used, each = np.arange(0), np.arange(b.size), alpha / k
    else:
        pick, used = split_halves(b.size, split_seed)
        each = alpha
    rows = used if method == "bonferroni" else pick
    outcomes = tuple(
        _one_run_outcome(name, np.asarray(s, dtype=float).ravel()[rows], b[rows], claimed_curve,
                         claimed_epsilon, delta=delta, alpha=each, guesses=guesses, seed=seed)
        for name, s in scores.items()
    )
    selection = ScoreSelection(
        method=method, chosen=best_outcome(outcomes), outcomes=outcomes, alpha=alpha,
        alpha_each=each,
        selection_size=int(pick.size), confirmation_size=int(used.size),
        seed=split_seed if method == "split" else 0,
    )
    return selection, used


def _one_run_outcome(
    name: str, s: np.ndarray, b: np.ndarray, curve: TradeOffCurve, claimed: float | None, *,
    delta: float, alpha: float, guesses: str | tuple[int, int] | list[int], seed: int,
) -> StatisticOutcome:
    """One statistic's eps_lb and verdict (the two tests the cell's verdict is the union of)."""
    if b.all() or not b.any():
        return StatisticOutcome(name, 0.0, False)
    # IN first, as canary_statistics orders them: ties broken against the auditor, the same way
    s, b = canary_scores(s[b], s[~b])
    bound = one_run_epsilon_lb(s, b, delta=delta, confidence=1 - alpha, guesses=guesses, seed=seed)
    verdict = one_run_verdict(s, b, curve, confidence=1 - alpha, guesses=guesses, seed=seed)
    eps = float(bound.epsilon_lb)
    return StatisticOutcome(name, eps, bool(verdict.violated) or epsilon_refutes(eps, claimed))
