"""Issue 11, items 1 and 2: theory curves exact in their tails, lower curves achieved.

Every reference here is computed without the code under test (tests/independent_references.py:
dp_accounting's accountants and PLDs, mpmath closed forms, our own FFT composition of the
max-test pair); only ``privacy_bounds``' curves and the ``check-accountant`` CLI are exercised.

Tolerances (stated once, used throughout):

- ``upper`` against its source: eps(delta) >= eps_src(delta) (1 - 1e-6) and delta(eps) >=
  delta_src(eps) (1 - 1e-6) - 1e-300 (the issue's 1e-6 relative; 1e-300: underflow). Where the
  source's eps is infinite (its infinity mass exceeds delta) the curve's must be too. On the curve
  itself: 1 - f(alpha) >= (1 - F(alpha)) (1 - 1e-9) - 2.3e-16, F the curve the source certifies: a
  curve stored as a float beta = f(alpha) resolves 1 - beta only to one ulp of 1 (1.1e-16), twice
  that for the source's own float sums; 1e-9 relative is float error of a tail sum.
- ``lower`` below ``upper``: delta_lower(eps) <= delta_upper(eps) (1 + 1e-9) + 1e-14: a delta
  formed as 1 - beta - e^eps alpha from probabilities near 1 is resolved to a few ulps of 1
  (1.1e-16 each); the worst excess measured on the fixed curves is 7.3e-17 (the one-epoch
  max-test ROC against the GDP curve at delta ~ 1e-16).
- ``lower`` against a dp_accounting PLD (a different object): 1 - lower(a) <= (1 - F(a))
  (1 + 1e-9) + 1e-12. dp_accounting's FFT compositions leave round-off of 3e-19 to 5e-18 per
  atom over 1e5 to 1e6 atoms (measured: negative entries totalling -7.7e-14 and -1.6e-13 in
  the two directions of Poisson q = 0.01, sigma 1, T = 1000), so its deltas below 1e-12 are
  not resolved.
"""

from __future__ import annotations

import json
import math
import re

import independent_references as ref
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from audit.cli import main
from audit.theory import privacy_bounds

UPPER_REL = 1e-6
UNDERFLOW = 1e-300  # deltas below this are float underflow (GDP's 7e-318 at eps 38.5, mu 1)
CURVE_REL, CURVE_ABS = 1e-9, 2.3e-16
ORDER_REL, ORDER_ABS = 1e-9, 1e-14
PLD_RESOLUTION = 1e-12
DELTAS = np.array([1e-15, 1e-12, 1e-10, 1e-8, 1e-6, 1e-5, 1e-3, 1e-2, 0.1, 0.5])
EPS_GRID = np.linspace(0.0, 60.0, 1201)
ALPHAS = np.logspace(-45, math.log10(0.5), 91)


def stated_discretisation(method: str) -> float:
    """The PLD discretisation a curve states in its ``method`` (the source's own parameter)."""
    found = re.search(r"discretisation ([0-9.]+(?:e-?[0-9]+)?)", method)
    assert found, f"the curve does not state its discretisation: {method!r}"
    return float(found.group(1))


def poisson_upper_source(bounds):
    """dp_accounting's pessimistic PLD at the discretisation the upper curve states."""
    m = bounds.mechanism
    d = stated_discretisation(bounds.upper.method)
    return ref.poisson_pld(m.sampling_probability, m.sigma, m.total_steps, d), d


def assert_upper_curve_below(curve, gap_source, alphas=ALPHAS):
    """curve(a) <= F(a) + tol, i.e. 1 - curve(a) >= (1 - F(a)) (1 - 1e-9) - 2.3e-16."""
    gap = 1.0 - np.asarray(curve(alphas), dtype=float)
    bad = gap < gap_source * (1 - CURVE_REL) - CURVE_ABS
    assert not bad.any(), (
        "upper curve above its source's curve (1 - f vs 1 - F) at alpha = "
        + ", ".join(
            f"{a:.3g}: {g:.6g} < {s:.6g}"
            for a, g, s in list(zip(alphas[bad], gap[bad], gap_source[bad], strict=True))[:6]
        )
    )


# --------------------------------------------------------------------------------------
# Item 1: upper curves understate epsilon at small delta (exact reproductions)
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("threat_model", ["isolated", "adversarial"])
def test_poisson_upper_at_small_delta_is_at_least_dp_accountings_pld(threat_model):
    """Issue 11 item 1: q = 0.001, sigma 0.3, T = 1000. dp_accounting's PLDAccountant with
    PoissonSampledDpEvent(0.001, GaussianDpEvent(0.3)) composed 1000 times gives eps(1e-6) =
    21.678 and delta(21.5) = 1.12e-6; the guarantee built from that PLD may not be smaller
    (today: 20.81 and 1e-15)."""
    b = privacy_bounds("poisson", sigma=0.3, steps_per_epoch=1000, epochs=1,
                       threat_model=threat_model)
    d = stated_discretisation(b.upper.method)
    acc = ref.poisson_accountant(0.001, 0.3, 1000, d)
    eps_src, delta_src = acc.get_epsilon(1e-6), acc.get_delta(21.5)
    if d == 1e-4:  # the numbers
        assert eps_src == pytest.approx(21.678, abs=1e-3)
        assert delta_src == pytest.approx(1.12e-6, rel=0.01)
    assert float(b.upper.epsilon(1e-6)) >= eps_src * (1 - UPPER_REL)
    assert float(b.upper.delta(21.5)) >= delta_src * (1 - UPPER_REL)


def test_poisson_upper_q005_sigma06_T200():
    """Issue 11 item 1: q = 0.05, sigma 0.6, T = 200: eps(1e-8) >= dp_accounting's 21.85
    (today 18.63)."""
    b = privacy_bounds("poisson", sigma=0.6, steps_per_epoch=20, epochs=10)
    assert b.mechanism.sampling_probability == 0.05 and b.mechanism.total_steps == 200
    d = stated_discretisation(b.upper.method)
    eps_src = ref.poisson_accountant(0.05, 0.6, 200, d).get_epsilon(1e-8)
    if d == 1e-4:
        assert eps_src == pytest.approx(21.85, abs=0.01)
    assert float(b.upper.epsilon(1e-8)) >= eps_src * (1 - UPPER_REL)


# --------------------------------------------------------------------------------------
# Item 2: PLD-based lower curves overstate epsilon (exact reproductions)
# --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_dynamic_shuffle_lower_is_achieved_by_the_composed_max_test_pair():
    """Issue 11 item 2: dynamic shuffle, adversarial, T = 100, E = 5, sigma 0.8. The lower
    curve is claimed achieved by the E-fold composed max-test pair, so its eps(1e-6) may not
    exceed that pair's. Our own fine-cell FFT composition brackets the pair's eps(1e-6) in
    [14.11039, 14.11047] (the issue's independent bracket: [14.11036, 14.11046]); the lower
    curve gives 14.1302 today."""
    lo, hi = ref.max_pair_bracket(0.8, 100, 5, "adversarial").epsilon(1e-6)
    assert 14.1103 <= lo <= hi <= 14.1105  # our bracket agrees with the issue's
    b = privacy_bounds("dynamic_shuffle", sigma=0.8, steps_per_epoch=100, epochs=5,
                       threat_model="adversarial")
    assert float(b.lower.epsilon(1e-6)) <= hi * (1 + 1e-9)


def test_poisson_lower_below_pessimistic_upper_q01_sigma1_T100():
    """Issue 11 item 2: q = 0.1, sigma 1, T = 100. A lower curve is achieved, so its eps(1e-8)
    is at most the truth, which is at most dp_accounting's pessimistic PLD's (9.9427), and at
    most the upper curve's (today 9.9436 exceeds both)."""
    b = privacy_bounds("poisson", sigma=1.0, steps_per_epoch=10, epochs=10, threat_model="isolated")
    assert b.mechanism.sampling_probability == 0.1 and b.mechanism.total_steps == 100
    pld, _ = poisson_upper_source(b)
    eps_src = pld.get_epsilon_for_delta(1e-8)
    lower = float(b.lower.epsilon(1e-8))
    assert lower <= eps_src * (1 + 1e-9)
    assert lower <= float(b.upper.epsilon(1e-8)) * (1 + 1e-9)


@pytest.mark.slow
def test_check_accountant_does_not_call_the_max_test_pair_value_unsound(
    tmp_path, monkeypatch, capsys
):
    """Issue 11 item 2: a grid holding only the dynamic-shuffle cell (adversarial, T = 100,
    E = 5, sigma 0.8, delta 1e-6) and an accountant claiming 14.1104 (the composed max-test
    pair's eps, a correct claim for that pair): ``audit check-accountant`` must not say
    ``unsound`` (today: exit 1)."""
    (tmp_path / "claim_max_pair.py").write_text(
        "def claim(mechanism, delta):\n    return 14.1104\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps([{
        "sampler": "dynamic_shuffle", "threat_model": "adversarial", "sigma": 0.8,
        "steps_per_epoch": 100, "epochs": 5, "delta": 1e-6,
    }]))
    code = main(["check-accountant", "claim_max_pair:claim", "--grid", str(grid), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert [c["status"] for c in report["cells"]] != ["unsound"], report["cells"]
    assert code == 0


# --------------------------------------------------------------------------------------
# Deliver 1: every upper curve is at least its source, in eps, delta and on the curve
# --------------------------------------------------------------------------------------

POISSON_SOURCE_CELLS = [  # (sigma, steps_per_epoch, epochs): q = 1/T
    (0.3, 1000, 1),  # the issue's: large eps at small delta
    (0.6, 20, 10),   # the issue's: q = 0.05
    (1.0, 100, 10),  # dp_accounting eps(1e-5) = 1.8282
    (2.0, 10, 10),   # dp_accounting eps(1e-5) = 2.3374
]


@pytest.mark.parametrize(("sigma", "steps", "epochs"), POISSON_SOURCE_CELLS)
def test_poisson_upper_is_at_least_the_pessimistic_pld(sigma, steps, epochs):
    """The Poisson guarantee is dp_accounting's pessimistic PLD (a dominating pair): its
    eps(delta) for delta in [1e-15, 0.5] and delta(eps) for eps in [0, 60] may not be below the
    PLD's (1e-6 relative), and its curve may not be above the curve the PLD's profile
    certifies (F, exact over the PLD's lattice), at alpha down to 1e-45."""
    b = privacy_bounds("poisson", sigma=sigma, steps_per_epoch=steps, epochs=epochs)
    pld, _ = poisson_upper_source(b)
    eps_src = np.array([pld.get_epsilon_for_delta(float(d)) for d in DELTAS])
    eps_up = b.upper.epsilon(DELTAS)
    assert np.all(eps_up >= eps_src * (1 - UPPER_REL)), list(
        zip(DELTAS, eps_up, eps_src, strict=True)
    )
    delta_src = np.asarray(pld.get_delta_for_epsilon(EPS_GRID))
    delta_up = b.upper.delta(EPS_GRID)
    bad = delta_up < delta_src * (1 - UPPER_REL) - UNDERFLOW
    assert not bad.any(), list(zip(EPS_GRID[bad], delta_up[bad], delta_src[bad], strict=True))[:5]
    assert_upper_curve_below(b.upper, ref.certified_gap(ref.pld_profiles(pld), ALPHAS))


@pytest.mark.parametrize(("sigma", "epochs"), [(0.3, 1), (0.8, 5), (1.0, 1), (5.0, 100)])
@pytest.mark.parametrize("sampler", ["deterministic", "persistent_shuffle", "dynamic_shuffle"])
def test_gdp_upper_is_at_least_the_closed_form(sampler, sigma, epochs):
    """Deterministic batches are exactly mu-GDP, mu = sqrt(E)/sigma, and the same curve is the
    shuffles' adversarial guarantee: eps(delta) and delta(eps) at least the closed form (mpmath,
    50 digits) to 1e-6 relative, and the curve not above G_mu at alpha down to 1e-45."""
    b = privacy_bounds(sampler, sigma=sigma, steps_per_epoch=10, epochs=epochs,
                       threat_model="adversarial")
    mu = math.sqrt(epochs) / sigma
    eps_src = np.array([ref.gdp_epsilon(float(d), mu) for d in DELTAS])
    assert np.all(b.upper.epsilon(DELTAS) >= eps_src * (1 - UPPER_REL))
    eps = EPS_GRID[::10]
    delta_src = np.array([ref.gdp_delta(float(e), mu) for e in eps])
    assert np.all(b.upper.delta(eps) >= delta_src * (1 - UPPER_REL) - UNDERFLOW)
    alphas = ALPHAS[::3]
    gap = np.array([1.0 - ref.gdp_tradeoff(float(a), mu) for a in alphas])
    assert_upper_curve_below(b.upper, gap, alphas)


@pytest.mark.slow
def test_truncated_poisson_upper_is_below_its_sources():
    """Truncated Poisson's guarantee is the pointwise maximum of three guarantees (module
    audit/theory/truncated_poisson.py): the coupling bound delta_P(eps) + (1 + e^eps) T E
    Pr[Bin(n, q) > B] on dp_accounting's pessimistic Poisson PLD (Chua et al. 2024, Thm 3.3)
    and dp_accounting's TruncatedSubsampledGaussian PLD for replace-one (discretisation 2e-4,
    the module's default). The maximum of two curves has an eps(delta) that can be below
    both, so the check is on the curve: f(a) <= max(F_coupling(a), F_truncated(a)), each F the
    curve its profile certifies (exact over the lattice). Here B = 20 makes the coupling term
    4e-17 (1 + e^eps), so the coupling inherits the Poisson PLD's tail (issue 11 item 1)."""
    from scipy import stats

    n, b_size, big_b, sigma, steps = 1000, 1, 20, 0.3, 1000
    q = b_size / n
    bounds = privacy_bounds("truncated_poisson", sigma=sigma, steps_per_epoch=steps, n=n,
                            max_batch_size=big_b)
    poisson = privacy_bounds("poisson", sigma=sigma, steps_per_epoch=steps)
    pld, _ = poisson_upper_source(poisson)
    extra = steps * float(stats.binom.sf(big_b, n, q))
    f_coupling = ref.certified_gap(ref.pld_profiles(pld), ALPHAS, extra=extra)
    f_truncated = ref.certified_gap(
        ref.pld_profiles(ref.truncated_pld(n, q, big_b, sigma, steps, 2e-4)), ALPHAS)
    # the third guarantee (issue 26): the zero-out count-revealing pair's pessimistic PLD
    from audit.theory.truncated_poisson_zero_out import zero_out_truncated_pld

    f_zero_out = ref.certified_gap(
        ref.pld_profiles(zero_out_truncated_pld(n, q, big_b, sigma, steps, 1e-4)), ALPHAS)
    assert_upper_curve_below(bounds.upper, np.minimum(np.minimum(f_coupling, f_truncated),
                                                      f_zero_out))


# --------------------------------------------------------------------------------------
# Deliver 2: lower curves achieved; lower below upper everywhere
# --------------------------------------------------------------------------------------

SAMPLERS = ["deterministic", "poisson", "truncated_poisson", "persistent_shuffle",
            "dynamic_shuffle"]
THREATS = ["isolated", "adversarial"]
GRID = [(0.5, 10, 1), (1.0, 20, 3), (2.0, 100, 2)]  # (sigma, T, E)


def bounds_of(sampler, threat_model, sigma, steps, epochs):
    extra = {"n": 4 * steps, "max_batch_size": 8} if sampler == "truncated_poisson" else {}
    return privacy_bounds(sampler, sigma=sigma, steps_per_epoch=steps, epochs=epochs,
                          threat_model=threat_model, **extra)


def assert_lower_below_upper(b):
    lo, up = b.lower.delta(EPS_GRID), b.upper.delta(EPS_GRID)
    bad = lo > up * (1 + ORDER_REL) + ORDER_ABS
    assert not bad.any(), (
        f"{b.mechanism}: lower delta above upper at eps = "
        + ", ".join(f"{e:g}: {x:.6g} > {y:.6g}"
                    for e, x, y in list(zip(EPS_GRID[bad], lo[bad], up[bad], strict=True))[:5])
    )


@pytest.mark.slow
@pytest.mark.parametrize("threat_model", THREATS)
@pytest.mark.parametrize("sampler", SAMPLERS)
def test_lower_delta_below_upper_delta_on_the_grid(sampler, threat_model):
    """lower.delta(eps) <= upper.delta(eps) (1 + 1e-9) + 1e-14 for eps in [0, 60] (1201
    points), every sampler x threat model x (sigma, T, E) in a fixed grid: a curve achieved
    by a pair can never be more private than a guarantee."""
    # truncated Poisson's replace-one PLD is slow to build (pure Python): two grid points
    for sigma, steps, epochs in GRID[:2] if sampler == "truncated_poisson" else GRID:
        assert_lower_below_upper(bounds_of(sampler, threat_model, sigma, steps, epochs))


@pytest.mark.slow
@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(
    sampler=st.sampled_from([s for s in SAMPLERS if s != "truncated_poisson"]),
    threat_model=st.sampled_from(THREATS),
    sigma=st.sampled_from([0.4, 0.7, 1.3, 3.0]),
    steps=st.sampled_from([5, 50, 200]),
    epochs=st.integers(1, 4),
)
def test_lower_delta_below_upper_delta_hypothesis(sampler, threat_model, sigma, steps, epochs):
    """The same order on a few more mechanisms drawn by hypothesis (fixed seed, 6 examples;
    truncated Poisson, slow to build, only on the fixed grid)."""
    assert_lower_below_upper(bounds_of(sampler, threat_model, sigma, steps, epochs))


@pytest.mark.parametrize(("sigma", "steps", "epochs"), POISSON_SOURCE_CELLS)
def test_poisson_lower_curve_above_what_the_pessimistic_pld_certifies(sigma, steps, epochs):
    """The Poisson lower curve is achieved by a pair dominated by the mechanism, so it lies on
    or above the true curve, which lies on or above the curve F certified by the pessimistic
    PLD: 1 - lower(a) <= (1 - F(a)) (1 + 1e-9) + 1e-12 at alpha down to 1e-45."""
    b = privacy_bounds("poisson", sigma=sigma, steps_per_epoch=steps, epochs=epochs)
    pld, _ = poisson_upper_source(b)
    gap_src = ref.certified_gap(ref.pld_profiles(pld), ALPHAS)
    gap = 1.0 - np.asarray(b.lower(ALPHAS), dtype=float)
    bad = gap > gap_src * (1 + CURVE_REL) + PLD_RESOLUTION
    assert not bad.any(), list(zip(ALPHAS[bad], gap[bad], gap_src[bad], strict=True))[:5]
