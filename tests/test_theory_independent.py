"""audit.theory recomputed independently: each formula checked by another method.

No check here reuses the code under test for the quantity it checks: Monte Carlo of the max
statistic, quadrature of the lognormal moments, a fine-grid FFT composition of the per-epoch
max pair, and the exact law of a truncated-Poisson zero-out pair.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

from audit.theory.shuffle_adversarial import max_test_cdf, shuffle_max_test_lower
from audit.theory.shuffle_isolated import delta_be, isolated_exact_lattice, lognormal_moments
from audit.theory.truncated_poisson import truncated_poisson_upper


def _composed_delta(loss, weight, times, eps, rounding, d=1e-4):
    """delta(eps) of the ``times``-fold composition of a loss distribution, loss rounded
    down (a lower bracket of the true delta) or up (an upper bracket), by FFT."""
    k = (np.floor(loss / d) if rounding == "down" else np.ceil(loss / d)).astype(np.int64)
    k0 = k.min()
    h = np.bincount(k - k0, weights=weight)
    size = (len(h) - 1) * times + 1
    law = np.maximum(np.fft.irfft(np.fft.rfft(h, size) ** times, size), 0.0)
    losses = (np.arange(size) + times * k0) * d
    return np.array([(law * np.maximum(1 - np.exp(e - losses), 0.0)).sum() for e in eps])


@pytest.mark.parametrize("mean", [2.0, 1.0, 0.0])
def test_max_test_cdf_matches_monte_carlo(mean):
    # F_m(C) = Phi((C-m)/s) Phi(C/s)^(T-1) vs the empirical CDF of the max of T normals.
    # Binomial standard error sqrt(F(1-F)/N) <= 1.2e-3 at N = 2e5; 5 se: a false alarm
    # probability below 1e-6 per point.
    rng = np.random.default_rng(20261129)
    steps, sigma, n = 5, 1.2, 200_000
    y = rng.normal(0.0, sigma, (n, steps))
    y[:, 0] += mean
    top = y.max(axis=1)
    for c in (1.0, 2.0, 3.0):
        f = math.exp(float(max_test_cdf(np.array([c]), mean, sigma, steps)[0][0]))
        se = math.sqrt(f * (1 - f) / n)
        assert abs((top <= c).mean() - f) < 5 * se


@pytest.mark.parametrize("sigma", [0.8, 1.0, 2.0])
def test_lognormal_moments_match_quadrature(sigma):
    # Y = exp(X/sigma - 1/(2 sigma^2)), X ~ N(0,1): E Y = 1, Var Y = e^{1/sigma^2} - 1,
    # rho = E|Y - 1|^3, all by adaptive quadrature (relative error ~1e-10).
    def y(x):
        return math.exp(x / sigma - 0.5 / sigma**2)

    def moment(g):
        return integrate.quad(lambda x: g(y(x)) * stats.norm.pdf(x), -14, 14, limit=500,
                              points=[0.5 / sigma])[0]

    v, rho = lognormal_moments(sigma)
    assert moment(lambda t: t) == pytest.approx(1.0, rel=1e-8)
    assert moment(lambda t: (t - 1) ** 2) == pytest.approx(v, rel=1e-7)
    assert v == pytest.approx(math.expm1(1 / sigma**2), rel=1e-12)
    assert moment(lambda t: abs(t - 1) ** 3) == pytest.approx(rho, rel=1e-7)


def test_dynamic_max_test_lower_is_bracketed_by_fine_composition():
    # The E-fold composition of the per-epoch max pair (density of the max under P = MoG_T(2)
    # and Q = MoG_T(1)) on a fine grid, loss rounded down / up: the true delta lies in the
    # bracket. The lower curve is built from a dominated pair of the same max pair, so its
    # delta may not exceed the upper bracket (and should not be far below the lower one:
    # 1e-3 relative covers its stated lattice error at discretisation 1e-4).
    steps, sigma, epochs = 5, 1.2, 3
    x = np.linspace(-8, 14, 1_000_001)
    dx = x[1] - x[0]

    def pdf(m):
        a, b = stats.norm.cdf((x - m) / sigma), stats.norm.cdf(x / sigma)
        return (stats.norm.pdf((x - m) / sigma) * b ** (steps - 1)
                + (steps - 1) * a * stats.norm.pdf(x / sigma) * b ** (steps - 2)) / sigma * dx

    fp, fq = pdf(2.0), pdf(1.0)
    loss = np.log(fp) - np.log(fq)
    eps = np.array([0.5, 1.0, 2.0, 3.0])
    lo = _composed_delta(loss, fp, epochs, eps, "down")
    hi = _composed_delta(loss, fp, epochs, eps, "up")
    got = shuffle_max_test_lower("dynamic_shuffle", sigma, steps, epochs, "adversarial").delta(eps)
    assert np.all(got <= hi + 1e-9)
    assert np.all(got >= lo * (1 - 1e-3))


def test_persistent_max_test_is_one_epoch_at_sigma_over_sqrt_e():
    a = shuffle_max_test_lower("persistent_shuffle", 1.2, 5, 4, "adversarial")
    b = shuffle_max_test_lower("persistent_shuffle", 0.6, 5, 1, "adversarial")
    eps = np.array([0.0, 1.0, 3.0])
    np.testing.assert_allclose(a.delta(eps), b.delta(eps), rtol=1e-12)


@pytest.mark.parametrize(("sigma", "rounds"), [(2.0, 500), (3.0, 200)])
def test_delta_be_bounds_exact_total_variation(sigma, rounds):
    # delta_BE must bound TV(MoG_M(1), N(0, I_M)) (exact lattice TV: error O(h^2) ~ 1e-7).
    tv = isolated_exact_lattice(sigma, rounds).total_variation()
    assert tv <= delta_be(sigma, rounds) < 1.0


def test_truncated_upper_bounds_zero_out_pair_with_batch_revealed():
    # Zero-out truncated Poisson, n = 100, b = 10, B = 12, sigma = 1, 20 steps. The strongest
    # attacker also sees r = |batch without the canary|; given r the canary is in the sum with
    # probability pi_r (up to 0.25 here, above q = 0.1). That pair (exact r law, loss rounded
    # down: a lower bracket of its delta) must stay below the guarantee.
    n, q, big_b, sigma, steps = 100, 0.1, 12, 1.0, 20
    kp = stats.binom.pmf(np.arange(n), n - 1, q)
    kept = np.zeros(big_b + 1)
    total = np.zeros(big_b + 1)
    for k, w in enumerate(kp):
        if k + 1 <= big_b:
            kept[k] += q * w
            total[k] += q * w
        else:
            kept[big_b - 1] += q * w * big_b / (k + 1)
            total[big_b - 1] += q * w * big_b / (k + 1)
            total[big_b] += q * w * (1 - big_b / (k + 1))
        total[min(k, big_b)] += (1 - q) * w
    pi = kept / total
    y = np.linspace(-12, 13, 50_001)
    g0 = stats.norm.pdf(y / sigma) / sigma * (y[1] - y[0])
    g1 = stats.norm.pdf((y - 1) / sigma) / sigma * (y[1] - y[0])
    p = (total[:, None] * ((1 - pi)[:, None] * g0 + pi[:, None] * g1)).ravel()
    qq = (total[:, None] * g0[None, :]).ravel()
    ok = (p > 0) & (qq > 0)
    loss = np.log(p[ok]) - np.log(qq[ok])
    eps = np.array([0.5, 1.0, 2.0, 3.0])
    pair = np.maximum(_composed_delta(loss, p[ok], steps, eps, "down"),
                      _composed_delta(-loss, qq[ok], steps, eps, "down"))
    upper = truncated_poisson_upper(n, q, big_b, sigma, steps).delta(eps)
    assert np.all(pair <= upper)


def test_truncated_poisson_accountant_part_is_replace_one():
    """Zero-out neighbours are replace-one neighbours under truncation (the null record takes
    the canary's slot and displaces others as the canary does); dp_accounting's truncated PLD
    enters the guarantee for that relation, which is never tighter than add/remove."""
    import numpy as np
    from dp_accounting.pld import privacy_loss_distribution as pld_lib
    from dp_accounting.privacy_accountant import NeighboringRelation

    from audit.theory.truncated_poisson import _truncated_pld

    replace = _truncated_pld(200, 0.05, 12, 1.0, 5, 2e-4)
    add_remove = pld_lib.from_truncated_subsampled_gaussian_mechanism(
        dataset_size=200,
        sampling_probability=0.05,
        truncated_batch_size=12,
        noise_multiplier=1.0,
        value_discretization_interval=2e-4,
        neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
    ).self_compose(5)
    eps = np.array([0.5, 1.0, 2.0])
    assert all(replace.get_delta_for_epsilon(e) >= add_remove.get_delta_for_epsilon(e) for e in eps)
