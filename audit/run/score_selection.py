"""Sound choice of one score statistic among a family (docs/design/attacks.md §7.4; issue 33
item 3).

The family (:mod:`attacks.score_family`) gives K scores of the same observations. Reporting the
best of K bounds each computed at alpha would overstate the confidence (up to K alpha); two
sound ways are offered, and the result says which (:class:`ScoreSelection`):

- ``bonferroni`` (one-run default): every statistic's bound and verdict on *all* canaries at
  alpha / K; the stated one is the best of them (a refuting verdict first, then the largest
  eps_lb). By the union bound, P(any of the K bounds exceeds the true eps, or any of the K
  verdicts refutes a true claim) <= K (alpha / K) = alpha per test, as one statistic at alpha
  today. It keeps all m canaries, which the one-run bound needs most (its ceiling grows with m,
  the price of alpha / K is a log factor).
- ``split`` (multi-run, and one-run on request): the canaries (one-run) or trainings
  (multi-run) are split by a fixed seed into a selection half and a confirmation half; the
  statistic with the best bound on the selection half is chosen (the selection half's numbers
  are a criterion, never stated), and the stated bound is computed on the confirmation half
  only, at alpha. Sound because the choice is a function of data independent of the
  confirmation half: in a one-run audit, conditionally on the selection canaries' IN/OUT bits
  the training is still DP in each confirmation canary's bit and the guesses are a
  post-processing of the output (Steinke, Nasr, Jagielski 2023, Thm 3.1 holds conditionally);
  in a multi-run audit the confirmation trials stay i.i.d. and are scored by a fixed function.

Ties (every eps_lb 0, the usual correct training) go to the family's first statistic, the
sampler's likelihood ratio.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from attacks.score_family import DEFAULT_FAMILY, ScoreContext, ScoreFamily
from audit.core.validation import check_choice, check_int
from audit.run.summary import (
    OneRunStatistics,
    canary_scores,
    canary_statistics,
    epsilon_refutes,
)
from audit.stats.binary import epsilon_lower_bound
from audit.stats.one_run import one_run_epsilon_lb, one_run_verdict
from audit.theory.curve import TradeOffCurve

__all__ = [
    "SELECTIONS",
    "OneRunChoice",
    "ScoreSelection",
    "StatisticOutcome",
    "TrialsChoice",
    "choose_one_run",
    "choose_trials",
    "split_halves",
]

SELECTIONS: tuple[str, ...] = ("bonferroni", "split")
"""The sound choices (module docstring)."""


@dataclass(frozen=True)
class StatisticOutcome:
    """One statistic's numbers in a selection.

    Attributes:
        name: the statistic.
        epsilon_lb: with ``bonferroni``, its eps lower bound on all canaries at alpha / K (a
            bound); with ``split``, on the selection half at alpha (a criterion, not stated).
        refutes: whether its verdict (or eps_lb against the claimed eps) refutes the claim there.
    """

    name: str
    epsilon_lb: float
    refutes: bool


@dataclass(frozen=True)
class ScoreSelection:
    """How the stated score statistic was chosen (module docstring).

    Attributes:
        method: ``bonferroni`` or ``split``.
        chosen: the statistic whose bound is stated.
        outcomes: every statistic's :class:`StatisticOutcome`, in the family's order.
        alpha: the audit's 1 - confidence (what the stated bound holds at, family-wise).
        alpha_each: what the stated bound is computed at: alpha / K (``bonferroni``) or alpha
            (``split``, on held-out data).
        selection_size: canaries or trainings in the selection half (0 with ``bonferroni``).
        confirmation_size: canaries or trainings the stated bound is computed on.
        seed: the split's seed (``split``).
    """

    method: str
    chosen: str
    outcomes: tuple[StatisticOutcome, ...]
    alpha: float
    alpha_each: float
    selection_size: int
    confirmation_size: int
    seed: int = 0

    @property
    def statistics(self) -> tuple[str, ...]:
        """The family's statistics, in order."""
        return tuple(o.name for o in self.outcomes)

    @property
    def correction(self) -> str:
        """The correction, in words."""
        k = len(self.outcomes)
        if self.method == "bonferroni":
            return (f"Bonferroni over {k} statistics: each bound and verdict at "
                    f"alpha / {k} = {self.alpha_each:.3g} on all {self.confirmation_size}")
        return (f"chosen on a held-out half ({self.selection_size}, split seed {self.seed}), "
                f"stated on the other {self.confirmation_size} at alpha = {self.alpha_each:.3g}")

    def sentence(self) -> str:
        """The report's line: the statistic stated, how it was chosen, every candidate's number."""
        what = "eps_lb at alpha / K" if self.method == "bonferroni" else (
            "selection-half eps_lb, a criterion")
        listed = ", ".join(
            f"{o.name} {o.epsilon_lb:.3g}{' (refutes)' if o.refutes else ''}" for o in self.outcomes
        )
        return (f"Score statistic: {self.chosen}, the best of {len(self.outcomes)} "
                f"({self.correction}); {what}: {listed}")

    def to_json(self) -> dict[str, object]:
        return {
            "method": self.method, "chosen": self.chosen, "alpha": self.alpha,
            "alpha_each": self.alpha_each, "selection_size": self.selection_size,
            "confirmation_size": self.confirmation_size, "seed": self.seed,
            "correction": self.correction,
            "outcomes": [{"name": o.name, "epsilon_lb": o.epsilon_lb, "refutes": o.refutes}
                         for o in self.outcomes],
        }


def split_halves(n: int, seed: int, *, group: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(selection, confirmation) row indices of ``n`` rows, each sorted, by a fixed seed.

    Rows come in consecutive groups of ``group`` (the k canaries of one training, docs/design.md
    §8.17); whole groups go to one half, the selection half takes floor(groups / 2) of them.
    """
    n = check_int("n", n, minimum=0)
    group = check_int("group", group, minimum=1)
    if n % group:
        raise ValueError(f"n={n} rows are not whole groups of {group}")
    groups = n // group
    order = np.random.default_rng([seed, 0x5E1EC7]).permutation(groups)
    pick = np.sort(order[: groups // 2])
    rest = np.sort(order[groups // 2:])

    def rows(g: np.ndarray) -> np.ndarray:
        return (g[:, None] * group + np.arange(group)).ravel()

    return rows(pick), rows(rest)


def _best(outcomes: Sequence[StatisticOutcome]) -> str:
    """A refuting statistic first, then the largest eps_lb; ties to the earlier one."""
    best = max(range(len(outcomes)), key=lambda i: (outcomes[i].refutes, outcomes[i].epsilon_lb,
                                                    -i))
    return outcomes[best].name


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
    """The one-run audit of a family's scores of the same canaries (module docstring).

    Args:
        scores: statistic name -> one score per canary (higher = IN), in the family's order;
            each a function of the training's output alone.
        included: the canaries' IN bits.
        claimed_curve, claimed_epsilon: the claim (its trade-off curve, its eps at ``delta``).
        delta, alpha, guesses, seed: as :func:`audit.run.summary.canary_statistics`.
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
    k = len(named)
    if method == "bonferroni":
        pick, used, each = np.arange(0), np.arange(b.size), alpha / k
    else:
        pick, used = split_halves(b.size, split_seed)
        each = alpha
    criterion_rows = used if method == "bonferroni" else pick
    outcomes = tuple(
        _one_run_outcome(name, s[criterion_rows], b[criterion_rows], claimed_curve,
                         claimed_epsilon, delta=delta, alpha=each, guesses=guesses, seed=seed)
        for name, s in named.items()
    )
    chosen = _best(outcomes)
    s = named[chosen]
    stats = canary_statistics(
        s[used][b[used]], s[used][~b[used]], claimed_curve, delta=delta, alpha=each,
        guesses=guesses, seed=seed,
    )
    selection = ScoreSelection(
        method=method, chosen=chosen, outcomes=outcomes, alpha=alpha, alpha_each=each,
        selection_size=int(pick.size), confirmation_size=int(used.size),
        seed=split_seed if method == "split" else 0,
    )
    return OneRunChoice(statistics=stats, selection=selection, scores=s, used=used)


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


@dataclass(frozen=True)
class TrialsChoice:
    """A multi-run family choice: the chosen statistic's scores of the confirmation trials.

    Attributes:
        scores_in, scores_out: the confirmation half's scores (the summary's bound reads these).
        selection: the :class:`ScoreSelection` (``split``; eps_lb per statistic on the selection
            half, by the ``bonferroni`` threshold grid at alpha: a criterion).
    """

    scores_in: np.ndarray
    scores_out: np.ndarray
    selection: ScoreSelection


def choose_trials(
    y_in: np.ndarray,
    y_out: np.ndarray,
    context: ScoreContext,
    *,
    delta: float,
    alpha: float,
    family: ScoreFamily = DEFAULT_FAMILY,
    seed: int = 0,
    group: int = 1,
) -> TrialsChoice:
    """Multi-run: split the IN and the OUT trainings (``group`` rows each) into halves by
    ``seed``, calibrate the family on the selection half's OUT rows (``context.reference``),
    choose the statistic with the largest eps_lb on the selection half, and return its scores of
    the confirmation half (module docstring). The confirmation rows keep their order.
    """
    rows_in, rows_out = np.asarray(y_in), np.asarray(y_out)
    if rows_in.ndim != 2 or rows_out.ndim != 2:
        raise ValueError(
            f"score_family needs all-iterates rows (trials, steps); got {rows_in.shape}, "
            f"{rows_out.shape}"
        )
    pick_in, keep_in = split_halves(rows_in.shape[0], seed, group=group)
    pick_out, keep_out = split_halves(rows_out.shape[0], seed + 1, group=group)
    if min(pick_in.size, pick_out.size, keep_in.size, keep_out.size) < 2:
        raise ValueError(
            "score_family: each half needs at least 2 IN and 2 OUT trials; got "
            f"{rows_in.shape[0]} IN, {rows_out.shape[0]} OUT"
        )
    calibrated = ScoreContext(sigma=context.sigma, q=context.q, reference=rows_out[pick_out])
    members = family.applicable(calibrated)
    sel_in = members.scores(rows_in[pick_in], calibrated)
    sel_out = members.scores(rows_out[pick_out], calibrated)
    outcomes = tuple(
        StatisticOutcome(name, float(epsilon_lower_bound(
            sel_in[name], sel_out[name], delta=delta, confidence=1 - alpha, threshold="bonferroni",
        ).epsilon_lb), False)
        for name in members.names
    )
    chosen = _best(outcomes)
    statistic = members.only([chosen]).statistics[0]
    selection = ScoreSelection(
        method="split", chosen=chosen, outcomes=outcomes, alpha=alpha, alpha_each=alpha,
        selection_size=int(pick_in.size + pick_out.size),
        confirmation_size=int(keep_in.size + keep_out.size), seed=seed,
    )
    return TrialsChoice(
        statistic(rows_in[keep_in], calibrated), statistic(rows_out[keep_out], calibrated),
        selection,
    )
