"""Anytime-valid confidence sequences for an error rate, and the sequential verdict built on them.

A sequential audit (docs/design.md §8.18) adds shards until its verdict is decided, so the number
of trials it ends with depends on the scores: a Clopper-Pearson bound computed at that random
size is not a 1 - alpha bound (peeking after every shard inflates the error rate). A *confidence
sequence* (CS) is a sequence of intervals C_1, C_2, ... with

    Pr[ exists n : p not in C_n ] <= alpha,

valid at every sample size at once, hence at any stopping time (Howard, Ramdas, McAuliffe,
Sekhon 2021, "Time-uniform, nonparametric, nonasymptotic confidence sequences", arXiv
1810.08240; Waudby-Smith & Ramdas 2023, "Estimating means of bounded random variables by
betting", arXiv 2010.09686).

The CS here is Robbins' conjugate mixture for a Bernoulli mean (Robbins 1970; Howard et al.
2021, Prop. 6 and its beta-binomial boundary). For observations X_i in [0, 1], i.i.d. with mean
p, and any prior Beta(a, b) fixed before they are seen,

    M_n(m) = int prod_i (r / m)^{X_i} ((1 - r) / (1 - m))^{1 - X_i} dBeta(r; a, b)
           = B(a + S_n, b + n - S_n) / B(a, b) / (m^{S_n} (1 - m)^{n - S_n}),   S_n = sum X_i,

is a non-negative supermartingale with M_0 = 1 under m = p: each factor x -> c^x d^{1-x} is
convex in x, so for X in [0, 1] with mean p its expectation is at most the Bernoulli(p) one
(Hoeffding 1963: a [0, 1] variable is below the Bernoulli of the same mean in the convex order),
which is r + (1 - r) = 1. Ville's inequality gives Pr[exists n: M_n(p) >= 1/alpha] <= alpha, so

    C_n = {m : M_n(m) < 1/alpha}

is a (1 - alpha) CS. log M_n(m) is convex in m with its minimum at S_n / n, so C_n is an interval
[lower, upper], whose ends are found by bisection (Brent's method for one sum; each end returned on
the outside: the reported interval contains C_n). Observations need not be 0/1: the fraction of k
dependent canaries of one training that a test gets wrong is a [0, 1] variable
(docs/design.md §8.17).

The verdict itself is an e-process (a test by betting; Shafer 2021, Waudby-Smith & Ramdas 2023,
Ramdas et al. 2023 "Game-theoretic statistics and safe anytime-valid inference"). A claimed
trade-off curve f (non-increasing) holds for every test, so for any threshold t and slope
s >= 0, FNR(t) + s FPR(t) >= f(FPR(t)) + s FPR(t) >= c(s) = min_x (f(x) + s x): the pair
variable Z = 1[IN score < t] + s 1[OUT score >= t], in [0, 1 + s], has mean >= c(s) under the
claim. Betting lambda in [0, 1 / (1 + s - c)) on c - Z gives the wealth

    W_n = prod_i (1 + lambda_i (c_i - Z_i)),

a non-negative supermartingale under the claim as long as (t_i, s_i, lambda_i) are chosen from
the trials before pair i only (predictable). Ville: Pr[exists n: W_n >= 1/alpha] <= alpha, so
"violated" when W_n first reaches 1/alpha is a level-alpha test at any stopping time. Here the
threshold maximises the past trials' margin f(FPR) - FNR (smoothed point estimates), s is the
claim's slope there (the tangent: c is then f(FPR) + s FPR for a convex f), c(s) is computed on
a grid as min_j f(x_{j+1}) + s x_j (a lower bound of the minimum for any non-increasing f), and
lambda is the predictable plug-in (c - mean) / (variance + (c - mean)^2) of the past Z's, capped
at half the range (:func:`plan_bet`). One test, no alpha split between two rates, no pilot:
this is what makes the sequential audit stop early (bench/sequential.py).

The running intersection of C_1, ..., C_n is also a (1 - alpha) CS (the truth is in every C_n
on the same event), so the bounds a sequential audit reports only tighten.

The prior sets where the CS is tight: a prior near the true rate costs about
(1/2) log(1 + n / (a + b)) nats at sample size n. A sequential audit's sequences (its eps_lb and
rate bounds, beside the e-process verdict) count the errors at a threshold fixed on a pilot
shard that is then left out of them, and take their priors from it (:func:`plan_sequential_test`):
the Jeffreys posteriors of the pilot's error counts, Beta(e + 1/2, n - e + 1/2).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import brentq
from scipy.special import betaln

from audit.core.confidence import significance
from audit.core.validation import check_real
from audit.stats.binary import (
    _as_scores,
    _candidate_thresholds,
    _counts,
    clopper_pearson_upper,
    epsilon_from_rates,
    evaluate_curve,
)

__all__ = [
    "BISECTION_STEPS",
    "BetaBinomialCS",
    "LineBet",
    "SequentialPlan",
    "SequentialVerdict",
    "bet_log_wealth",
    "plan_bet",
    "plan_sequential_test",
    "sequential_verdict",
    "support_line",
]

BISECTION_STEPS = 64
"""Bisection steps per end of a confidence interval of an array (the bracket, in [0, 1], ends
2^-64 wide; the end returned is always the bracket's outer one)."""


def _check_alpha(alpha: float) -> float:
    return check_real(
        "alpha", alpha, minimum=0.0, maximum=0.5, strict_minimum=True, strict_maximum=True
    )


@dataclass(frozen=True)
class BetaBinomialCS:
    """Robbins' beta-binomial mixture confidence sequence for the mean of [0, 1] observations.

    Attributes:
        a, b: the Beta(a, b) mixing prior (> 0), fixed before the observations are seen.
        alpha: 1 - confidence, in (0, 0.5): Pr[the mean ever leaves the sequence] <= alpha.
    """

    a: float = 0.5
    b: float = 0.5
    alpha: float = 0.05

    def __post_init__(self) -> None:
        check_real("a", self.a, minimum=0.0, strict_minimum=True)
        check_real("b", self.b, minimum=0.0, strict_minimum=True)
        _check_alpha(self.alpha)

    def log_mixture(
        self, total: np.ndarray | float, n: np.ndarray | float, m: np.ndarray | float
    ) -> np.ndarray:
        """log M_n(m) = log B(a + S, b + n - S) - log B(a, b) - S log m - (n - S) log(1 - m)."""
        total, n, m = (np.asarray(v, dtype=float) for v in (total, n, m))
        with np.errstate(divide="ignore", invalid="ignore"):
            s_term = np.where(total > 0, total * np.log(m), 0.0)
            f_term = np.where(n - total > 0, (n - total) * np.log1p(-m), 0.0)
        return betaln(self.a + total, self.b + n - total) - betaln(self.a, self.b) - s_term - f_term

    def bounds(
        self, total: np.ndarray | float, n: np.ndarray | int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper) of C_n = {m : M_n(m) < 1/alpha} after ``n`` observations summing to
        ``total`` (arrays broadcast); (0, 1) when n = 0. Each end is found by bisection
        (:data:`BISECTION_STEPS`; scalars by Brent's method) and returned on the outside of C_n."""
        total, n = np.broadcast_arrays(np.asarray(total, dtype=float), np.asarray(n, dtype=float))
        if np.any(total < 0) or np.any(total > n):
            raise ValueError("total must lie in [0, n]: the sum of n observations in [0, 1]")
        # log M_n(m) - log(1/alpha) = base - S log m - (n - S) log(1 - m): convex in m, least at S /
        # n
        base = (
            betaln(self.a + total, self.b + n - total)
            - betaln(self.a, self.b)
            - math.log(1.0 / self.alpha)
        )
        if total.ndim == 0:
            lower_end, upper_end = _scalar_ends(float(base), float(total), float(n))
            return np.asarray(lower_end), np.asarray(upper_end)
        centre = np.where(n > 0, total / np.maximum(n, 1.0), 0.5)
        failures = n - total

        def outside(m: np.ndarray) -> np.ndarray:
            with np.errstate(divide="ignore", invalid="ignore"):
                value = (
                    base
                    - np.where(total > 0, total * np.log(m), 0.0)
                    - np.where(failures > 0, failures * np.log1p(-m), 0.0)
                )
            return value >= 0

        lo, hi = centre.copy(), np.ones_like(centre)  # upper end: increasing on [centre, 1)
        for _ in range(BISECTION_STEPS):
            mid = 0.5 * (lo + hi)
            out = outside(mid)
            hi, lo = np.where(out, mid, hi), np.where(out, lo, mid)
        upper = np.where((total >= n) | (n <= 0), 1.0, hi)
        lo, hi = np.zeros_like(centre), centre.copy()  # lower end: decreasing on (0, centre]
        for _ in range(BISECTION_STEPS):
            mid = 0.5 * (lo + hi)
            out = outside(mid)
            lo, hi = np.where(out, mid, lo), np.where(out, hi, mid)
        lower = np.where((total <= 0) | (n <= 0), 0.0, lo)
        return lower, upper


def _scalar_ends(base: float, total: float, n: float) -> tuple[float, float]:
    """The ends of {m : base - S log m - (n - S) log(1 - m) < 0} for one (S, n), by Brent's
    method, each moved outwards until the function is >= 0 there (the outside of C_n)."""
    if n <= 0:
        return 0.0, 1.0
    failures = n - total

    def g(m: float) -> float:
        return (
            base
            - (total * math.log(m) if total > 0 else 0.0)
            - (failures * math.log1p(-m) if failures > 0 else 0.0)
        )

    centre, tol = total / n, 4 * np.finfo(float).eps
    top, bottom = float(np.nextafter(1.0, 0.0)), 1e-300
    upper = 1.0
    if failures > 0 and centre < top and g(top) >= 0:
        upper = _outside(g, brentq(g, centre, top, xtol=1e-300, rtol=tol), 1.0)
    lower = 0.0
    if total > 0 and centre > bottom and g(bottom) >= 0:
        lower = _outside(g, brentq(g, bottom, centre, xtol=1e-300, rtol=tol), 0.0)
    return lower, upper


def _outside(g: Callable[[float], float], root: float, towards: float) -> float:
    """``root`` moved towards ``towards`` one float at a time until g >= 0 there."""
    while g(root) < 0 and root != towards:
        root = float(np.nextafter(root, towards))
    return root


# --------------------------------------------------------------------------- the e-process


CLAIM_GRID = np.unique(
    np.concatenate([[0.0, 1.0], np.geomspace(1e-12, 1.0, 6000), np.linspace(0.0, 1.0, 6001)])
)
"""FPRs at which the claim is evaluated to bound min_x f(x) + s x from below
(:func:`support_line`)."""


def support_line(claim: Callable[[np.ndarray], np.ndarray], fpr: float) -> tuple[float, float]:
    """(s, c): the claim's slope s = -f'(fpr) >= 0 (central difference) and
    c = min_j f(x_{j+1}) + s x_j over :data:`CLAIM_GRID`, which is <= f(x) + s x for every x in
    [0, 1] when f is non-increasing (on [x_j, x_{j+1}], f(x) >= f(x_{j+1}) and s x >= s x_j)."""
    h = max(1e-3 * fpr, 1e-12)
    lo, hi = max(fpr - h, 0.0), min(fpr + h, 1.0)
    f_lo, f_hi = (float(v) for v in evaluate_curve(claim, np.array([lo, hi])))
    slope = max(0.0, (f_lo - f_hi) / (hi - lo)) if hi > lo else 0.0
    values = _claim_on_grid(claim)
    return slope, float(np.min(values[1:] + slope * CLAIM_GRID[:-1]))


@functools.lru_cache(maxsize=16)
def _claim_on_grid(claim: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """f on :data:`CLAIM_GRID`, once per claim (the e-process bets on it at every look)."""
    values = evaluate_curve(claim, CLAIM_GRID)
    values.setflags(write=False)
    return values


@dataclass(frozen=True)
class LineBet:
    """One predictable bet of the e-process: Z = FN + s FP at ``threshold`` against c, stake
    ``stake`` (lambda); the factor per pair is 1 + lambda (c - Z) >= 1 - lambda (1 + s - c) > 0."""

    threshold: float
    slope: float
    intercept: float
    stake: float


def _pair_variables(rows_in: np.ndarray, rows_out: np.ndarray, threshold: float, slope: float,
                    per_canary: bool) -> np.ndarray:
    """Z of each (IN, OUT) pair: canary by canary (independent canaries: k pairs per training
    pair), or per training pair with the fractions of its k canaries in error (dependent)."""
    fn = (rows_in < threshold).astype(float)
    fp = (rows_out >= threshold).astype(float)
    if per_canary:
        return (fn + slope * fp).ravel()
    return fn.mean(axis=1) + slope * fp.mean(axis=1)


def plan_bet(
    past_in: np.ndarray,
    past_out: np.ndarray,
    claim: Callable[[np.ndarray], np.ndarray],
    *,
    per_canary: bool = True,
) -> LineBet:
    """The next bet from the past pairs' scores only (``(trainings, k)`` rows, both sides):
    threshold maximising f(FPR~) - FNR~ with the smoothed rates (errors + 1/2) / (n + 1), the
    support line there, and the plug-in stake (module docstring)."""
    sorted_in, sorted_out = np.sort(past_in.ravel()), np.sort(past_out.ravel())
    thresholds = _candidate_thresholds(sorted_in, sorted_out)
    fp, fn = _counts(thresholds, sorted_in, sorted_out)
    fpr = (fp + 0.5) / (sorted_out.size + 1)
    fnr = (fn + 0.5) / (sorted_in.size + 1)
    best = int(np.argmax(evaluate_curve(claim, fpr) - fnr))
    threshold = float(thresholds[best])
    slope, intercept = support_line(claim, float(fpr[best]))
    z = _pair_variables(past_in, past_out, threshold, slope, per_canary)
    span = 1.0 + slope
    mean = float(z.mean())
    variance = (span**2 / 4 + float(np.sum((z - mean) ** 2))) / (z.size + 1)
    gap = intercept - mean
    stake = 0.0 if gap <= 0 else min(0.5 / (span - intercept), gap / (variance + gap**2))
    return LineBet(threshold=threshold, slope=slope, intercept=intercept, stake=stake)


def bet_log_wealth(
    bet: LineBet, rows_in: np.ndarray, rows_out: np.ndarray, *, per_canary: bool = True
) -> float:
    """log of the wealth factor prod (1 + lambda (c - Z)) over the new pairs (row r of IN with row r
    of OUT)."""
    z = _pair_variables(rows_in, rows_out, bet.threshold, bet.slope, per_canary)
    return float(np.sum(np.log1p(bet.stake * (bet.intercept - z))))


# --------------------------------------------------------------------------- the sequential verdict


@dataclass(frozen=True)
class SequentialPlan:
    """What a sequential audit fixes on its pilot shard, before the tested trials are seen.

    Attributes:
        threshold: the test "IN iff score >= threshold".
        fpr_prior, fnr_prior: the (a, b) Beta priors of the two rates' confidence sequences.
        pilot_in, pilot_out: the pilot's trial counts (left out of the test).
        alpha: 1 - confidence of the verdict (alpha / 2 per rate).
    """

    threshold: float
    fpr_prior: tuple[float, float]
    fnr_prior: tuple[float, float]
    pilot_in: int
    pilot_out: int
    alpha: float

    def sequences(self) -> tuple[BetaBinomialCS, BetaBinomialCS]:
        """The (FPR, FNR) confidence sequences, each at alpha / 2 (union: both hold at 1 -
        alpha)."""
        return (BetaBinomialCS(*self.fpr_prior, alpha=self.alpha / 2),
                BetaBinomialCS(*self.fnr_prior, alpha=self.alpha / 2))


def _jeffreys(errors: float, n: int) -> tuple[float, float]:
    return float(errors) + 0.5, float(n - errors) + 0.5


def plan_sequential_test(
    pilot_in: ArrayLike,
    pilot_out: ArrayLike,
    claim: Callable[[np.ndarray], np.ndarray],
    *,
    confidence: float | None = None,
    alpha: float | None = None,
) -> SequentialPlan:
    """Choose the threshold and the priors on a pilot shard (then left out of the test), for a
    test at ``confidence`` (default 0.95; ``alpha=`` its deprecated spelling 1 - confidence).

    The threshold maximises the pilot's margin f(FPR_hi) - FNR_hi (Clopper-Pearson at alpha / 2
    on the pilot, as the fixed-size verdict's selection half, docs/design.md §8.3) over every
    pilot score; the priors are the Jeffreys posteriors of the pilot's error counts there.
    """
    return _plan_at(
        pilot_in, pilot_out, claim, significance(confidence, alpha, where="plan_sequential_test")
    )


def _plan_at(
    pilot_in: ArrayLike, pilot_out: ArrayLike, claim: Callable[[np.ndarray], np.ndarray],
    alpha: float,
) -> SequentialPlan:
    """:func:`plan_sequential_test` at significance ``alpha`` = 1 - confidence."""
    alpha = _check_alpha(alpha)
    sorted_in, sorted_out = _as_scores("pilot_in", pilot_in), _as_scores("pilot_out", pilot_out)
    thresholds = _candidate_thresholds(sorted_in, sorted_out)
    fp, fn = _counts(thresholds, sorted_in, sorted_out)
    fpr_hi = clopper_pearson_upper(fp, sorted_out.size, alpha / 2)
    fnr_hi = clopper_pearson_upper(fn, sorted_in.size, alpha / 2)
    best = int(np.argmax(evaluate_curve(claim, fpr_hi) - fnr_hi))
    return SequentialPlan(
        threshold=float(thresholds[best]),
        fpr_prior=_jeffreys(fp[best], sorted_out.size),
        fnr_prior=_jeffreys(fn[best], sorted_in.size),
        pilot_in=int(sorted_in.size),
        pilot_out=int(sorted_out.size),
        alpha=alpha,
    )


@dataclass(frozen=True)
class SequentialVerdict:
    """The state of a sequential test after some looks (docs/design.md §8.18).

    ``violated``: the e-process's wealth reached 1/alpha (``log_wealth`` >= log(1/alpha)): the claim
    is refuted at confidence 1 - alpha, whenever the audit stopped. The confidence sequences at the
    pilot's threshold give the evidence and the eps bound: ``fpr_lo``/``fpr_hi`` and
    ``fnr_lo``/``fnr_hi`` are the running intersections of the two rates' sequences (each at alpha /
    2), which hold at every look at once with probability >= 1 - alpha, and ``epsilon_lb`` = eps
    from (FPR_hi, FNR_hi) at ``delta`` (a lower bound at 1 - alpha at any stopping time; a statement
    of its own beside the verdict). ``futile``: FNR_lo >= f(FPR_lo), the pilot threshold's true
    (FPR, FNR) lies on or above the claimed curve (a stopping rule: it claims nothing, "consistent"
    proves nothing); ``decided``: either. Error sums are in units of trials (fractional with
    dependent canaries: per training, the fraction of its canaries in error);
    ``units_in``/``units_out`` count the tested units (trials, or trainings for dependent canaries),
    pilot excluded.
    """

    violated: bool
    futile: bool
    log_wealth: float
    threshold: float
    fpr_lo: float
    fpr_hi: float
    fnr_lo: float
    fnr_hi: float
    f_of_fpr_hi: float
    f_of_fpr_lo: float
    epsilon_lb: float
    false_positives: float
    false_negatives: float
    units_in: int
    units_out: int
    looks: int
    alpha: float

    @property
    def decided(self) -> bool:
        """Whether the test has stopped: refuted or futile."""
        return self.violated or self.futile

    @property
    def margin(self) -> float:
        """f(FPR_hi) - FNR_hi; positive means violated."""
        return self.f_of_fpr_hi - self.fnr_hi

    def to_dict(self) -> dict[str, object]:
        """JSON-ready dict (with ``decided``, ``margin``, and FPR_hi/FNR_hi/f(FPR_hi) as named
        in the fixed-size verdict's evidence)."""
        out = asdict(self)
        out["threshold"] = self.threshold if math.isfinite(self.threshold) else "inf"
        out["decided"], out["margin"] = self.decided, self.margin
        out["e_value"] = math.exp(min(self.log_wealth, 700.0))
        out["FPR_hi"], out["FNR_hi"], out["f(FPR_hi)"] = self.fpr_hi, self.fnr_hi, self.f_of_fpr_hi
        return out


def sequential_verdict(
    plan: SequentialPlan,
    claim: Callable[[np.ndarray], np.ndarray],
    looks: list[tuple[float, int, float, int]],
    *,
    delta: float,
    log_wealth: float,
    previous: SequentialVerdict | None = None,
) -> SequentialVerdict:
    """The sequential verdict after ``looks``: cumulative (FP sum, OUT units, FN sum, IN units)
    at the pilot's threshold at each look, in order (pilot excluded), each rate's CS intersected
    over the looks; ``log_wealth``: the e-process's log wealth now. ``previous``: the verdict
    after all looks but the last (only the last look's sequences are then computed)."""
    fpr_cs, fnr_cs = plan.sequences()
    fpr_lo, fpr_hi, fnr_lo, fnr_hi = 0.0, 1.0, 0.0, 1.0
    if previous is not None:
        fpr_lo, fpr_hi, fnr_lo, fnr_hi = (
            previous.fpr_lo,
            previous.fpr_hi,
            previous.fnr_lo,
            previous.fnr_hi,
        )
        looks_done, looks = len(looks), looks[-1:]
    fp = fn = 0.0
    n_in = n_out = 0
    for fp, n_out, fn, n_in in looks:
        lo, hi = fpr_cs.bounds(fp, n_out)
        fpr_lo, fpr_hi = max(fpr_lo, float(lo)), min(fpr_hi, float(hi))
        lo, hi = fnr_cs.bounds(fn, n_in)
        fnr_lo, fnr_hi = max(fnr_lo, float(lo)), min(fnr_hi, float(hi))
    f_hi, f_lo = (float(v) for v in evaluate_curve(claim, np.array([fpr_hi, fpr_lo])))
    return SequentialVerdict(
        violated=bool(log_wealth >= math.log(1.0 / plan.alpha)),
        futile=bool(fnr_lo >= f_lo),
        log_wealth=float(log_wealth),
        threshold=plan.threshold,
        fpr_lo=fpr_lo,
        fpr_hi=fpr_hi,
        fnr_lo=fnr_lo,
        fnr_hi=fnr_hi,
        f_of_fpr_hi=f_hi,
        f_of_fpr_lo=f_lo,
        epsilon_lb=float(epsilon_from_rates(fpr_hi, fnr_hi, delta)),
        false_positives=float(fp),
        false_negatives=float(fn),
        units_in=int(n_in),
        units_out=int(n_out),
        looks=looks_done if previous is not None else len(looks),
        alpha=plan.alpha,
    )
