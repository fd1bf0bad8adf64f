"""The compiled route's own noise (audit.training.philox, audit.training.compiled.gaussian_rows):
Philox4x32-10 against its published known answers, the ziggurat's tables and core, and the law of
the noise against the exact normal (scipy.stats.norm.sf) out to 6.5 standard deviations.

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
    """A row whose noise at ``step`` has a main word in the ziggurat's tail (layer 0, outside its
    core |x| < r): the slow path's tail loop."""
    counters = (size + 3) // 4
    for row in range(20_000):
        q = np.arange(counters, dtype=np.uint32)
        words = compiled.philox4x32(np.stack([q, 0 * q + step, 0 * q + row, 0 * q], axis=1), key)
        words = words.T.ravel()[:size]  # variate j takes word j div Q of counter j mod Q
        layer0 = (words & 0xFF) == 0
        signed = (words.view(np.int32) >> 8).astype(np.float64) + 0.5
        if (layer0 & (np.abs(signed) * 2.0**-23 * philox._ZIG_X[0] >= philox._ZIG_R)).any():
            return row
    raise AssertionError("no tail word in 20,000 rows")


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


def test_ziggurat_tables():
    """The 256 layers have equal areas v to 1e-12 relative: the base r f(r) + sqrt(2 pi) norm.sf(r)
    (the rectangle and the tail), layer i >= 1 x_i (f(x_{i+1}) - f(x_i)), the top layer
    x_255 (1 - f(x_255)); together they cover the half-line's area sqrt(pi / 2)."""
    r, v, x, f = philox.ziggurat_tables()
    assert x.shape == f.shape == (257,) and x[1] == r and x[-1] == 0.0 and f[-1] == 1.0
    assert np.all(np.diff(x) < 0)
    np.testing.assert_allclose(f[:-1], np.exp(-x[:-1] ** 2 / 2), rtol=1e-15)
    np.testing.assert_allclose(x[0] * f[1], v, rtol=1e-12)
    np.testing.assert_allclose(r * f[1] + np.sqrt(2 * np.pi) * stats.norm.sf(r), v, rtol=1e-12)
    np.testing.assert_allclose(x[1:-1] * (f[2:] - f[1:-1]), v, rtol=1e-12)
    assert philox.LAYERS * v > np.sqrt(np.pi / 2)


def _python_variates(words: np.ndarray, key: np.ndarray, step: int, row: int) -> np.ndarray:
    """:func:`audit.training.philox._variates` run by Python (numpy scalars)."""
    out = np.empty(words.shape[0], np.float32)
    with np.errstate(over="ignore"):
        philox._variates(words, np.asarray(key, np.uint32), step, row, 0.5, out)
    return out


def test_core_words_are_their_abscissae():
    """A word inside its layer's core gives z = (2 s + 1) x_i 2^-24 (s its signed high 24 bits)
    in float32: 2 s + 1 exact, the table x_i 2^-24 and the product rounded, then std z rounded:
    bit for bit that formula, and within three float32 roundings (3 x 2^-24 relative) of the exact
    std (s + 1/2) x_i 2^-23; the float32 core test differs from the exact one only for words
    within 2.4e-7 relative of a core's edge; 1.49% of uniform words fall outside the cores
    (binomial sd 0.03% on 2e5 words); the compiled transform is its Python source bit for bit,
    slow paths included."""
    rng = np.random.default_rng(3)
    words = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32)
    words[:4] = [0, 0xFFFFFF00, 0x7FFFFFFF, 0x80000000]
    key = philox.noise_key(9)
    got = compiled.ziggurat_variates(words, key, 4, 7, 0.5)
    layer = (words & 0xFF).astype(np.int64)
    signed = words.view(np.int32) >> 8
    odd = signed.astype(np.float32) * np.float32(2) + np.float32(1)
    x32 = odd * philox._ZIG_STEP32[layer]
    core = np.abs(x32) < philox._ZIG_CORE32[layer]
    assert np.array_equal(got[core], np.float32(0.5) * x32[core])
    exact = (signed.astype(np.float64) + 0.5) * (philox._ZIG_X[layer] * 2.0**-23)
    relative = np.abs(got[core] - 0.5 * exact[core]) / np.abs(0.5 * exact[core])
    assert relative.max() <= 3 * 2.0**-24
    exact_core = np.abs(exact) < philox._ZIG_X[layer + 1]
    edge = np.abs(np.abs(exact) / philox._ZIG_X[layer + 1] - 1)
    assert np.all(edge[core != exact_core] < 2.4e-7)
    assert abs((~core).mean() - 0.01492) < 4.5 * np.sqrt(0.01492 / words.size)
    head = slice(0, 3000)  # about 45 slow words
    assert np.array_equal(got[head], _python_variates(words[head], key, 4, 7))


def test_noise_law_moments_ks_and_tails():
    """2^25 = 33.5 M variates of the generator itself (2^25 / 660 rows x 660 parameters, 4 keys,
    64 steps): moments, Kolmogorov-Smirnov on the first 4.2 M, and the frequency of |z| > k
    against 2 norm.sf(k). Power at N = 2^25 (4.5 standard errors): the mean to 7.8e-4 std, the
    variance to 1.1e-3 relative, skewness to 1.9e-3, excess kurtosis to 3.8e-3; KS on 4.2 M
    detects a CDF error of 1e-3 (critical D at p = 1e-5: 1.1e-3); |z| > 4 (2,125 expected) to
    10% relative, |z| > 5 (19 expected) a doubling. The wedges (1.5% of the words) are inside
    these statistics; the tail beyond r = 3.65 (0.026%) is tested with conditioned words below."""
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
    """The ziggurat's tail path (layer 0 outside its core, |z| > r = 3.654) on 2 x 10^7 words
    conditioned on it (numpy's PCG64; the tail's own draws from Philox counters), through the
    compiled transform: P(|Z| > s | |Z| > r) = norm.sf(s) / norm.sf(r) exactly. Expected counts:
    1.6e6 beyond 4.5, 3.1e4 beyond 5.5, 153 beyond 6 (a 40% error detected at p = 1e-5), 6 beyond
    6.5; the sign is a fair coin (4.5 standard errors: a bias of 5e-4); KS of |Z| against the
    conditional law on 10^6 (a CDF error of 2.2e-3 detected)."""
    r, _, x, _ = philox.ziggurat_tables()
    rng = np.random.default_rng(11)
    chunk, chunks = 2_500_000, 8
    lowest = int(np.ceil(r / x[0] * 2**23 - 0.5))  # |s + 1/2| 2^-23 x_0 >= r: outside the core
    levels = np.array([4.5, 5.0, 5.5, 6.0, 6.5])
    counts = np.zeros(len(levels), dtype=np.int64)
    positive = 0
    key = philox.noise_key(2**33 + 5)
    for index in range(chunks):
        size = rng.integers(lowest, 2**23, chunk)
        signed = np.where(rng.integers(0, 2, chunk) == 1, size, -size - 1)
        words = (signed << 8).astype(np.int32).view(np.uint32)  # layer 0
        z = compiled.ziggurat_variates(words, key, 0, index).astype(np.float64)
        assert np.all(np.abs(z) >= np.float32(r)) and np.array_equal(z > 0, signed > 0)
        positive += int((z > 0).sum())
        counts += [(np.abs(z) > level).sum() for level in levels]
        if index == 0:
            law = lambda v: 1 - stats.norm.sf(v) / stats.norm.sf(r)  # noqa: E731
            assert stats.kstest(np.abs(z[: 10**6]), law).pvalue >= POISSON_P
    n = chunk * chunks
    assert abs(positive - n / 2) <= Z_TOLERANCE * np.sqrt(n / 4)
    expected = n * stats.norm.sf(levels) / stats.norm.sf(r)
    for level, count, mean in zip(levels, counts, expected, strict=True):
        assert _count_is_consistent(int(count), mean), (level, count, mean)


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
    (flat,) = np.flatnonzero(problem.canary.u)
    sign = problem.canary.u[flat]
    # variate j of a row is the parameter at position j of the kernel's class-major layout
    j = compiled.kernel_coordinate(int(flat), problem.model.classes, problem.model.size)
    assert compiled.kernel_order(problem.canary.u, problem.model.classes)[j] == sign
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


@pytest.mark.parametrize("threat_model", ["isolated", "adversarial"])
def test_training_block_by_block_is_step_by_step(training_config, threat_model):
    """compiled.philox_training (all T steps of a block of models before the next block) against
    the step-by-step loop (every model's noise then kernel at step t, for t = 0 .. T - 1): the
    same parameters, observations and batch sizes bit for bit, for blocks of 1, 3 and 64 models
    (the models are independent and their noise a function of their address)."""
    from audit.training.models import augment

    config = training_config(model="logistic", clip=2.0, sigma=0.8, threat_model=threat_model)
    problem = build_problem(config)
    k = 7
    batches = make_sampler("poisson", n=config.n, batch_size=config.batch_size).sample(
        np.random.default_rng(5), k
    )
    steps = batches.shape[1]
    xa = augment(torch.as_tensor(problem.x, dtype=torch.float32))
    data = (
        compiled.padded_rows(xa.numpy()),
        xa.square().sum(-1).numpy(),
        np.asarray(problem.y, np.int64),
    )
    (j,) = np.flatnonzero(problem.canary.u)
    rules = compiled.step_rules(
        CANARY_INDEX, problem.canary.injected, threat_model == "adversarial", int(j)
    )
    canary_in = np.arange(k) % 2 == 0
    u = np.asarray(problem.canary.u, np.float32)
    keys = np.stack([philox.noise_key(2**40 + i // 4) for i in range(k)])
    rows = (np.arange(k) % 4).astype(np.uint32)
    index = np.ascontiguousarray(batches, dtype=np.int32)
    features = problem.model.features + 1
    start = compiled.transposed_weights(np.asarray(problem.theta0, np.float32)[None], features)
    std, alpha = 0.8 * 2.0, np.float32(-config.lr / config.batch_size)

    def fresh():
        weights = np.broadcast_to(start, (k, *start.shape[1:])).copy()
        return weights, np.zeros((k, steps)), np.zeros((k, steps), np.int32)

    weights, observed, sizes = fresh()
    noise = np.empty((k, problem.model.size), np.float32)
    for t in range(steps):
        compiled.gaussian_rows(noise, keys, rows, t, std)
        compiled.logistic_step(
            weights, noise, *data, index[:, t], canary_in, rules, u, 2.0, alpha,
            observed[:, t], sizes[:, t],
        )
    for block in (1, 3, 64):
        blocked = fresh()
        scratch = np.empty((min(block, k), problem.model.size), np.float32)
        compiled.philox_training(
            block, blocked[0], scratch, keys, rows, std, *data, index, canary_in, rules, u, 2.0,
            alpha, blocked[1], blocked[2],
        )
        for got, expected in zip(blocked, (weights, observed, sizes), strict=True):
            assert np.array_equal(got, expected)
