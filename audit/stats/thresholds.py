"""The ``planned`` threshold: fixed before any score is seen, tested once on all trials with
a joint test of both error rates (docs/design.md §8.12).

The other sound strategies pay for choosing the threshold on the data: ``split`` throws half the
trials away and suffers a winner's curse on the selection half; ``bonferroni`` spends alpha over
k thresholds; ``multisplit`` spends a factor 2. A threshold fixed *before* the scores are seen
pays nothing for its choice.

**The rule.** An order statistic at a planned rank r. On the OUT tail: t = the r-th largest
OUT score, and the rule "IN iff score > t"; S counts the IN trials strictly above t. Without ties
(continuous scores) exactly r - 1 OUT trials lie above t and the true FPR of "IN iff score >= t"
is U_(r) ~ Beta(r, n_out - r + 1), the r-th smallest of n_out uniforms (the survival function of a
continuous score is uniform). Given the OUT scores the threshold is fixed, and the IN trials
called IN count S ~ Binomial(n_in, TPR). The IN tail is the same rule with the roles of IN and
OUT exchanged and the scores negated (b = the r-th smallest IN score, the rule "IN iff score >=
b"; S counts the OUT trials strictly below b, called OUT).

**Ties are counted against the claim** (docs/results.md, "Tied scores"). Where scores tie at t,
the trials tied with t are never counted as successes, and no random number is drawn, so the test
holds at its level for every seed, not only on average over a tie-breaking randomisation. Why:
write each OUT score as a non-increasing function of a uniform W (score = Q(W), W ~ U(0, 1), so
that score > s iff W < Pr[OUT > s] up to a null set); the r-th largest OUT score is Q(W_(r)),
W_(r) ~ Beta(r, n_out - r + 1) the r-th smallest W, and the FPR of the rule "score > t" is
Pr[OUT > t] <= W_(r) (W_(r) lies in t's atom, whose lower end is Pr[OUT > t]). TPR <= e^eps FPR +
delta <= g(W_(r)) with g increasing, so S ~ Binomial(n_in, TPR) is stochastically at most
Binomial(n_in, g(W_(r))) given the OUT scores, and W_(r) has exactly the Beta law the p-value
below integrates over: the p-value is valid for the rule "score > t" whatever the ties. For
continuous scores nothing changes (no IN score equals t).

**The joint test** (Berger and Boos's exact treatment of a nuisance parameter, here with its
exact law instead of a confidence set). (eps, delta)-DP gives TPR <= e^eps FPR + delta for
every test (and the exchanged form for the IN tail), so under the claim "(eps, delta)-DP"
S is stochastically at most Binomial(n_in, g(U)), g(u) = min(1, e^eps u + delta), U ~
Beta(r, n_out - r + 1); its p-value is

    p(eps) = integral_0^1 Pr[Binomial(n_in, g(Q(v))) >= S] dv,   Q the Beta quantile,

bounded *above* by a right Riemann sum on the quantile scale (the integrand increases in v):
2000 equal cells on [0, 1 - 1e-7] plus 1e-7 for the last cell. Rejecting when p(eps) <= alpha
is a level-alpha test: given the OUT scores, Pr[S in the rejection region] is the integrand at
the true U, whose average over U's law is at most alpha. p increases with eps, so the rejected
claims are an interval [0, eps_lb]; eps_lb (found by bisection, a point evaluated and rejected)
is a lower bound with probability >= 1 - alpha. A claimed curve f is refuted the same way with
g(u) = 1 - f(u) (exchanged: 1 - f^{-1}(u)). Against the union bound over two Clopper-Pearson
bounds at alpha/2 (§8.2) nothing is split: at Poisson q = 0.01, sigma = 1, T = 100 with
500,000 trials a side it certifies about 0.07 more.

**The plan.** The rank (and tail) maximising the eps_lb reached with probability 0.9 (or, for a
verdict, the chance of refuting the claim) were the scores' trade-off curve a given planning
curve f: U at Beta quantiles, S ~ Binomial(n_in, 1 - f(U)), eps_lb at the 10% quantile of S
(it increases with S). The curve comes
from the theory (the mechanism's ``lower`` curve: what a known attack achieves; the default
attack of a white-box audit attains it) or from a *pilot*: a seeded random subset of the trials
(:data:`PILOT_FRACTION`) whose empirical curve is planned on and which is then left out of the
test (:func:`pilot_curve`, :func:`split_pilot`). The test is sound whatever the plan.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import beta as beta_law
from scipy.stats import binom

from audit.core.validation import check_choice, check_int, check_real
from audit.stats.error_rates import (
    PILOT_FRACTION,
    EpsilonBound,
    Verdict,
    _as_scores,
    _check_common,
    _check_tradeoff_function,
    _naive_maximum,
    clopper_pearson_upper,
    epsilon_from_rates,
    evaluate_curve,
    per_trial_scores,
)

__all__ = [
    "FAMILY_BASE",
    "FAMILY_SPAN",
    "OBJECTIVES",
    "PILOT_FRACTION",
    "PLAN_SOURCES",
    "SIDES",
    "JointTest",
    "Pilot",
    "PlannedFamily",
    "PlannedGuesses",
    "PlannedThreshold",
    "family_epsilon_lower_bound",
    "family_ranks",
    "family_verdict",
    "joint_p_value",
    "pilot_curve",
    "plan_family",
    "plan_guesses",
    "plan_threshold",
    "planned_epsilon_lower_bound",
    "planned_projection",
    "planned_verdict",
    "projected_rules",
    "split_pilot",
    "take_pilot",
]

PLANNED = "planned"
"""The strategy's name (:class:`audit.stats.binary.Planned`, which sits above this module)."""

FAMILY = "planned_ranks"
"""The name of the strategy of :class:`PlannedFamily` (:class:`audit.stats.binary.PlannedRanks`)."""

SIDES: tuple[str, ...] = ("out", "in")
"""``out``: the r-th largest OUT score (r OUT trials called IN, low-FPR tail); ``in``: the r-th
smallest IN score (r IN trials called OUT, low-FNR tail)."""

PLAN_SOURCES: tuple[str, ...] = ("theory", "pilot", "given", "counts")
"""Where a plan's curve came from: the theory's lower curve, a pilot subset of the trials
(left out of the test), a curve the caller gave, or (``counts``) no curve at all: a rule of
:class:`PlannedFamily`, fixed by the trial counts alone."""

OBJECTIVES: tuple[str, ...] = ("eps_lb", "verdict")
"""What a plan maximises: the eps lower bound reached with probability PLAN_POWER, or the chance
of refuting a claim."""

PILOT_PESSIMISM = 0.16
"""Level of the pilot curve's one-sided CP upper bounds (about one standard error)."""

CELLS = 2000
"""Equal cells of the quantile scale [0, 1 - LAST_CELL] in the p-value's Riemann sum."""

LAST_CELL = 1e-7
"""The last cell [1 - LAST_CELL, 1], counted with integrand 1."""

PLAN_CELLS = 200
"""Cells used while planning (a projection: the test itself uses CELLS)."""

RANK_CANDIDATES = 40
"""Geometric ranks 1..n tried first by the planner per side."""

REFINE = 16
"""Ranks tried next, evenly between the best geometric rank's two neighbours."""

EPS_MAX = 50.0
"""Largest eps searched."""

PLAN_POWER = 0.9
"""The planner maximises the eps_lb reached with this probability (its 10th percentile: a
steady bound rather than a lucky one), as :mod:`audit.run.planning` plans with ``power``."""


# --------------------------------------------------------------------------- the joint test


@functools.lru_cache(maxsize=256)
def _cells(r: int, n_fixed: int, cells: int) -> tuple[np.ndarray, np.ndarray]:
    """(widths, right ends) of the quantile cells of U ~ Beta(r, n_fixed - r + 1): the right
    ends' quantiles, and the last cell's right end u = 1 (cached: read-only arrays)."""
    v = np.linspace(0.0, 1.0 - LAST_CELL, cells + 1)
    u = beta_law.ppf(v[1:], r, n_fixed - r + 1)
    widths, ends = np.append(np.diff(v), LAST_CELL), np.append(u, 1.0)
    widths.setflags(write=False)
    ends.setflags(write=False)
    return widths, ends


def joint_p_value(
    successes: np.ndarray | int,
    n_other: int,
    r: int,
    n_fixed: int,
    bound: Callable[[np.ndarray], np.ndarray],
    *,
    cells: int = CELLS,
) -> np.ndarray:
    """Upper bound on p = integral Pr[Binomial(n_other, bound(U)) >= successes] over
    U ~ Beta(r, n_fixed - r + 1) (module docstring): a right Riemann sum on the quantile scale.

    ``bound(u)`` maps FPR values u (shape (cells,)) to the claim's largest TPR, broadcast
    against leading axes (e.g. a grid of eps); ``successes`` broadcasts against those axes.
    """
    widths, u = _cells(int(r), int(n_fixed), int(cells))
    g = np.clip(bound(u), 0.0, 1.0)
    s = np.asarray(successes)[..., None]
    tail = np.where(s <= 0, 1.0, binom.sf(s - 1, n_other, g))
    return np.minimum(np.sum(tail * widths, axis=-1), 1.0)


def _largest_rejected(
    p_value: Callable[[np.ndarray], np.ndarray],
    alpha: float,
    rows: int = 1,
    tolerance: float = 1e-7,
) -> np.ndarray:
    """Per row, the largest eps in [0, EPS_MAX] found rejected (p <= alpha) by bisection:
    0 where eps = 0 is not rejected, EPS_MAX where EPS_MAX is. p increases with eps, so the
    rejected claims form an interval from 0 and the returned point, itself evaluated and
    rejected, lies in it (halvings until the bracket is below ``tolerance``). ``p_value`` maps
    eps of shape (rows,) to p-values of shape (rows,)."""
    lo = np.zeros(rows)
    hi = np.full(rows, EPS_MAX)
    rejected_lo = p_value(lo) <= alpha
    rejected_hi = p_value(hi) <= alpha
    alive = rejected_lo & ~rejected_hi
    for _ in range(60):
        if not alive.any():
            break
        mid = (lo + hi) / 2
        ok = p_value(mid) <= alpha
        lo = np.where(alive & ok, mid, lo)
        hi = np.where(alive & ~ok, mid, hi)
        alive &= (hi - lo) > tolerance
    return np.where(rejected_hi, EPS_MAX, np.where(rejected_lo, lo, 0.0))


@dataclass(frozen=True)
class JointTest:
    """The planned rule's counts on the test scores and what the joint test concluded.

    ``successes`` of ``n_other``: the other side's correct calls (IN trials strictly above the
    OUT tail's order statistic; OUT trials strictly below the IN tail's), a score tied with the
    order statistic never counted (ties against the claim, module docstring);
    ``p_value``: of the tested claim; ``epsilon_lb``: the largest eps rejected (eps tests).
    """

    side: str
    rank: int
    threshold: float
    successes: int
    n_fixed: int
    n_other: int
    alpha: float
    p_value: float
    epsilon_lb: float | None = None

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["threshold"] = self.threshold if math.isfinite(self.threshold) else str(self.threshold)
        return out


def _oriented(
    plan: PlannedThreshold, sorted_in: np.ndarray, sorted_out: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(fixed side, other side) sorted ascending, oriented so that the rule is "the r-th largest
    of the fixed side": (OUT, IN) for side ``out``; (-IN, -OUT) for side ``in``."""
    if sorted_in.size != plan.n_in or sorted_out.size != plan.n_out:
        raise ValueError(
            f"plan: planned for {plan.n_in} IN and {plan.n_out} OUT test scores, got "
            f"{sorted_in.size} IN and "
            f"{sorted_out.size} OUT; plan again for these counts"
        )
    if plan.side == "out":
        return np.asarray(sorted_out, dtype=float), np.asarray(sorted_in, dtype=float)
    return -np.asarray(sorted_in, dtype=float)[::-1], -np.asarray(sorted_out, dtype=float)[::-1]


def _successes(fixed: np.ndarray, other: np.ndarray, r: int) -> tuple[float, int]:
    """(t, S): the r-th largest ``fixed`` score t and S = #{other > t}, the ``other`` scores
    strictly above t: a score tied with t is not a success (ties against the claim, module
    docstring; no random number, so the count is the same for every seed)."""
    t = float(fixed[fixed.size - r])
    return t, other.size - int(np.searchsorted(other, t, side="right"))


def _eps_bound(delta: float) -> Callable[[np.ndarray], Callable[[np.ndarray], np.ndarray]]:
    return lambda eps: (lambda u: np.exp(np.asarray(eps)[..., None]) * u + delta)


def _claim_bound(
    claim: Callable[[np.ndarray], np.ndarray], side: str
) -> Callable[[np.ndarray], np.ndarray]:
    """u -> the claim's largest TPR at FPR u (side ``out``: 1 - f(u)), or, exchanged, the largest
    TNR at FNR u (side ``in``: 1 - f^{-1}(u), f^{-1}(u) = inf{x : f(x) <= u})."""
    if side == "out":
        power = getattr(claim, "power", None)  # TradeOffCurve.power: 1 - f where it lives
        if callable(power):
            return lambda u: np.clip(np.asarray(power(u), dtype=float), 0.0, 1.0)
        return lambda u: 1.0 - evaluate_curve(claim, u)
    ends = np.geomspace(1e-15, 0.5, 4000)
    grid = np.unique(np.concatenate([[0.0], ends, 1.0 - ends, [1.0]]))
    f = np.minimum.accumulate(np.clip(evaluate_curve(claim, grid), 0.0, 1.0))

    def bound(u: np.ndarray) -> np.ndarray:
        # f^{-1}(u) >= the grid point before the first with f <= u: 1 - f^{-1} rounded up
        j = np.searchsorted(-f, -np.asarray(u, dtype=float), side="left")
        return 1.0 - grid[np.clip(j - 1, 0, grid.size - 1)]

    return bound


# --------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class PlannedThreshold:
    """A threshold rule fixed before the tested scores are seen: an order statistic at ``rank``
    on side ``side`` of ``n_in`` IN and ``n_out`` OUT test scores.

    ``source`` says where the planning curve came from (:data:`PLAN_SOURCES`), ``curve`` names
    it; ``expected_value`` is the planned value of ``objective`` (:data:`OBJECTIVES`): the eps_lb
    reached with probability :data:`PLAN_POWER`, or the chance of refuting the claim;
    ``pilot_in``/``pilot_out``: trials the pilot used (left out of the test), 0 without one.
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
        """The planned threshold on sorted test scores, for the rule "IN iff score >= t" (where
        scores tie at the order statistic, :func:`planned_epsilon_lower_bound` counts the tied
        trials against the claim instead, module docstring)."""
        fixed, _ = _oriented(self, sorted_in, sorted_out)
        t = float(fixed[fixed.size - self.rank])
        return t if self.side == "out" else float(np.nextafter(-t, np.inf))

    def epsilon_bound(self, scores_in: ArrayLike, scores_out: ArrayLike, *, delta: float,
                      alpha: float, seed: int = 0, optimistic: bool = True) -> EpsilonBound:
        """:func:`planned_epsilon_lower_bound`'s bound (what
        ``audit.stats.binary.epsilon_lower_bound`` returns for ``threshold="planned"``)."""
        return planned_epsilon_lower_bound(
            scores_in, scores_out, self, delta=delta, alpha=alpha, seed=seed,
            optimistic=optimistic,
        )[0]

    def verdict(
        self,
        scores_in: ArrayLike,
        scores_out: ArrayLike,
        claim: Callable[[np.ndarray], np.ndarray],
        *,
        alpha: float,
        seed: int = 0,
    ) -> Verdict:
        """:func:`planned_verdict`'s verdict (what ``audit.stats.binary.verdict`` returns for
        ``threshold="planned"``)."""
        return planned_verdict(scores_in, scores_out, claim, self, alpha=alpha, seed=seed)[0]

    def describe(self) -> str:
        """One sentence: what was planned, and from what."""
        rate = "FPR" if self.side == "out" else "FNR"
        stat = (f"the {self.rank}-th largest of {self.n_out} OUT scores" if self.side == "out"
                else f"the {self.rank}-th smallest of {self.n_in} IN scores")
        pilot = (
            f"; the pilot's {self.pilot_in} IN + {self.pilot_out} OUT trials are left out of the "
            "test"
            if self.pilot_in or self.pilot_out
            else ""
        )
        value = (
            f"eps_lb {self.expected_value:.4g} reached with probability {PLAN_POWER:g}"
            if self.objective == "eps_lb"
            else f"chance {self.expected_value:.3g} to refute the claim"
        )
        return (
            f"threshold planned before the scores were seen, from {self.curve} ({self.source}): "
            f"{stat} "
            f"(planned {rate} {self.planned_rate:.3g}; projected: {value}), "
            f"tested once on all test trials with the joint test of both rates{pilot}"
        )

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["planned_rate"] = self.planned_rate
        out["description"] = self.describe()
        return out


def _power_of(
    curve: Callable[[np.ndarray], np.ndarray], side: str
) -> Callable[[np.ndarray], np.ndarray]:
    """The planning curve's other-side success probability at fixed-side rate u: 1 - f(u)
    (``out``; from ``TradeOffCurve.power`` where it lives) or 1 - f^{-1}(u) (``in``)."""
    return _claim_bound(curve, side)


def _success_quantiles(
    power: Callable[[np.ndarray], np.ndarray],
    r: int,
    n_fixed: int,
    n_other: int,
    levels: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(support, pmf, quantiles at ``levels``) of S ~ Binomial(n_other, power(U)), U ~ Beta(r,
    n_fixed - r + 1) at 12 quantile midpoints (a planning approximation)."""
    u = beta_law.ppf((np.arange(12) + 0.5) / 12, r, n_fixed - r + 1)
    p = power(u)
    lo = int(binom.ppf(1e-9, n_other, p).min())
    hi = int(binom.isf(1e-9, n_other, p).max())
    support = np.arange(max(lo - 1, 0), min(hi + 1, n_other) + 1)
    pmf = binom.pmf(support[None, :], n_other, p[:, None]).mean(axis=0)
    pmf = pmf / max(pmf.sum(), 1e-300)
    cdf = np.cumsum(pmf)
    quantiles = support[np.minimum(np.searchsorted(cdf, levels), support.size - 1)]
    return support, pmf, quantiles


def _planned_value(
    objective: str,
    power,
    r: int,
    n_fixed: int,
    n_other: int,
    alpha: float,
    delta: float,
    claim_bound,
    probability: float = PLAN_POWER,
) -> float:
    """The planned value at rank r: the eps_lb reached with ``probability`` (eps_lb increases
    with S, so it is eps_lb at the (1 - probability)-quantile of S; ``power`` is the planning
    curve's success probability), or the chance that S reaches the smallest count whose
    p-value is <= alpha."""
    levels = np.array([1.0 - probability])
    support, pmf, quantiles = _success_quantiles(power, r, n_fixed, n_other, levels)
    if objective == "eps_lb":
        bound = _eps_bound(delta)
        values = _largest_rejected(
            lambda eps: joint_p_value(quantiles, n_other, r, n_fixed, bound(eps), cells=PLAN_CELLS),
            alpha,
            rows=quantiles.size,
            tolerance=1e-4,
        )
        return float(values[0])
    first = _first_rejected(
        support,
        lambda s: joint_p_value(s, n_other, r, n_fixed, claim_bound, cells=PLAN_CELLS),
        alpha,
    )
    return float(pmf[first:].sum())


def _first_rejected(
    support: np.ndarray, p_value: Callable[[int], np.ndarray], alpha: float
) -> int:
    """The position in ``support`` (ascending counts) of the smallest count whose p-value is <=
    ``alpha`` (``support.size`` if none), by bisection: the joint p-value decreases in the count
    S, as each Binomial tail Pr[B >= S] of its sum does, so the rejected counts are exactly those
    from there on. log2 |support| evaluations instead of one per count (the verdict plan of a
    1e6-trial audit evaluated 2e5-count supports at 106 ranks: 25 s, now well under 1 s)."""
    lo, hi = 0, int(support.size)
    while lo < hi:
        middle = (lo + hi) // 2
        if float(p_value(int(support[middle]))) <= alpha:
            hi = middle
        else:
            lo = middle + 1
    return lo


def _symmetric(curve: object) -> bool:
    """Whether ``curve`` declares itself symmetric (f = f^{-1}): an
    :class:`audit.theory.curve.TradeOffCurve` does (``is_symmetric``); the theory sits above
    this module, so the declaration is read, not the type."""
    return getattr(curve, "is_symmetric", False) is True


def plan_threshold(
    curve: Callable[[np.ndarray], np.ndarray],
    n_in: int,
    n_out: int,
    *,
    alpha: float,
    delta: float | None = None,
    claim: Callable[[np.ndarray], np.ndarray] | None = None,
    source: str = "given",
    curve_name: str | None = None,
    sides: tuple[str, ...] = SIDES,
    pilot: tuple[int, int] = (0, 0),
) -> PlannedThreshold:
    """The rank (and tail) maximising, were the scores' trade-off curve ``curve``, the eps lower
    bound at ``delta`` reached with probability :data:`PLAN_POWER` (objective ``eps_lb``) or,
    with ``claim``, the chance of refuting it (``verdict``), under the joint test (module
    docstring; docs/design.md §8.12).

    Args:
        curve: the planning curve f (alpha -> beta), e.g. the theory's ``lower`` curve.
        n_in: the IN trials the test will have.
        n_out: the OUT trials the test will have.
        alpha: 1 - confidence of the test.
        delta: plan for the eps lower bound at this delta; or
        claim: plan for the verdict against this claimed curve (exactly one of the two).
        source: where ``curve`` came from (:data:`PLAN_SOURCES`); ``curve_name`` names it.
        sides: the tails to plan on (a symmetric theory curve with n_in = n_out plans one).
        pilot: (IN, OUT) trials a pilot used, recorded in the plan.
    """
    n_in = check_int("n_in", n_in, minimum=1)
    n_out = check_int("n_out", n_out, minimum=1)
    if (delta is None) == (claim is None):
        raise ValueError(
            "plan_threshold needs exactly one of delta= (plan the eps bound) and claim= (plan the "
            "verdict)"
        )
    delta, alpha = _check_common(0.0 if delta is None else delta, alpha)
    source = check_choice("source", source, PLAN_SOURCES)
    if not callable(curve):
        raise ValueError(f"curve={curve!r} must be a trade-off curve: a callable alpha -> beta")
    objective = "verdict" if claim is not None else "eps_lb"
    if claim is not None:
        _check_tradeoff_function(claim)
    symmetric = _symmetric(curve) and (claim is None or _symmetric(claim))
    best: tuple[float, str, int] = (-math.inf, "out", 1)
    for side in sides:
        side = check_choice("sides", side, SIDES)
        if side == "in" and symmetric and n_in == n_out and "out" in sides:
            continue  # symmetric curves plan the same rank on either tail
        n_fixed, n_other = (n_out, n_in) if side == "out" else (n_in, n_out)
        power = _power_of(curve, side)
        claim_bound = _claim_bound(claim, side) if claim is not None else None

        def value(
            r: int, side_power=power, n_fixed=n_fixed, n_other=n_other, claim_bound=claim_bound
        ) -> float:
            return _planned_value(
                objective, side_power, r, n_fixed, n_other, alpha, delta, claim_bound
            )

        coarse = np.unique(np.round(np.geomspace(1, n_fixed, RANK_CANDIDATES)).astype(np.int64))
        values = np.array([value(int(r)) for r in coarse])
        i = int(np.argmax(values))
        lo, hi = int(coarse[max(i - 1, 0)]), int(coarse[min(i + 1, coarse.size - 1)])
        fine = np.setdiff1d(
            np.unique(np.round(np.linspace(lo, hi, min(hi - lo + 1, REFINE))).astype(np.int64)),
            coarse,
        )
        ranks = np.concatenate([coarse, fine])
        values = np.concatenate([values, [value(int(r)) for r in fine]])
        j = int(np.argmax(values))
        if values[j] > best[0]:
            best = (float(values[j]), side, int(ranks[j]))
    name = curve_name or getattr(curve, "label", None) or "the given curve"
    return PlannedThreshold(
        side=best[1], rank=best[2], n_in=n_in, n_out=n_out, source=source, curve=str(name),
        objective=objective, expected_value=best[0], pilot_in=pilot[0], pilot_out=pilot[1],
    )


def planned_projection(
    curve: Callable[[np.ndarray], np.ndarray],
    plan: PlannedThreshold,
    *,
    alpha: float,
    delta: float | None = None,
    claim: Callable[[np.ndarray], np.ndarray] | None = None,
    power: float = PLAN_POWER,
) -> float:
    """What ``plan`` (made by :func:`plan_threshold` from ``curve``, as the audit makes it) is
    projected to give were the scores' trade-off curve ``curve``: with ``delta``, the eps_lb its
    joint test reaches with probability ``power`` (``plan.expected_value`` at
    :data:`PLAN_POWER`); with ``claim``, the chance that its joint test refutes the claim (a
    chance: ``power`` plays no part). Computed as the planner computes it (S's law at 12 Beta
    quantiles of U, :data:`PLAN_CELLS` cells: a projection, not a bound)."""
    if (delta is None) == (claim is None):
        raise ValueError("planned_projection needs exactly one of delta= and claim=")
    power = check_real(
        "power", power, minimum=0.0, maximum=1.0, strict_minimum=True, strict_maximum=True
    )
    delta_, alpha = _check_common(0.0 if delta is None else delta, alpha)
    n_fixed, n_other = (plan.n_out, plan.n_in) if plan.side == "out" else (plan.n_in, plan.n_out)
    objective = "eps_lb" if claim is None else "verdict"
    claim_bound = None if claim is None else _claim_bound(claim, plan.side)
    return _planned_value(
        objective, _power_of(curve, plan.side), plan.rank, n_fixed, n_other, alpha, delta_,
        claim_bound, power,
    )


# --------------------------------------------------------------------------- bounds and verdicts


def _check_plan(plan: object) -> PlannedThreshold:
    if not isinstance(plan, PlannedThreshold):
        raise ValueError(
            "threshold='planned' needs plan=: an audit.stats.thresholds.PlannedThreshold fixed "
            "before the scores were "
            f"seen (audit.stats.thresholds.plan_threshold); got plan={plan!r}"
        )
    return plan


def _joint(plan: PlannedThreshold, sorted_in: np.ndarray, sorted_out: np.ndarray, alpha: float,
           seed: int, bound_of_eps=None, claim_bound=None) -> JointTest:
    """The plan's joint test on the sorted test scores (of an eps grid with ``bound_of_eps``, or
    of the claim with ``claim_bound``)."""
    fixed, other = _oriented(plan, sorted_in, sorted_out)
    t, s = _successes(fixed, other, plan.rank)
    threshold = t if plan.side == "out" else -t
    n_fixed, n_other = fixed.size, other.size
    if bound_of_eps is not None:
        eps = float(
            _largest_rejected(
                lambda e: joint_p_value(s, n_other, plan.rank, n_fixed, bound_of_eps(e)), alpha
            )[0]
        )
        p = float(joint_p_value(s, n_other, plan.rank, n_fixed, bound_of_eps(np.array([eps])))[0])
        return JointTest(plan.side, plan.rank, threshold, s, n_fixed, n_other, alpha, p, eps)
    p = float(joint_p_value(s, n_other, plan.rank, n_fixed, claim_bound))
    return JointTest(plan.side, plan.rank, threshold, s, n_fixed, n_other, alpha, p)


def _rule_threshold(test: JointTest, sorted_in: np.ndarray, sorted_out: np.ndarray) -> float:
    """The threshold t of the rule "IN iff score >= t" that the joint test's count S is of:
    on the OUT tail "score > order statistic", on the IN tail "score >= order statistic". Where
    no other score equals the order statistic this is :meth:`PlannedThreshold.threshold_for`
    (the order statistic itself on the OUT tail, just above it on the IN tail); where scores
    tie with it, the other one (module docstring, "Ties")."""
    cut = test.threshold
    tied = int(
        np.searchsorted(sorted_in, cut, side="right") - np.searchsorted(sorted_in, cut, side="left")
        + np.searchsorted(sorted_out, cut, side="right")
        - np.searchsorted(sorted_out, cut, side="left")
    ) > 1
    above = float(np.nextafter(cut, np.inf))
    if test.side == "out":
        return above if tied else cut
    return cut if tied else above


def _box(test: JointTest, alpha: float) -> tuple[int, int, float, float]:
    """(FP, FN, FPR_hi, FNR_hi) of the joint test's rule, Clopper-Pearson at alpha/2: the fixed
    side's count is the rank r (that rule's rate on the fixed side is at most W_(r) ~ Beta(r, n -
    r + 1), which CP at count r covers: Beta(r + 1, n - r) lies above it; without ties it is the
    rule's own count), the other side's its errors, n_other - S (the box a plot draws)."""
    errors = test.n_other - test.successes
    if test.side == "out":
        fp, fn, n_out, n_in = test.rank, errors, test.n_fixed, test.n_other
    else:
        fp, fn, n_out, n_in = errors, test.rank, test.n_other, test.n_fixed
    fpr_hi = float(clopper_pearson_upper(fp, n_out, alpha / 2))
    fnr_hi = float(clopper_pearson_upper(fn, n_in, alpha / 2))
    return fp, fn, fpr_hi, fnr_hi


OPTIMISTIC_RANKS = 40
"""Geometric ranks per tail at which the optimistic maximum also runs the joint test."""


def _joint_maximum(
    plan: PlannedThreshold,
    sorted_in: np.ndarray,
    sorted_out: np.ndarray,
    alpha: float,
    delta: float,
    seed: int,
    at_plan: float,
) -> float:
    """The largest joint-test eps over the plan's rank and 40 geometric ranks on each tail, all
    on the same scores: the optimistic counterpart of the planned bound (not a bound)."""
    best = at_plan
    bound = _eps_bound(delta)
    for side in SIDES:
        probe = PlannedThreshold(
            side, 1, plan.n_in, plan.n_out, plan.source, plan.curve, plan.objective, 0.0
        )
        fixed, other = _oriented(probe, sorted_in, sorted_out)
        for r in np.unique(
            np.round(np.geomspace(1, fixed.size, OPTIMISTIC_RANKS)).astype(np.int64)
        ).tolist():
            _, s = _successes(fixed, other, r)
            n_other, n_fixed = other.size, fixed.size

            def p_value(
                e: np.ndarray, s: int = s, r: int = r, n_other: int = n_other,
                n_fixed: int = n_fixed,
            ) -> np.ndarray:
                return joint_p_value(s, n_other, r, n_fixed, bound(e))

            eps = _largest_rejected(p_value, alpha, tolerance=1e-4)
            best = max(best, float(eps[0]))
    return best


def planned_epsilon_lower_bound(
    scores_in: ArrayLike,
    scores_out: ArrayLike,
    plan: PlannedThreshold,
    *,
    delta: float,
    alpha: float = 0.05,
    seed: int = 0,
    optimistic: bool = True,
) -> tuple[EpsilonBound, JointTest]:
    """The planned rule's eps lower bound from the joint test (module docstring): sound at
    1 - alpha whatever the plan. The :class:`audit.stats.binary.EpsilonBound`'s counts, FPR_hi and
    FNR_hi are those of the rule "IN iff score >= t" with Clopper-Pearson at alpha/2 (the box a
    plot draws); its ``epsilon_lb`` is the joint test's, given with its evidence as a
    :class:`JointTest`; its ``epsilon_optimistic`` (with ``optimistic``) the largest of the
    Clopper-Pearson naive maximum (§8.3) and the joint test at the plan's rank and at 40
    geometric ranks per tail on the same scores: optimistic, not a bound, and never below the
    bound. Tied scores are counted against the claim (module docstring): the result is the same
    for every ``seed`` (kept for the callers that pass one)."""
    delta, alpha = _check_common(delta, alpha)
    seed = check_int("seed", seed, minimum=0)
    plan = _check_plan(plan)
    # sorted once; the rule's threshold is the joint test's order statistic (not found again)
    sorted_in, sorted_out = _as_scores("scores_in", scores_in), _as_scores("scores_out", scores_out)
    test = _joint(plan, sorted_in, sorted_out, alpha, seed, bound_of_eps=_eps_bound(delta))
    t = _rule_threshold(test, sorted_in, sorted_out)
    fp, fn, fpr_hi, fnr_hi = _box(test, alpha)
    naive = (
        max(
            _naive_maximum(
                sorted_in, sorted_out, alpha, lambda a, b: epsilon_from_rates(a, b, delta)
            ),
            _joint_maximum(
                plan, sorted_in, sorted_out, alpha, delta, seed, float(test.epsilon_lb or 0.0)
            ),
        )
        if optimistic
        else math.nan
    )
    bound = EpsilonBound(
        epsilon_lb=float(test.epsilon_lb or 0.0),
        epsilon_optimistic=naive,
        threshold=t,
        strategy=PLANNED,
        delta=delta,
        alpha=alpha,
        n_in=sorted_in.size,
        n_out=sorted_out.size,
        false_positives=fp,
        false_negatives=fn,
        n_eval_in=sorted_in.size,
        n_eval_out=sorted_out.size,
        fpr_hi=fpr_hi,
        fnr_hi=fnr_hi,
        alpha_per_rate=alpha / 2,
    )
    return bound, test


def planned_verdict(
    scores_in: ArrayLike,
    scores_out: ArrayLike,
    claim: Callable[[np.ndarray], np.ndarray],
    plan: PlannedThreshold,
    *,
    alpha: float = 0.05,
    seed: int = 0,
) -> tuple[Verdict, JointTest]:
    """The planned rule's verdict on ``claim``: ``violated`` iff the joint test's p-value of
    the claim is <= alpha (module docstring). The :class:`audit.stats.binary.Verdict` carries the
    rule's Clopper-Pearson box at alpha/2 (FPR_hi, FNR_hi, f(FPR_hi)) as evidence; the
    decision is the joint test's, given as a :class:`JointTest`. Ties are counted against the
    claim, so ``seed`` changes nothing (module docstring)."""
    _check_tradeoff_function(claim)
    _, alpha = _check_common(0.0, alpha)
    seed = check_int("seed", seed, minimum=0)
    plan = _check_plan(plan)
    sorted_in, sorted_out = _as_scores("scores_in", scores_in), _as_scores("scores_out", scores_out)
    test = _joint(
        plan, sorted_in, sorted_out, alpha, seed, claim_bound=_claim_bound(claim, plan.side)
    )
    t = _rule_threshold(test, sorted_in, sorted_out)
    fp, fn, fpr_hi, fnr_hi = _box(test, alpha)
    decision = Verdict(
        violated=bool(test.p_value <= alpha), threshold=t, strategy=PLANNED, alpha=alpha,
        false_positives=fp, false_negatives=fn, n_eval_in=sorted_in.size,
        n_eval_out=sorted_out.size, fpr_hi=fpr_hi, fnr_hi=fnr_hi,
        f_of_fpr_hi=float(evaluate_curve(claim, np.array([fpr_hi]))[0]), alpha_per_rate=alpha / 2,
    )
    return decision, test


# --------------------------------------------------------------------------- a family of
# planned ranks, fixed by the trial counts alone


FAMILY_BASE = 4
"""Ratio of consecutive ranks of :func:`family_ranks` (1, 4, 16, 64, ...)."""

FAMILY_SPAN = 1 / 8
"""The family's largest rank is at most this fraction of the fixed side's trials (planned rate
<= 12.5%; beyond it only attacks with eps_lb near 0 gain, docs/results.md)."""


def family_ranks(n: int) -> tuple[int, ...]:
    """The ranks FAMILY_BASE^j <= max(1, FAMILY_SPAN n), j = 0, 1, ...: a function of the trial
    count n alone (n = 1000: 1, 4, 16, 64; n = 1e4: up to 1024), so fixed before any score is
    seen."""
    n = check_int("n", n, minimum=1)
    top, ranks, r = max(1.0, FAMILY_SPAN * n), [], 1
    while r <= top and r <= n:
        ranks.append(r)
        r *= FAMILY_BASE
    return tuple(ranks)


@dataclass(frozen=True)
class PlannedFamily:
    """K planned rules fixed by the trial counts alone, each tested at alpha / K (Bonferroni).

    The rules are the order statistics at :func:`family_ranks` on both tails (side ``out``: the
    r-th largest OUT score; side ``in``: the r-th smallest IN score): no theory curve and no
    pilot is needed, so every trial is tested. Each rule's joint test (module docstring) rejects
    a true claim with probability <= alpha / K, so all K together reject it with probability <=
    alpha (the union bound, whatever their dependence): the largest of the K eps_lb, and the
    verdict "violated iff some rule refutes the claim at alpha / K", hold at 1 - alpha for every
    seed (ties counted against the claim in each rule). The price is alpha / K instead of a
    plan; at 1000 trials a side (K = 8) it keeps the median eps_lb within 0.93-1.03 of the
    oracle rule's (docs/results.md, "Scores without a theory curve")."""

    rules: tuple[PlannedThreshold, ...]

    @property
    def size(self) -> int:
        """K, the number of rules (and the Bonferroni divisor)."""
        return len(self.rules)

    def describe(self) -> str:
        """One sentence: the rules and their correction."""
        ranks = ", ".join(str(r) for r in sorted({rule.rank for rule in self.rules}))
        return (
            f"{self.size} rules fixed by the trial counts alone (ranks {ranks} from the top of "
            "the OUT scores and from the bottom of the IN scores), each a joint test of both "
            f"rates at alpha / {self.size} (Bonferroni), every trial tested"
        )

    def to_dict(self) -> dict[str, object]:
        return {"rules": [rule.to_dict() for rule in self.rules], "size": self.size,
                "description": self.describe()}


def plan_family(n_in: int, n_out: int) -> PlannedFamily:
    """The :class:`PlannedFamily` of ``n_in`` IN and ``n_out`` OUT scores: :func:`family_ranks`
    of n_out on side ``out`` and of n_in on side ``in``."""
    n_in = check_int("n_in", n_in, minimum=1)
    n_out = check_int("n_out", n_out, minimum=1)
    rules = [
        PlannedThreshold(side, r, n_in, n_out, "counts", "the trial counts alone", "eps_lb", 0.0)
        for side, n in (("out", n_out), ("in", n_in))
        for r in family_ranks(n)
    ]
    return PlannedFamily(tuple(rules))


def _check_family(family: object, n_in: int, n_out: int) -> PlannedFamily:
    if family is None:
        return plan_family(n_in, n_out)
    if not isinstance(family, PlannedFamily) or not family.rules:
        raise ValueError(f"family={family!r} must be a PlannedFamily (plan_family(n_in, n_out))")
    return family


def family_epsilon_lower_bound(
    scores_in: ArrayLike,
    scores_out: ArrayLike,
    family: PlannedFamily | None = None,
    *,
    delta: float,
    alpha: float = 0.05,
    optimistic: bool = True,
) -> tuple[EpsilonBound, tuple[JointTest, ...]]:
    """The largest eps_lb of the family's K joint tests, each at alpha / K: sound at 1 - alpha
    (:class:`PlannedFamily`); ``family`` None: :func:`plan_family` of the score counts.

    The :class:`audit.stats.binary.EpsilonBound` is that of the best rule (its Clopper-Pearson
    box at alpha / (2K) per rate), ``alpha`` the whole statement's; with ``optimistic`` its
    ``epsilon_optimistic`` is the naive maximum (§8.3) and the joint test at 40 geometric ranks
    per tail at alpha (optimistic, not a bound). Also every rule's :class:`JointTest`."""
    delta, alpha = _check_common(delta, alpha)
    sorted_in, sorted_out = _as_scores("scores_in", scores_in), _as_scores("scores_out", scores_out)
    family = _check_family(family, sorted_in.size, sorted_out.size)
    each = alpha / family.size
    results = [
        planned_epsilon_lower_bound(sorted_in, sorted_out, rule, delta=delta, alpha=each,
                                    optimistic=False)
        for rule in family.rules
    ]
    best, _ = max(results, key=lambda pair: pair[0].epsilon_lb)
    naive = math.nan
    if optimistic:
        plan = family.rules[0]
        at_best = float(best.epsilon_lb)
        naive = max(
            _naive_maximum(
                sorted_in, sorted_out, alpha, lambda a, b: epsilon_from_rates(a, b, delta)
            ),
            _joint_maximum(plan, sorted_in, sorted_out, alpha, delta, 0, at_best),
        )
    bound = replace(best, epsilon_optimistic=naive, strategy=FAMILY, alpha=alpha)
    return bound, tuple(test for _, test in results)


def family_verdict(
    scores_in: ArrayLike,
    scores_out: ArrayLike,
    claim: Callable[[np.ndarray], np.ndarray],
    family: PlannedFamily | None = None,
    *,
    alpha: float = 0.05,
) -> tuple[Verdict, tuple[JointTest, ...]]:
    """``violated`` iff some rule's joint test refutes ``claim`` at alpha / K (union bound: at
    most alpha for a true claim, :class:`PlannedFamily`); the :class:`audit.stats.binary.Verdict`
    is that of the rule with the smallest p-value, ``alpha`` the whole verdict's."""
    _check_tradeoff_function(claim)
    _, alpha = _check_common(0.0, alpha)
    sorted_in, sorted_out = _as_scores("scores_in", scores_in), _as_scores("scores_out", scores_out)
    family = _check_family(family, sorted_in.size, sorted_out.size)
    each = alpha / family.size
    results = [planned_verdict(sorted_in, sorted_out, claim, rule, alpha=each)
               for rule in family.rules]
    decision, _ = min(results, key=lambda pair: pair[1].p_value)
    return replace(decision, strategy=FAMILY, alpha=alpha), tuple(t for _, t in results)


# --------------------------------------------------------------------------- pilot


def split_pilot(
    scores: object, seed: int, fraction: float = PILOT_FRACTION
) -> tuple[np.ndarray, np.ndarray]:
    """(pilot, test): a seeded uniformly random ``fraction`` of ``scores`` and the rest.

    The scores are i.i.d. across trials, so a random subset of positions, chosen independently
    of the values, leaves the test scores i.i.d. and independent of the pilot (also when the
    array is sorted: selecting uniformly random positions of the sorted sample has the law of
    selecting uniformly random trials).
    """
    fraction = check_real(
        "fraction", fraction, minimum=0.0, maximum=1.0, strict_minimum=True, strict_maximum=True
    )
    array = per_trial_scores("scores", np.asarray(scores, dtype=float))  # one per trial
    k = round(fraction * array.size)
    if k < 1 or k >= array.size:
        raise ValueError(
            "threshold='planned' with a pilot needs at least 2 scores a side and a pilot of >= "
            f"1; got {array.size}"
        )
    order = np.random.default_rng(seed).permutation(array.size)
    return array[order[:k]], array[order[k:]]


def pilot_curve(pilot_in: ArrayLike, pilot_out: ArrayLike) -> Callable[[np.ndarray], np.ndarray]:
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
    x = np.concatenate(
        [[0.0], clopper_pearson_upper(fp, sorted_out.size, PILOT_PESSIMISM)[::-1], [1.0]]
    )
    f = np.concatenate(
        [[1.0], clopper_pearson_upper(fn, sorted_in.size, PILOT_PESSIMISM)[::-1], [0.0]]
    )
    f = np.minimum.accumulate(f)
    # equal FPRs: keep the smallest FNR, the last of each run (x ascending, f non-increasing)
    last = np.append(x[1:] != x[:-1], True)
    x, f = x[last], f[last]

    def curve(alpha: np.ndarray) -> np.ndarray:
        return np.interp(np.asarray(alpha, dtype=float), x, f)

    return curve


@dataclass(frozen=True)
class Pilot:
    """A pilot split off the scores to plan on (docs/design.md §8.12): its curve, its name in the
    report, the test scores it leaves (independent of the pilot) and the pilot's sizes."""

    curve: Callable[[np.ndarray], np.ndarray]
    name: str
    test_in: np.ndarray
    test_out: np.ndarray
    sizes: tuple[int, int]


def take_pilot(
    scores_in: ArrayLike, scores_out: ArrayLike, seed: int, fraction: float = PILOT_FRACTION
) -> Pilot:
    """:func:`split_pilot` of each side (IN with ``seed``, OUT with ``seed + 1``) and the
    pilot's :func:`pilot_curve`: what a planned threshold without a theory curve plans on."""
    pilot_in, test_in = split_pilot(scores_in, seed, fraction)
    pilot_out, test_out = split_pilot(scores_out, seed + 1, fraction)
    return Pilot(
        pilot_curve(pilot_in, pilot_out), f"a pilot of {fraction:.0%} of the trials",
        test_in, test_out, (pilot_in.size, pilot_out.size),
    )


# --------------------------------------------------------------------------- one run: planned
# guesses


@dataclass(frozen=True)
class PlannedGuesses:
    """A one-run guessing rule (k+, k-) fixed before the canaries' scores are seen, from a
    planning curve; tested once at alpha (``guesses = (k_plus, k_minus)`` of
    :func:`audit.stats.one_run.one_run_epsilon_lb`, docs/design.md §8.11, §8.12)."""

    k_plus: int
    k_minus: int
    canaries: int
    curve: str
    expected_epsilon_lb: float

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


GUESS_QUANTILES = (0.1, 0.3, 0.5, 0.7, 0.9)
"""Quantiles of the correct count whose bounds are averaged by :func:`plan_guesses`."""


def projected_rules(
    curve: Callable[[np.ndarray], np.ndarray], m: int
) -> tuple[list[tuple[int, int, float]], np.ndarray, np.ndarray]:
    """The candidate rules (k, 0) and (k, k) a planner weighs for m canaries whose scores follow
    ``curve``, with their projected precision, numbers of guesses r and correct counts at the
    quantiles :data:`GUESS_QUANTILES` (rows) of Binomial(r, precision) (:func:`plan_guesses`)."""
    ks = np.unique(np.clip(np.round(np.geomspace(0.001, 0.5, 24) * m).astype(np.int64), 1, m // 2))
    grid = np.unique(np.concatenate([[0.0], np.geomspace(1e-9, 1.0, 4000)]))
    power = np.maximum.accumulate(_power_of(curve, "out")(grid))
    guessed = grid + power  # 2k/m at FPR x, increasing
    x = np.interp(np.minimum(2 * ks / m, guessed[-1]), guessed, grid)
    tpr = np.interp(x, grid, power)
    precision = np.where(x + tpr > 0, tpr / np.maximum(x + tpr, 1e-300), 0.5)
    rules = [(int(k), 0, float(p)) for k, p in zip(ks, precision, strict=True)]
    rules += [(int(k), int(k), float(p)) for k, p in zip(ks, precision, strict=True) if 2 * k <= m]
    guesses = np.array([kp + km for kp, km, _ in rules])
    correct = np.stack([binom.ppf(q, guesses, [p for _, _, p in rules]) for q in GUESS_QUANTILES])
    return rules, guesses, np.clip(correct.astype(np.int64), 0, guesses)


def plan_guesses(
    curve: Callable[[np.ndarray], np.ndarray],
    m: int,
    *,
    delta: float,
    alpha: float,
    curve_name: str | None = None,
) -> PlannedGuesses:
    """The rule (k, 0) or (k, k) maximising the projected f-DP eps lower bound of one run with
    m canaries at level alpha (no Bonferroni over rules: the rule is fixed in advance).

    Were the canaries' scores to follow ``curve`` (FNR = f(FPR) for one canary's test), the
    threshold whose expected number of IN guesses is k has FPR x with (m/2)(x + 1 - f(x)) = k
    and precision p = (1 - f(x)) / (x + 1 - f(x)); the rule (k, k) on a symmetric curve has
    the same precision on both sides. The correct count is taken as Binomial(r, p), r = k+ + k-,
    and the bound :func:`audit.stats.one_run.fdp_epsilon_lb` averaged over its quantiles
    :data:`GUESS_QUANTILES` (a projection; the rule's soundness does not depend on it).
    """
    from audit.stats.one_run import fdp_epsilon_lb  # the one-run bound (audit.stats.one_run, §8.10)

    m = check_int("m", m, minimum=4)
    rules, guesses, correct = projected_rules(curve, m)
    bounds = (
        np.asarray(
            fdp_epsilon_lb(
                m, np.tile(guesses, len(GUESS_QUANTILES)), correct.ravel(), delta=delta, alpha=alpha
            )
        )
        .reshape(correct.shape)
        .mean(axis=0)
    )
    i = int(np.argmax(bounds))
    best = (float(bounds[i]), rules[i])
    name = curve_name or getattr(curve, "label", None) or "the given curve"
    return PlannedGuesses(k_plus=best[1][0], k_minus=best[1][1], canaries=m, curve=str(name),
                          expected_epsilon_lb=best[0])
