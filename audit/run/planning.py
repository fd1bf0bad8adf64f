"""Planning an audit: how many trials it needs, from the ceiling of audit.stats.binary.

An audit shows a claim "(eps_c, delta)-DP" violated when its sound lower bound exceeds
eps_c. If the best attack's scores had exactly the trade-off curve f (the theory's ``lower``
curve: what a known attack achieves), then with n IN and n OUT trials the error counts at a
threshold with rates (a, f(a)) are Binomial(n, a) and Binomial(n, f(a)), independent. With
probability >= p = ``power`` both lie below their sqrt(p)-quantiles, and then (CP bounds
increase with the count) eps_lb is at least the bound computed at those quantiles. The plan
is the smallest n for which that pessimistic ceiling exceeds eps_c (or reaches a target eps
to certify). Assumptions, stated: the attack attains f; for ``split`` the threshold picked on
the selection half is the best one (the realised choice can only be worse, so real audits
may need somewhat more); for ``bonferroni`` the grid's rates are taken at their expectations.

Checked by simulation (:func:`simulated_power`: scores whose trade-off curve is exactly f, fed to
the real :func:`audit.stats.binary.verdict` / :func:`audit.stats.binary.epsilon_lower_bound`;
200-400 repetitions, deterministic, Poisson and dynamic-shuffle curves, claims 1 and 2 at delta
1e-5): at the planned n, ``goal="violate"`` (the runner's verdict, FNR_hi < claim(FPR_hi)) succeeds
in 92-99% of audits with ``split`` and 100% with ``bonferroni``; ``goal="certify"`` (eps_lb >=
target) with ``split`` in only 84-93%: maximising the noisy eps on the selection half picks too
extreme a threshold (winner's curse). So ``trials_needed(verify_reps=k)`` checks the analytic n by
simulation and raises it by factors of 1.1 until the simulated power reaches ``power`` (the default
for ``certify`` with ``split``).

With ``planned`` nothing is assumed found: the projection is the rule the audit plans at each n
(:func:`planned_rule`) and what its joint test gives (:func:`audit.stats.thresholds.
planned_projection`); :func:`simulated_power` fixes that rule before drawing any score and runs
its joint test in each simulated audit (docs/design.md §8.20).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
from scipy.stats import binom

from audit.core.exact_confidence import exact_confidence
from audit.core.mechanism import Mechanism
from audit.core.validation import check_choice, check_int, check_real
from audit.stats.binary import (
    DEFAULT_GRID_SIZE,
    DEFAULT_THRESHOLD,
    Split,
    ThresholdStrategy,
    curve_epsilon,
    evaluate_curve,
    ideal_epsilon_lb,
    threshold_strategy,
)
from audit.stats.one_run import candidate_guesses, fdp_epsilon_lb
from audit.stats.thresholds import PlannedThreshold, plan_threshold, planned_projection
from audit.theory import bounds_for
from audit.theory.curve import TradeOffCurve

__all__ = [
    "GOALS",
    "OneRunPlan",
    "Plan",
    "RuleFamilyPrice",
    "canaries_needed",
    "claimed_curve",
    "curve_scores",
    "one_run_projection",
    "pessimistic_epsilon_lb",
    "planned_rule",
    "rule_family_price",
    "simulated_power",
    "theory_bounds",
    "trials_needed",
]

GOALS: tuple[str, ...] = ("violate", "certify")
"""``violate``: the verdict refutes the claim (eps, delta); ``certify``: eps_lb >= the target."""

VERIFY_BUDGET = 2 * 10**7
"""Largest reps * trials simulated by the verification (about a minute at most)."""


def planned_rule(
    curve: Callable[[np.ndarray], np.ndarray],
    trials: int,
    *,
    alpha: float = 0.05,
    delta: float | None = None,
    claim: Callable[[np.ndarray], np.ndarray] | None = None,
) -> PlannedThreshold:
    """The rule a ``planned`` audit of ``trials`` IN and ``trials`` OUT trials fixes before any
    score is seen, from ``curve`` (the theory's lower curve) and the trial counts: the eps
    bound's plan (``delta``) or the verdict's (``claim``), by
    :func:`audit.stats.thresholds.plan_threshold`, as the audit plans (docs/design.md §8.12)."""
    return plan_threshold(
        curve, trials, trials, alpha=alpha, delta=delta, claim=claim, source="given"
    )


def pessimistic_epsilon_lb(
    curve: Callable[[np.ndarray], np.ndarray],
    trials: int,
    *,
    delta: float,
    alpha: float = 0.05,
    power: float = 0.9,
    threshold: str | ThresholdStrategy = DEFAULT_THRESHOLD,
    grid_size: int = DEFAULT_GRID_SIZE,
) -> float:
    """eps_lb reached with probability >= ``power`` if the scores follow ``curve`` exactly and
    the best threshold is found (error counts at their sqrt(power)-quantiles; module
    docstring). With ``split`` the realised threshold is worse: a planning figure, not a
    guarantee (``goal="certify"`` measured 84-93% at ``power`` 0.9). With ``planned``, the
    planned rule itself (:func:`planned_rule`): the eps_lb its joint test reaches with
    probability ``power`` at the rank the audit plans (no threshold is assumed found)."""
    strategy = threshold_strategy(threshold, grid_size=grid_size)
    if strategy.needs_plan:
        rule = planned_rule(curve, trials, alpha=alpha, delta=delta)
        return planned_projection(curve, rule, alpha=alpha, delta=delta, power=power)
    confidence = exact_confidence(alpha)  # alpha bit for bit
    return ideal_epsilon_lb(
        curve,
        trials,
        delta=delta,
        confidence=confidence,
        threshold=threshold,
        grid_size=grid_size,
        quantile=math.sqrt(power),
    )

def curve_scores(
    curve: Callable[[np.ndarray], np.ndarray], trials: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """(IN, OUT) scores, ``trials`` each, whose trade-off curve is exactly ``curve``.

    Each trial gets a level a and the score -a: OUT levels are Uniform(0, 1), IN levels have
    CDF 1 - f(a), so the test "score >= -x" has FPR Pr[a_out <= x] = x and FNR
    Pr[a_in > x] = f(x) at every x at once, i.e. the error counts at all thresholds are
    jointly those of an attack attaining f (the likelihood-ratio test of a pair with
    curve f). IN levels by inverse CDF on a geometric grid down to 1e-12 (linear between).
    """
    grid = np.unique(np.concatenate(([0.0], np.geomspace(1e-12, 1.0, 20_000))))
    cdf = np.maximum.accumulate(1.0 - np.clip(evaluate_curve(curve, grid), 0.0, 1.0))
    scores_out = -rng.random(trials)
    scores_in = -np.interp(rng.random(trials), cdf, grid)
    return scores_in, scores_out


def claimed_curve(target_epsilon: float, delta: float) -> TradeOffCurve:
    """The trade-off curve of the claim "(target_epsilon, delta)-DP" that a ``violate`` plan
    refutes."""
    return TradeOffCurve.from_privacy_profile(
        [target_epsilon], [delta], sampler="poisson", threat_model="isolated", kind="upper",
        method=f"claimed ({target_epsilon:g}, {delta:g})-DP",
    )


def simulated_power(
    curve: Callable[[np.ndarray], np.ndarray],
    trials: int,
    target_epsilon: float,
    *,
    delta: float,
    alpha: float = 0.05,
    threshold: str | ThresholdStrategy = DEFAULT_THRESHOLD,
    goal: str = "violate",
    grid_size: int = DEFAULT_GRID_SIZE,
    reps: int = 200,
    seed: int = 0,
) -> float:
    """Fraction of ``reps`` simulated audits (scores from :func:`curve_scores`, ``trials`` IN and
    OUT each) that succeed: ``violate``: the strategy's verdict
    (:meth:`audit.stats.binary.ThresholdStrategy.verdict`) refutes the claim
    (target_epsilon, delta)-DP; ``certify``: its eps lower bound is >= target. With
    ``planned`` the rule is fixed once, before any score is drawn, from ``curve`` and the trial
    counts (:func:`planned_rule`: the verdict's plan for ``violate``, the eps bound's for
    ``certify``), and each repetition runs its joint test, as the audit does. A Monte Carlo
    estimate (standard error sqrt(p (1 - p) / reps)); repetition r uses
    ``default_rng([seed, r])`` and split (tie-breaking) seed r, so results are reproducible."""
    goal = check_choice("goal", goal, GOALS)
    reps = check_int("reps", reps, minimum=1)
    strategy = threshold_strategy(threshold, grid_size=grid_size)
    claim = claimed_curve(target_epsilon, delta)
    plan = None
    if strategy.needs_plan:  # fixed before any score is drawn (docs/design.md §8.12)
        plan = (
            planned_rule(curve, trials, alpha=alpha, claim=claim)
            if goal == "violate"
            else planned_rule(curve, trials, alpha=alpha, delta=delta)
        )
    hits = 0
    for r in range(reps):
        scores_in, scores_out = curve_scores(curve, trials, np.random.default_rng([seed, r]))
        if goal == "violate":
            hits += strategy.verdict(
                scores_in, scores_out, claim, alpha=alpha, seed=r, plan=plan
            ).violated
        else:
            bound = strategy.epsilon_bound(  # the bound only: no optimistic maximum
                scores_in, scores_out, delta=delta, alpha=alpha, seed=r, plan=plan,
                optimistic=False,
            )
            hits += bound.epsilon_lb >= target_epsilon
    return hits / reps

@dataclass(frozen=True)
class Plan:
    """Trials (per side: IN and OUT each) to reach eps_lb > ``target_epsilon`` with ``power``;
    ``projection`` says what was projected (the strategy, and for ``planned`` the rule)."""

    target_epsilon: float
    trials: int | None
    reachable: bool
    curve_epsilon: float
    delta: float
    alpha: float
    power: float
    threshold: str
    note: str
    goal: str = "violate"
    analytic_trials: int | None = None
    simulated_power: float | None = None
    projection: str = ""

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def trials_needed(
    curve: Callable[[np.ndarray], np.ndarray],
    target_epsilon: float,
    *,
    delta: float,
    alpha: float = 0.05,
    power: float = 0.9,
    threshold: str | ThresholdStrategy = DEFAULT_THRESHOLD,
    grid_size: int = DEFAULT_GRID_SIZE,
    max_trials: int = 10**9,
    goal: str = "violate",
    verify_reps: int | None = None,
    seed: int = 0,
) -> Plan:
    """Smallest n (IN and OUT trials each, to ~1%) with pessimistic eps_lb > ``target_epsilon``.

    ``curve``'s own eps at delta is the limit as n grows; a target at or above it is
    unreachable (``reachable=False``, ``trials=None``). With ``verify_reps`` > 0 the analytic
    n is checked by :func:`simulated_power` (``goal``, ``verify_reps`` repetitions) and raised
    by factors of 1.1 until the simulated power reaches ``power``; the default is 200 for
    ``goal="certify"`` with ``split`` (where the analytic n falls short, module docstring),
    else 0. Skipped, with a note, when reps * trials would exceed ``VERIFY_BUDGET``.

    With ``planned`` the projection is the planned rule itself (:func:`planned_rule`, the rank
    the audit plans at each n): ``certify``, the eps_lb its joint test reaches with probability
    ``power`` exceeds the target; ``violate``, the chance that the verdict's joint test refutes
    the claim (target, delta)-DP (:func:`claimed_curve`) is at least ``power`` (the audit's eps
    test can only add to it). ``projection`` in the result says what was projected.
    """
    target_epsilon = check_real("claim", target_epsilon, minimum=0.0)
    power = check_real(
        "power", power, minimum=0.0, maximum=1.0, strict_minimum=True, strict_maximum=True
    )
    max_trials = check_int("max_trials", max_trials, minimum=4)
    goal = check_choice("goal", goal, GOALS)
    strategy = threshold_strategy(threshold, grid_size=grid_size)
    if verify_reps is None:  # the analytic n of split falls short (module docstring)
        verify_reps = 200 if (goal == "certify" and isinstance(strategy, Split)) else 0
    verify_reps = check_int("verify_reps", verify_reps, minimum=0)
    limit = float(curve_epsilon(curve, delta))
    plan = functools.partial(
        Plan, target_epsilon=target_epsilon, curve_epsilon=limit, delta=delta, alpha=alpha,
        power=power, threshold=strategy.name, goal=goal,
    )
    claim = claimed_curve(target_epsilon, delta)

    def reaches(n: int) -> bool:
        if strategy.needs_plan and goal == "violate":  # the verdict's planned joint test
            rule = planned_rule(curve, n, alpha=alpha, claim=claim)
            return planned_projection(curve, rule, alpha=alpha, claim=claim) >= power
        return (
            pessimistic_epsilon_lb(
                curve,
                n,
                delta=delta,
                alpha=alpha,
                power=power,
                threshold=strategy,
                grid_size=grid_size,
            )
            > target_epsilon
        )

    if target_epsilon >= limit:
        return plan(trials=None, reachable=False, note=(
            f"the attack's curve has eps = {limit:.4g} at delta = {delta:g}; no number of trials "
            f"certifies more than that, so eps > {target_epsilon:g} cannot be shown"))
    low, high = 2, 16
    while not reaches(high):
        low, high = high, high * 2
        if high > max_trials:
            return plan(
                trials=None,
                reachable=False,
                note=f"more than max_trials={max_trials} trials needed",
            )
    while high > low * 1.01 + 1:
        mid = (low + high) // 2
        low, high = (low, mid) if reaches(mid) else (mid, high)
    note = "assumes the attack attains the curve; trials are per side (IN and OUT each)"
    analytic = trials = int(high)
    projection = _projection(strategy, curve, trials, goal, alpha, delta, claim, power)
    simulated = None
    if verify_reps and verify_reps * trials > VERIFY_BUDGET:
        note += (f"; not checked by simulation ({verify_reps} x {trials} trials is over the budget "
                 f"{VERIFY_BUDGET:g}): with split the threshold choice may need more trials")
    elif verify_reps:
        def measured(n: int) -> float:
            return simulated_power(
                curve,
                n,
                target_epsilon,
                delta=delta,
                alpha=alpha,
                threshold=threshold,
                goal=goal,
                grid_size=grid_size,
                reps=verify_reps,
                seed=seed,
            )

        simulated = measured(trials)
        while (
            simulated < power
            and trials * 1.1 <= max_trials
            and verify_reps * trials * 1.1 <= VERIFY_BUDGET
        ):
            trials = math.ceil(trials * 1.1)
            simulated = measured(trials)
        error = math.sqrt(simulated * (1 - simulated) / verify_reps)
        note += (
            f"; analytic n = {analytic}, checked by simulation: power {simulated:.3f} at n = "
            f"{trials} ({verify_reps} simulated audits, standard error {error:.2f})"
        )
    elif not strategy.needs_plan:
        note += "; the best threshold is assumed found"
    return plan(trials=trials, reachable=True, note=note, analytic_trials=analytic,
                simulated_power=simulated, projection=projection)


def _projection(
    strategy: ThresholdStrategy,
    curve: Callable[[np.ndarray], np.ndarray],
    trials: int,
    goal: str,
    alpha: float,
    delta: float,
    claim: TradeOffCurve,
    power: float,
) -> str:
    """What :func:`trials_needed` projected at ``trials``, in words."""
    if not strategy.needs_plan:
        return (
            f"{strategy.name}: the Clopper-Pearson pair at the best threshold the strategy can "
            f"pick, error counts at their {math.sqrt(power):.3g}-quantiles (audit.stats.binary."
            "ideal_points)"
        )
    if goal == "violate":
        rule = planned_rule(curve, trials, alpha=alpha, claim=claim)
        value = planned_projection(curve, rule, alpha=alpha, claim=claim)
        what = f"chance {value:.3g} that its joint test refutes ({claim.method})"
    else:
        rule = planned_rule(curve, trials, alpha=alpha, delta=delta)
        value = planned_projection(curve, rule, alpha=alpha, delta=delta, power=power)
        what = f"eps_lb {value:.4g} reached with probability {power:g} by its joint test"
    return f"planned: the rule the audit plans at n = {trials}: {rule.describe()}; then {what}"


def theory_bounds(
    mechanism: Mechanism,
) -> tuple[TradeOffCurve | None, TradeOffCurve | None, str]:
    """(upper, lower, note) from ``audit.theory.bounds_for`` (each a TradeOffCurve or None).

    The note is empty: the theory is part of the package (the note is kept for callers).
    """
    bounds = bounds_for(mechanism)
    return bounds.upper, bounds.lower, ""


# --------------------------------------------------------------------------- one-run audits


@dataclass(frozen=True)
class RuleFamilyPrice:
    """What testing a family of G guessing rules at alpha / G costs against one rule planned
    before the run at alpha, at m canaries whose scores follow a planning curve (a projection:
    both at the same quantile of their correct counts; :func:`rule_family_price`).

    ``family_*``: the best of the ``bonferroni`` grid's G = ``candidates`` rules at alpha / G;
    ``planned_*``: the rule :func:`audit.stats.thresholds.plan_guesses` fixes (eps) and the rule
    :func:`audit.stats.one_run_gdp.plan_gdp_guesses` fixes (mu-GDP), each at alpha. ``cost`` and
    ``mu_cost``: 1 - family / planned, the fraction of the planned rule's bound the family loses
    (0 where the planned bound is 0; negative where the family projects more)."""

    canaries: int
    candidates: int
    quantile: float
    family_epsilon_lb: float
    planned_k_plus: int
    planned_k_minus: int
    planned_epsilon_lb: float
    cost: float
    family_mu_lb: float
    gdp_k_plus: int
    gdp_k_minus: int
    planned_mu_lb: float
    mu_cost: float

    def describe(self) -> str:
        """One sentence: the family's price on eps_lb and on mu_lb."""
        return (
            f"the {self.candidates}-rule family (each rule at alpha/{self.candidates}) costs "
            f"{100 * self.cost:.0f}% of eps_lb against the planned rule ({self.planned_k_plus}, "
            f"{self.planned_k_minus}) at alpha (projected eps_lb {self.family_epsilon_lb:.3f} "
            f"against {self.planned_epsilon_lb:.3f}) and {100 * self.mu_cost:.0f}% of mu_lb "
            f"against the planned GDP rule ({self.gdp_k_plus}, {self.gdp_k_minus}) (mu_lb "
            f"{self.family_mu_lb:.3f} against {self.planned_mu_lb:.3f}); correct counts at their "
            f"{self.quantile:g}-quantile, m = {self.canaries}"
        )

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _projected_precision(
    curve: Callable[[np.ndarray], np.ndarray], m: int, ks: np.ndarray
) -> np.ndarray:
    """Precision of guessing IN for the k highest of m canaries whose scores follow ``curve``:
    the FPR x with (m/2)(x + 1 - f(x)) = k, precision (1 - f(x)) / (x + 1 - f(x)) (the same for
    OUT guesses on the k lowest when f is symmetric, as the planners take it)."""
    grid = np.unique(np.concatenate([[0.0], np.geomspace(1e-9, 1.0, 4000)]))
    power_curve = np.maximum.accumulate(1.0 - np.clip(evaluate_curve(curve, grid), 0.0, 1.0))
    guessed = grid + power_curve  # 2k/m at FPR x, increasing
    x = np.interp(np.minimum(2 * np.asarray(ks) / m, guessed[-1]), guessed, grid)
    tpr = np.interp(x, grid, power_curve)
    return np.where(x + tpr > 0, tpr / np.maximum(x + tpr, 1e-300), 0.5)


def _projected_correct(
    curve: Callable[[np.ndarray], np.ndarray], m: int, pairs: list[tuple[int, int]],
    quantile: float,
) -> tuple[np.ndarray, np.ndarray]:
    """(guesses, correct at ``quantile`` of Binomial(guesses, precision)) of each rule."""
    guesses = np.array([kp + km for kp, km in pairs], dtype=np.int64)
    precision = _projected_precision(curve, m, np.array([max(kp, km) for kp, km in pairs]))
    correct = binom.ppf(quantile, guesses, precision).astype(np.int64)
    return guesses, np.clip(correct, 0, guesses)


def rule_family_price(
    curve: Callable[[np.ndarray], np.ndarray],
    m: int,
    *,
    delta: float,
    alpha: float = 0.05,
    power: float = 0.9,
) -> RuleFamilyPrice:
    """The price of the default ``bonferroni`` family of one-run guessing rules at m canaries
    (:class:`RuleFamilyPrice`): its best rule at alpha / G against the planned rules at alpha,
    the correct counts of every rule at the (1 - ``power``)-quantile of Binomial(r, precision)
    (the projection of :func:`one_run_projection`), the f-DP eps bound at ``delta`` and mu_lb.
    Cost: a few recursions over about 70 rules, O(m) at most (about a second at m = 1e6)."""
    from audit.stats.one_run_gdp import fdp_mu_lb, plan_gdp_guesses
    from audit.stats.thresholds import plan_guesses

    m = check_int("m", m, minimum=4)
    quantile = 1.0 - power
    pairs = candidate_guesses(m)
    g, c = _projected_correct(curve, m, pairs, quantile)
    level = alpha / len(pairs)
    family_eps = float(np.max(fdp_epsilon_lb(m, g, c, delta=delta, alpha=level)))
    family_mu = float(np.max(fdp_mu_lb(m, g, c, alpha=level)))
    eps_plan = plan_guesses(curve, m, delta=delta, alpha=alpha)
    mu_plan = plan_gdp_guesses(curve, m, alpha=alpha)
    planned = [(eps_plan.k_plus, eps_plan.k_minus), (mu_plan.k_plus, mu_plan.k_minus)]
    pg, pc = _projected_correct(curve, m, planned, quantile)
    planned_eps = float(fdp_epsilon_lb(m, pg[0], pc[0], delta=delta, alpha=alpha))
    planned_mu = float(fdp_mu_lb(m, pg[1], pc[1], alpha=alpha))

    def cost(family: float, plan: float) -> float:
        return 1.0 - family / plan if plan > 0 else 0.0

    return RuleFamilyPrice(
        canaries=m, candidates=len(pairs), quantile=quantile,
        family_epsilon_lb=family_eps, planned_k_plus=eps_plan.k_plus,
        planned_k_minus=eps_plan.k_minus, planned_epsilon_lb=planned_eps,
        cost=cost(family_eps, planned_eps), family_mu_lb=family_mu,
        gdp_k_plus=mu_plan.k_plus, gdp_k_minus=mu_plan.k_minus, planned_mu_lb=planned_mu,
        mu_cost=cost(family_mu, planned_mu),
    )


@dataclass(frozen=True)
class OneRunPlan:
    """Canaries a one-run audit needs (a projection, labelled so; see :func:`canaries_needed`)."""

    canaries: int | None
    reachable: bool
    target_epsilon: float
    projected_epsilon_lb: float
    k_plus: int
    precision: float
    note: str
    price: RuleFamilyPrice | None = None
    """At the planned m (or the best m searched): the planned rule to fix in advance
    (``guesses = [k_plus, k_minus]``) and what the default rule family costs against it."""

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


ONE_RUN_MAX_CANARIES = 1_000_000
"""Largest m searched (a projection costs about 0.1 s at m = 1e5 and 1 s at 1e6: the f-DP
recursion's rows stop early, :func:`audit.stats.one_run._recursion_mass`)."""


def one_run_projection(
    curve: Callable[[np.ndarray], np.ndarray],
    m: int,
    *,
    delta: float,
    alpha: float = 0.05,
    power: float = 0.9,
) -> tuple[float, int, float]:
    """(eps_lb, k+, precision) that one run with m canaries reaches with probability about
    ``power`` if the canaries' scores follow ``curve`` (FNR = f(FPR) of a known attack).

    For the one-sided rules (k, 0) of the ``bonferroni`` grid
    (:func:`audit.stats.one_run.candidate_guesses`), tested at alpha / G as in the report: the
    threshold whose expected number of IN guesses is k has FPR x with (m/2)(x + 1 - f(x)) = k and
    precision p = (1 - f(x)) / (x + 1 - f(x)); the correct count is taken at the (1 -
    power)-quantile of Binomial(k, p), and the f-DP bound
    (:func:`audit.stats.one_run.fdp_epsilon_lb`) is computed at it. Two-sided rules (which the audit
    also tries) are left out, so the projection errs low for symmetric curves.
    """
    m = check_int("m", m, minimum=4)
    pairs = candidate_guesses(m)
    ks = np.array([kp for kp, km in pairs if km == 0])
    grid = np.unique(np.concatenate([[0.0], np.geomspace(1e-9, 1.0, 4000)]))
    power_curve = np.maximum.accumulate(1.0 - np.clip(evaluate_curve(curve, grid), 0.0, 1.0))
    guessed = grid + power_curve  # 2k/m at FPR x, increasing
    x = np.interp(np.minimum(2 * ks / m, guessed[-1]), guessed, grid)
    tpr = np.interp(x, grid, power_curve)
    precision = np.where(x + tpr > 0, tpr / np.maximum(x + tpr, 1e-300), 0.5)
    correct = binom.ppf(1 - power, ks, precision).astype(np.int64)
    eps = np.atleast_1d(
        fdp_epsilon_lb(m, ks, np.clip(correct, 0, ks), delta=delta, alpha=alpha / len(pairs))
    )
    best = int(np.argmax(eps))
    return float(eps[best]), int(ks[best]), float(precision[best])


def canaries_needed(
    curve: Callable[[np.ndarray], np.ndarray],
    target_epsilon: float,
    *,
    delta: float,
    alpha: float = 0.05,
    power: float = 0.9,
) -> OneRunPlan:
    """Smallest m (geometric steps of 1.25 from 100 to 1e6) whose one-run projection
    (:func:`one_run_projection`) reaches eps_lb >= ``target_epsilon``: a projection, not a
    guarantee (expected-threshold rules, binomial correct counts). ``price`` in the result: at
    that m (or the best m searched), the rule planned from ``curve`` and the price of the
    default rule family against it (:func:`rule_family_price`). Cost: one projection per m
    searched, O(m) each (seconds at m = 1e6)."""
    target_epsilon = check_real("target_epsilon", target_epsilon, minimum=0.0, strict_minimum=True)
    m_values = np.unique(np.round(100 * 1.25 ** np.arange(0, 40)).astype(int))
    m_values = m_values[m_values <= ONE_RUN_MAX_CANARIES]
    best = (0.0, 0, 0.5, 0)
    for m in m_values:
        eps, k, precision = one_run_projection(curve, int(m), delta=delta, alpha=alpha, power=power)
        if eps > best[0]:
            best = (eps, k, precision, int(m))
        if eps >= target_epsilon:
            return OneRunPlan(
                int(m),
                True,
                target_epsilon,
                eps,
                k,
                precision,
                f"projection: guessing IN for the {k} highest of {m} canaries, precision "
                f"{precision:.3f}",
                rule_family_price(curve, int(m), delta=delta, alpha=alpha, power=power),
            )
    return OneRunPlan(
        None,
        False,
        target_epsilon,
        best[0],
        best[1],
        best[2],
        f"not reached with m <= {ONE_RUN_MAX_CANARIES}: the best projection is eps_lb = "
        f"{best[0]:.3f} at m = {best[3]}",
        rule_family_price(curve, max(best[3], 4), delta=delta, alpha=alpha, power=power),
    )
