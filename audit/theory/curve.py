"""Trade-off curves: the one representation every theory family returns.

A trade-off function f(alpha) = inf { beta_phi : alpha_phi <= alpha } gives the smallest
type II error (FNR) of any test at type I error (FPR) alpha (Dong, Roth, Su, *Gaussian
Differential Privacy*, 2019/2022, Def. 2.1). Every curve here is stored as a convex,
non-increasing, piecewise-linear function on [0, 1] given by its vertices, and is
*conservative for its kind* (docs/design.md §3.7):

- ``upper`` (a guarantee): the stored curve lies on or below the true trade-off curve of the
  mechanism. Built from a dominating pair (pessimistic PLD) or from supporting lines
  ``beta >= 1 - delta(eps) - e^eps alpha`` (then the maximum of finitely many lines, which is
  below the true curve);
- ``lower`` (achieved by a known pair of datasets): the stored curve lies on or above the
  curve the pair achieves, so the mechanism's true curve lies on or below it. Built from
  (FPR, FNR) points of actual tests; the chords between them are achieved by randomised
  tests, so the piecewise-linear interpolation is achieved exactly;
- ``exact``: closed form (e.g. Gaussian DP), or a numerical curve whose error is stated in
  ``method``.

Piecewise-linear curves make the conversions exact rather than approximate: for vertices
(a_i, b_i) the privacy profile is delta(eps) = max_i (1 - b_i - e^eps a_i), attained at the
vertex where the slope crosses -e^eps, and eps(delta) = max(0, max_i log((1 - b_i - delta)/a_i)).
The only approximation is the finite grid that produced the vertices (stated in
``method``); for a smooth convex curve sampled at spacing h both the chord and the
tangent-line envelopes are O(h^2) from the curve (error falls as 1/n^2 in the grid size n).

Every curve is symmetrised, f -> conv(min(f, f^{-1})) (Dong, Roth, Su, Prop. 2.4 and
Appendix), because zero-out adjacency is symmetric: a guarantee must hold for the pair in
both orders, and the pair achieves its curve in both orders.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import spatial, stats

from audit.names import KINDS
from audit.validation import check_choice, check_real

__all__ = ["TradeOffCurve", "gdp_delta", "gdp_epsilon", "gdp_tradeoff"]

FloatArray = NDArray[np.float64]


# --------------------------------------------------------------------------------------
# Gaussian DP in closed form (Dong, Roth, Su, Def. 2.7 and Cor. 2.13)
# --------------------------------------------------------------------------------------


def gdp_tradeoff(alpha: ArrayLike, mu: float) -> FloatArray:
    """G_mu(alpha) = Phi(Phi^{-1}(1 - alpha) - mu), the trade-off curve of N(0,1) vs N(mu,1)."""
    alpha = np.clip(np.asarray(alpha, dtype=float), 0.0, 1.0)
    return stats.norm.cdf(stats.norm.isf(alpha) - mu)


def gdp_delta(eps: ArrayLike, mu: float) -> FloatArray:
    """delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) for mu-GDP (DRS Cor. 2.13).

    Evaluated as Phi(...) - exp(eps + logPhi(...)) to stay accurate for large eps.
    """
    eps = np.asarray(eps, dtype=float)
    if mu <= 0:
        return np.zeros_like(eps)
    first = stats.norm.cdf(-eps / mu + mu / 2)
    second = np.exp(eps + stats.norm.logcdf(-eps / mu - mu / 2))
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
# Piecewise-linear convex geometry
# --------------------------------------------------------------------------------------


def lower_hull(x: ArrayLike, y: ArrayLike) -> tuple[FloatArray, FloatArray]:
    """Vertices of the lower convex hull of points (x_i, y_i).

    Points are sorted by x (ties: lowest y first); collinear middle points are dropped.
    """
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    order = np.lexsort((y, x))
    x, y = x[order], y[order]
    keep = np.ones(len(x), dtype=bool)
    keep[1:] = x[1:] != x[:-1]  # lowest y for each x
    x, y = x[keep], y[keep]
    x, y, convex = _prune_concave(x, y)
    if convex:
        return x, y
    try:  # qhull: O(n log n) in C; its vertices run counter-clockwise
        hull = spatial.ConvexHull(np.column_stack((x, y)))
    except spatial.QhullError:
        return _monotone_chain(x, y)
    v = hull.vertices
    start = int(np.argmin(np.where(x[v] == x.min(), y[v], np.inf)))
    v = np.roll(v, -start)
    stop = int(np.argmax(np.where(x[v] == x.max(), -y[v], -np.inf)))
    v = v[: stop + 1]
    return x[v], y[v]


def _monotone_chain(x: FloatArray, y: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Andrew's monotone chain (lower hull) for points sorted by x."""
    hx: list[float] = []
    hy: list[float] = []
    for px, py in zip(x.tolist(), y.tolist(), strict=True):
        while len(hx) >= 2 and (
            (hx[-1] - hx[-2]) * (py - hy[-2]) - (hy[-1] - hy[-2]) * (px - hx[-2]) <= 0
        ):
            hx.pop()
            hy.pop()
        hx.append(px)
        hy.append(py)
    return np.asarray(hx), np.asarray(hy)


def _prune_concave(
    x: FloatArray, y: FloatArray, passes: int = 20
) -> tuple[FloatArray, FloatArray, bool]:
    """Drop, in vectorised passes, points lying on or above the chord of their neighbours.

    Such a point is never a lower-hull vertex, so removing all of them at once is safe; when
    no such point is left the chain is convex, i.e. it is the lower hull (returns True).
    """
    for _ in range(passes):
        if len(x) < 3:
            return x, y, True
        cross = (x[1:-1] - x[:-2]) * (y[2:] - y[:-2]) - (y[1:-1] - y[:-2]) * (x[2:] - x[:-2])
        bad = cross <= 0
        if not bad.any():
            return x, y, True
        keep = np.ones(len(x), dtype=bool)
        keep[1:-1] = ~bad
        x, y = x[keep], y[keep]
    return x, y, False


def upper_envelope_of_lines(
    slopes: ArrayLike, intercepts: ArrayLike
) -> tuple[FloatArray, FloatArray]:
    """Vertices on [0, 1] of x -> max(0, max_i (intercept_i + slope_i x)).

    Lines y = m x + c on the upper envelope are the vertices of the upper convex hull of the
    dual points (m, c); consecutive envelope lines meet at the envelope's vertices.
    """
    m = np.append(np.asarray(slopes, dtype=float), 0.0)
    c = np.append(np.asarray(intercepts, dtype=float), 0.0)
    hm, neg_c = lower_hull(m, -c)
    hc = -neg_c
    # consecutive hull lines (ascending slope) meet at x = (c_i - c_{i+1}) / (m_{i+1} - m_i);
    # line i is on top for x in [breaks[i-1], breaks[i]]
    breaks = (hc[:-1] - hc[1:]) / (hm[1:] - hm[:-1])
    inside = breaks[(breaks > 0.0) & (breaks < 1.0)]
    grid = np.unique(np.concatenate(([0.0, 1.0], inside)))
    idx = np.searchsorted(breaks, grid, side="left")
    return grid, np.maximum(hm[idx] * grid + hc[idx], 0.0)


def _normalise(
    a: ArrayLike, b: ArrayLike, *, guarantee: bool = False
) -> tuple[FloatArray, FloatArray]:
    """Vertices of the lower convex hull of the points, with (1, 0) added: a convex,
    non-increasing curve on [0, 1] ending at f(1) = 0.

    Without a point at alpha = 0 one is added: (0, 1) (every trade-off curve has f(0) <= 1),
    or for a ``guarantee`` (0, beta of the leftmost point) (f is non-increasing, so
    f(0) >= f(a_1) >= b_1 keeps it below the true curve)."""
    a = np.clip(np.asarray(a, dtype=float).ravel(), 0.0, 1.0)
    b = np.clip(np.asarray(b, dtype=float).ravel(), 0.0, 1.0)
    if not np.any(a == 0.0):
        left = float(b[np.argmin(a)]) if (guarantee and a.size) else 1.0
        a = np.append(a, 0.0)
        b = np.append(b, left)
    a = np.append(a, 1.0)
    b = np.append(b, 0.0)
    hx, hy = lower_hull(a, b)
    zero = np.nonzero(hy <= 0.0)[0]
    if zero.size and zero[0] < len(hy) - 1:  # flat at 0 from there on
        hx = np.append(hx[: zero[0] + 1], 1.0)
        hy = np.append(hy[: zero[0] + 1], 0.0)
    return hx, hy


def symmetrise(a: FloatArray, b: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Vertices of conv(min(f, f^{-1})) for a convex PL curve f (DRS Prop. 2.4 and App. B).

    This is the right symmetrisation for a curve *achieved* by a pair of datasets (``lower``):
    the pair achieves f in one order and f^{-1} in the other, and randomising between tests
    achieves the convex hull.
    """
    return _normalise(np.concatenate((a, b)), np.concatenate((b, a)))


def symmetric_envelope(a: FloatArray, b: FloatArray) -> tuple[FloatArray, FloatArray]:
    """The symmetric guarantee implied by the eps >= 0 part of a convex PL guarantee f.

    With delta(eps) = sup_a (1 - f(a) - e^eps a) for eps >= 0 (the part of f with slope
    <= -1, i.e. its head up to the slope -1 vertex), the symmetric curve
    sup_{eps >= 0} max(0, 1 - delta - e^eps a, e^-eps (1 - delta - a)) (DRS Prop. 2.12) is
    max(H, H^{-1}) with H = the head continued by the slope -1 line. Used for ``upper``
    curves built from both directions' profiles, where only eps >= 0 is trusted (a
    pessimistic PLD's low-loss tail need not be a probability distribution).
    """
    with np.errstate(divide="ignore", over="ignore"):
        slopes = np.diff(b) / np.diff(a)
    k = int(np.searchsorted(slopes, -1.0, side="left"))  # vertex where slope crosses -1
    ha, hb = a[: k + 1], b[: k + 1]
    end = ha[-1] + hb[-1]  # the slope -1 line from (a_k, b_k) meets beta = 0 here
    if end < 1.0:
        ha = np.append(ha, end)
        hb = np.append(hb, 0.0)
    elif ha[-1] < 1.0:
        ha = np.append(ha, 1.0)
        hb = np.append(hb, end - 1.0)
    return _pl_maximum(ha, hb, hb[::-1], ha[::-1])


def _pl_maximum(
    a1: FloatArray, b1: FloatArray, a2: FloatArray, b2: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Vertices of max(f1, f2) for two PL functions on [0, 1] (breakpoints plus crossings)."""
    grid = np.union1d(a1, a2)
    grid = np.union1d(grid[(grid >= 0.0) & (grid <= 1.0)], [0.0, 1.0])
    d = np.interp(grid, a1, b1) - np.interp(grid, a2, b2)
    cross = np.nonzero(d[:-1] * d[1:] < 0)[0]
    t = d[cross] / (d[cross] - d[cross + 1])
    grid = np.union1d(grid, grid[cross] + t * (grid[cross + 1] - grid[cross]))
    values = np.maximum(np.interp(grid, a1, b1), np.interp(grid, a2, b2))
    return _normalise(grid, values)


# --------------------------------------------------------------------------------------
# The curve
# --------------------------------------------------------------------------------------


class TradeOffCurve:
    """A labelled trade-off curve beta = f(alpha) on [0, 1] (FPR alpha, FNR beta).

    Attributes:
        sampler: the batch sampler (a name from :data:`audit.names.SAMPLERS`).
        threat_model: the threat model or pair (``isolated``, ``adversarial``).
        kind: ``upper`` (guarantee), ``lower`` (achieved by a known pair) or ``exact``.
        method: how it was computed, with the grid or discretisation that bounds its error.
        alphas, betas: the vertices of the stored convex piecewise-linear curve.

    Call it, ``curve(alpha)``, to evaluate f (vectorised); ``delta(eps)`` and
    ``epsilon(delta)`` convert to the privacy profile (both directions of the pair).

    Built from vertices, an ``upper`` curve must be a guarantee for the pair in both orders
    (as a privacy profile delta(eps), eps >= 0, is); it is symmetrised from its eps >= 0
    part. ``lower`` and ``exact`` curves describe a pair in one order and are symmetrised by
    conv(min(f, f^{-1})).
    """

    def __init__(
        self,
        alphas: ArrayLike,
        betas: ArrayLike,
        *,
        sampler: str,
        threat_model: str,
        kind: str,
        method: str,
        symmetric: bool = False,
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
        a, b = _normalise(alphas, betas, guarantee=self.kind == "upper")
        if not symmetric:
            a, b = symmetric_envelope(a, b) if self.kind == "upper" else symmetrise(a, b)
        self.alphas: FloatArray = a
        self.betas: FloatArray = b
        with np.errstate(divide="ignore", over="ignore"):
            self._slopes = np.diff(b) / np.diff(a)
        self._exact_curve = exact_curve
        self._exact_delta = exact_delta
        self._exact_epsilon = exact_epsilon
        self.gdp_mu = gdp_mu
        self.short = short or self.method.split(",")[0].split(";")[0].split(" (")[0]

    # -- constructors -------------------------------------------------------------------

    @classmethod
    def from_points(
        cls,
        fpr: ArrayLike,
        fnr: ArrayLike,
        *,
        sampler: str,
        threat_model: str,
        kind: str = "lower",
        method: str,
    ) -> TradeOffCurve:
        """From (FPR, FNR) points of tests of one pair: their convex hull, symmetrised.

        Each point is achieved by a test and each chord by a randomised test, so for a
        ``lower`` curve the result is achieved (on or above the pair's true curve).
        """
        return cls(fpr, fnr, sampler=sampler, threat_model=threat_model, kind=kind, method=method)

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
        ``upper`` curve) and converges to it as O(h^2) in the eps spacing h (docs/design.md §5.1).
        """
        eps = np.asarray(eps, dtype=float)
        delta = np.asarray(delta, dtype=float)
        slopes = np.concatenate((-np.exp(eps), -np.exp(-eps)))
        intercepts = np.concatenate((1 - delta, np.exp(-eps) * (1 - delta)))
        a, b = upper_envelope_of_lines(slopes, intercepts)
        return cls(
            a, b, sampler=sampler, threat_model=threat_model, kind=kind, method=method,
            symmetric=True,
        )

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
        the curve (chords above G_mu) for ``lower`` curves.
        """
        mu = check_real("mu", mu, minimum=0.0)
        method = method or f"Gaussian DP, mu = {mu:.6g} (closed form)"
        if mu == 0:
            a = np.array([0.0, 1.0])
            b = np.array([1.0, 0.0])
        elif kind == "lower":
            z = np.linspace(-mu / 2 - 12, mu / 2 + 12, grid_size)  # threshold in N(0,1) units
            a = stats.norm.sf(z)
            b = stats.norm.cdf(z - mu)
        else:
            eps_max = max(1.0, mu * (mu / 2 + 12))
            eps = np.linspace(0.0, eps_max, grid_size)
            slopes = np.concatenate((-np.exp(eps), -np.exp(-eps)))
            dl = gdp_delta(eps, mu)
            intercepts = np.concatenate((1 - dl, np.exp(-eps) * (1 - dl)))
            a, b = upper_envelope_of_lines(slopes, intercepts)
        return cls(
            a, b, sampler=sampler, threat_model=threat_model, kind=kind, method=method,
            symmetric=True,
            exact_curve=lambda x: gdp_tradeoff(x, mu),
            exact_delta=lambda e: gdp_delta(e, mu),
            exact_epsilon=lambda d: gdp_epsilon(d, mu),
            gdp_mu=mu,
        )

    # -- evaluation ---------------------------------------------------------------------

    def __call__(self, alpha: ArrayLike) -> FloatArray:
        """f(alpha), vectorised; conservative for the curve's kind."""
        alpha = np.asarray(alpha, dtype=float)
        if self._exact_curve is not None:
            return self._exact_curve(alpha)
        return np.interp(np.clip(alpha, 0.0, 1.0), self.alphas, self.betas)

    def curve(self, alpha: ArrayLike) -> FloatArray:
        """Alias of calling the curve: beta = f(alpha)."""
        return self(alpha)

    def delta(self, eps: ArrayLike) -> FloatArray:
        """delta(eps) = sup_alpha (1 - f(alpha) - e^eps alpha), vectorised over eps.

        Exact for the stored piecewise-linear curve: the supremum is attained at the vertex
        where the slope crosses -e^eps.
        """
        eps = np.asarray(eps, dtype=float)
        if self._exact_delta is not None:
            return self._exact_delta(eps)
        with np.errstate(over="ignore"):
            slope = -np.exp(eps)
        idx = np.searchsorted(self._slopes, slope, side="left")
        a = self.alphas[idx]
        b = self.betas[idx]
        with np.errstate(invalid="ignore", over="ignore"):
            value = np.where(a > 0, 1.0 - b - np.exp(eps) * a, 1.0 - b)
        return np.clip(value, 0.0, 1.0)

    def epsilon(self, delta: ArrayLike) -> FloatArray:
        """The smallest eps >= 0 with delta(eps) <= delta (inf if none), vectorised.

        Exact for the stored curve: eps = max(0, max_i log((1 - b_i - delta) / a_i)).
        """
        delta = np.asarray(delta, dtype=float)
        if self._exact_epsilon is not None:
            return self._exact_epsilon(delta)
        flat = delta.ravel()
        out = np.zeros(flat.shape)
        gap = 1.0 - self.betas
        at_zero = self.alphas == 0
        gap_at_zero = gap[at_zero].max(initial=0.0)
        a = self.alphas[~at_zero]
        g = gap[~at_zero]
        chunk = max(1, 5_000_000 // max(1, len(a)))
        for start in range(0, len(flat), chunk):
            d = flat[start : start + chunk, None]
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(g[None, :] > d, (g[None, :] - d) / a[None, :], 1.0)
            out[start : start + chunk] = np.maximum(np.log(ratio.max(axis=1)), 0.0)
        out[flat < gap_at_zero] = math.inf
        return out.reshape(delta.shape)

    # -- combination --------------------------------------------------------------------

    def maximum(
        self, other: TradeOffCurve, *, method: str | None = None, short: str | None = None
    ) -> TradeOffCurve:
        """The pointwise maximum of two ``upper`` curves (a guarantee if both are)."""
        grid, values = _pl_maximum(self.alphas, self.betas, other.alphas, other.betas)
        return TradeOffCurve(
            grid, values, sampler=self.sampler, threat_model=self.threat_model,
            kind=self.kind, method=method or f"max({self.method}; {other.method})",
            symmetric=True, short=short or f"max of {self.short} and {other.short}",
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
