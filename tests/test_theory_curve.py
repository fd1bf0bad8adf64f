"""TradeOffCurve: conversions, conservativeness for each kind, symmetrisation, combination."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audit.theory import TradeOffCurve
from audit.theory.curve import gdp_delta, gdp_epsilon, gdp_tradeoff, lower_hull

ALPHA = np.concatenate((np.logspace(-10, -1, 200), np.linspace(0.1, 1, 200)))


def _pl(curve: TradeOffCurve) -> TradeOffCurve:
    """The same curve without its closed forms: only the stored vertices."""
    c = curve.relabel()
    c._exact_curve = c._exact_delta = c._exact_epsilon = None
    return c


def gdp(mu, kind="exact"):
    return TradeOffCurve.from_gdp(
        mu, sampler="deterministic", threat_model="adversarial", kind=kind
    )


def test_gdp_closed_forms_agree():
    mu = 1.3
    eps = np.linspace(0, 5, 11)
    d = gdp_delta(eps, mu)
    assert np.all(np.diff(d) <= 0)
    np.testing.assert_allclose(gdp_epsilon(d[1:-1], mu), eps[1:-1], rtol=1e-8)
    # delta(eps) = sup_a 1 - f(a) - e^eps a, checked on a fine grid (grid error < 1e-6)
    a = np.logspace(-12, 0, 200_001)
    sup = np.max(1 - gdp_tradeoff(a, mu)[None, :] - np.exp(eps[:, None]) * a[None, :], axis=1)
    np.testing.assert_allclose(sup, d, atol=1e-6)


def test_upper_vertices_below_and_lower_vertices_above_gdp():
    truth = gdp_tradeoff(ALPHA, 2.0)
    upper = _pl(gdp(2.0, "upper"))
    lower = _pl(gdp(2.0, "lower"))
    assert np.all(upper(ALPHA) <= truth + 1e-12)
    assert np.all(lower(ALPHA) >= truth - 1e-12)
    # O(h^2) grid error: both within 1e-5 of the truth with 2000 grid points
    assert np.max(truth - upper(ALPHA)) < 1e-5
    assert np.max(lower(ALPHA) - truth) < 2e-5


def test_conversions_exact_for_piecewise_linear():
    # a curve with vertices (0, 1), (0.1, 0.5), (0.4, 0.1), (1, 0) (symmetrised for 'lower')
    c = TradeOffCurve([0, 0.1, 0.4, 1], [1, 0.5, 0.1, 0], sampler="poisson",
                      threat_model="isolated", kind="lower", method="test")
    for eps in (0.0, 0.5, 1.0, 2.0):
        brute = np.max(1 - c.betas - np.exp(eps) * c.alphas)
        assert float(c.delta(eps)) == pytest.approx(max(brute, 0.0), abs=1e-15)
    # epsilon is the inverse of delta
    for delta in (1e-3, 0.05, 0.2):
        e = float(c.epsilon(delta))
        assert float(c.delta(e)) == pytest.approx(delta, abs=1e-12)
        assert float(c.delta(e * 0.999)) > delta
    assert float(c.epsilon(0.99)) == 0.0


def test_symmetrised_curves_are_symmetric():
    c = TradeOffCurve([0, 0.05, 0.3, 1], [0.9, 0.4, 0.05, 0], sampler="poisson",
                      threat_model="isolated", kind="lower", method="test")
    inner = c.betas > 0  # f(f(a)) = a away from the flat part at beta = 0
    np.testing.assert_allclose(
        np.interp(c.betas, c.alphas, c.betas)[inner], c.alphas[inner], atol=1e-12
    )
    u = TradeOffCurve([0, 0.05, 0.3, 1], [0.9, 0.4, 0.05, 0], sampler="poisson",
                      threat_model="isolated", kind="upper", method="test")
    inner = u.betas > 0
    np.testing.assert_allclose(
        np.interp(u.betas, u.alphas, u.betas)[inner], u.alphas[inner], atol=1e-12
    )
    # where the slope -1 vertex lies before the diagonal, both symmetrisations coincide
    # (Dong, Roth, Su, Prop. 2.4): f up to that vertex, a slope -1 segment, then f^{-1}
    v = ([0, 0.02, 0.1, 1], [1, 0.6, 0.3, 0])  # slopes -20, -3.75, -0.33: vertex (0.1, 0.3)
    lo = TradeOffCurve(*v, sampler="p", threat_model="i", kind="lower", method="t")
    up = TradeOffCurve(*v, sampler="p", threat_model="i", kind="upper", method="t")
    np.testing.assert_allclose(lo(ALPHA), up(ALPHA), atol=1e-12)
    assert float(lo(0.2)) == pytest.approx(0.2)  # on the segment from (0.1, 0.3) to (0.3, 0.1)


def test_infinite_epsilon_when_mass_at_alpha_zero():
    c = TradeOffCurve([0, 1], [0.99, 0], sampler="poisson", threat_model="isolated",
                      kind="upper", method="test")
    assert float(c.epsilon(1e-3)) == np.inf
    assert float(c.epsilon(0.02)) < np.inf


def test_from_privacy_profile_is_a_valid_guarantee():
    eps = np.linspace(0, 8, 400)
    c = TradeOffCurve.from_privacy_profile(eps, gdp_delta(eps, 1.5), sampler="deterministic",
                                           threat_model="adversarial", method="grid")
    assert np.all(c(ALPHA) <= gdp_tradeoff(ALPHA, 1.5) + 1e-12)
    assert np.max(gdp_tradeoff(ALPHA, 1.5) - c(ALPHA)) < 1e-3


def test_maximum_of_guarantees():
    a, b = gdp(2.0, "upper"), gdp(1.0, "upper")
    m = a.maximum(b)
    np.testing.assert_allclose(m(ALPHA), np.maximum(_pl(a)(ALPHA), _pl(b)(ALPHA)), atol=1e-12)
    assert m.kind == "upper" and "max" in m.short


def test_labels_and_errors():
    c = gdp(1.0)
    assert c.label.startswith("deterministic / adversarial / exact")
    with pytest.raises(ValueError, match="kind"):
        TradeOffCurve([0, 1], [1, 0], sampler="x", threat_model="y", kind="uper", method="m")
    with pytest.raises(ValueError, match="upper"):
        TradeOffCurve([0, 1], [1, 0], sampler="x", threat_model="y", kind="uper", method="m")
    with pytest.raises(ValueError, match="mu"):
        TradeOffCurve.from_gdp(-1.0, sampler="x", threat_model="y")
    with pytest.raises(ValueError, match="label"):
        c.relabel(colour="red")


def test_lower_hull_matches_brute_force():
    rng = np.random.default_rng(3)
    x = rng.random(500)
    y = rng.random(500)
    hx, hy = lower_hull(x, y)
    # every point lies on or above the hull, and the hull is convex
    assert np.all(np.interp(x, hx, hy) <= y + 1e-12)
    slopes = np.diff(hy) / np.diff(hx)
    assert np.all(np.diff(slopes) > 0)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1)), min_size=1, max_size=30),
    st.sampled_from(["upper", "lower"]),
)
def test_any_curve_is_convex_nonincreasing_with_monotone_profile(points, kind):
    a, b = zip(*points, strict=True)
    c = TradeOffCurve(a, b, sampler="poisson", threat_model="isolated", kind=kind, method="h")
    assert c.alphas[0] == 0.0 and c.alphas[-1] == 1.0 and c.betas[-1] == 0.0
    assert np.all(np.diff(c.betas) <= 1e-15)
    # convex: every vertex on or below the chord of its neighbours
    a0, a1, a2 = c.alphas[:-2], c.alphas[1:-1], c.alphas[2:]
    b0, b1, b2 = c.betas[:-2], c.betas[1:-1], c.betas[2:]
    assert np.all((a1 - a0) * (b2 - b0) - (b1 - b0) * (a2 - a0) >= -1e-12)
    d = c.delta(np.linspace(0, 10, 50))
    assert np.all(np.diff(d) <= 1e-15)
    assert np.all(c(ALPHA) <= 1 - ALPHA + 1e-12) or kind == "lower"
