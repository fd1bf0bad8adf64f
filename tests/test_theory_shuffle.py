"""Shuffle curves: max-test lower bounds, Berry-Esseen guarantee, exact isolated curve."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from audit.theory import privacy_bounds
from audit.theory.shuffle_adversarial import _max_cells, max_test_points
from audit.theory.shuffle_isolated import (
    berry_esseen_applies,
    berry_esseen_curve,
    delta_be,
    isolated_exact_lattice,
    lognormal_moments,
)

A = np.concatenate((np.logspace(-9, -1, 80), np.linspace(0.1, 1, 91)))


def test_max_test_points_against_simulation():
    """FPR/FNR of "max > C" by simulation: within 4 binomial standard errors."""
    rng = np.random.default_rng(0)
    sigma, T, n = 1.0, 50, 40_000
    fpr, fnr = max_test_points(sigma, T, "adversarial", size=2001)
    c_grid = np.linspace(*_grid_bounds(sigma, T), 2001)
    i = int(np.argmin(np.abs(fpr - 0.1)))
    c = c_grid[i]
    y = rng.normal(0.0, sigma, (n, T))
    y_q, y_p = y.copy(), y.copy()
    y_q[:, 0] += 1.0
    y_p[:, 0] += 2.0
    fpr_hat = float((y_q.max(axis=1) > c).mean())
    fnr_hat = float((y_p.max(axis=1) <= c).mean())
    for est, exact in ((fpr_hat, fpr[i]), (fnr_hat, fnr[i])):
        assert abs(est - exact) < 4 * math.sqrt(exact * (1 - exact) / n)


def _grid_bounds(sigma, T):
    from audit.theory.shuffle_adversarial import _grid

    g = _grid(2.0, 1.0, sigma, T, 3)
    return g[0], g[-1]


def test_persistent_is_one_epoch_at_reduced_sigma():
    p = privacy_bounds("persistent_shuffle", sigma=1.2, steps_per_epoch=30, epochs=4).lower
    one = privacy_bounds("persistent_shuffle", sigma=0.6, steps_per_epoch=30, epochs=1).lower
    np.testing.assert_allclose(p(A), one(A), atol=1e-12)


def test_dynamic_composition_between_optimistic_and_pessimistic_pld():
    """The dominated lattice pair's composition lies between dp_accounting's optimistic and
    pessimistic estimates for the same per-epoch pair (and it is achieved by a test)."""
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    d = privacy_bounds("dynamic_shuffle", sigma=0.8, steps_per_epoch=100, epochs=5).lower
    p, q = _max_cells(0.8, 100, "adversarial", 5000)
    lp = {i: math.log(v) for i, v in enumerate(p) if v > 0}
    lq = {i: math.log(v) for i, v in enumerate(q) if v > 0}
    bounds = []
    for pessimistic in (False, True):
        pld = pld_lib.from_two_probability_mass_functions(
            lq, lp, pessimistic_estimate=pessimistic, symmetric=False
        ).self_compose(5)
        bounds.append(float(pld.get_delta_for_epsilon(1.0)))
    assert bounds[0] <= float(d.delta(1.0)) <= bounds[1]


def test_lognormal_moments_closed_form():
    for sigma in (0.7, 1.0, 2.0):
        s = 1 / sigma
        x = np.linspace(-14, 14, 400_001)
        y = np.exp(s * x - s * s / 2)
        w = stats.norm.pdf(x) * (x[1] - x[0])
        v, rho = lognormal_moments(sigma)
        assert v == pytest.approx(((y - 1) ** 2 * w).sum(), rel=1e-6)
        assert rho == pytest.approx((np.abs(y - 1) ** 3 * w).sum(), rel=1e-5)


def test_berry_esseen_bounds_monte_carlo_on_small_M():
    """delta_BE bounds TV, and each Berry-Esseen step holds, by simulation (M = 30, sigma = 2).

    Tolerances: 4 binomial standard errors of the simulated probabilities (n = 2e5).
    """
    rng = np.random.default_rng(1)
    sigma, M, n = 2.0, 30, 200_000
    assert berry_esseen_applies(sigma, M)
    s = 1 / sigma
    x = rng.standard_normal((n, M))
    s_q = np.exp(s * x - s * s / 2).sum(axis=1)
    x[:, 0] += s  # the canary's round under P: X + 1/sigma
    s_p = np.exp(s * x - s * s / 2).sum(axis=1)
    q_le, p_le = float((s_q <= M).mean()), float((s_p <= M).mean())
    tol = 4 * math.sqrt(0.25 / n)
    tv_hat = q_le - p_le
    assert tv_hat <= delta_be(sigma, M) + 2 * tol
    # the exact lattice TV agrees with the simulation
    exact_tv = isolated_exact_lattice(sigma, M, 0.005).total_variation()
    assert abs(tv_hat - exact_tv) < 2 * tol
    # the Berry-Esseen step under Q at x = M: |Q(S <= M) - 1/2| <= C_1 rho / (v^1.5 sqrt(M))
    v, rho = lognormal_moments(sigma)
    assert abs(q_le - 0.5) <= 0.4748 * rho / (v**1.5 * math.sqrt(M)) + tol


def test_exact_curve_bracketed_by_be_upper_and_max_test_lower():
    """Where the Berry-Esseen bound applies: upper <= exact <= lower (as curves)."""
    for sampler, epochs in (
        ("dynamic_shuffle", 1),
        ("dynamic_shuffle", 3),
        ("persistent_shuffle", 2),
    ):
        b = privacy_bounds(sampler, sigma=2.5, steps_per_epoch=1000, epochs=epochs,
                           threat_model="isolated")
        assert "Berry-Esseen" in b.upper.method
        assert b.exact is not None
        assert np.all(b.upper(A) <= b.exact(A) + 1e-9)
        assert np.all(b.exact(A) <= b.lower(A) + 1e-6)  # 1e-6: lattice error of the exact curve
        be = berry_esseen_curve(2.5, 1000, epochs, sampler=sampler)
        assert float(b.exact.delta(0.0)) <= 1 - float(be(0.0))  # TV <= 1 - (1 - delta_BE)^E


def test_berry_esseen_outside_regime_is_absent():
    assert not berry_esseen_applies(0.5, 100)  # sqrt(3 / ln 100) = 0.81
    assert berry_esseen_curve(0.5, 100) is None
    b = privacy_bounds("dynamic_shuffle", sigma=0.5, steps_per_epoch=100, threat_model="isolated")
    assert any("does not apply" in note for note in b.notes)
    assert "Berry-Esseen" not in b.upper.method


def test_exact_curve_refuses_small_sigma():
    with pytest.raises(ValueError, match="too small"):
        isolated_exact_lattice(0.3, 100)
    b = privacy_bounds("dynamic_shuffle", sigma=0.3, steps_per_epoch=100, threat_model="isolated")
    assert b.exact is None and any("no exact curve" in note for note in b.notes)


def test_exact_lattice_converges_as_h_squared():
    tv = [isolated_exact_lattice(1.0, 10, h).total_variation() for h in (0.02, 0.01, 0.005)]
    e1, e2 = tv[0] - tv[1], tv[1] - tv[2]
    assert 3.0 < e1 / e2 < 5.0  # ratio 4 for O(h^2)


@settings(max_examples=12, deadline=None)
@given(
    st.sampled_from(["persistent_shuffle", "dynamic_shuffle"]),
    st.sampled_from(["isolated", "adversarial"]),
    st.floats(0.6, 3.0),
    st.integers(2, 200),
    st.integers(1, 3),
)
def test_shuffle_lower_below_upper_and_deterministic(sampler, threat, sigma, steps, epochs):
    b = privacy_bounds(sampler, sigma=sigma, steps_per_epoch=steps, epochs=epochs,
                       threat_model=threat)
    det = privacy_bounds("deterministic", sigma=sigma, steps_per_epoch=steps, epochs=epochs)
    # as privacy losses: lower <= upper <= deterministic; as curves the order reverses.
    # 1e-9 absorbs float rounding in the lattice compositions
    assert np.all(b.lower(A) >= b.upper(A) - 1e-9)
    assert np.all(b.lower(A) >= det.upper(A) - 1e-9)
    eps = np.linspace(0, 8, 33)
    for c in b.curves():
        d = c.delta(eps)
        assert np.all(np.diff(d) <= 1e-12)
        assert np.all(np.diff(c(A)) <= 1e-12)
