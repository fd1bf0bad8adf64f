"""Low noise (issue 26): the random-allocation pair on the octave lattice, and truncated Poisson's
zero-out count-revealing pair, each against an independent computation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from audit.theory import privacy_bounds
from audit.theory.poisson import poisson_upper
from audit.theory.random_allocation_octave import (
    OctaveLaw,
    octave_allocation_upper,
    octave_leaf,
    octave_sum,
    random_allocation_bounds,
    sum_log_error,
)
from audit.theory.shuffle_isolated import isolated_exact_curve
from audit.theory.truncated_poisson import inclusion_probability, truncated_poisson_lower
from audit.theory.truncated_poisson_zero_out import count_mixture, zero_out_truncated_upper

# pld-accounting 2.0 (Feldman & Shenfeld's accountant), eps(1e-5) brackets (its upper, its
# lower) from gaussian_allocation_epsilon_range(delta=1e-5, sigma=S, num_steps=T,
# num_epochs=E) (default accuracy; bench/random_allocation.py --low-noise recomputes them).
PLD_ACCOUNTING = {
    (0.3, 10, 1): (16.837650762253535, 16.804827486717283),
    (0.5, 10, 1): (7.70453683987284, 7.6713532296246),
    (0.7, 10, 1): (4.378885679677969, 4.345684398406457),
    (0.3, 10, 10): (76.88552210781639, 76.73755646199045),
    (0.5, 1000, 1): (3.1460679303748824, 3.125507588113131),
    (0.6, 100, 10): (6.8778692162166335, 6.79002595057786),
    (1.0, 50, 2): (1.258256718463492, 1.2021653275377941),
    (2.0, 100, 3): (0.32149968906641363, 0.30710892642396037),
}


def _eps(curve) -> float:
    return float(curve.epsilon(1e-5))


@pytest.mark.parametrize(("key", "bracket"), list(PLD_ACCOUNTING.items()))
def test_octave_upper_within_five_percent_of_pld_accounting(key, bracket):
    """Issue 26: never below pld-accounting's lower end (both are sound brackets of one eps),
    within 5% of its upper end."""
    sigma, m, e = key
    ours = _eps(octave_allocation_upper(sigma, m, e))
    assert bracket[1] <= ours <= 1.05 * bracket[0]


@pytest.mark.slow
def test_octave_upper_live_pld_accounting():
    pld_accounting = pytest.importorskip("PLD_accounting")
    up, lo = pld_accounting.gaussian_allocation_epsilon_range(
        delta=1e-5, sigma=0.6, num_steps=5, num_epochs=1)
    ours = _eps(octave_allocation_upper(0.6, 5, 1))
    assert lo <= ours <= 1.05 * up


@pytest.mark.parametrize(("sigma", "m", "sampler", "epochs"), [
    (0.8, 10, "dynamic_shuffle", 1),
    (1.6, 20, "persistent_shuffle", 4),
])
def test_octave_upper_below_the_exact_curve(sigma, m, sampler, epochs):
    """A guarantee lies below the exact one-epoch curve (the FFT law of S; its O(h^2) error
    about 1e-7: 1e-6)."""
    a = np.linspace(0.0, 1.0, 401)
    upper = octave_allocation_upper(sigma, m, epochs, sampler=sampler)
    exact = isolated_exact_curve(sigma, m, epochs, sampler=sampler)
    assert np.all(upper(a) <= exact(a) + 1e-6)
    assert _eps(exact) <= _eps(upper) <= 1.02 * _eps(exact)


def test_persistent_is_one_epoch_at_sigma_over_sqrt_e():
    a = octave_allocation_upper(0.8, 30, 4, sampler="persistent_shuffle")
    b = octave_allocation_upper(0.4, 30, 1, sampler="persistent_shuffle")
    assert _eps(a) == pytest.approx(_eps(b), rel=1e-12)


def test_octave_sum_is_the_law_of_the_sum():
    """Leaf and sum laws: total mass 1, E S = M (E Y = 1) up to the stated relative error, and the
    P-law of S equals the size-biased Q-law (s / M) dQ_S(s) up to the same rounding."""
    s, n = 1.0 / 0.6, 1024
    leaf_q = octave_leaf(s, 0.0, -40, 60, n)
    leaf_p = octave_leaf(s, s, -40, 60, n)
    for leaf in (leaf_q, leaf_p):
        assert leaf.pmf.sum() + leaf.zero + leaf.over == pytest.approx(1.0, abs=1e-12)
    two = octave_sum(leaf_q, leaf_q)
    four = octave_sum(two, two)
    mixed = octave_sum(octave_sum(two, leaf_q), leaf_p)  # 3 Q rounds and the canary
    for law, mean in ((two, 2.0), (four, 4.0), (mixed, 3.0 + math.exp(s * s))):
        v = law.values()
        total = law.pmf.sum() + law.zero + law.over
        assert total == pytest.approx(1.0, abs=1e-12)
        # E S' = E S e^{+-a} (up to the tail beyond top, 1e-19 of mass)
        assert abs(math.log((law.pmf * v).sum() / mean)) <= law.log_error
    assert four.log_error == pytest.approx(leaf_q.log_error + 2 * sum_log_error(n))
    # size bias: P(S > x) vs E_Q[S / M; S > x] with M = 4 (both up to e^{2a} in x)
    q4 = four.pmf.ravel()
    v = four.values().ravel()
    p4 = mixed.pmf.ravel()
    for x in (2.0, 4.0, 8.0, 32.0):
        biased = (q4 * v / 4.0)[v > x].sum()
        assert (p4[v > x * 1.01]).sum() <= biased * 1.001 + 1e-15
        assert (p4[v > x / 1.01]).sum() >= biased * 0.999 - 1e-15


def test_octave_law_is_a_frozen_record():
    leaf = octave_leaf(1.0, 0.0, -10, 20, 128)
    assert isinstance(leaf, OctaveLaw) and leaf.depth == 1 and leaf.leaves == 1
    with pytest.raises(AttributeError):
        leaf.zero = 0.5  # type: ignore[misc]


def test_method_lists_every_error_term():
    upper = octave_allocation_upper(0.4, 100, 2)
    assert upper.kind == "upper"
    for term in ("octave lattice", "loss shift a", "tree depth", "PLD rounding", "float error"):
        assert term in upper.method


def test_combined_bounds_where_the_linear_lattice_does_not_fit():
    ra = random_allocation_bounds(0.4, 50, 1)
    assert ra.lower is None and "no random-allocation lattice test" in ra.notes[0]
    b = privacy_bounds("dynamic_shuffle", sigma=0.4, steps_per_epoch=50, threat_model="isolated")
    assert _eps(b.upper) <= _eps(ra.upper) + 1e-9 < _eps(privacy_bounds(
        "deterministic", sigma=0.4, steps_per_epoch=50).upper)
    assert _eps(b.lower) <= _eps(b.upper)


@pytest.mark.parametrize(("field", "kwargs"), [
    ("mantissa", {"mantissa": 1000}),
    ("mantissa", {"mantissa": 2**20}),
    ("sigma", {"sigma": 0.0}),
    ("rounds", {"rounds": 0}),
    ("relative_accuracy", {"relative_accuracy": -1.0}),
])
def test_bad_input_names_the_field(field, kwargs):
    args = {"sigma": 0.5, "rounds": 10} | kwargs
    with pytest.raises(ValueError, match=field):
        octave_allocation_upper(args.pop("sigma"), args.pop("rounds"), **args)


def test_octave_refuses_another_canary_law():
    with pytest.raises(ValueError, match="poisson"):
        octave_allocation_upper(0.5, 10, sampler="poisson")


# --------------------------------------------------------------------------------------
# Truncated Poisson, zero-out: the count-revealing pair


def _pair_delta(n, q, big_b, sigma, steps, eps, rounding, d=1e-4):
    """delta(eps) of the count-revealing pair by a direct grid (independent of dp_accounting):
    the law of r = |kept others| enumerated K by K, Gaussian densities on a fine y grid, the
    per-step loss rounded down (a lower bracket) or up (an upper bracket of the grid pair),
    composed by FFT; both directions."""
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
    pi = np.divide(kept, total, out=np.zeros_like(kept), where=total > 0)
    y = np.linspace(-10, 11, 12_001)
    g0 = stats.norm.pdf(y / sigma) / sigma * (y[1] - y[0])
    g1 = stats.norm.pdf((y - 1) / sigma) / sigma * (y[1] - y[0])
    p = (total[:, None] * ((1 - pi)[:, None] * g0 + pi[:, None] * g1)).ravel()
    qq = (total[:, None] * g0[None, :]).ravel()
    ok = (p > 0) & (qq > 0)
    loss = np.log(p[ok]) - np.log(qq[ok])
    out = []
    for sign, weight in ((1.0, p[ok]), (-1.0, qq[ok])):
        lo = sign * loss
        k = (np.floor(lo / d) if rounding == "down" else np.ceil(lo / d)).astype(np.int64)
        k0 = k.min()
        h = np.bincount(k - k0, weights=weight)
        size = (len(h) - 1) * steps + 1
        law = np.maximum(np.fft.irfft(np.fft.rfft(h, size) ** steps, size), 0.0)
        losses = (np.arange(size) + steps * k0) * d
        out.append([(law * np.maximum(1 - np.exp(e - losses), 0.0)).sum() for e in eps])
    return np.max(np.array(out), axis=0)


def test_count_mixture_inclusion_is_p_prime():
    for n, q, big_b in ((1500, 0.01, 20), (100, 0.1, 12), (1000, 0.001, 12)):
        mix = count_mixture(n, q, big_b)
        assert sum(mix.weights) == pytest.approx(1.0, abs=1e-12)
        assert mix.inclusion == pytest.approx(inclusion_probability(n, q, big_b), rel=1e-10)


def test_zero_out_pair_matches_a_direct_computation():
    """dp_accounting's pessimistic PLDs of the mixture's components vs the direct grid pair:
    grid(down) <= ours, and ours below grid(up) (whose rounding, d = 5e-4 per step over 5
    steps, already exceeds dp_accounting's 1e-4) up to 5% in delta."""
    n, q, big_b, sigma, steps = 100, 0.1, 12, 1.0, 5
    eps = np.array([0.5, 1.0, 2.0])
    ours = zero_out_truncated_upper(n, q, big_b, sigma, steps).delta(eps)
    down = _pair_delta(n, q, big_b, sigma, steps, eps, "down", d=5e-4)
    up = _pair_delta(n, q, big_b, sigma, steps, eps, "up", d=5e-4)
    assert np.all(down <= ours)
    assert np.all(ours <= up * 1.05)


def test_zero_out_pair_between_isolated_lower_and_poisson_limits():
    n, b, big_b, sigma, steps = 1500, 15, 20, 1.0, 20
    q = b / n
    upper = zero_out_truncated_upper(n, q, big_b, sigma, steps)
    lower = truncated_poisson_lower(n, q, big_b, sigma, steps)
    assert _eps(lower) <= _eps(upper) <= 2.0 * _eps(lower)  # the gap the pair leaves open
    # B far above the batch: no truncation, the pair is Poisson's
    far = zero_out_truncated_upper(n, q, 200, sigma, steps)
    assert _eps(far) == pytest.approx(_eps(poisson_upper(q, sigma, steps)), rel=1e-6)


@pytest.mark.slow
def test_truncated_poisson_upper_uses_the_zero_out_pair():
    """runs/one-run-vs-multi's cell: the guarantee was 4.38 (dp_accounting's replace-one
    truncated PLD); the count-revealing pair brings it to about 1.02."""
    n, b, big_b, sigma, steps = 1500, 15, 20, 1.0, 100
    upper = zero_out_truncated_upper(n, b / n, big_b, sigma, steps)
    bounds = privacy_bounds("truncated_poisson", sigma=sigma, steps_per_epoch=100, n=n,
                            max_batch_size=big_b)
    assert _eps(bounds.upper) <= _eps(upper) + 1e-9
    assert "zero-out count-revealing pair" in bounds.upper.method


def test_sigma_for_uses_the_octave_guarantee_at_low_noise():
    """Calibration: with the octave lattice the isolated shuffle's upper eps at sigma 0.5, T 20
    is the random-allocation one, far below the deterministic curve's."""
    from audit.core.mechanism import Mechanism
    from audit.theory.calibration import shuffle_epsilon_at

    m = Mechanism(sampler="dynamic_shuffle", sigma=0.5, steps_per_epoch=20, epochs=1,
                  threat_model="isolated")
    eps = shuffle_epsilon_at(m, 1e-5, "upper")
    assert eps == pytest.approx(_eps(octave_allocation_upper(0.5, 20, 1)), rel=1e-9)
    assert eps < 0.8 * _eps(privacy_bounds("deterministic", sigma=0.5, steps_per_epoch=20).upper)
