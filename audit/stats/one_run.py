"""One-run audits: m canaries in a single training, each included independently with prob. 1/2.

The game (Steinke, Nasr, Jagielski 2023; Mahloujifar, Melis, Chaudhuri 2024). Canary j is IN
(``included[j]``) with probability 1/2, independently of the others; after the one training
each canary gets a score (higher = "IN"), a function of the output only. The auditor guesses
IN for the k+ highest scores, OUT for the k- lowest and abstains on the rest: r = k+ + k-
guesses, of which C are correct. A private mechanism cannot make C large:

- **(eps, delta)-DP** -- Steinke, Nasr, Jagielski, "Privacy Auditing with One (1) Training
  Run", NeurIPS 2023 (arXiv 2305.08846), their main theorem for (eps, delta)-DP (the general
  form with the delta term, proved in their Section 5; the p-value code of their Appendix D
  computes the same expression): for every v,

      Pr[C >= v] <= Pr[W >= v] + 2 m delta max_{i = 1..v} Pr[v - i <= W < v] / i,
      W ~ Binomial(r, e^eps / (1 + e^eps)).

  The right side is the p-value p(eps) of the claim "(eps, delta)-DP"; ``epsilon_lb`` is the
  end of the run of rejected claims (p(eps) <= alpha) that starts at eps = 0, on nested grids
  (101 points on [0, 50], then 101 and 51 points between the last rejected point and the
  next: steps of 1e-4 at the end). With probability >= 1 - alpha the true eps* (at this
  delta) is >= epsilon_lb, and this needs no monotonicity in eps (which holds on fine grids
  in tests/test_one_run.py, but is not proved for 2 m delta > 1): epsilon_lb is itself a
  rejected claim, and an (eps*, delta)-DP mechanism is (eps', delta)-DP for every
  eps' >= eps*, so each p(eps')(v) bounds Pr[C >= v] and so does their infimum q(v) over
  eps' >= eps*; {epsilon_lb > eps*} lies in {q(C) <= alpha}, of probability at most
  Pr[C >= v0] <= q(v0) <= alpha, v0 the least v with q(v) <= alpha. The same holds for the
  f-DP bound below (a rejection at (eps', c) says Pr[C >= c] < alpha for every mechanism of
  the weaker claim eps' >= eps*).

- **f-DP** -- Mahloujifar, Melis, Chaudhuri, "Auditing f-Differential Privacy in One Run"
  (arXiv 2410.22235; ICML 2025), main theorem on guessing games under f-DP and its numerical
  procedure (the authors' ``audit_rh_with_cap``): with r_i = E[C 1{C >= i}] / m and
  h_i = E[(r - C) 1{C >= i}] / m, f-DP for every canary and the concavity of 1 - f give
  h_{i-1} >= (1 - f)^{-1}(r_i), while r_{i-1} - r_i = (i - 1)/(r - i + 1) (h_{i-1} - h_i)
  and r_0 + h_0 = r/m. If Pr[C >= c] >= tau then r_c >= tau c/m and r_c + h_c >= tau r/m;
  running the recursion down from (tau c/m, tau (r - c)/m) with the smallest h allowed at
  each step,

      h_i = max(h_{i+1}, (1 - f)^{-1}(r_{i+1})),
      r_i = min(1, r_{i+1} + i/(r - i) (h_i - h_{i+1})),   i = c - 1, ..., 0,

  gives a lower bound on r_0 + h_0; if it exceeds r/m the claim f is refuted at level tau
  (Pr[C >= c] < tau under the claim). The true (r_c, h_c) = (p e/m, p (r - e)/m), with
  p = Pr[C >= c] >= tau and e = E[C | C >= c] >= c, can start higher in r and lower in h,
  and the recursion is not obviously monotone (a lower h_{i+1} can raise r_i); that the
  recursion's start is still the worst case is checked in tests/test_one_run.py against the
  linear program over every law of C that the per-canary constraints allow (piecewise-
  linear (1 - f)^{-1}: (eps, delta) curves and privacy profiles), whose minimum it matches
  to 1e-9. ``one_run_verdict`` runs it at tau = alpha on the
  observed c; the f-DP ``epsilon_lb`` is the largest eps whose (eps, delta)-DP curve
  f(x) = max(0, 1 - delta - e^eps x, e^-eps (1 - delta - x)) is refuted. It certifies more
  than the (eps, delta) theorem from the same guesses (the curve's shape is used).

Which curve the recursion needs. The step h_{i-1} >= (1 - f)^{-1}(r_i) comes from each
canary's test: guessing IN is a test of OUT (null) against IN, bounded by the claimed f
(FNR >= f(FPR), as in :func:`audit.stats.binary.verdict`); guessing OUT is the reverse test, bounded
by f^{-1}. With k- = 0 the claim f is used as given; with k+ = 0, f^{-1}; with both, the
least concave majorant of max(1 - f, 1 - f^{-1}) (for symmetric claims such as Gaussian DP
and (eps, delta)-DP this is f itself). A callable claim is tabulated on 20,000 geometric
points, each power rounded up to the next grid point's (f is non-increasing), so the
tabulated power lies above the claim's and its inverse below: the verdict errs towards
"consistent".

Choosing k+ and k- soundly (``guesses``):

- ``(k_plus, k_minus)``: fixed in advance; one test at alpha.
- ``"bonferroni"`` (default): a grid of candidates fixed by m alone -- one-sided (k, 0) and
  two-sided (k, k) with k = round(phi m), phi geometric in [0.002, 0.5] (10 values) -- each
  tested at alpha / G (G candidates). The union bound makes the largest bound (or any
  rejection) hold at alpha: Pr[some candidate's bound exceeds the truth] <= G alpha / G.
- ``"split"``: a seeded half of the canaries selects the candidate (best bound at alpha on
  that half); the other half is audited with that candidate's fractions. Given the selection
  canaries' bits, the mechanism seen as a function of the evaluation canaries is still
  (eps, delta)-DP / f-DP in each of them, their bits are still independent fair coins, and
  the guesses are a function of the output (and of the fixed selection bits); so the
  theorems apply with m = the evaluation half -- except that the number of guesses r is now
  chosen from the output (the selection scores), while the (eps, delta) theorem (delta > 0)
  and the f-DP recursion hold for r fixed in advance. So the evaluation is tested at
  alpha / G_r, G_r the number of distinct r the selection can pick: on {R = r0} the guesses
  agree with a rule that always makes r0 guesses (a fixed rule off that event), so
  Pr[R = r0 and reject] <= alpha / G_r and the union over r0 is <= alpha. The bound at
  delta = 0 keeps alpha: given the output, each guess is right with probability at most
  q = e^eps / (1 + e^eps) (Steinke et al.'s conditional argument), so C is dominated by
  Binomial(||T||_1, q) whatever chose ||T||_1; and the f-DP recursion with the (eps, 0) curve
  refutes (r, c) only where Pr[Binomial(r, q) >= c] < alpha (randomized response guessed on
  r fixed canaries is (eps, 0)-DP and has exactly that law, and the recursion is valid for
  it), so its rejections are SNJ's too. A verdict on a claimed curve always pays G_r.

Every count here is exact (no estimate): the guesses and their correctness are counted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import expit, ndtr, ndtri
from scipy.stats import binom

from audit.core.confidence import significance
from audit.core.seeding import rng_for
from audit.core.validation import check_choice, check_int, check_real
from audit.stats.error_rates import _check_tradeoff_function, evaluate_curve

__all__ = [
    "GUESS_STRATEGIES",
    "ONE_RUN_METHODS",
    "ChosenRule",
    "ClaimedPower",
    "GuessCount",
    "OneRunBound",
    "OneRunTest",
    "OneRunVerdict",
    "canary_membership",
    "candidate_guesses",
    "choose_rule",
    "count_correct",
    "eps_delta_power",
    "fdp_epsilon_lb",
    "fdp_rejects",
    "gdp_power",
    "largest_refuted_claim",
    "make_guesses",
    "one_run_epsilon_lb",
    "one_run_verdict",
    "rule_counts",
    "snj_epsilon_lb",
    "snj_p_value",
    "tabulated_power",
]

GUESS_STRATEGIES: tuple[str, ...] = ("bonferroni", "split")
"""Sound ways to choose (k+, k-) from the scores (module docstring); or a fixed pair."""

ONE_RUN_METHODS: tuple[str, ...] = ("snj", "fdp")
"""``snj``: Steinke-Nasr-Jagielski (eps, delta) theorem; ``fdp``: Mahloujifar et al. recursion
with the (eps, delta)-DP curve."""

GRID_FRACTIONS = np.geomspace(0.002, 0.5, 10)
"""phi of the candidate grid: k = round(phi m), one-sided (k, 0) and two-sided (k, k)."""

EPS_MAX = 50.0
"""Largest eps searched; a bound this large means "every eps up to 50 refuted"."""


# --------------------------------------------------------------------------- guesses


@dataclass(frozen=True)
class GuessCount:
    """The guesses of one (k+, k-) rule on m canaries and how many were right."""

    m: int
    k_plus: int
    k_minus: int
    correct: int

    @property
    def guesses(self) -> int:
        """r = k+ + k-, the number of non-abstentions."""
        return self.k_plus + self.k_minus


def _as_canaries(scores: object, included: object) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(scores, dtype=float).ravel()
    b = np.asarray(included).ravel()
    if s.size == 0:
        raise ValueError("scores is empty; need one score per canary")
    if np.isnan(s).any():
        raise ValueError("scores contains NaN; every canary needs a score")
    if b.shape != s.shape:
        raise ValueError(
            f"included has {b.size} entries but scores has {s.size}; need one per canary"
        )
    if b.dtype != bool:
        if not np.isin(b, (0, 1)).all():
            raise ValueError(
                "included must be booleans (or 0/1): which canaries were in the training"
            )
        b = b.astype(bool)
    return s, b


def make_guesses(scores: object, k_plus: int, k_minus: int) -> np.ndarray:
    """Guesses in {-1, 0, +1}: +1 (IN) for the k+ highest scores, -1 (OUT) for the k- lowest.

    Ties are broken by canary index (a stable sort). The guesses must not depend on the
    canaries' bits, with one safe exception: indices that put the IN canaries first among
    tied scores (as :mod:`audit.report.one_run` does) break every tie against the auditor, so
    the number of correct guesses is at most that of any bit-blind tie-break, and every
    bound on Pr[C >= c] still holds.
    """
    s = np.asarray(scores, dtype=float).ravel()
    m = s.size
    k_plus = check_int("k_plus", k_plus, minimum=0, maximum=m)
    k_minus = check_int("k_minus", k_minus, minimum=0, maximum=m)
    if k_plus + k_minus > m:
        raise ValueError(f"k_plus + k_minus = {k_plus + k_minus} must be <= m = {m} canaries")
    order = np.argsort(s, kind="stable")
    out = np.zeros(m, dtype=np.int8)
    out[order[m - k_plus:]] = 1
    out[order[:k_minus]] = -1
    return out


def count_correct(scores: object, included: object, k_plus: int, k_minus: int) -> GuessCount:
    """The (k+, k-) rule's guesses on the canaries and the number C that are correct."""
    s, b = _as_canaries(scores, included)
    g = make_guesses(s, k_plus, k_minus)
    correct = int(np.sum((g == 1) & b) + np.sum((g == -1) & ~b))
    return GuessCount(m=s.size, k_plus=int(k_plus), k_minus=int(k_minus), correct=correct)


def rule_counts(
    scores: object, included: object, pairs: Sequence[tuple[int, int]]
) -> list[GuessCount]:
    """:func:`count_correct` of every rule (k+, k-) in ``pairs`` from one stable sort of the
    scores (the same guesses and counts): O(m log m + len(pairs)) time, O(m) memory."""
    s, b = _as_canaries(scores, included)
    m = s.size
    ranked = b[np.argsort(s, kind="stable")]  # bits by ascending score, ties by index
    in_below = np.concatenate(([0], np.cumsum(ranked, dtype=np.int64)))  # IN among the j lowest
    out = []
    for kp, km in pairs:
        kp = check_int("k_plus", kp, minimum=0, maximum=m)
        km = check_int("k_minus", km, minimum=0, maximum=m)
        if kp + km > m:
            raise ValueError(f"k_plus + k_minus = {kp + km} must be <= m = {m} canaries")
        correct = int(in_below[m] - in_below[m - kp]) + int(km - in_below[km])
        out.append(GuessCount(m=m, k_plus=int(kp), k_minus=int(km), correct=correct))
    return out


def canary_membership(seed: int, key: str, m: int) -> np.ndarray:
    """Which of the m canaries of training key ``key`` are IN: independent fair coins from
    ``audit.core.seeding.rng_for(seed, key, "one_run_membership")`` (the same in every layer, so
    shards, scores and the report agree without storing them)."""
    m = check_int("m", m, minimum=1)
    return rng_for(seed, key, "one_run_membership").random(m) < 0.5


def candidate_guesses(m: int) -> list[tuple[int, int]]:
    """The ``bonferroni`` grid of (k+, k-) for m canaries: a function of m only."""
    m = check_int("m", m, minimum=1)
    ks = np.unique(np.clip(np.round(GRID_FRACTIONS * m).astype(np.int64), 1, max(1, m // 2)))
    pairs = [(int(k), 0) for k in ks] + [(int(k), int(k)) for k in ks if 2 * k <= m]
    return list(dict.fromkeys(pairs))


# --------------------------------------------------------------------------- Steinke-Nasr-Jagielski


def snj_p_value(m: int, guesses: int, correct: int, epsilon: object, delta: float) -> np.ndarray:
    """Pr[C >= v] bound of Steinke-Nasr-Jagielski's (eps, delta) theorem (module docstring).

    p = Pr[W >= v] + 2 m delta max_{i=1..v} Pr[v - i <= W < v] / i,  W ~ Bin(r, e^eps/(1+e^eps)),
    the binomial tail from ``binom.sf`` (computed where it lives), capped at 1; vectorised in eps.
    The maximum over the v windows is found in O(log v) binomial CDF evaluations per eps
    (:func:`_snj_window_max`), memory O(size of eps).
    """
    r, v = int(guesses), int(correct)
    q = expit(np.asarray(epsilon, dtype=float))
    tail = binom.sf(v - 1, r, q)
    if delta == 0 or v == 0:
        return np.minimum(tail, 1.0)
    return np.minimum(tail + 2.0 * m * delta * _snj_window_max(r, v, q), 1.0)


def _snj_window_max(r: int, v: int, q: np.ndarray) -> np.ndarray:
    """max_{i=1..v} Pr[v - i <= W <= v - 1] / i for W ~ Binomial(r, q), elementwise in q (v >= 1).

    Write A(j) = Pr[j <= W <= v - 1] / (v - j), the mean pmf over the window [j, v - 1]; the
    maximum over j = 0..v-1 is wanted. Moving the left end from j to j - 1 raises the mean iff
    pmf(j - 1) >= A(j). The binomial pmf is unimodal: while j - 1 >= mode, pmf(j - 1) is at
    least every pmf in the window, so the mean rises; left of the mode, once pmf(j - 1) <
    A(j), the mean falls and pmf keeps falling, so pmf(j - 2) <= pmf(j - 1) < A(j - 1) and the
    mean falls for good. So the test "pmf(j - 1) >= A(j)" holds on j in (j0, v - 1] and fails
    on [1, j0], and the maximum is A(j0): found by bisection on j (about log2 v steps), then
    A taken at j0 and its two neighbours (floating-point ties near the crossing). Window
    masses from the survival function above the mean and the CDF below (where each lives).
    Same value as the maximum over all v windows to rounding (tests/test_one_run_scale.py).
    """
    q = np.asarray(q, dtype=float)
    mean = r * q

    def window_mean(j: np.ndarray) -> np.ndarray:
        upper = binom.sf(j - 1, r, q) - binom.sf(v - 1, r, q)
        lower = binom.cdf(v - 1, r, q) - binom.cdf(j - 1, r, q)
        return np.maximum(np.where(j - 1 >= mean, upper, lower), 0.0) / (v - j)

    lo = np.zeros(q.shape, dtype=np.int64)  # the test fails at lo (or lo = 0)
    hi = np.full(q.shape, v, dtype=np.int64)  # holds on [hi, v - 1]
    while np.any(hi - lo > 1):
        mid = (lo + hi) // 2
        holds = binom.pmf(mid - 1, r, q) >= window_mean(mid)
        open_ = hi - lo > 1
        hi = np.where(open_ & holds, mid, hi)
        lo = np.where(open_ & ~holds, mid, lo)
    j0 = hi - 1
    return np.max(
        [window_mean(np.clip(j0 + d, 0, v - 1)) for d in (-1, 0, 1)], axis=0
    )


_LEVELS = (np.linspace(0.0, EPS_MAX, 101), 101, 51)


def _largest_rejected(rejects: Callable[[np.ndarray], np.ndarray], rows: int = 1) -> np.ndarray:
    """Per row, the end of the rejected run [0, eps] on nested grids: 101 points on [0, 50],
    then 101 and 51 points between the last rejected point and the next (step 1e-4 at the
    end). 0 where eps = 0 is not rejected. ``rejects`` maps eps of shape (rows, n) to bools.
    Every evaluated point below the returned one is rejected."""
    grid = np.broadcast_to(_LEVELS[0], (rows, _LEVELS[0].size))
    ok = np.asarray(rejects(grid), dtype=bool)
    prefix = np.cumprod(ok, axis=1).sum(axis=1)  # number of leading rejected points
    lo = np.where(prefix > 0, grid[np.arange(rows), np.maximum(prefix - 1, 0)], 0.0)
    hi = np.where(
        prefix < grid.shape[1], grid[np.arange(rows), np.minimum(prefix, grid.shape[1] - 1)], lo
    )
    alive = (prefix > 0) & (prefix < grid.shape[1])
    for n in _LEVELS[1:]:
        if not alive.any():
            break
        t = np.linspace(0.0, 1.0, n)
        fine = lo[:, None] + t[None, :] * (hi - lo)[:, None]
        ok = np.asarray(rejects(fine), dtype=bool) | ~alive[:, None]
        prefix = np.cumprod(ok, axis=1).sum(axis=1)
        new_lo = fine[np.arange(rows), np.maximum(prefix - 1, 0)]
        new_hi = fine[np.arange(rows), np.minimum(prefix, n - 1)]
        lo = np.where(alive, new_lo, lo)
        hi = np.where(alive, new_hi, hi)
    return np.where(prefix > 0, lo, 0.0) if rows else lo


def snj_epsilon_lb(m: int, guesses: int, correct: int, *, delta: float, alpha: float) -> float:
    """Largest eps refuted at level alpha by the (eps, delta) theorem of Steinke-Nasr-Jagielski:
    the end of the run [0, eps] of grid points with p(eps') <= alpha (:func:`snj_p_value`).
    Cost: about 250 p-values, each O(log correct) binomial CDFs; memory O(1) in m."""
    m, r, v = _check_counts(m, guesses, correct)
    delta = check_real("delta", delta, minimum=0.0, maximum=1.0, strict_maximum=True)
    alpha = check_real(
        "alpha", alpha, minimum=0.0, maximum=1.0, strict_minimum=True, strict_maximum=True
    )
    if r == 0:
        return 0.0
    return float(_largest_rejected(lambda eps: snj_p_value(m, r, v, eps, delta) <= alpha)[0])


def _check_counts(m: object, guesses: object, correct: object) -> tuple[int, int, int]:
    m = check_int("m", m, minimum=1)
    r = check_int("guesses", guesses, minimum=0, maximum=m)
    v = check_int("correct", correct, minimum=0, maximum=r)
    return m, r, v


# --------------------------------------------------------------------------- f-DP (Mahloujifar et
# al.)


@dataclass(frozen=True)
class ClaimedPower:
    """A claim seen by the one-run recursion: y -> (1 - f)^{-1}(y) = inf{x : 1 - f(x) >= y}.

    ``inverse`` is vectorised; computed exactly (closed forms) or rounded down (tabulated),
    never above the claim's: a smaller inverse makes the verdict less likely to say violated.
    ``sides``: the guesses it covers -- ``"in"`` ((1 - f)^{-1}: IN guesses only), ``"out"``
    ((1 - f^{-1})^{-1}: OUT guesses only) or ``"both"`` (a symmetric claim, or the concave
    majorant of the two powers); the default ``"in"`` is the only reading valid for any f.
    """

    inverse: Callable[[np.ndarray], np.ndarray]
    label: str
    sides: str = "in"
    family: Callable[..., np.ndarray] | None = field(default=None, compare=False)
    """Optional elementwise form: ``inverse(y) == family(y, *parameters)`` with broadcasting.
    Given, the recursion evaluates only the rows still running (:func:`_recursion_mass`).
    Neither it nor ``parameters`` takes part in equality or hashing (as before they existed)."""
    parameters: tuple[np.ndarray, ...] = field(default=(), compare=False)
    """The claim's parameters (one array per argument of ``family``; broadcast with y)."""

    def covers(self, k_plus: int, k_minus: int) -> bool:
        """Whether the rule (k+, k-) guesses only on sides this power is valid for."""
        return (
            self.sides == "both"
            or (self.sides == "in" and not k_minus)
            or (self.sides == "out" and not k_plus)
        )


def gdp_power(mu: float | np.ndarray) -> ClaimedPower:
    """mu-GDP: 1 - G_mu(x) = Phi(Phi^{-1}(x) + mu), inverse y -> Phi(Phi^{-1}(y) - mu)
    (symmetric)."""
    mu_arr = np.asarray(mu, dtype=float)
    return ClaimedPower(
        lambda y: _gdp_inverse(y, mu_arr), f"{mu}-GDP", "both", _gdp_inverse, (mu_arr,)
    )


def _gdp_inverse(y: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """(1 - G_mu)^{-1}(y) = Phi(Phi^{-1}(y) - mu), elementwise."""
    return ndtr(ndtri(np.clip(y, 0.0, 1.0)) - mu)


def eps_delta_power(epsilon: float | np.ndarray, delta: float | np.ndarray) -> ClaimedPower:
    """(eps, delta)-DP: 1 - f(x) = min(1, delta + e^eps x, 1 - e^-eps (1 - delta - x)) (Kairouz et
    al.'s region), inverse y -> max(0, (y - delta) e^-eps, 1 - delta - e^eps (1 - y))
    (symmetric)."""
    eps_arr = np.asarray(epsilon, dtype=float)
    delta_arr = np.asarray(delta, dtype=float)
    params = (np.exp(-eps_arr), np.exp(eps_arr), delta_arr)
    return ClaimedPower(
        lambda y: _eps_delta_inverse(y, *params), f"({epsilon}, {delta})-DP", "both",
        _eps_delta_inverse, params,
    )


def _eps_delta_inverse(
    y: np.ndarray, exp_minus_eps: np.ndarray, exp_eps: np.ndarray, delta: np.ndarray
) -> np.ndarray:
    """max(0, (y - delta) e^-eps, 1 - delta - e^eps (1 - y)), elementwise (e^+-eps given)."""
    y = np.clip(y, 0.0, 1.0)
    return np.maximum(
        0.0, np.maximum((y - delta) * exp_minus_eps, 1.0 - delta - exp_eps * (1.0 - y))
    )


_TAIL = np.geomspace(1e-15, 0.5, 10_000)
_TABLE_X = np.concatenate([[0.0], _TAIL, 1.0 - _TAIL[-2::-1], [1.0]])
"""Grid of the tabulated claims: geometric towards 0 and towards 1 (x_k ascending)."""
_TABLE_ONE_MINUS_X = np.concatenate([[1.0], 1.0 - _TAIL, _TAIL[-2::-1], [0.0]])
"""1 - x_k, exact where x_k is near 1."""


def _upper_concave_hull(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vertices of the least concave majorant of the points (x ascending): Andrew's monotone
    chain, exact in float (qhull's tolerances could drop a vertex, i.e. lower the majorant)."""
    hx: list[float] = []
    hy: list[float] = []
    for xi, yi in zip(x.tolist(), y.tolist(), strict=True):
        while len(hx) >= 2 and (hy[-1] - hy[-2]) * (xi - hx[-2]) <= (yi - hy[-2]) * (
            hx[-1] - hx[-2]
        ):
            hx.pop()
            hy.pop()
        hx.append(xi)
        hy.append(yi)
    return np.array(hx), np.array(hy)


def tabulated_power(claim: Callable[[np.ndarray], np.ndarray], sides: str = "in") -> ClaimedPower:
    """A callable claim f (alpha -> beta) tabulated for the recursion, rounded to its safe side.

    ``sides``: ``"in"`` (guesses IN only: the test OUT vs IN, curve f), ``"out"`` (OUT only: the
    reverse test, curve f^{-1}) or ``"both"`` (the least concave majorant of the two powers).
    On the grid x_0 < ... < x_n, the power 1 - f on (x_k, x_{k+1}] is at most 1 - f(x_{k+1})
    (f non-increasing); the concave majorant of these upper steps lies above the claim's
    concave power, so its inverse (linear interpolation) lies below the true inverse.
    """
    sides = check_choice("sides", sides, ("in", "out", "both"))
    _check_tradeoff_function(claim)
    x = _TABLE_X
    f = np.clip(evaluate_curve(claim, x), 0.0, 1.0)
    f = np.minimum.accumulate(f)  # non-increasing to float precision
    powers = []
    if sides in ("in", "both"):
        powers.append(1.0 - f)
    if sides in ("out", "both"):
        # f^{-1}(x_k) = inf{t : f(t) <= x_k} >= t_{j-1}, j the first grid index with f(t_j) <= x_k.
        j = np.searchsorted(-f, -x, side="left")  # first index with f <= x
        # 1 - f^{-1}(x_k) <= 1 - t_{j-1}, read exactly from the 1 - x table.
        powers.append(np.where(j == 0, 1.0, _TABLE_ONE_MINUS_X[np.clip(j - 1, 0, x.size - 1)]))
    power = np.max(powers, axis=0)
    upper = np.append(power[1:], 1.0)  # the step above (x_k, x_{k+1}] at x_k
    hx, hy = _upper_concave_hull(x, upper)
    hy = np.maximum.accumulate(np.clip(hy, 0.0, 1.0))

    def inverse(y: np.ndarray) -> np.ndarray:
        y = np.clip(np.asarray(y, dtype=float), 0.0, 1.0)
        # inf{x : hull(x) >= y}; the hull is non-decreasing and piecewise linear.
        k = np.searchsorted(hy, y, side="left")
        k = np.clip(k, 1, hx.size - 1)
        x0, x1, y0, y1 = hx[k - 1], hx[k], hy[k - 1], hy[k]
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(y1 > y0, (y - y0) / (y1 - y0), 0.0)
        return np.where(y <= hy[0], hx[0], x0 + np.clip(t, 0.0, 1.0) * (x1 - x0))

    return ClaimedPower(inverse, f"tabulated claim ({sides})", sides, inverse)


def _recursion_mass(
    power: ClaimedPower,
    m: int,
    guesses: np.ndarray,
    correct: np.ndarray,
    tau: float,
    stop_above: np.ndarray | float | None = None,
) -> np.ndarray:
    """r_0 + h_0 of the recursion (module docstring), vectorised over broadcast arrays.

    Each row stops as soon as its result is known, exactly (the same floating-point operations
    as running every step): (a) a step where h does not grow leaves r unchanged, so every later
    step computes the same (1 - f)^{-1}(r) <= h and nothing changes again -- the mass is final;
    (b) with ``stop_above``, once r_i + h_i exceeds it the row stops (r and h never decrease,
    so r_0 + h_0 exceeds it too; the value returned is then r_i + h_i, enough for
    :func:`fdp_rejects`). Far from the refutation boundary (a) or (b) comes within a few
    steps (the mass grows or decays geometrically); near it after hundreds to thousands of
    steps, and a row whose increments have decayed to rounding level (h and r still growing by
    an ulp or so a step) runs on until (a), (b) or i = 0: up to about 1e5 steps at m = 1e6,
    the price of results identical to the full recursion's c steps. Cost: O(rows x steps run)
    evaluations of the claim's inverse, memory O(rows); a claim with ``family`` is evaluated
    on the running rows only (others on every row, the rows that stopped masked).
    """
    c = np.asarray(correct, dtype=np.int64)
    r_total = np.asarray(guesses, dtype=np.int64)
    if power.family is None:
        return _recursion_mass_dense(power, m, r_total, c, tau, stop_above)
    params = [np.asarray(p, dtype=float) for p in power.parameters]
    shape = np.broadcast_shapes(c.shape, r_total.shape, *(p.shape for p in params))
    c = np.broadcast_to(c, shape).ravel()
    r_total = np.broadcast_to(r_total, shape).ravel()
    params = [np.broadcast_to(p, shape).ravel() for p in params]
    r = tau * c / m
    h = tau * (r_total - c) / m
    limit = None if stop_above is None else np.broadcast_to(stop_above, shape).ravel()
    i = c - 1
    run = np.flatnonzero(c > 0)
    # the running rows' state, compacted; written back when a row stops
    rr, hh, ii, tt = r[run], h[run], i[run], r_total[run]
    pp = [p[run] for p in params]
    lim = None if limit is None else limit[run]
    while run.size:
        h_new = np.maximum(hh, power.family(rr, *pp))
        step = ii / np.maximum(tt - ii, 1)
        grew = h_new > hh
        rr = np.minimum(rr + step * (h_new - hh), 1.0)
        hh = h_new
        keep = grew & (ii > 0)
        if lim is not None:
            keep &= ~(rr + hh > lim)
        ii = ii - 1
        if not keep.all():
            done = ~keep
            r[run[done]], h[run[done]] = rr[done], hh[done]
            run, rr, hh, ii, tt = run[keep], rr[keep], hh[keep], ii[keep], tt[keep]
            pp = [p[keep] for p in pp]
            if lim is not None:
                lim = lim[keep]
    return (r + h).reshape(shape)


def _recursion_mass_dense(
    power: ClaimedPower,
    m: int,
    guesses: np.ndarray,
    correct: np.ndarray,
    tau: float,
    stop_above: np.ndarray | float | None = None,
) -> np.ndarray:
    """:func:`_recursion_mass` for a claim given by ``inverse`` alone: every row at every step
    (the inverse may broadcast the rows), rows that stopped masked; ends when every row has."""
    c, r_total = np.broadcast_arrays(correct, guesses)
    r = tau * c / m
    h = tau * (r_total - c) / m
    running = np.ones(np.broadcast_shapes(r.shape, np.shape(power.inverse(r))), dtype=bool)
    for i in range(int(c.max(initial=0)) - 1, -1, -1):
        active = (i < c) & running
        h_new = np.where(active, np.maximum(h, power.inverse(r)), h)
        step = np.where(active, i / np.maximum(r_total - i, 1), 0.0)
        grew = h_new > h
        r = np.minimum(r + step * (h_new - h), 1.0)
        h = h_new
        running = running & ~((i < c) & ~grew)
        if stop_above is not None:
            running = running & ~(r + h > stop_above)
        if i < int(c.min(initial=0)) and not running.any():
            break
    return r + h


def fdp_rejects(
    power: ClaimedPower, m: int, guesses: object, correct: object, alpha: float
) -> np.ndarray:
    """True where the claim is refuted at level alpha: recursion mass r_0 + h_0 > r/m (+1e-12).
    Each row stops once the mass passes r/m + 1e-12 (:func:`_recursion_mass`)."""
    g = np.asarray(guesses, dtype=np.int64)
    limit = g / m + 1e-12
    mass = _recursion_mass(power, m, g, np.asarray(correct), alpha, stop_above=limit)
    return mass > limit


def fdp_epsilon_lb(
    m: int, guesses: ArrayLike, correct: ArrayLike, *, delta: float, alpha: float
) -> np.ndarray | float:
    """Largest eps whose (eps, delta)-DP curve the f-DP recursion refutes at level alpha
    (vectorised over rule arrays ``guesses``, ``correct``; nested grids as for SNJ)."""
    delta = check_real("delta", delta, minimum=0.0, maximum=1.0, strict_maximum=True)
    return largest_refuted_claim(
        lambda eps: eps_delta_power(eps, delta), m, guesses, correct, alpha=alpha
    )


def largest_refuted_claim(
    claim_of: Callable[[np.ndarray], ClaimedPower],
    m: int,
    guesses: ArrayLike,
    correct: ArrayLike,
    *,
    alpha: float,
) -> np.ndarray | float:
    """End of the run of parameters x in [0, 50] whose claim ``claim_of(x)`` (a family weakening
    as x grows: (eps, delta)-DP in eps, mu-GDP in mu) the f-DP recursion refutes at level alpha
    from ``correct`` of ``guesses`` on m canaries (vectorised over rules; nested grids, step
    1e-4 at the end; 0 for a rule without guesses). A float for scalar counts.

    Cost: three grid levels (101, 101, 51 claims per rule), each one vectorised recursion over
    rules x claims whose rows stop early (:func:`_recursion_mass`); memory O(rules x 101)."""
    g = np.atleast_1d(np.asarray(guesses, dtype=np.int64))
    c = np.atleast_1d(np.asarray(correct, dtype=np.int64))
    g, c = np.broadcast_arrays(g, c)
    for gi, ci in zip(g.tolist(), c.tolist(), strict=True):
        _check_counts(m, gi, ci)
    alpha = check_real(
        "alpha", alpha, minimum=0.0, maximum=1.0, strict_minimum=True, strict_maximum=True
    )

    def rejects(x: np.ndarray) -> np.ndarray:
        return fdp_rejects(claim_of(x), m, g[:, None], c[:, None], alpha) & (g[:, None] > 0)

    out = _largest_rejected(rejects, rows=g.size)
    return float(out[0]) if np.ndim(guesses) == 0 and np.ndim(correct) == 0 else out


# --------------------------------------------------------------------------- audits from scores


@dataclass(frozen=True)
class OneRunTest:
    """The guessing rule a one-run test chose, its counts and its level (shared by
    :class:`OneRunBound` and :class:`OneRunVerdict`).

    ``canaries`` m in all; ``m_eval`` audited (m, or the evaluation half with ``split``);
    ``k_plus``, ``k_minus``, ``guesses`` (= k+ + k-) and ``correct`` are the chosen rule's,
    tested at ``alpha_per_test`` (of ``alpha`` in all, by ``strategy`` among ``candidates``).
    """

    strategy: str
    alpha: float
    canaries: int
    m_eval: int
    k_plus: int
    k_minus: int
    guesses: int
    correct: int
    alpha_per_test: float
    candidates: int

    @staticmethod
    def counts(count: GuessCount) -> dict[str, int]:
        """The rule's fields of ``count``: ``m_eval``, ``k_plus``, ``k_minus``, ``guesses``,
        ``correct``."""
        return {"m_eval": count.m, "k_plus": count.k_plus, "k_minus": count.k_minus,
                "guesses": count.guesses, "correct": count.correct}


@dataclass(frozen=True)
class OneRunBound(OneRunTest):
    """A sound eps lower bound from one run: eps >= epsilon_lb with probability >= 1 - alpha.

    The rule (:class:`OneRunTest`) is tested at ``alpha_per_test``: alpha / candidates with
    ``bonferroni`` (G rules) and with ``split`` (G_r numbers of guesses; 1 for SNJ at delta =
    0), alpha for a fixed rule.
    """

    epsilon_lb: float
    method: str
    delta: float

    @property
    def accuracy(self) -> float:
        """Fraction of the guesses that were correct (a count, not an estimate of anything)."""
        return self.correct / max(self.guesses, 1)

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["accuracy"] = self.accuracy
        return out


def _bound(method: str, m: int, count: GuessCount, delta: float, alpha: float) -> float:
    return _bounds(method, m, [count], delta, alpha)[0]


def _bounds(
    method: str, m: int, counts: list[GuessCount], delta: float, alpha: float
) -> list[float]:
    if method == "snj":
        return [snj_epsilon_lb(m, c.guesses, c.correct, delta=delta, alpha=alpha) for c in counts]
    g = np.array([c.guesses for c in counts])
    v = np.array([c.correct for c in counts])
    return [float(x) for x in np.atleast_1d(fdp_epsilon_lb(m, g, v, delta=delta, alpha=alpha))]


def _split(scores: np.ndarray, included: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    if scores.size < 4:
        raise ValueError(f"guesses='split' needs at least 4 canaries; got {scores.size}")
    order = np.random.default_rng(seed).permutation(scores.size)
    half = scores.size // 2
    return order[:half], order[half:]


def _fractions(pair: tuple[int, int], m: int, m_target: int) -> tuple[int, int]:
    kp, km = (min(m_target, max(1 if k else 0, round(k * m_target / m))) for k in pair)
    return kp, min(km, m_target - kp)


def _distinct_guess_counts(pairs: list[tuple[int, int]], m: int, m_target: int) -> int:
    """G_r: how many distinct numbers of evaluation guesses r = k+ + k- ``split`` can pick."""
    return len({sum(_fractions(pair, m, m_target)) for pair in pairs})


def _parse_guesses(guesses: str | Sequence[int]) -> str | tuple[int, int]:
    if isinstance(guesses, str):
        return check_choice("guesses", guesses, GUESS_STRATEGIES)
    try:
        kp, km = guesses
    except (TypeError, ValueError):
        raise ValueError(
            f"guesses={guesses!r} must be a pair (k_plus, k_minus) or one of "
            f"{', '.join(GUESS_STRATEGIES)}"
        ) from None
    kp, km = check_int("guesses k_plus", kp, minimum=0), check_int("guesses k_minus", km, minimum=0)
    if kp + km == 0:
        raise ValueError("guesses=(0, 0) makes no guess; need k_plus + k_minus >= 1")
    return kp, km


def one_run_epsilon_lb(
    scores: object,
    included: object,
    *,
    delta: float,
    confidence: float | None = None,
    alpha: float | None = None,
    guesses: str | Sequence[int] = "bonferroni",
    method: str = "fdp",
    seed: int = 0,
) -> OneRunBound:
    """Sound eps lower bound at ``delta`` from one run's canary scores (module docstring).

    Args:
        scores: one score per canary (higher = "IN"), a function of the training's output.
        included: which canaries were in the training (each drawn with probability 1/2).
        delta: the delta at which eps is bounded.
        confidence: the probability that the bound holds (default 0.95).
        alpha: deprecated spelling of 1 - confidence (a DeprecationWarning, same numbers).
        guesses: ``(k_plus, k_minus)`` fixed in advance, ``"bonferroni"`` or ``"split"``.
        method: ``"fdp"`` (Mahloujifar et al. with the (eps, delta) curve) or ``"snj"``.
        seed: seeds the ``split`` permutation of the canaries.

    Cost: one sort of the scores (O(m log m)) and, per candidate rule, the bound's search of
    about 250 claims: ``fdp``, recursion rows that stop once their outcome is fixed
    (:func:`_recursion_mass`: a few to a few thousand steps each); ``snj``, O(log r) binomial
    CDFs per claim (:func:`_snj_window_max`). Memory O(m). About 0.04 s at m = 1e4 and 1-2 s at
    m = 1e6 on one core (docs/design.md §8.21).
    """
    alpha = significance(confidence, alpha, where="one_run_epsilon_lb")
    s, b = _as_canaries(scores, included)
    delta = check_real("delta", delta, minimum=0.0, maximum=1.0, strict_maximum=True)
    alpha = check_real(
        "alpha", alpha, minimum=0.0, maximum=0.5, strict_minimum=True, strict_maximum=True
    )
    method = check_choice("method", method, ONE_RUN_METHODS)
    seed = check_int("seed", seed, minimum=0)
    rule = _parse_guesses(guesses)

    def bounds(m: int, counts: list[GuessCount], level: float) -> list[float]:
        return _bounds(method, m, counts, delta, level)

    # Pure eps-DP (delta = 0) holds for a data-dependent r (module docstring); else a union over r.
    chosen = choose_rule(s, b, rule, bounds, alpha=alpha, seed=seed, fixed_r=delta != 0)
    return _result(
        chosen.value,
        method,
        chosen.strategy,
        delta,
        alpha,
        s.size,
        chosen.count,
        chosen.alpha_per_test,
        chosen.candidates,
    )


@dataclass(frozen=True)
class ChosenRule:
    """A guessing rule chosen soundly (:func:`choose_rule`): its ``value`` (the bound at
    ``alpha_per_test``), ``count`` on the audited canaries, ``strategy`` and ``candidates``."""

    value: float
    count: GuessCount
    strategy: str
    alpha_per_test: float
    candidates: int


def choose_rule(
    scores: np.ndarray,
    included: np.ndarray,
    rule: str | tuple[int, int],
    bounds: Callable[[int, list[GuessCount], float], list[float]],
    *,
    alpha: float,
    seed: int,
    fixed_r: bool = True,
) -> ChosenRule:
    """Choose (k+, k-) by ``rule`` (a fixed pair, ``"bonferroni"`` or ``"split"``; module
    docstring) and bound the chosen rule's count with ``bounds(m, counts, level)`` (larger is
    stronger; one value per count). ``fixed_r``: the bound needs the number of guesses fixed in
    advance (the f-DP recursion; SNJ with delta > 0), so ``split`` pays the union over the G_r
    numbers of guesses it can pick."""
    s, b, m = scores, included, scores.size
    if isinstance(rule, tuple):
        count = count_correct(s, b, *rule)
        return ChosenRule(bounds(m, [count], alpha)[0], count, "fixed", alpha, 1)
    if rule == "bonferroni":
        pairs = candidate_guesses(m)
        each = alpha / len(pairs)
        counts = rule_counts(s, b, pairs)
        values = bounds(m, counts, each)
        best = int(np.argmax(values))
        return ChosenRule(values[best], counts[best], "bonferroni", each, len(pairs))
    sel, ev = _split(s, b, seed)
    pairs = candidate_guesses(sel.size)
    sel_counts = rule_counts(s[sel], b[sel], pairs)
    best = int(np.argmax(bounds(sel.size, sel_counts, alpha)))
    count = count_correct(s[ev], b[ev], *_fractions(pairs[best], sel.size, ev.size))
    n_r = _distinct_guess_counts(pairs, sel.size, ev.size) if fixed_r else 1
    return ChosenRule(bounds(ev.size, [count], alpha / n_r)[0], count, "split", alpha / n_r, n_r)


def _result(
    value, method, strategy, delta, alpha, m, count: GuessCount, each, candidates
) -> OneRunBound:
    return OneRunBound(
        epsilon_lb=float(value),
        method=method,
        strategy=strategy,
        delta=delta,
        alpha=alpha,
        canaries=m,
        alpha_per_test=each,
        candidates=candidates,
        **OneRunTest.counts(count),
    )


@dataclass(frozen=True)
class OneRunVerdict(OneRunTest):
    """Whether one run's canaries refute a claimed trade-off curve at confidence 1 - alpha.

    ``violated`` iff the f-DP recursion's mass r_0 + h_0 (at the chosen rule, level
    ``alpha_per_test``) exceeds guesses / m_eval: then, were the claim true, Pr[C >= correct]
    < alpha_per_test (Mahloujifar, Melis, Chaudhuri; module docstring).
    """

    violated: bool
    mass: float

    @property
    def capacity(self) -> float:
        """guesses / m_eval: the mass a distribution of C has in total."""
        return self.guesses / max(self.m_eval, 1)

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["capacity"] = self.capacity
        return out


def _claim_power(
    claim: ClaimedPower | Callable[[np.ndarray], np.ndarray], k_plus: int, k_minus: int,
    cache: dict[str, ClaimedPower],
) -> ClaimedPower:
    if isinstance(claim, ClaimedPower):
        if not claim.covers(k_plus, k_minus):
            raise ValueError(
                f"claim {claim.label} has sides={claim.sides!r} but the rule (k_plus, k_minus) = "
                f"({k_plus}, "
                f"{k_minus}) also guesses {'OUT' if k_minus else 'IN'}; pass the curve itself or "
                "tabulated_power(curve, 'both')"
            )
        return claim
    sides = "both" if k_plus and k_minus else ("in" if k_plus else "out")
    if sides not in cache:
        cache[sides] = tabulated_power(claim, sides)
    return cache[sides]


def one_run_verdict(
    scores: object,
    included: object,
    claim: object,
    alpha: float | None = None,
    *,
    confidence: float | None = None,
    guesses: str | Sequence[int] = "bonferroni",
    seed: int = 0,
) -> OneRunVerdict:
    """Test a claimed trade-off curve against one run's canaries (the one-run analogue of
    :func:`audit.stats.binary.verdict`).

    ``claim``: a callable f (alpha -> beta: an audit.theory TradeOffCurve, a Poisson
    accountant's curve, ...) or a :class:`ClaimedPower` (:func:`gdp_power`,
    :func:`eps_delta_power` for an explicit (eps, delta)). ``guesses`` as in
    :func:`one_run_epsilon_lb`; with ``bonferroni`` the claim is violated if any candidate
    rule refutes it at alpha / G. ``confidence`` (default 0.95) is the verdict's; the fourth
    positional ``alpha`` its deprecated spelling 1 - confidence (a DeprecationWarning).
    """
    alpha = significance(confidence, alpha, where="one_run_verdict")
    s, b = _as_canaries(scores, included)
    alpha = check_real(
        "alpha", alpha, minimum=0.0, maximum=0.5, strict_minimum=True, strict_maximum=True
    )
    seed = check_int("seed", seed, minimum=0)
    if not isinstance(claim, ClaimedPower) and not callable(claim):
        raise ValueError(
            f"claim={claim!r} must be a trade-off curve (a callable alpha -> beta) or a "
            "ClaimedPower"
        )
    if getattr(claim, "kind", None) == "approximation":  # as audit.stats.binary.verdict refuses it
        raise ValueError(
            "claim must be a guarantee; a curve of kind 'approximation' (e.g. Edgeworth) has no "
            "error bound and is never audited as a claim"
        )
    rule = _parse_guesses(guesses)
    cache: dict[str, ClaimedPower] = {}
    m = s.size

    def test(
        sub: np.ndarray, pairs: list[tuple[int, int]], level: float
    ) -> list[tuple[float, GuessCount]]:
        out = []
        for (kp, km), count in zip(pairs, rule_counts(s[sub], b[sub], pairs), strict=True):
            power = _claim_power(claim, kp, km, cache)
            mass = float(
                _recursion_mass(
                    power, count.m, np.array(count.guesses), np.array(count.correct), level
                )
            )
            out.append((mass, count))
        return out

    everything = np.arange(m)
    if isinstance(rule, tuple):
        results, strategy, each, n = test(everything, [rule], alpha), "fixed", alpha, 1
    elif rule == "bonferroni":
        pairs = candidate_guesses(m)
        each, n, strategy = alpha / len(pairs), len(pairs), "bonferroni"
        results = test(everything, pairs, each)
    else:
        sel, ev = _split(s, b, seed)
        pairs = candidate_guesses(sel.size)
        chosen = test(sel, pairs, alpha)
        best = int(np.argmax([mass / (c.guesses / c.m) for mass, c in chosen]))
        # the recursion needs r fixed: union over r
        n = _distinct_guess_counts(pairs, sel.size, ev.size)
        results = test(ev, [_fractions(pairs[best], sel.size, ev.size)], alpha / n)
        strategy, each = "split", alpha / n
    margins = [mass - c.guesses / c.m for mass, c in results]
    i = int(np.argmax(margins))
    mass, count = results[i]
    return OneRunVerdict(
        violated=bool(margins[i] > 1e-12), strategy=strategy, alpha=alpha, canaries=m, mass=mass,
        alpha_per_test=each, candidates=n, **OneRunTest.counts(count),
    )
