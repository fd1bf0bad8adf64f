"""The compiled route's own noise (audit.training.philox, audit.training.compiled.gaussian_rows):
Philox4x32-10 against its published known answers, the Box-Muller transform against numpy's float64,
and the law of the noise against the exact normal (scipy.stats.norm.sf) out to 6.5 standard
deviations.

Every statistical check below uses fixed keys and seeds and a two-sided tolerance of about 4.5
standard errors (or a Poisson p-value of 1e-5): some 40 checks, so a correct generator fails one
with probability below 1e-3, and the power of each is stated beside it.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from audit.sampling.factory import make_sampler
from audit.training import compiled, philox
from audit.training.canaries import CANARY_INDEX
from audit.training.engine import train
from audit.training.trials import build_problem

pytestmark = pytest.mark.skipif(not compiled.available(), reason="numba not installed")

KNOWN_ANSWERS = [  # Random123 1.14, examples/kat_vectors: "philox4x32 10" counter, key -> output
    ([0, 0, 0, 0], [0, 0], [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
    ([0xFFFFFFFF] * 4, [0xFFFFFFFF] * 2, [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
    (
        [0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0],
        [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1],
    ),
]

Z_TOLERANCE = 4.5
"""Standard errors allowed for an approximately normal statistic (two-sided p = 7e-6)."""

POISSON_P = 1e-5
"""Smallest two-sided p-value allowed for a count."""


def _count_is_consistent(count: int, expected: float) -> bool:
    """Two-sided Poisson test of a count of rare events (a binomial with p <= 0.05 is within
    a few percent of it in the tails tested here)."""
    lower = stats.poisson.cdf(count, expected)
    upper = stats.poisson.sf(count - 1, expected)
    return 2 * min(lower, upper) >= POISSON_P


@pytest.mark.parametrize(
    "run", [philox.philox4x32, compiled.philox4x32], ids=["python", "compiled"]
)
def test_philox_known_answers(run):
    for counter, key, expected in KNOWN_ANSWERS:
        assert run(np.array([counter], np.uint32), np.array(key, np.uint32))[0].tolist() == expected


def test_noise_key_splits_the_seed():
    assert philox.noise_key(0x0123456789ABCDEF).tolist() == [0x89ABCDEF, 0x01234567]
    with pytest.raises(ValueError, match=r"noise key: seed=-1 must be in \[0, 2\^64\)"):
        philox.noise_key(-1)


def _tail_row(key: np.ndarray, step: int, size: int) -> int:
    """A row whose noise at ``step`` has a far-tail pair (a first word below 2^20)."""
    counters = (size // 2 + 1) // 2
    for row in range(10_000):
        q = np.arange(counters, dtype=np.uint32)
        words = compiled.philox4x32(np.stack([q, 0 * q + step, 0 * q + row, 0 * q], axis=1), key)
        if (words[:, [0, 2]] < philox.TAIL_WORD).any():
            return row
    raise AssertionError("no far-tail pair in 10,000 rows")


@pytest.mark.parametrize("size", [130, 131, 2, 9])
def test_compiled_noise_is_its_python_source(size):
    """The compiled rows bit for bit against the same code run by Python, on rows that take the
    main path and on one with a far-tail pair; a row's noise does not depend on the other rows."""
    key = philox.noise_key(2**40 + 17)
    tail = _tail_row(key, 3, size)
    rows = np.array([tail, 0, 1, 5], np.uint32)
    out = np.empty((4, size), np.float32)
    compiled.gaussian_rows(out, np.tile(key, (4, 1)), rows, 3, 0.75)
    for i, row in enumerate(rows[:2]):  # the Python run is slow (numpy scalars)
        assert np.array_equal(out[i], philox.gaussian_row(key, 3, int(row), size, 0.75))
    alone = np.empty((1, size), np.float32)
    compiled.gaussian_rows(alone, key[None], rows[1:2], 3, 0.75)
    assert np.array_equal(alone[0], out[1])


def test_streams_differ_by_key_step_and_row():
    key = philox.noise_key(5)
    base = philox.gaussian_row(key, 0, 0, 64)
    for other in (
        philox.gaussian_row(philox.noise_key(6), 0, 0, 64),
        philox.gaussian_row(key, 1, 0, 64),
        philox.gaussian_row(key, 0, 1, 64),
        philox.gaussian_row(philox.noise_key(5 + 2**32), 0, 0, 64),
    ):
        assert not np.any(other == base)


def _reference_transform(first: np.ndarray, extra: np.ndarray, angle: np.ndarray) -> np.ndarray:
    """The transform of the module docstring in numpy float64 (np.log, np.sin, np.cos), rounded
    once to float32."""
    first, extra, angle = (w.astype(np.uint64) for w in (first, extra, angle))
    tail = first < int(philox.TAIL_WORD)
    u1 = np.where(tail, ((first << np.uint64(32)) | extra).astype(np.float64) + 0.5, 0.0) * 2.0**-64
    u1 = np.where(tail, u1, (first.astype(np.float64) + 0.5) * 2.0**-32)
    radius = np.sqrt(-2 * np.log(u1))
    phi = ((angle & np.uint64(0x1FFFFFFF)).astype(np.float64) + 0.5) * (np.pi / 4 / 2**29)
    swap = ((angle >> np.uint64(29)) & np.uint64(1)).astype(bool)
    z1 = np.where(swap, np.sin(phi), np.cos(phi)) * radius
    z2 = np.where(swap, np.cos(phi), np.sin(phi)) * radius
    z1 = np.where((angle >> np.uint64(30)) & np.uint64(1), -z1, z1)
    z2 = np.where(angle >> np.uint64(31), -z2, z2)
    return np.stack([z1, z2]).astype(np.float32)


def test_transform_is_float64_box_muller_rounded_once():
    """The compiled transform (own ln, sin, cos polynomials) against numpy's float64 functions:
    equal after the float32 rounding, or one float32 ulp apart where the exact value lies
    within the polynomials' 1e-13 of a rounding boundary (expected about 2e-6 of the values;
    allowed: 1e-4). Words over the whole range, the far tail and the extremes."""
    rng = np.random.default_rng(3)
    n = 400_000
    first = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    first[: n // 4] = rng.integers(0, 2**20, n // 4)  # far tail
    first[:4] = [0, 1, 2**20 - 1, 2**20]
    first[-2:] = [2**32 - 1, 2**31]
    extra = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    extra[:2] = [0, 2**32 - 1]
    angle = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    angle[:8] = [
        0,
        2**29 - 1,
        2**29,
        2**30,
        2**31,
        2**32 - 1,
        0x1FFFFFFF | 0xE0000000,
        0x20000000 | 0x80000000,
    ]
    got = compiled.box_muller(first, extra, angle)
    expected = _reference_transform(first, extra, angle)
    ulps = np.abs(got.astype(np.float64) - expected) / np.spacing(np.abs(expected)).astype(
        np.float64
    )
    assert ulps.max() <= 1.0
    assert (ulps > 0).mean() <= 1e-4
    assert np.array_equal(np.signbit(got), np.signbit(expected))
    assert abs(got).max() <= np.float32(np.sqrt(2 * 65 * np.log(2)))  # u1 >= 2^-65: |z| <= 9.49


def test_noise_law_moments_ks_and_tails():
    """2^25 = 33.5 M variates of the generator itself (2^25 / 660 rows x 660 parameters, 4 keys,
    64 steps): moments, Kolmogorov-Smirnov on the first 4.2 M, and the frequency of |z| > k
    against 2 norm.sf(k). Power at N = 2^25 (4.5 standard errors): the mean to 7.8e-4 std, the
    variance to 1.1e-3 relative, skewness to 1.9e-3, excess kurtosis to 3.8e-3; KS on 4.2 M
    detects a CDF error of 1e-3 (critical D at p = 1e-5: 1.1e-3); |z| > 4 (2,125 expected) to
    10% relative, |z| > 5 (19 expected) a doubling. float32 noise from 24-bit uniforms has no
    mass beyond 5.77 std; the far tail is tested with conditioned words below."""
    size, steps, keys = 660, 64, 4
    rows = 2**25 // (size * steps * keys)
    n = 0
    power_sums = np.zeros(5)
    thresholds = np.arange(1, 6)
    beyond = np.zeros(len(thresholds), dtype=np.int64)
    sample = []
    out = np.empty((rows, size), np.float32)
    for key_index in range(keys):
        key = np.tile(philox.noise_key(1000 + 7919 * key_index), (rows, 1))
        for step in range(steps):
            compiled.gaussian_rows(out, key, np.arange(rows, dtype=np.uint32), step, 1.0)
            z = out.astype(np.float64).ravel()
            square = z * z
            n += z.size
            power_sums += [
                z.size,
                z.sum(),
                square.sum(),
                (square * z).sum(),
                (square * square).sum(),
            ]
            beyond += [np.count_nonzero(square > k * k) for k in thresholds]
            if len(sample) < 32:
                sample.append(z[: 2**17])
    mean = power_sums[1] / n
    variance = power_sums[2] / n - mean**2
    skew = (power_sums[3] / n) / variance**1.5
    kurtosis = (power_sums[4] / n) / variance**2 - 3
    assert abs(mean) <= Z_TOLERANCE / np.sqrt(n)
    assert abs(variance - 1) <= Z_TOLERANCE * np.sqrt(2 / n)
    assert abs(skew) <= Z_TOLERANCE * np.sqrt(6 / n)
    assert abs(kurtosis) <= Z_TOLERANCE * np.sqrt(24 / n)
    assert stats.kstest(np.concatenate(sample), stats.norm.cdf).pvalue >= POISSON_P
    for k, count in zip(thresholds, beyond, strict=True):
        p = 2 * stats.norm.sf(k)
        if n * p > 1000:
            assert abs(count - n * p) <= Z_TOLERANCE * np.sqrt(n * p * (1 - p)), (k, count, n * p)
        else:
            assert _count_is_consistent(int(count), n * p), (k, count, n * p)


def test_far_tail_to_six_and_a_half_sigma():
    """The far-tail path (first word below 2^20, u1 < 2^-12, radius above r0 = sqrt(24 ln 2) =
    4.08) on 4 x 10^7 uniform words conditioned on it (numpy's PCG64), through the compiled
    transform: for s > r0, P(|Z1| > s | R > r0) = 2 norm.sf(s) 2^12 exactly. Expected counts
    per coordinate: 1.4e6 beyond 4.5, 5.6e4 beyond 5.5, 323 beyond 6 (a 25% error detected at
    p = 1e-5), 13 beyond 6.5; and R^2 - r0^2 is exponential with mean 2 (memoryless), KS on
    10^6 (a CDF error of 2e-3 detected)."""
    rng = np.random.default_rng(11)
    chunk, chunks = 2_500_000, 16
    levels = np.array([4.5, 5.0, 5.5, 6.0, 6.5])
    counts = np.zeros((2, len(levels)), dtype=np.int64)
    for index in range(chunks):
        first = rng.integers(0, 2**20, chunk, dtype=np.uint32)
        extra = rng.integers(0, 2**32, chunk, dtype=np.uint64).astype(np.uint32)
        angle = rng.integers(0, 2**32, chunk, dtype=np.uint64).astype(np.uint32)
        z = compiled.box_muller(first, extra, angle)
        size = np.abs(z)
        for i, level in enumerate(levels):
            counts[:, i] += (size > level).sum(1)
        if index == 0:
            head = z[:, : 10**6].astype(np.float64)
            excess = (head[0] ** 2 + head[1] ** 2) - 24 * np.log(2)
            assert stats.kstest(excess, stats.expon(scale=2).cdf).pvalue >= POISSON_P
    expected = chunk * chunks * 2 * stats.norm.sf(levels) * 2**12
    for coordinate in range(2):
        for level, count, mean in zip(levels, counts[coordinate], expected, strict=True):
            assert _count_is_consistent(int(count), mean), (coordinate, level, count, mean)


def test_route_observes_its_own_noise(training_config):
    """The compiled_philox route's Dirac observations are the Philox noise on the canary's
    coordinate plus the injected canary gradient, bit for bit: y_kt = (u_j N_kt[j] + C I_kt)/C,
    N_kt = gaussian_row(key of the stream, t, row, P, sigma C)."""
    config = training_config(model="logistic", clip=2.0, sigma=0.8)
    problem = build_problem(config)
    batches = make_sampler("poisson", n=config.n, batch_size=config.batch_size).sample(
        np.random.default_rng(2), 6
    )
    canary_in = np.array([True, True, True, False, False, False])
    seeds = (2**62 + 3, 12)
    noise = [(torch.Generator().manual_seed(seed), 3) for seed in seeds]
    out = train(problem, batches, canary_in, noise, route="compiled_philox")
    (j,) = np.flatnonzero(problem.canary.u)
    sign = problem.canary.u[j]
    keys = np.stack([philox.noise_key(seeds[k // 3]) for k in range(6)])
    rows = np.array([0, 1, 2, 0, 1, 2], np.uint32)
    for t in range(batches.shape[1]):
        noise_t = np.empty((6, problem.model.size), np.float32)  # tested against its source above
        compiled.gaussian_rows(noise_t, keys, rows, t, 0.8 * 2.0)
        for k in range(6):
            n_kt = noise_t[k, j]
            injected = np.float32(2.0) * np.float32(
                canary_in[k] and (batches[k, t] == CANARY_INDEX).any()
            )
            y_raw = np.float32(sign * n_kt) + injected
            assert out.y[k, t] == np.float64(y_raw) / 2.0 + problem.known


def test_noise_sources_give_the_same_law_of_observations(training_config):
    """The same trainings (batches) with torch's noise and with Philox: the canary's final
    projection IN and OUT have the same law (two-sample KS, p >= 1e-5; 600 trainings a side:
    detects a shift of 0.3 standard deviations), and differ draw by draw."""
    config = training_config(model="logistic", n=200, batch_size=5)
    problem = build_problem(config)
    k = 1200
    batches = make_sampler("poisson", n=config.n, batch_size=config.batch_size).sample(
        np.random.default_rng(4), k
    )
    canary_in = np.arange(k) < k // 2
    outputs = {}
    for route in ("compiled", "compiled_philox"):
        noise = [
            (torch.Generator().manual_seed(21), k // 2),
            (torch.Generator().manual_seed(22), k // 2),
        ]
        outputs[route] = train(problem, batches, canary_in, noise, route=route)
    torch_final, philox_final = outputs["compiled"].final, outputs["compiled_philox"].final
    assert not np.any(torch_final == philox_final)
    for side in (canary_in, ~canary_in):
        assert stats.ks_2samp(torch_final[side], philox_final[side]).pvalue >= POISSON_P
    assert np.array_equal(outputs["compiled"].batch_sizes, outputs["compiled_philox"].batch_sizes)
