"""The Edgeworth approximation of the isolated shuffle pair (audit.theory.edgeworth).

Tolerances come from the expansion's error order (see each test): the two-term expansion's
CDF error is the third-order term T_3 = O(M^{-3/2}) plus O(M^{-2}); the E-fold Gaussian
limit's relative error in total variation is O(1/M) at fixed c^2 = E / M.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from audit.run.claims import claim_for
from audit.run.spec import TrainingKey, parse_spec
from audit.stats.binary import verdict
from audit.theory import Bounds, TradeOffCurve, privacy_bounds
from audit.theory.calibration import sigma_for
from audit.theory.edgeworth import (
    _standardised,
    edgeworth_cdf,
    edgeworth_curve,
    edgeworth_term,
    lognormal_cumulants,
    multi_epoch_curve,
    multi_epoch_mu,
    multi_epoch_separation,
    sum_cumulants,
)
from audit.theory.shuffle_isolated import isolated_exact_curve, isolated_exact_lattice

Z = np.linspace(-10.0, 10.0, 4001)


@pytest.mark.parametrize("sigma", [0.7, 1.0, 2.0, 5.0])
def test_cumulants_in_closed_form_match_scipy_lognormal(sigma: float) -> None:
    s = 1.0 / sigma
    k = lognormal_cumulants(sigma, 4)
    _mean, var, skew, kurt = stats.lognorm(s, scale=math.exp(-(s**2) / 2)).stats("mvsk")
    w = math.exp(s**2)
    assert k[0] == pytest.approx(1.0, rel=1e-12)
    assert k[1] == pytest.approx(w - 1, rel=1e-12) and k[1] == pytest.approx(float(var), rel=1e-9)
    assert k[2] == pytest.approx((w - 1) ** 2 * (w + 2), rel=1e-12)
    assert k[2] == pytest.approx(float(skew) * float(var) ** 1.5, rel=1e-9)
    assert k[3] == pytest.approx(float(kurt) * float(var) ** 2, rel=1e-9)
    # H1 with one round: the size-biased Y~ = w Y has cumulants w^r kappa_r
    assert sum_cumulants(sigma, 1, "H1", 4) == pytest.approx(
        [w**r * k[r - 1] for r in (1, 2, 3, 4)]
    )


def test_cumulants_are_accurate_for_large_sigma() -> None:
    """kappa_3 = (w - 1)^2 (w + 2) ~ 3 s^4: tiny differences of O(1) moments, kept by decimals."""
    s2 = 1e-4  # sigma = 100
    w1 = math.expm1(s2)
    assert lognormal_cumulants(100.0, 3)[2] == pytest.approx(w1**2 * (w1 + 3), rel=1e-12)


@pytest.mark.parametrize(("sigma", "rounds", "h"), [
    (2.0, 30, 0.002), (2.0, 100, 0.002), (2.0, 300, 0.002), (1.0, 10_000, None),
])
def test_two_term_edgeworth_cdf_against_the_lattice_law(
    sigma: float, rounds: int, h: float | None
) -> None:
    """Two-term Edgeworth CDFs of S under H0 and H1 against the FFT lattice law of S.

    Error order: for i.i.d. summands with a density (Cramer's condition) and all moments,
    F - F_2 = T_3 + O(M^{-2}) uniformly, T_3 = O(M^{-3/2}) the third Edgeworth term (Petrov
    1975, Thm VI.4). We check that the cases are in the asymptotic regime, sup|T_4| <=
    sup|T_3| / 2, so that the tail T_3 + T_4 + ... of a geometric-like series is at most
    2 sup|T_3|: tolerance = 2 sup|T_3| + the lattice's own error. The lattice CDF at the
    point s_k = k h is the true CDF at s_k + h/2 (nearest-point rounding) up to O(h^2); its
    error is estimated by Richardson from the lattice at 2h: |F_h - F_2h| / 3, doubled.
    """
    lat = isolated_exact_lattice(sigma, rounds, h)
    coarse = isolated_exact_lattice(sigma, rounds, 2 * lat.h)
    for hyp, law, law2 in (("H0", lat.q, coarse.q), ("H1", lat.p, coarse.p)):
        _, _, lambdas = _standardised(sum_cumulants(sigma, rounds, hyp, 6))
        t3 = np.abs(edgeworth_term(Z, lambdas, 3)).max()
        t4 = np.abs(edgeworth_term(Z, lambdas, 4)).max()
        assert t4 <= t3 / 2, "not in the asymptotic regime: the tolerance below would not hold"
        cdf = np.cumsum(law)
        cdf2 = np.cumsum(law2)
        at = coarse.s[: len(cdf2)]  # points of the 2h lattice, every other point of the h one
        lattice_err = (
            np.abs(np.interp(at, lat.s, cdf) - cdf2).max() / 3 if lat.h < coarse.h else 0.0
        )
        s = lat.s + lat.h / 2
        inside = (cdf > 1e-14) & (cdf < 1 - 1e-14)
        two, _ = edgeworth_cdf(s, sigma, rounds, hyp, terms=2)
        one, _ = edgeworth_cdf(s, sigma, rounds, hyp, terms=1)
        err2 = np.abs(two - cdf)[inside].max()
        err1 = np.abs(one - cdf)[inside].max()
        assert err2 <= 2 * t3 + 2 * lattice_err, (hyp, err2, t3, lattice_err)
        assert err2 < err1  # the second term helps
        if sigma == 2.0:  # sup|T_4| <= sup|T_3| / 3 here: the error is T_3 to within a half
            assert err2 >= 0.5 * t3 - 2 * lattice_err


def test_edgeworth_error_falls_like_m_to_the_minus_three_halves() -> None:
    """sup|T_3| M^{3/2} does not depend on M (lambda_r M^{(r-2)/2} is fixed under H0)."""
    consts = []
    for rounds in (100, 1000, 10_000):
        _, _, lambdas = _standardised(sum_cumulants(2.0, rounds, "H0", 5))
        consts.append(np.abs(edgeworth_term(Z, lambdas, 3)).max() * rounds**1.5)
    assert consts == pytest.approx([consts[0]] * 3, rel=1e-6)


def test_edgeworth_curve_is_an_approximation_close_to_the_exact_curve() -> None:
    """TV = sup_s (Q(S <= s) - P(S <= s)) moves by at most the sum of both CDF errors."""
    sigma, rounds = 2.0, 100
    curve = edgeworth_curve(sigma, rounds)
    assert curve.kind == "approximation" and "approximation" in curve.method
    exact = isolated_exact_curve(sigma, rounds)
    tol = 0
    for hyp in ("H0", "H1"):
        _, _, lambdas = _standardised(sum_cumulants(sigma, rounds, hyp, 5))
        tol += 2 * np.abs(edgeworth_term(Z, lambdas, 3)).max()
    assert abs(float(curve.delta(0.0)) - float(exact.delta(0.0))) <= tol + 1e-6  # + lattice


def test_isolated_shuffle_bounds_carry_the_approximation_but_not_among_the_bounds() -> None:
    b = privacy_bounds("dynamic_shuffle", sigma=2.0, steps_per_epoch=100, epochs=2,
                       threat_model="isolated")
    assert b.approximation is not None and b.approximation.kind == "approximation"
    assert all(c.kind != "approximation" for c in b.curves())
    adv = privacy_bounds(
        "dynamic_shuffle", sigma=2.0, steps_per_epoch=100, threat_model="adversarial"
    )
    assert adv.approximation is None


def test_approximation_kind_is_symmetrised_like_exact() -> None:
    a = np.linspace(0, 1, 101)
    b = (1 - a) ** 3
    kw = {"sampler": "dynamic_shuffle", "threat_model": "isolated", "method": "m"}
    approx = TradeOffCurve(a, b, kind="approximation", **kw)
    exact = TradeOffCurve(a, b, kind="exact", **kw)
    np.testing.assert_array_equal(approx.alphas, exact.alphas)
    np.testing.assert_array_equal(approx.betas, exact.betas)


def test_an_approximation_is_refused_as_a_claim_or_a_bound() -> None:
    approx = edgeworth_curve(2.0, 100)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="approximation"):
        verdict(rng.normal(1, 1, 200), rng.normal(0, 1, 200), approx, threshold="split")
    spec = parse_spec({
        "mode": "simulate", "seed": 5, "samplers": ["dynamic_shuffle"], "attacks": ["max"],
        "trials_in": 100, "trials_out": 100, "claim": "sampler",
        "training": {"sigma": 2.0, "batch_size": 1, "n": 100},
    })
    mechanism = spec.mechanism(TrainingKey("dynamic_shuffle", "isolated"))
    with pytest.raises(ValueError, match="approximation"):
        claim_for(spec, mechanism, {mechanism: Bounds(mechanism, approx, None)})
    with pytest.raises(ValueError, match="bound"):
        sigma_for(1.0, 1e-5, "deterministic", steps_per_epoch=10, bound="approximation")


def test_multi_epoch_mu_formula() -> None:
    assert multi_epoch_mu(1.0, 1000, 10) == pytest.approx(math.sqrt(10 * (math.e - 1) / 1000))
    mu = multi_epoch_mu(2.0, 100, 10)
    assert multi_epoch_separation(2.0, 100, 10) == pytest.approx(2 * stats.norm.cdf(mu / 2) - 1)
    curve = multi_epoch_curve(2.0, 100, 10)
    assert curve.kind == "approximation"
    assert float(curve.delta(0.0)) == pytest.approx(multi_epoch_separation(2.0, 100, 10), rel=1e-9)


@pytest.mark.parametrize(("sigma", "rounds", "epochs"), [(2.0, 100, 1), (1.0, 100, 10)])
def test_multi_epoch_separation_against_composed_exact_curves(
    sigma: float, rounds: int, epochs: int
) -> None:
    """The E-fold TV tends to 2 Phi(mu/2) - 1, mu = sqrt(E (e^{1/sigma^2} - 1)/M) (Cor. 5.3).

    At fixed c^2 = E / M the relative error r(M) = TV_exact / TV_limit - 1 is O(1/M) (the
    delta-method corrections to the mean and variance of log L are O(1/M) relative, and the
    skewness term of the E-fold loss cancels in TV at first order since it is the same under
    H0 and H1). So ten times the rounds at the same c must give at most a fifth of the error
    (1/10 from the order, a factor 2 of margin for the next order), plus 1e-4 relative for the
    numerical composition (PLD discretisation 1e-4 of the loss, lattice h = 0.005).
    """
    r = []
    for m, e in ((rounds, epochs), (10 * rounds, 10 * epochs)):
        tv = float(isolated_exact_curve(sigma, m, e).delta(0.0))
        r.append(tv / multi_epoch_separation(sigma, m, e) - 1)
    assert abs(r[1]) <= 0.2 * abs(r[0]) + 1e-4, r
    assert abs(r[0]) < 0.05  # and the limit is already a usable description at the small size
