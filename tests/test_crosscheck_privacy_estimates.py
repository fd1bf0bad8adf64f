"""Cross-checks with an anchor: the harness's Bayesian eps interval and Clopper-Pearson bound
against Microsoft's privacy-estimates (0.1.0.post1; Zanella-Beguelin et al., ICML 2023) on the
same counts (issue 34 item 7).

- ``compute_eps_lo(method="beta")`` is the union-bound Clopper-Pearson bound at alpha/2 per rate,
  the harness's ``epsilon_from_rates(clopper_pearson_upper(., alpha/2))``: same scipy quantiles,
  same formula, so rtol 1e-9.
- ``Beta(count).eps_lo(delta, alpha=q)`` is the q-quantile of eps under the independent Jeffreys
  posteriors of FPR and FNR (the probability of the (eps, delta) region, by ``dblquad`` at
  epsabs 5e-3, root at xtol 1e-2); the harness's :func:`bayesian_epsilon` the same quantiles by
  Monte Carlo (200,000 draws). The arbiter is an independent 1-D quadrature of the posterior CDF
  P[eps <= e] = int f_FPR(x) Pr[FNR >= L_e(x)] dx, L_e(x) = max(0, 1 - delta - e^e x,
  e^-e (1 - delta - x)), at epsrel 1e-11. Tolerances: the harness within 5 Monte Carlo standard
  errors sqrt(q (1 - q) / N) / f(e_q) of it, f the posterior density of eps (finite
  differences); privacy-estimates within 1e-2 + 5e-3 / f(e_q) (its root and integration
  tolerances). One difference of scope: privacy-estimates' region also counts the reversed test
  above the diagonal FPR + FNR > 1, which the harness floors at 0; the counts here put no
  posterior mass there (FPR + FNR < 0.7 by > 20 sd).

The privacy-estimates quantiles take about 10 s each (``dblquad``): marked slow.
"""

from __future__ import annotations

import math

import pytest
from scipy import integrate, optimize, stats

pe = pytest.importorskip("privacy_estimates")

from audit.stats.binary import clopper_pearson_upper, epsilon_from_rates  # noqa: E402
from audit.stats.estimates import DRAWS, bayesian_epsilon  # noqa: E402

# (FP, n_out, FN, n_in, delta)
COUNTS = [(20, 1000, 300, 1000, 1e-5), (5, 2000, 600, 2000, 1e-5), (100, 1000, 100, 1000, 0.0)]


def _counts(fp: int, n_out: int, fn: int, n_in: int) -> object:
    return pe.AttackResults(FN=fn, FP=fp, TN=n_out - fp, TP=n_in - fn)


def _cdf(e: float, fp: int, n_out: int, fn: int, n_in: int, delta: float) -> float:
    """P[eps <= e] under the Jeffreys posteriors, by 1-D quadrature (module docstring)."""
    fpr = stats.beta(fp + 0.5, n_out - fp + 0.5)
    fnr = stats.beta(fn + 0.5, n_in - fn + 0.5)

    def lower(x: float) -> float:
        return max(0.0, 1 - delta - math.exp(e) * x, math.exp(-e) * (1 - delta - x))

    value, _ = integrate.quad(
        lambda x: fpr.pdf(x) * fnr.sf(lower(x)),
        fpr.ppf(1e-14),
        fpr.isf(1e-14),
        epsabs=1e-13,
        epsrel=1e-11,
        limit=500,
        points=[fpr.mean()],
    )
    return float(value)


def _quantile(q: float, *args: float) -> tuple[float, float]:
    """(e_q, f(e_q)): the posterior q-quantile of eps and its density there."""
    e = optimize.brentq(lambda x: _cdf(x, *args) - q, 0.0, 20.0, xtol=1e-12)
    h = 1e-3
    return e, (_cdf(e + h, *args) - _cdf(e - h, *args)) / (2 * h)


@pytest.mark.parametrize("delta", [0.0, 1e-5, 1e-2])
@pytest.mark.parametrize(("fp", "n_out", "fn", "n_in"), [c[:4] for c in COUNTS])
def test_clopper_pearson_matches(fp: int, n_out: int, fn: int, n_in: int, delta: float) -> None:
    theirs = pe.compute_eps_lo(_counts(fp, n_out, fn, n_in), delta, 0.05, "beta")
    ours = float(
        epsilon_from_rates(
            clopper_pearson_upper(fp, n_out, 0.025), clopper_pearson_upper(fn, n_in, 0.025), delta
        )
    )
    assert ours == pytest.approx(theirs, rel=1e-9)


@pytest.mark.parametrize(("fp", "n_out", "fn", "n_in", "delta"), COUNTS)
def test_harness_bayesian_interval_against_quadrature(
    fp: int, n_out: int, fn: int, n_in: int, delta: float
) -> None:
    ours = bayesian_epsilon(fp, n_out, fn, n_in, delta=delta, level=0.95)
    for q, value in (
        (0.025, ours.epsilon_lo),
        (0.5, ours.epsilon_median),
        (0.975, ours.epsilon_hi),
    ):
        exact, density = _quantile(q, fp, n_out, fn, n_in, delta)
        se = math.sqrt(q * (1 - q) / DRAWS) / density
        assert abs(value - exact) <= 5 * se, (q, value, exact, se)


@pytest.mark.slow
def test_privacy_estimates_bayesian_interval_matches() -> None:
    fp, n_out, fn, n_in, delta = COUNTS[0]
    model = pe.Beta(_counts(fp, n_out, fn, n_in))
    ours = bayesian_epsilon(fp, n_out, fn, n_in, delta=delta, level=0.95)
    for q, theirs, mine in (
        (0.025, model.eps_lo(delta=delta, alpha=0.025), ours.epsilon_lo),
        (0.975, model.eps_hi(delta=delta, alpha=0.025), ours.epsilon_hi),
    ):
        exact, density = _quantile(q, fp, n_out, fn, n_in, delta)
        assert abs(theirs - exact) <= 1e-2 + 5e-3 / density, (q, theirs, exact)
        assert (
            abs(mine - theirs)
            <= 1e-2 + 5e-3 / density + 5 * math.sqrt(q * (1 - q) / DRAWS) / density
        )
