"""The engine on a GPU (``device = "cuda"``): the same trainings as on the CPU, the right noise law,
reproducible shards. Skipped where torch sees no GPU (CI); run on a machine with one:
``python -m pytest tests/test_cuda.py``.

Tolerances: float32 throughout. Without noise (sigma = 1e-9, so every draw is below 1e-8) a CPU
and a GPU training of the same batches differ only by the summation order of the products
(MKL vs cuBLAS); after T steps of lr/b-scaled updates the parameters agree to a few float32
ulps times T, so 1e-4 absolute on parameters of order 1 leaves a factor ~10 of margin over
T = 20 steps of 1e-6 each. The noise law: the statistics are exact normal / chi-square
quantities at level ALPHA (not tuned; fixed seeds).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from audit.sampling.factory import make_sampler
from audit.training.engine import train
from audit.training.trials import TrainingConfig, build_problem, run_shard

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a GPU (torch.cuda.is_available())"
)

ALPHA = 1e-6
Z = stats.norm.isf(ALPHA / 2)


def _config(device: str, **overrides) -> TrainingConfig:
    fields = dict(
        dataset="digits",
        model="logistic",
        hidden=8,
        activation="tanh",
        sampler="poisson",
        sigma=1.0,
        clip=1.0,
        lr=0.5,
        batch_size=5,
        n=100,
        epochs=1,
        canary="dirac",
        threat_model="isolated",
        device=device,
    )
    fields.update(overrides)
    return TrainingConfig(**fields)


CASES = [
    dict(model="logistic", sampler="poisson", canary="dirac", threat_model="isolated"),
    dict(model="logistic", sampler="dynamic_shuffle", canary="dirac", threat_model="adversarial"),
    dict(model="mlp", sampler="poisson", canary="input", threat_model="isolated"),
    dict(
        model="mlp", sampler="persistent_shuffle", canary="dirac", threat_model="isolated", epochs=2
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(str(v) for v in c.values()))
@pytest.mark.parametrize("group_by_width", [True, False], ids=["grouped", "padded"])
def test_gpu_trains_as_the_cpu_without_noise(case, group_by_width):
    k = 64
    outputs = []
    for device in ("cpu", "cuda"):
        config = _config(device, sigma=1e-9, **case)
        problem = build_problem(config)
        sampler = make_sampler(
            config.sampler, n=config.n, batch_size=config.batch_size, epochs=config.epochs
        )
        batches = sampler.sample(np.random.default_rng(3), k)
        canary_in = np.arange(k) % 2 == 0
        generator = torch.Generator(device=device).manual_seed(5)
        outputs.append(
            train(
                problem,
                batches,
                canary_in,
                [(generator, k)],
                route="grouped" if group_by_width else "padded",
            )
        )
    cpu, gpu = outputs
    np.testing.assert_array_equal(gpu.batch_sizes, cpu.batch_sizes)
    np.testing.assert_allclose(gpu.theta, cpu.theta, atol=1e-4, rtol=1e-5)
    np.testing.assert_allclose(gpu.y, cpu.y, atol=1e-4, rtol=0)
    np.testing.assert_allclose(gpu.logits, cpu.logits, atol=1e-3, rtol=0)


def test_gpu_noise_law_isolated_dirac():
    """OUT: y_t ~ N(0, sigma^2) exactly (real data never move the Dirac coordinate); IN: mean q."""
    config = _config("cuda", batch_size=10, n=100)
    out = run_shard(config, seed=1, shard=0, trials=20_000)
    y_out, y_in = out["y_out"].ravel(), out["y_in"].ravel()
    m = y_out.size
    assert abs(y_out.mean()) < Z / np.sqrt(m)
    # var of the sample variance of N(0, 1): 2 / (m - 1)
    assert abs(y_out.var(ddof=1) - 1.0) < Z * np.sqrt(2 / (m - 1))
    q = config.batch_size / config.n
    difference = y_in.mean() - y_out.mean()
    spread = np.sqrt((1 + q * (1 - q)) / y_in.size + 1 / m)
    assert abs(difference - q) < Z * spread
    assert stats.kstest(y_out[:100_000], "norm").pvalue > ALPHA


def test_gpu_shard_is_reproducible():
    config = _config("cuda", model="mlp", sampler="dynamic_shuffle")
    first = run_shard(config, seed=7, shard=2, trials=300)
    second = run_shard(config, seed=7, shard=2, trials=300)
    for key in first:
        np.testing.assert_array_equal(first[key], second[key], err_msg=key)


def test_gpu_batches_are_drawn_on_the_device():
    """run_shard on a GPU draws the Poisson batches with torch on the device
    (audit.training.device_batches): reproducible shards, the batch sizes' law (mean b, variance
    n q (1 - q)) over 2 x 20,000 runs of T = 10 steps."""
    from audit.training import device_batches

    config = _config("cuda", batch_size=10, n=100)
    first = run_shard(config, seed=3, shard=0, trials=2000)
    again = run_shard(config, seed=3, shard=0, trials=2000)
    for key, value in first.items():
        np.testing.assert_array_equal(value, again[key], err_msg=key)
    sampler = make_sampler("poisson", n=100, batch_size=10)
    batches = device_batches.sample(sampler, torch.Generator(device="cuda").manual_seed(1), 40_000)
    assert batches.device.type == "cuda" and batches.dtype == torch.int32
    sizes = (batches >= 0).sum(-1).double().cpu().numpy().ravel()
    q = 0.1
    assert abs(sizes.mean() - 10) < Z * np.sqrt(100 * q * (1 - q) / sizes.size)
    # the sample variance's relative sd: sqrt((2 + (1 - 6 q (1 - q)) / (n q (1 - q))) / N) (binomial
    # kurtosis)
    excess = (1 - 6 * q * (1 - q)) / (100 * q * (1 - q))
    assert abs(sizes.var() / (100 * q * (1 - q)) - 1) < Z * np.sqrt((2 + excess) / sizes.size)
    real = batches >= 0
    assert bool((real[..., :-1] >= real[..., 1:]).all())


def test_gpu_route_defaults():
    """On a GPU: the padded route and device batches, recorded in the fingerprint."""
    from audit.training.compiled import default_routes

    assert default_routes("cuda") == {
        "logistic": "padded", "mlp": "padded", "batches": "device", "torch": "batched"
    }
