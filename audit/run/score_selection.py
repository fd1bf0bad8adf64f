"""Sound choice of one score statistic among a family (docs/design/attacks.md §7.4; issue 33
item 3).

The family (:mod:`attacks.score_family`) gives K scores of the same observations. Reporting the
best of K bounds each computed at alpha would overstate the confidence (up to K alpha); two
sound ways are offered, and the result says which (:class:`ScoreSelection`):

- ``bonferroni`` (one-run default, :mod:`audit.run.one_run_selection`): every statistic's
  bound and verdict on *all* canaries at alpha / K; the stated one is the best of them (a
  refuting verdict first, then the largest eps_lb). By the union bound, P(any of the K
  bounds exceeds the true eps, or any of the K verdicts refutes a true claim)
  <= K (alpha / K) = alpha per test, as one statistic at alpha today. It keeps all m
  canaries, which the one-run bound needs most (its ceiling grows with m; the price of
  alpha / K is a log factor).
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

from attacks.registry import default_attack, get_attack
from attacks.score_family import DEFAULT_FAMILY, ScoreContext, ScoreFamily
from audit.core.observations import Observations
from audit.core.validation import check_int
from audit.sampling.laws import canary_inclusion_probability
from audit.stats.binary import epsilon_lower_bound

__all__ = [
    "SELECTIONS",
    "ScoreFamilyAttack",
    "ScoreSelection",
    "StatisticOutcome",
    "TrialsChoice",
    "best_outcome",
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

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> ScoreSelection:
        """The record :meth:`to_json` wrote (``scores/<cell>.selection.json``)."""
        outcomes = data.get("outcomes")
        if not isinstance(outcomes, list):
            raise ValueError(f"score selection: 'outcomes' must be a list; got {outcomes!r}")
        return cls(
            method=str(data["method"]), chosen=str(data["chosen"]),
            outcomes=tuple(StatisticOutcome(str(o["name"]), _number(o, "epsilon_lb"),
                                            bool(o["refutes"])) for o in outcomes),
            alpha=_number(data, "alpha"), alpha_each=_number(data, "alpha_each"),
            selection_size=int(_number(data, "selection_size")),
            confirmation_size=int(_number(data, "confirmation_size")),
            seed=int(_number(data, "seed")),
        )

    def to_json(self) -> dict[str, object]:
        return {
            "method": self.method, "chosen": self.chosen, "alpha": self.alpha,
            "alpha_each": self.alpha_each, "selection_size": self.selection_size,
            "confirmation_size": self.confirmation_size, "seed": self.seed,
            "correction": self.correction,
            "outcomes": [{"name": o.name, "epsilon_lb": o.epsilon_lb, "refutes": o.refutes}
                         for o in self.outcomes],
        }


def _number(data: Mapping[str, object], name: str) -> float:
    value = data.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"score selection: {name!r} must be a number; got {value!r}")
    return float(value)


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


def best_outcome(outcomes: Sequence[StatisticOutcome]) -> str:
    """A refuting statistic first, then the largest eps_lb; ties to the earlier one."""
    best = max(range(len(outcomes)), key=lambda i: (outcomes[i].refutes, outcomes[i].epsilon_lb,
                                                    -i))
    return outcomes[best].name


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
    chosen = best_outcome(outcomes)
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


class ScoreFamilyAttack:
    """The multi-run cell ``<sampler>/<threat model>/score_family``: the family's statistics
    chosen on a selection half of the trainings and applied to the other half
    (:func:`choose_trials`). Not a per-trial :class:`attacks.base.Attack`: its scores are those
    of the confirmation trials only, and the choice needs every trial at once (so it is
    refused with ``store = "scores"``, whose shards are scored alone, and with a sequential
    ``stop``, whose shards are read in order).

    ``likelihood_ratio`` is the sampler's own default attack (:func:`attacks.default_attack`:
    poisson_lr, the shuffles' likelihood ratios, known_step), q its canary inclusion
    probability (:func:`audit.sampling.laws.canary_inclusion_probability`).
    """

    name = "score_family"
    observation = "all_iterates"

    def __init__(self, family: ScoreFamily = DEFAULT_FAMILY, *, seed: int = 0, group: int = 1,
                 delta: float = 1e-5, alpha: float = 0.05) -> None:
        self.family, self.seed, self.group = family, seed, group
        self.delta, self.alpha = delta, alpha

    def choose(self, observations: Observations) -> TrialsChoice:
        """The choice on ``observations`` (all trials of one training key)."""
        y_in, y_out = observations.pair(self.observation)
        mechanism = observations.mechanism
        lr = get_attack(default_attack(mechanism, self.observation))

        def sampler_lr(rows: np.ndarray, context: ScoreContext) -> np.ndarray:
            return lr.score(rows, mechanism, observations)

        family = self.family
        if "likelihood_ratio" in family.names:
            family = family.with_function("likelihood_ratio", sampler_lr,
                                          f"the sampler's likelihood ratio ({lr.name})")
        try:
            q: float | None = float(canary_inclusion_probability(mechanism))
        except ValueError:
            q = None
        return choose_trials(
            np.asarray(y_in), np.asarray(y_out), ScoreContext(sigma=mechanism.sigma, q=q),
            delta=self.delta, alpha=self.alpha, family=family, seed=self.seed, group=self.group,
        )

    def scores(self, observations: Observations) -> tuple[np.ndarray, np.ndarray]:
        """The confirmation trials' (scores_in, scores_out) of the chosen statistic."""
        choice = self.choose(observations)
        return choice.scores_in, choice.scores_out
