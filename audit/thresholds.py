"""The ``planned`` threshold: fixed before any score is seen, tested once on all trials.

The other sound strategies pay for choosing the threshold on the data: ``split`` throws half the
trials away and suffers a winner's curse on the selection half; ``bonferroni`` spends alpha over
k thresholds; ``multisplit`` spends a factor 2. A threshold fixed *before* the scores are seen
pays nothing (docs/design.md §8.12):

- The rule is an order statistic at a planned rank: on the OUT tail, "IN iff score >= the r-th
  largest OUT score" (then FP = r, and the true FPR at that threshold is Beta(r, n_out - r + 1)
  for continuous scores, stochastically below Clopper-Pearson's Beta(r + 1, n_out - r): CP at
  the observed count is conservative, as for the ``bonferroni`` grid, §8.3); on the IN tail,
  "IN iff score > the r-th smallest IN score" (FN = r). The other rate's count is independent
  of that threshold given it, so its CP bound holds conditionally. One test, alpha / 2 per rate,
  all trials: sound whatever the plan, because the plan does not look at the tested scores.
- The rank is chosen to maximise the *expected* objective at the planned counts, computed with
  the exact Clopper-Pearson bounds of :mod:`audit.stats`: if the scores' trade-off curve is f
  (its power 1 - f), the fixed side's true rate at rank r is U ~ Beta(r, n - r + 1), and the
  other side's count is Binomial(n_other, f(U)) (OUT tail) or Binomial(n_other, f^{-1}(U))
  (IN tail); E[objective(CP_upper(r), CP_upper(count))] is summed over the count's binomial law
  and 12 Beta quantiles of U (:func:`expected_objective`).
- The curve comes from the theory (the mechanism's ``lower`` curve: what a known attack
  achieves; the default attack of a white-box audit attains it) or from a *pilot*: a seeded
  random subset of the trials (:data:`PILOT_FRACTION`) whose empirical curve is planned on and
  which is then left out of the test (:func:`pilot_curve`, :func:`split_pilot`).

For the eps lower bound the objective is eps_lb(FPR_hi, FNR_hi) (docs/design.md §8.2); for a
verdict it is the probability of refuting the claim, ties broken by the expected margin.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
from scipy.stats import beta as beta_law
from scipy.stats import binom

from audit.stats import (
    _as_scores,
    _cp_upper_counts,
    clopper_pearson_upper,
    epsilon_from_rates,
    evaluate_curve,
)
from audit.theory.curve import TradeOffCurve
from audit.validation import check_choice, check_int, check_real

__all__ = [
    "PILOT_FRACTION",
    "PLAN_SOURCES",
    "SIDES",
    "PlannedGuesses",
    "PlannedThreshold",
    "eps_objective",
    "expected_objective",
    "pilot_curve",
    "plan_guesses",
    "plan_threshold",
    "split_pilot",
    "verdict_objective",
]

SIDES: tuple[str, ...] = ("out", "in")
"""``out``: the r-th largest OUT score (FP = r, low-FPR tail); ``in``: just above the r-th
smallest IN score (FN = r, low-FNR tail)."""

PLAN_SOURCES: tuple[str, ...] = ("theory", "pilot", "given")
"""Where a plan's curve came from: the theory's lower curve, a pilot subset of the trials
(left out of the test), or a curve the caller gave."""

PILOT_FRACTION = 0.1
"""Share of the IN and of the OUT trials a pilot takes (and the test leaves out)."""

PILOT_PESSIMISM = 0.16
"""Level of the pilot curve's one-sided CP upper bounds (about one standard error)."""

RANK_CANDIDATES = 60
"""Geometric ranks 1..n tried first by the planner per side."""

REFINE = 40
"""Ranks tried next, evenly between the best geometric rank's two neighbours."""

BETA_NODES = 12
"""Quantiles of U ~ Beta(r, n - r + 1) averaged over (midpoints (j + 1/2) / 12)."""

TAIL = 1e-10
"""Binomial mass left out on each side of the count's law (the expectation's error <= 2e-10
times the objective's range)."""

Objective = Callable[[np.ndarray, np.ndarray], np.ndarray]


def eps_objective(delta: float) -> Objective:
    """eps_lb(FPR_hi, FNR_hi) at ``delta`` (:func:`audit.stats.epsilon_from_rates`)."""
    return lambda fpr_hi, fnr_hi: epsilon_from_rates(fpr_hi, fnr_hi, delta)


def verdict_objective(claim: Callable[[np.ndarray], object]) -> Objective:
    """1{FNR_hi < f(FPR_hi)} + 1e-3 (f(FPR_hi) - FNR_hi): the chance of refuting ``claim``, ties
    (e.g. no chance anywhere) broken by the expected margin."""

    def objective(fpr_hi: np.ndarray, fnr_hi: np.ndarray) -> np.ndarray:
        margin = evaluate_curve(claim, np.asarray(fpr_hi, dtype=float)) - fnr_hi
        return (margin > 0).astype(float) + 1e-3 * margin

    return objective


@dataclass(frozen=True)
class PlannedThreshold:
    """A threshold rule fixed before the tested scores are seen: an order statistic at ``rank``
    on side ``side`` of ``n_in`` IN and ``n_out`` OUT test scores.

    ``source`` says where the planning curve came from (:data:`PLAN_SOURCES`), ``curve`` names
    it; ``expected_value`` is the planned expectation of the objective (``objective``: "eps_lb"
    or "verdict") and ``planned_rate`` the fixed side's rate r / n. ``pilot_in``/``pilot_out``:
    trials the pilot used (left out of the test), 0 without a pilot.
    """

    side: str
    rank: int
    n_in: int
    n_out: int
    source: str
    curve: str
    objective: str
    expected_value: float
    pilot_in: int = 0
    pilot_out: int = 0

    @property
    def planned_rate(self) -> float:
        """r / n: the planned FPR (side ``out``) or FNR (side ``in``)."""
        return self.rank / (self.n_out if self.side == "out" else self.n_in)

    def threshold_for(self, sorted_in: np.ndarray, sorted_out: np.ndarray) -> float:
        """The planned threshold on sorted test scores (sizes must be the planned ones)."""
        if sorted_in.size != self.n_in or sorted_out.size != self.n_out:
            raise ValueError(
                f"plan: planned for {self.n_in} IN and {self.n_out} OUT test scores, got {sorted_in.size} IN "
                f"and {sorted_out.size} OUT; plan again for these counts"
            )
        if self.side == "out":
            return float(sorted_out[self.n_out - self.rank])
        return float(np.nextafter(sorted_in[self.rank - 1], np.inf))

    def describe(self) -> str:
        """One sentence: what was planned, and from what."""
        rate = "FPR" if self.side == "out" else "FNR"
        stat = (f"the {self.rank}-th largest of {self.n_out} OUT scores" if self.side == "out"
                else f"just above the {self.rank}-th smallest of {self.n_in} IN scores")
        pilot = (f"; the pilot's {self.pilot_in} IN + {self.pilot_out} OUT trials are left out of the test"
                 if self.pilot_in or self.pilot_out else "")
        return (f"threshold planned before the scores were seen, from {self.curve} ({self.source}): {stat} "
                f"(planned {rate} {self.planned_rate:.3g}, expected {self.objective} {self.expected_value:.4g}), "
                f"tested once at alpha/2 per rate{pilot}")

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["planned_rate"] = self.planned_rate
        out["description"] = self.describe()
        return out


def _power_of(curve: Callable[[np.ndarray], object]) -> Callable[[np.ndarray], np.ndarray]:
    """x -> 1 - f(x), computed where it lives when the curve can (``TradeOffCurve.power``)."""
    power = getattr(curve, "power", None)
    if callable(power):
        return lambda x: np.clip(np.asarray(power(x), dtype=float), 0.0, 1.0)
    return lambda x: np.clip(1.0 - evaluate_curve(curve, x), 0.0, 1.0)


def _inverse_power(curve: Callable[[np.ndarray], object]) -> Callable[[np.ndarray], np.ndarray]:
    """v -> 1 - f^{-1}(v): the power of the reverse test at FNR v, f^{-1}(v) = inf{x: f(x) <= v},
    by interpolation on 8000 points geometric at both ends of [0, 1]."""
    ends = np.geomspace(1e-15, 0.5, 4000)
    grid = np.unique(np.concatenate([[0.0], ends, 1.0 - ends, [1.0]]))
    f = np.minimum.accumulate(np.clip(evaluate_curve(curve, grid), 0.0, 1.0))
    order = np.argsort(f, kind="stable")
    f_sorted, x_sorted = f[order], grid[order]

    def inverse_power(v: np.ndarray) -> np.ndarray:
        return 1.0 - np.interp(np.asarray(v, dtype=float), f_sorted, x_sorted)

    return inverse_power


def expected_objective(
    power: Callable[[np.ndarray], np.ndarray],
    ranks: np.ndarray,
    n_fixed: int,
    n_other: int,
    alpha_fixed: float,
    alpha_other: float,
    objective_fixed_other: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> np.ndarray:
    """E[objective] of the order-statistic rule at each rank (module docstring).

    ``power(u)`` is the other side's success probability at fixed-side rate u (1 - f(u) on the
    OUT tail: the IN trials called IN). The other side's error count is
    n_other - Binomial(n_other, power(U)), U at the 12 Beta(r, n_fixed - r + 1) quantile
    midpoints; ``objective_fixed_other(fixed_hi, other_hi)`` of the two CP upper bounds.
    """
    ranks = np.asarray(ranks, dtype=np.int64)
    fixed_hi = clopper_pearson_upper(ranks, n_fixed, alpha_fixed)
    levels = (np.arange(BETA_NODES) + 0.5) / BETA_NODES
    out = np.zeros(ranks.size)
    for i, r in enumerate(ranks.tolist()):
        u = beta_law.ppf(levels, r, n_fixed - r + 1)
        p = power(u)  # successes (other side's correct calls)
        lo = int(binom.ppf(TAIL, n_other, p).min())
        hi = int(binom.isf(TAIL, n_other, p).max())
        successes = np.arange(max(lo - 1, 0), min(hi + 1, n_other) + 1)
        pmf = binom.pmf(successes[None, :], n_other, p[:, None]).mean(axis=0)
        errors = n_other - successes
        other_hi = _cp_upper_counts(errors, n_other, alpha_other)
        values = objective_fixed_other(np.full(errors.size, fixed_hi[i]), other_hi)
        out[i] = float(np.sum(pmf * values) / max(np.sum(pmf), 1e-300))
    return out


def plan_threshold(
    curve: Callable[[np.ndarray], object],
    n_in: int,
    n_out: int,
    *,
    alpha: float,
    objective: Objective,
    objective_name: str = "eps_lb",
    source: str = "given",
    curve_name: str | None = None,
    sides: tuple[str, ...] = SIDES,
    pilot: tuple[int, int] = (0, 0),
) -> PlannedThreshold:
    """The rank (and tail) maximising the expected ``objective`` at CP level alpha / 2 per rate,
    were the scores' trade-off curve ``curve`` (module docstring; docs/design.md §8.12).

    Args:
        curve: the planning curve f (alpha -> beta), e.g. the theory's ``lower`` curve.
        n_in, n_out: the IN and OUT trials the test will have.
        alpha: 1 - confidence of the test (alpha / 2 per rate).
        objective: maps (FPR_hi, FNR_hi) arrays to the value to maximise in expectation
            (:func:`eps_objective`, :func:`verdict_objective`).
        sides: which tails to plan on (both by default).
    """
    n_in = check_int("n_in", n_in, minimum=1)
    n_out = check_int("n_out", n_out, minimum=1)
    alpha = check_real("alpha", alpha, minimum=0.0, maximum=0.5, strict_minimum=True, strict_maximum=True)
    source = check_choice("source", source, PLAN_SOURCES)
    if not callable(curve):
        raise ValueError(f"curve={curve!r} must be a trade-off curve: a callable alpha -> beta")
    best: tuple[float, str, int] = (-math.inf, "out", 1)
    symmetric = isinstance(curve, TradeOffCurve)  # symmetric by construction (audit.theory.curve)
    for side in sides:
        side = check_choice("sides", side, SIDES)
        n_fixed, n_other = (n_out, n_in) if side == "out" else (n_in, n_out)
        if side == "in" and symmetric and n_in == n_out and "out" in sides:
            continue  # a symmetric curve plans the same rank on either tail
        power = _power_of(curve) if side == "out" else _inverse_power(curve)

        def values(ranks: np.ndarray, side: str = side, power=power, n_fixed=n_fixed, n_other=n_other) -> np.ndarray:
            def ordered(fixed: np.ndarray, other: np.ndarray) -> np.ndarray:
                return objective(fixed, other) if side == "out" else objective(other, fixed)

            return expected_objective(power, ranks, n_fixed, n_other, alpha / 2, alpha / 2, ordered)

        # coarse geometric ranks, then every rank between the best one's neighbours (or 40 of them)
        coarse = np.unique(np.round(np.geomspace(1, n_fixed, RANK_CANDIDATES)).astype(np.int64))
        coarse_values = values(coarse)
        i = int(np.argmax(coarse_values))
        lo, hi = int(coarse[max(i - 1, 0)]), int(coarse[min(i + 1, coarse.size - 1)])
        fine = np.unique(np.round(np.linspace(lo, hi, min(hi - lo + 1, REFINE))).astype(np.int64))
        ranks, side_values = np.concatenate([coarse, fine]), np.concatenate([coarse_values, values(fine)])
        j = int(np.argmax(side_values))
        if side_values[j] > best[0]:
            best = (float(side_values[j]), side, int(ranks[j]))
    name = curve_name or getattr(curve, "label", None) or getattr(curve, "method", None) or "the given curve"
    return PlannedThreshold(
        side=best[1], rank=best[2], n_in=n_in, n_out=n_out, source=source, curve=str(name),
        objective=objective_name, expected_value=best[0], pilot_in=pilot[0], pilot_out=pilot[1],
    )


# --------------------------------------------------------------------------- pilot


def split_pilot(scores: object, seed: int, fraction: float = PILOT_FRACTION) -> tuple[np.ndarray, np.ndarray]:
    """(pilot, test): a seeded uniformly random ``fraction`` of ``scores`` and the rest.

    The scores are i.i.d. across trials, so a random subset of positions, chosen independently
    of the values, leaves the test scores i.i.d. and independent of the pilot (also when the
    array is sorted: selecting uniformly random positions of the sorted sample has the law of
    selecting uniformly random trials).
    """
    fraction = check_real("fraction", fraction, minimum=0.0, maximum=1.0, strict_minimum=True, strict_maximum=True)
    array = np.asarray(scores, dtype=float).ravel()
    k = round(fraction * array.size)
    if k < 1 or k >= array.size:
        raise ValueError(
            f"threshold='planned' with a pilot needs at least 2 scores a side and a pilot of >= 1; got {array.size}"
        )
    order = np.random.default_rng(seed).permutation(array.size)
    return array[order[:k]], array[order[k:]]


def pilot_curve(pilot_in: object, pilot_out: object) -> Callable[[np.ndarray], np.ndarray]:
    """The pilot's empirical trade-off curve, made conservative where the pilot knows little.

    The tests "IN iff score >= t" at every pilot score give points (FPR, FNR); both rates are
    taken at their one-sided Clopper-Pearson upper bounds at level :data:`PILOT_PESSIMISM`
    (about one standard error above the count where counts are large, and never 0 on either
    tail), so the planner, which maximises over the pilot's noisy points, is not drawn to a
    point where the pilot was merely lucky; f is interpolated linearly through (0, 1) and
    (1, 0), non-increasing. A planning curve, not a bound.
    """
    sorted_in = _as_scores("pilot scores_in", pilot_in)
    sorted_out = _as_scores("pilot scores_out", pilot_out)
    thresholds = np.append(np.unique(np.concatenate([sorted_in, sorted_out])), np.inf)
    fp = sorted_out.size - np.searchsorted(sorted_out, thresholds, side="left")
    fn = np.searchsorted(sorted_in, thresholds, side="left")
    x = np.concatenate([[0.0], clopper_pearson_upper(fp, sorted_out.size, PILOT_PESSIMISM)[::-1], [1.0]])
    f = np.concatenate([[1.0], clopper_pearson_upper(fn, sorted_in.size, PILOT_PESSIMISM)[::-1], [0.0]])
    f = np.minimum.accumulate(f)
    # equal FPRs: keep the smallest FNR, the last of each run (x ascending, f non-increasing)
    last = np.append(x[1:] != x[:-1], True)
    x, f = x[last], f[last]

    def curve(alpha: np.ndarray) -> np.ndarray:
        return np.interp(np.asarray(alpha, dtype=float), x, f)

    return curve


# --------------------------------------------------------------------------- one run: planned guesses


@dataclass(frozen=True)
class PlannedGuesses:
    """A one-run guessing rule (k+, k-) fixed before the canaries' scores are seen, from a
    planning curve; tested once at alpha (``guesses = (k_plus, k_minus)`` of
    :func:`audit.one_run.one_run_epsilon_lb`, docs/design.md §8.11, §8.12)."""

    k_plus: int
    k_minus: int
    canaries: int
    curve: str
    expected_epsilon_lb: float

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


GUESS_QUANTILES = (0.1, 0.3, 0.5, 0.7, 0.9)
"""Quantiles of the correct count whose bounds are averaged by :func:`plan_guesses`."""


def plan_guesses(
    curve: Callable[[np.ndarray], object], m: int, *, delta: float, alpha: float, curve_name: str | None = None
) -> PlannedGuesses:
    """The rule (k, 0) or (k, k) maximising the projected f-DP eps lower bound of one run with
    m canaries at level alpha (no Bonferroni over rules: the rule is fixed in advance).

    Were the canaries' scores to follow ``curve`` (FNR = f(FPR) for one canary's test), the
    threshold whose expected number of IN guesses is k has FPR x with (m/2)(x + 1 - f(x)) = k
    and precision p = (1 - f(x)) / (x + 1 - f(x)); the rule (k, k) on a symmetric curve has
    the same precision on both sides. The correct count is taken as Binomial(r, p), r = k+ + k-,
    and the bound :func:`audit.one_run.fdp_epsilon_lb` averaged over its quantiles
    :data:`GUESS_QUANTILES` (a projection; the rule's soundness does not depend on it).
    """
    from audit.one_run import fdp_epsilon_lb  # the one-run bound (audit.one_run, §8.10)

    m = check_int("m", m, minimum=4)
    ks = np.unique(np.clip(np.round(np.geomspace(0.001, 0.5, 24) * m).astype(np.int64), 1, m // 2))
    grid = np.unique(np.concatenate([[0.0], np.geomspace(1e-9, 1.0, 4000)]))
    power = np.maximum.accumulate(_power_of(curve)(grid))
    guessed = grid + power  # 2k/m at FPR x, increasing
    x = np.interp(np.minimum(2 * ks / m, guessed[-1]), guessed, grid)
    tpr = np.interp(x, grid, power)
    precision = np.where(x + tpr > 0, tpr / np.maximum(x + tpr, 1e-300), 0.5)
    rules = [(int(k), 0, float(p)) for k, p in zip(ks, precision, strict=True)]
    rules += [(int(k), int(k), float(p)) for k, p in zip(ks, precision, strict=True) if 2 * k <= m]
    guesses = np.array([kp + km for kp, km, _ in rules])
    correct = np.stack([binom.ppf(q, guesses, [p for _, _, p in rules]) for q in GUESS_QUANTILES])
    correct = np.clip(correct.astype(np.int64), 0, guesses)
    bounds = np.asarray(fdp_epsilon_lb(m, np.tile(guesses, len(GUESS_QUANTILES)), correct.ravel(),
                                       delta=delta, alpha=alpha)).reshape(correct.shape).mean(axis=0)
    i = int(np.argmax(bounds))
    best = (float(bounds[i]), rules[i])
    name = curve_name or getattr(curve, "label", None) or "the given curve"
    return PlannedGuesses(k_plus=best[1][0], k_minus=best[1][1], canaries=m, curve=str(name),
                          expected_epsilon_lb=best[0])
