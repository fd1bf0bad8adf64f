"""Trade-off curves: the one representation every theory family returns.

A trade-off function f(alpha) = inf { beta_phi : alpha_phi <= alpha } gives the smallest
type II error (FNR) of any test at type I error (FPR) alpha (Dong, Roth, Su, *Gaussian
Differential Privacy*, 2019/2022, Def. 2.1). Every curve here is a convex, non-increasing,
piecewise-linear function on [0, 1], *symmetric* (f = f^{-1}, since zero-out adjacency is
symmetric) and *conservative for its kind* (docs/design.md §3.7):

- ``upper`` (a guarantee): the stored curve lies on or below the true trade-off curve of the
  mechanism. Built from a dominating pair (pessimistic PLD) or from supporting lines
  ``beta >= 1 - delta(eps) - e^eps alpha`` (then the maximum of finitely many lines, which is
  below the true curve);
- ``lower`` (achieved by a known pair of datasets): the stored curve lies on or above the
  curve the pair achieves, so the mechanism's true curve lies on or below it. Built from
  (FPR, FNR) points of actual tests; the chords between them are achieved by randomised
  tests, so the piecewise-linear interpolation is achieved exactly;
- ``exact``: closed form (e.g. Gaussian DP), or a numerical curve whose error is stated in
  ``method``;
- ``approximation``: an asymptotic approximation (e.g. Edgeworth), never a bound.

**Storage where the numbers live.** A symmetric convex curve is determined by its *head*,
the part left of its fixed point x* = f(x*), where every slope is <= -1 (for a symmetric
convex f the left slope at x* is L <= -1 since the right slope is 1/L >= L). The head is
stored as vertices (alpha_i, power_i) with power = 1 - beta, the test's power. Near
alpha = 0 both coordinates are tiny (alpha down to 1e-300, power down to 1e-20 at eps 60)
and are kept to full relative precision, which storing beta = 1 - power (a number within
1e-16 of 1) would destroy. The tail (alpha > x*) is the mirror image: vertices
(beta_i, alpha_i), where the small numbers are now the function values.

Piecewise-linear curves make the conversions exact rather than approximate: on the head,
delta(eps) = max_i (power_i - e^eps alpha_i) for eps >= 0 (attained at the vertex where the
slope crosses -e^eps), delta(-eps) = 1 - e^-eps (1 - delta(eps)) by symmetry, and
eps(delta) = max(0, max_i log((power_i - delta) / alpha_i)). The only approximation is the
finite grid that produced the vertices (stated in ``method``).

**Symmetrisation.** A curve of one ordered pair (``lower``, ``exact``) becomes
conv(min(f, f^{-1})) (DRS Prop. 2.4 and Appendix): the pair achieves f in one order and
f^{-1} in the other; the points of f^{-1} are the mirrored points (beta_i, 1 - alpha_i),
which callers may pass computed where they live (``inverse_powers``). A guarantee
(``upper``) keeps the eps >= 0 part of its profile (the head of slope <= -1), continued by
the eps = 0 line of slope -1, and mirrors it: max(H, H^{-1}) (DRS Prop. 2.12), because only
eps >= 0 of a pessimistic PLD is trusted (its low-loss tail need not be a distribution).

No qhull: hulls are Andrew's monotone chain (after vectorised pruning), whose orientation
test keeps relative precision for coordinates spanning 1e-300 to 1 (qhull's absolute
tolerances merged the vertices near alpha = 0 and lost the tail of the curve).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TypedDict

import numpy as np
from numpy.typing import ArrayLike, NDArray

# Phi = ndtr, Phi^{-1} = ndtri, log Phi = log_ndtr: scipy.stats.norm's own kernels, the same
# numbers bit for bit, without importing scipy.stats (a second at start; docs/design.md §2.7).
from scipy import special

from audit.core.names import KINDS
from audit.core.validation import check_choice, check_real

__all__ = [
    "TradeOffCurve",
    "concave_hull",
    "gdp_delta",
    "gdp_epsilon",
    "gdp_tradeoff",
    "lower_hull",
]

FloatArray = NDArray[np.float64]


# --------------------------------------------------------------------------------------
# Gaussian DP in closed form (Dong, Roth, Su, Def. 2.7 and Cor. 2.13)
# --------------------------------------------------------------------------------------


def gdp_tradeoff(alpha: ArrayLike, mu: float) -> FloatArray:
    """G_mu(alpha) = Phi(Phi^{-1}(1 - alpha) - mu), the trade-off curve of N(0,1) vs N(mu,1)."""
    alpha = np.clip(np.asarray(alpha, dtype=float), 0.0, 1.0)
    return special.ndtr(-special.ndtri(alpha) - mu)  # Phi^{-1}(1 - a) = -Phi^{-1}(a)


def gdp_delta(eps: ArrayLike, mu: float) -> FloatArray:
    """delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) for mu-GDP (DRS Cor. 2.13).

    Evaluated as Phi(...) - exp(eps + logPhi(...)) to stay accurate for large eps.
    """
    eps = np.asarray(eps, dtype=float)
    if mu <= 0:
        return np.zeros_like(eps)
    first = special.ndtr(-eps / mu + mu / 2)
    second = np.exp(eps + special.log_ndtr(-eps / mu - mu / 2))
    return np.maximum(first - second, 0.0)


def gdp_epsilon(delta: ArrayLike, mu: float) -> FloatArray:
    """The smallest eps >= 0 with gdp_delta(eps, mu) <= delta (bisection, vectorised)."""
    delta = np.asarray(delta, dtype=float)
    lo = np.zeros_like(delta)
    hi = np.full_like(delta, 1.0)
    for _ in range(200):  # grow until delta(hi) <= delta
        grow = gdp_delta(hi, mu) > delta
        if not grow.any():
            break
        hi = np.where(grow, hi * 2, hi)
    for _ in range(100):
        mid = (lo + hi) / 2
        above = gdp_delta(mid, mu) > delta
        lo = np.where(above, mid, lo)
        hi = np.where(above, hi, mid)
    return np.where(gdp_delta(np.zeros_like(delta), mu) <= delta, 0.0, hi)


# --------------------------------------------------------------------------------------
# Piecewise-linear concave geometry in (alpha, power) coordinates
# --------------------------------------------------------------------------------------


def concave_hull(x: ArrayLike, y: ArrayLike) -> tuple[FloatArray, FloatArray]:
    """Vertices of the upper concave hull of points (x_i, y_i), by increasing x.

    Ties in x keep the highest y; collinear middle points are dropped. Vectorised passes
    drop points on or below the chord of their neighbours (never hull vertices), then
    Andrew's monotone chain finishes; the orientation test is a difference of products
    that keeps relative precision at any scale.
    """
    xs = np.asarray(x, dtype=float).ravel()
    ys = np.asarray(y, dtype=float).ravel()
    ok = np.isfinite(xs) & np.isfinite(ys)
    xs, ys = xs[ok], ys[ok]
    order = np.lexsort((-ys, xs))
    xs, ys = xs[order], ys[order]
    keep = np.ones(len(xs), dtype=bool)
    keep[1:] = xs[1:] != xs[:-1]  # highest y for each x
    xs, ys = xs[keep], ys[keep]
    for _ in range(30):
        if len(xs) < 3:
            return xs, ys
        cross = ((xs[1:-1] - xs[:-2]) * (ys[2:] - ys[:-2])
                 - (ys[1:-1] - ys[:-2]) * (xs[2:] - xs[:-2]))
        bad = cross >= 0  # on or below the chord
        if not bad.any():
            return xs, ys
        keep = np.ones(len(xs), dtype=bool)
        keep[1:-1] = ~bad
        xs, ys = xs[keep], ys[keep]
    return _monotone_chain_upper(xs, ys)


def _monotone_chain_upper(x: FloatArray, y: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Andrew's monotone chain (upper hull) for points sorted by x with distinct x."""
    hx: list[float] = []
    hy: list[float] = []
    for px, py in zip(x.tolist(), y.tolist(), strict=True):
        while len(hx) >= 2 and (
            (hx[-1] - hx[-2]) * (py - hy[-2]) - (hy[-1] - hy[-2]) * (px - hx[-2]) >= 0
        ):
            hx.pop()
            hy.pop()
        hx.append(px)
        hy.append(py)
    return np.asarray(hx), np.asarray(hy)


def lower_hull(x: ArrayLike, y: ArrayLike) -> tuple[FloatArray, FloatArray]:
    """Vertices of the lower convex hull of points (x_i, y_i) (ties in x: lowest y)."""
    hx, hy = concave_hull(x, -np.asarray(y, dtype=float))
    return hx, -hy


def _cut_at_diagonal(a: FloatArray, p: FloatArray) -> tuple[FloatArray, FloatArray]:
    """The part of a concave non-decreasing chain (alpha, power) left of beta = alpha.

    On the diagonal power = 1 - alpha; a + p increases along the chain, so the cut is the
    first segment where a + p passes 1. A chain that never reaches it is returned whole.
    """
    s = a + p
    k = int(np.searchsorted(s, 1.0, side="left"))
    if k >= len(a):
        return a, p
    if s[k] == 1.0 or k == 0:
        return a[: k + 1], p[: k + 1]
    a0, p0, a1, p1 = a[k - 1], p[k - 1], a[k], p[k]
    t = (1.0 - a0 - p0) / ((a1 - a0) + (p1 - p0))
    x = a0 + t * (a1 - a0)
    return np.append(a[:k], x), np.append(p[:k], 1.0 - x)


def _close_head(a: FloatArray, p: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Clip a head to [0, 1]^2 with power non-decreasing, starting at alpha = 0."""
    p = np.clip(np.maximum.accumulate(np.clip(p, 0.0, 1.0)), 0.0, 1.0)
    if a[0] > 0:
        raise AssertionError("a head starts at alpha = 0")
    return a, p


def head_of_pair_points(
    a: FloatArray, p: FloatArray, b: FloatArray, qa: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Head of conv(min(f, f^{-1})) from tests of one ordered pair.

    (a, p) = (FPR, power) of tests of the pair; (b, qa) = (FNR, 1 - FPR) of the same tests,
    i.e. the points of f^{-1} in (alpha, power) coordinates, computed where they live.
    The trivial tests (0, 0) and (1, 1) are added; all points are achieved, and so is the
    hull (randomised tests).
    """
    xs = np.concatenate(([0.0, 1.0], a, b))
    ys = np.concatenate(([0.0, 1.0], p, qa))
    xs = np.clip(xs, 0.0, 1.0)
    ys = np.clip(ys, 0.0, 1.0)
    ha, hp = concave_hull(xs, ys)
    return _close_head(*_cut_at_diagonal(ha, hp))


def head_of_guarantee_points(a: FloatArray, p: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Head of the symmetric guarantee implied by the eps >= 0 part of a guarantee f.

    (a, p) are vertices (alpha, power) of a guarantee f (power <= the true power). The
    result is max(H, H^{-1}) left of the diagonal (module docstring): the concave hull (a
    guarantee stays one: the hull only lowers f), its part of slope >= 1 in power (eps >= 0),
    continued by the eps = 0 line of slope 1 up to the diagonal. Without a point at
    alpha = 0 the leftmost power is used there (f non-increasing: f(0) >= f(a_1)).
    """
    a = np.clip(np.asarray(a, dtype=float).ravel(), 0.0, 1.0)
    p = np.clip(np.asarray(p, dtype=float).ravel(), 0.0, 1.0)
    if a.size == 0:
        return np.array([0.0, 0.5]), np.array([0.0, 0.5])
    if not np.any(a == 0.0):
        a = np.append(a, 0.0)
        p = np.append(p, p[np.argmin(a[:-1])])
    ha, hp = concave_hull(a, p)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        slopes = np.diff(hp) / np.diff(ha)
    k = int(np.searchsorted(-slopes, -1.0, side="right"))  # slopes >= 1 come first
    ha, hp = ha[: k + 1], hp[: k + 1]
    if ha[-1] + hp[-1] < 1.0:  # continue with slope 1 to the diagonal
        x = (1.0 - hp[-1] + ha[-1]) / 2.0
        ha = np.append(ha, x)
        hp = np.append(hp, 1.0 - x)
    return _close_head(*_cut_at_diagonal(ha, hp))


def head_of_symmetric_points(a: FloatArray, p: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Head of a curve whose points (alpha, power) already describe a symmetric curve."""
    a = np.clip(np.asarray(a, dtype=float).ravel(), 0.0, 1.0)
    p = np.clip(np.asarray(p, dtype=float).ravel(), 0.0, 1.0)
    xs = np.concatenate(([1.0], a))
    ys = np.concatenate(([1.0], p))
    if not np.any(a == 0.0):
        xs = np.append(xs, 0.0)
        ys = np.append(ys, p[np.argmin(a)] if a.size else 0.0)
    ha, hp = concave_hull(xs, ys)
    return _close_head(*_cut_at_diagonal(ha, hp))


def envelope_of_lines(
    slopes: ArrayLike, intercepts: ArrayLike
) -> tuple[FloatArray, FloatArray]:
    """Vertices on alpha >= 0 of alpha -> min_i (intercept_i + slope_i alpha), slopes > 0,
    up to where the envelope reaches 1 (the last line's end point has power exactly 1).

    The guarantee's power from (eps_i, delta_i) pairs: power <= delta_i + e^{eps_i} alpha.
    The lower envelope of lines y = m x + c for x >= 0 is given by the lower convex hull of
    the dual points (m, c); consecutive hull lines meet at x = (c_j - c_i) / (m_i - m_j).
    """
    m = np.asarray(slopes, dtype=float)
    c = np.asarray(intercepts, dtype=float)
    hm, hc = lower_hull(m, c)  # ascending slope
    # on x >= 0 the envelope starts with the smallest intercept and moves to smaller slopes
    start = int(np.argmin(hc))
    hm, hc = hm[: start + 1][::-1], hc[: start + 1][::-1]  # descending slope from x = 0
    xs = (hc[1:] - hc[:-1]) / (hm[:-1] - hm[1:])
    a = np.concatenate(([0.0], xs))
    p = np.concatenate(([hc[0]], hc[1:] + hm[1:] * xs))
    if hc[-1] < 1.0:  # the last (smallest-slope) line continues until power reaches 1
        a = np.append(a, max(a[-1], (1.0 - hc[-1]) / hm[-1]))
        p = np.append(p, 1.0)
    return a, p


# --------------------------------------------------------------------------------------
# The curve
# --------------------------------------------------------------------------------------


class _ClosedForms(TypedDict):
    """The closed forms a Gaussian-DP curve carries (keyword arguments of TradeOffCurve)."""

    exact_curve: Callable[[FloatArray], FloatArray]
    exact_delta: Callable[[FloatArray], FloatArray]
    exact_epsilon: Callable[[FloatArray], FloatArray]
    gdp_mu: float


class TradeOffCurve:
    """A labelled symmetric trade-off curve beta = f(alpha) on [0, 1] (FPR alpha, FNR beta).

    Attributes:
        sampler: the batch sampler (a name from :data:`audit.core.names.SAMPLERS`).
        threat_model: the threat model or pair (``isolated``, ``adversarial``).
        kind: ``upper`` (guarantee), ``lower`` (achieved by a known pair), ``exact`` or
            ``approximation``.
        method: how it was computed, with the grid or discretisation that bounds its error.
        head_alphas, head_powers: the stored head (module docstring).
        alphas, betas: all vertices of the curve (derived; for plots and combination).

    Call it, ``curve(alpha)``, to evaluate f (vectorised); ``delta(eps)`` and
    ``epsilon(delta)`` convert to the privacy profile (both directions of the pair).

    Args:
        alphas: FPRs of the points (vertices or tests) that define the curve.
        betas: their FNRs (the mirrored points' FPRs, tiny near alpha = 1).
        powers: 1 - FNR of the points, computed where they live (tiny near alpha = 0);
            default 1 - betas (and betas default to 1 - powers).
        inverse_powers: 1 - FPR of the points (for the mirrored points (beta, 1 - alpha) of
            a one-order pair); default 1 - alphas.
        symmetric: the points already describe a symmetric curve (no symmetrisation).
        guarantee_points: the points are the head of a guarantee's eps >= 0 part (supporting
            lines), whatever the kind: kept with slope <= -1 and continued by slope -1.

    Raises:
        ValueError: an unknown kind, or neither betas nor powers.
    """

    is_symmetric = True
    """Every TradeOffCurve is symmetric (f = f^{-1}); read by :mod:`audit.stats.thresholds`."""

    def __init__(
        self,
        alphas: ArrayLike,
        betas: ArrayLike | None = None,
        *,
        sampler: str,
        threat_model: str,
        kind: str,
        method: str,
        powers: ArrayLike | None = None,
        inverse_powers: ArrayLike | None = None,
        symmetric: bool = False,
        guarantee_points: bool = False,
        exact_curve: Callable[[FloatArray], FloatArray] | None = None,
        exact_delta: Callable[[FloatArray], FloatArray] | None = None,
        exact_epsilon: Callable[[FloatArray], FloatArray] | None = None,
        gdp_mu: float | None = None,
        short: str | None = None,
    ) -> None:
        self.sampler = str(sampler)
        self.threat_model = str(threat_model)
        self.kind = check_choice("kind", kind, KINDS)
        self.method = str(method)
        if betas is None and powers is None:
            raise ValueError("TradeOffCurve: give betas or powers (or both)")
        a = np.asarray(alphas, dtype=float).ravel()
        p = 1.0 - np.asarray(betas, float).ravel() if powers is None else (
            np.asarray(powers, dtype=float).ravel())
        b = 1.0 - p if betas is None else np.asarray(betas, dtype=float).ravel()
        if symmetric:
            ha, hp = head_of_symmetric_points(a, p)
        elif self.kind == "upper" or guarantee_points:
            ha, hp = head_of_guarantee_points(a, p)
        else:
            qa = 1.0 - a if inverse_powers is None else np.asarray(inverse_powers, float).ravel()
            ha, hp = head_of_pair_points(a, p, b, qa)
        self._set_head(ha, hp)
        self._exact_curve = exact_curve
        self._exact_delta = exact_delta
        self._exact_epsilon = exact_epsilon
        self.gdp_mu = gdp_mu
        self.short = short or self.method.split(",")[0].split(";")[0].split(" (")[0]

    def _set_head(self, a: FloatArray, p: FloatArray) -> None:
        self.head_alphas: FloatArray = np.asarray(a, dtype=float)
        self.head_powers: FloatArray = np.asarray(p, dtype=float)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            self._slopes = np.diff(self.head_powers) / np.diff(self.head_alphas)
        self._slopes = np.where(np.isnan(self._slopes), np.inf, self._slopes)
        # the tail: mirrored head, by increasing alpha
        self._tail_x = (1.0 - self.head_powers)[::-1]
        self._tail_y = self.head_alphas[::-1]

    # -- constructors -------------------------------------------------------------------

    @classmethod
    def from_points(
        cls,
        fpr: ArrayLike,
        fnr: ArrayLike | None = None,
        *,
        sampler: str,
        threat_model: str,
        kind: str = "lower",
        method: str,
        power: ArrayLike | None = None,
        specificity: ArrayLike | None = None,
    ) -> TradeOffCurve:
        """From (FPR, FNR) points of tests of one pair: their convex hull, symmetrised.

        Each point is achieved by a test and each chord by a randomised test, so for a
        ``lower`` curve the result is achieved (on or above the pair's true curve).
        ``power`` (1 - FNR) and ``specificity`` (1 - FPR) may be given computed where they
        live; ``fnr`` is then needed only for the mirrored points (default 1 - power).
        """
        if fnr is None and power is None:
            raise ValueError("from_points: give fnr or power")
        return cls(fpr, fnr, powers=power, inverse_powers=specificity, sampler=sampler,
                   threat_model=threat_model, kind=kind, method=method)

    @classmethod
    def from_privacy_profile(
        cls,
        eps: ArrayLike,
        delta: ArrayLike,
        *,
        sampler: str,
        threat_model: str,
        kind: str = "upper",
        method: str,
    ) -> TradeOffCurve:
        """From (eps_i, delta_i) pairs that hold: f(a) >= max(0, 1 - d - e^e a, e^-e (1 - d - a)).

        The maximum of these finitely many supporting lines is below the true curve (a valid
        ``upper`` curve; docs/design.md §5.1); on the head it is power(a) = min_i (delta_i +
        e^{eps_i} a), the eps_i >= 0 lines, continued by the smallest eps's line up to the
        diagonal. Only eps_i >= 0 are used (the others are their mirror images).
        """
        eps = np.asarray(eps, dtype=float).ravel()
        delta = np.asarray(delta, dtype=float).ravel()
        use = eps >= 0
        a, p = envelope_of_lines(np.exp(np.minimum(eps[use], 700.0)), delta[use])
        return cls(a, powers=p, sampler=sampler, threat_model=threat_model, kind=kind,
                   method=method, guarantee_points=True)

    @classmethod
    def from_gdp(
        cls,
        mu: float,
        *,
        sampler: str,
        threat_model: str,
        kind: str = "exact",
        method: str | None = None,
        grid_size: int = 2000,
    ) -> TradeOffCurve:
        """The mu-GDP curve G_mu (closed form for curve, delta and epsilon).

        The stored vertices (used to combine curves) are tangent-line intersections at
        ``grid_size`` eps values (below G_mu) for ``upper``/``exact`` curves, and points on
        the curve (chords above G_mu) for ``lower`` curves; the powers are survival
        functions, accurate at tiny alpha.
        """
        mu = check_real("mu", mu, minimum=0.0)
        method = method or f"Gaussian DP, mu = {mu:.6g} (closed form)"
        closed: _ClosedForms = {
            "exact_curve": lambda x: gdp_tradeoff(x, mu),
            "exact_delta": lambda e: gdp_delta(e, mu),
            "exact_epsilon": lambda d: gdp_epsilon(d, mu),
            "gdp_mu": mu,
        }
        if mu == 0:
            return cls([0.0, 0.5], powers=[0.0, 0.5], sampler=sampler,
                       threat_model=threat_model, kind=kind, method=method, symmetric=True,
                       **closed)
        if kind == "lower":
            body = np.linspace(-mu / 2 - 12, mu / 2 + 12, grid_size)  # thresholds, N(0,1) units
            z = np.concatenate((np.linspace(-mu / 2 - 38, -mu / 2 - 12, 200), body,
                                np.linspace(mu / 2 + 12, mu / 2 + 38, 200)))
            return cls(special.ndtr(-z), powers=special.ndtr(mu - z), sampler=sampler,
                       threat_model=threat_model, kind=kind, method=method, symmetric=True,
                       **closed)
        eps_body = min(max(1.0, mu * (mu / 2 + 12)), 700.0)  # delta ~ Phi(-12): the body
        eps_top = min(max(eps_body, mu * (mu / 2 + 38)), 700.0)  # e^700: float64's edge
        eps = np.concatenate((np.linspace(0.0, eps_body, grid_size),
                              np.linspace(eps_body, eps_top, 400)))
        a, p = envelope_of_lines(np.exp(eps), gdp_delta(eps, mu))
        return cls(a, powers=p, sampler=sampler, threat_model=threat_model, kind=kind,
                   method=method, guarantee_points=True, **closed)

    # -- evaluation ---------------------------------------------------------------------

    def power(self, alpha: ArrayLike) -> FloatArray:
        """1 - f(alpha), accurate where it is small (tiny alpha), vectorised."""
        a = np.clip(np.asarray(alpha, dtype=float), 0.0, 1.0)
        if self._exact_curve is not None and self.gdp_mu is not None:
            return special.ndtr(special.ndtri(a) + self.gdp_mu)  # 1 - G_mu(a)
        head = np.interp(a, self.head_alphas, self.head_powers)
        tail = 1.0 - np.interp(a, self._tail_x, self._tail_y, right=0.0)
        return np.where(a <= self.head_alphas[-1], head, tail)

    def __call__(self, alpha: ArrayLike) -> FloatArray:
        """f(alpha), vectorised; conservative for the curve's kind."""
        alpha = np.asarray(alpha, dtype=float)
        if self._exact_curve is not None:
            return self._exact_curve(alpha)
        x = np.clip(alpha, 0.0, 1.0)
        head = 1.0 - np.interp(x, self.head_alphas, self.head_powers)
        tail = np.interp(x, self._tail_x, self._tail_y, right=0.0)
        return np.where(x <= self.head_alphas[-1], head, tail)

    def curve(self, alpha: ArrayLike) -> FloatArray:
        """Alias of calling the curve: beta = f(alpha)."""
        return self(alpha)

    def delta(self, eps: ArrayLike) -> FloatArray:
        """delta(eps) = sup_alpha (1 - f(alpha) - e^eps alpha), vectorised over eps.

        Exact for the stored piecewise-linear curve: for eps >= 0 the supremum is attained at
        the head vertex where the slope crosses -e^eps, max_i (power_i - e^eps alpha_i); for
        eps < 0, delta(eps) = 1 - e^eps + e^eps delta(-eps) (symmetry).
        """
        eps = np.asarray(eps, dtype=float)
        if self._exact_delta is not None:
            return self._exact_delta(eps)
        e = np.abs(eps)
        with np.errstate(over="ignore"):
            growth = np.exp(e)
        idx = np.searchsorted(-self._slopes, -growth, side="left")
        a = self.head_alphas[idx]
        p = self.head_powers[idx]
        with np.errstate(invalid="ignore", over="ignore"):
            positive = np.where(a > 0, p - growth * a, p)
        positive = np.clip(positive, 0.0, 1.0)
        with np.errstate(over="ignore", invalid="ignore"):
            negative = -np.expm1(-e) + np.exp(-e) * positive
        return np.clip(np.where(eps >= 0, positive, negative), 0.0, 1.0)

    def epsilon(self, delta: ArrayLike) -> FloatArray:
        """The smallest eps >= 0 with delta(eps) <= delta (inf if none), vectorised.

        Exact for the stored curve: eps = max(0, max_i log((power_i - delta) / alpha_i)).
        """
        delta = np.asarray(delta, dtype=float)
        if self._exact_epsilon is not None:
            return self._exact_epsilon(delta)
        flat = delta.ravel()
        out = np.zeros(flat.shape)
        at_zero = self.head_alphas == 0
        power_at_zero = self.head_powers[at_zero].max(initial=0.0)
        a = self.head_alphas[~at_zero]
        g = self.head_powers[~at_zero]
        chunk = max(1, 5_000_000 // max(1, len(a)))
        for start in range(0, len(flat), chunk):
            d = flat[start : start + chunk, None]
            with np.errstate(divide="ignore", invalid="ignore"):
                logs = np.where(g[None, :] > d, np.log(g[None, :] - d) - np.log(a[None, :]),
                                0.0)
            out[start : start + chunk] = np.maximum(logs.max(axis=1, initial=0.0), 0.0)
        out[flat < power_at_zero] = math.inf
        return out.reshape(delta.shape)

    # -- vertices -----------------------------------------------------------------------

    @property
    def alphas(self) -> FloatArray:
        """All vertices' FPRs by increasing alpha: the head, then its mirror image."""
        tail = self._tail_x[1:]
        out = np.concatenate((self.head_alphas, tail))
        return out if out[-1] >= 1.0 else np.append(out, 1.0)

    @property
    def betas(self) -> FloatArray:
        """All vertices' FNRs (beta = 1 - power on the head; mirrored alphas on the tail)."""
        out = np.concatenate((1.0 - self.head_powers, self._tail_y[1:]))
        return out if self._tail_x[-1] >= 1.0 else np.append(out, 0.0)

    # -- combination --------------------------------------------------------------------

    def maximum(
        self, other: TradeOffCurve, *, method: str | None = None, short: str | None = None
    ) -> TradeOffCurve:
        """The pointwise maximum of two ``upper`` curves (a guarantee if both are).

        On the union of both curves' vertices left of the larger fixed point, plus the
        crossings, the smaller of the two powers; the maximum of two symmetric convex curves
        is symmetric and convex, so its head is the part left of the diagonal.
        """
        grid = np.concatenate((self.alphas, other.alphas, [0.5]))  # fixed points are <= 1/2
        grid = np.unique(grid[grid <= 0.5])
        p1 = _pl_power(self, grid)
        p2 = _pl_power(other, grid)
        d = p1 - p2
        cross = np.nonzero(d[:-1] * d[1:] < 0)[0]
        t = d[cross] / (d[cross] - d[cross + 1])
        extra = grid[cross] + t * (grid[cross + 1] - grid[cross])
        grid = np.union1d(grid, extra)
        power = np.minimum(_pl_power(self, grid), _pl_power(other, grid))
        return TradeOffCurve(
            grid, powers=power, sampler=self.sampler, threat_model=self.threat_model,
            kind=self.kind, symmetric=True, method=method or f"max({self.method}; {other.method})",
            short=short or f"max of {self.short} and {other.short}",
        )

    def relabel(self, **labels: str) -> TradeOffCurve:
        """A copy with some of sampler, threat_model, kind, method changed."""
        new = object.__new__(TradeOffCurve)
        new.__dict__.update(self.__dict__)
        for key, value in labels.items():
            if key not in ("sampler", "threat_model", "kind", "method", "short"):
                raise ValueError(
                    f"relabel: {key!r} is not a label; allowed: sampler, threat_model, kind, "
                    "method, short"
                )
            setattr(new, key, check_choice("kind", value, KINDS) if key == "kind" else str(value))
        return new

    # -- description --------------------------------------------------------------------

    @property
    def label(self) -> str:
        """Plot label, e.g. ``poisson / adversarial / upper (PLD pessimistic)``."""
        return f"{self.sampler} / {self.threat_model} / {self.kind} ({self.short})"

    def to_dict(self, eps_deltas: Sequence[float] = (1e-5,)) -> dict[str, object]:
        """A JSON-ready summary: labels and eps at the given deltas."""
        return {
            "sampler": self.sampler,
            "threat_model": self.threat_model,
            "kind": self.kind,
            "method": self.method,
            "epsilon": {
                f"{d:g}": float(self.epsilon(np.array([d]))[0]) for d in eps_deltas
            },
        }

    def __repr__(self) -> str:
        return f"TradeOffCurve({self.label!r}, vertices={len(self.alphas)})"


def _pl_power(curve: TradeOffCurve, alpha: FloatArray) -> FloatArray:
    """The stored piecewise-linear curve's power (ignoring closed forms)."""
    head = np.interp(alpha, curve.head_alphas, curve.head_powers)
    tail = 1.0 - np.interp(alpha, curve._tail_x, curve._tail_y, right=0.0)
    return np.where(alpha <= curve.head_alphas[-1], head, tail)
