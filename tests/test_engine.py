"""The batched DP-SGD engine: per-example gradients, clipping, one step vs Opacus, noise,
the canary's signal under every threat model, zero-out."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from scipy import stats

import audit.training.engine
from audit.sampling.factory import make_sampler
from audit.training import compiled, philox
from audit.training.canaries import CANARY_INDEX
from audit.training.compiled_mlp import mlp_flat_order
from audit.training.engine import train
from audit.training.models import make_model
from audit.training.trials import build_problem

# Statistical tests fail with probability about ALPHA each when the code is right:
# two-sided normal / chi-square quantiles at level ALPHA (not tuned; the seeds are fixed).
ALPHA = 1e-6
Z = stats.norm.isf(ALPHA / 2)


def _streams(*rows: int, seed: int = 0) -> list[tuple[torch.Generator, int]]:
    return [(torch.Generator().manual_seed(seed + i), r) for i, r in enumerate(rows)]


def _models():
    return [
        make_model("logistic", features=6, classes=4),
        make_model("mlp", features=6, classes=4, hidden=5, activation="tanh"),
        make_model("mlp", features=6, classes=4, hidden=5, activation="relu"),
        make_model("mlp", features=6, classes=4, hidden=5, activation="sigmoid"),
    ]


@pytest.mark.parametrize(
    "model", _models(), ids=lambda m: f"{type(m).__name__}-{getattr(m, 'activation', '')}"
)
def test_per_example_gradients_match_torch_func(model):
    from torch.func import grad, vmap

    k, s = 3, 7
    g = torch.Generator().manual_seed(1)
    theta = model.init(k, g).double() + 0.1 * torch.randn(
        k, model.size, generator=g, dtype=torch.float64
    )
    x = torch.randn(k, s, model.features, generator=g, dtype=torch.float64)
    y = torch.randint(0, model.classes, (k, s), generator=g)

    def loss(th, xi, yi):
        return model.losses(th.reshape(1, -1), xi.reshape(1, 1, -1), yi.reshape(1, 1))[0, 0]

    expected = vmap(vmap(grad(loss), in_dims=(None, 0, 0)), in_dims=(0, 0, 0))(theta, x, y)
    got = model.per_example_grads(theta, x, y)
    assert torch.allclose(got, expected, atol=1e-5, rtol=0)
    norms = model.per_example_norms(theta, x, y)
    assert torch.allclose(norms, expected.norm(dim=-1), atol=1e-5, rtol=0)


@pytest.mark.parametrize("model", _models()[:2], ids=["logistic", "mlp"])
def test_clipping_bounds_norms_and_keeps_small_gradients(model):
    k, s, clip = 4, 9, 2.0
    g = torch.Generator().manual_seed(2)
    theta = model.init(k, g).double()
    # Inputs of very different scales, so that some gradients are inside the ball.
    x = torch.randn(k, s, model.features, generator=g, dtype=torch.float64)
    x = x * torch.logspace(-3, 1, s, dtype=torch.float64)[None, :, None]
    y = torch.randint(0, model.classes, (k, s), generator=g)
    per_example = model.per_example_grads(theta, x, y)
    norms = per_example.norm(dim=-1)
    assert (norms < clip).any() and (norms > clip).any()
    for i in range(s):
        weight = torch.zeros(k, s, dtype=torch.float64)
        weight[:, i] = 1.0
        clipped = model.clipped_grad_sum(theta, x, y, weight, clip)
        assert (clipped.norm(dim=-1) <= clip * (1 + 1e-12)).all()
        inside = norms[:, i] <= clip
        assert torch.allclose(clipped[inside], per_example[inside, i], atol=1e-12, rtol=0)
        outside = ~inside
        assert torch.allclose(
            clipped[outside].norm(dim=-1),
            torch.full((int(outside.sum()),), clip, dtype=torch.float64),
        )
    # The sum over slots is the sum of the clipped per-example gradients; weight 0 drops a slot.
    weight = torch.ones(k, s, dtype=torch.float64)
    weight[:, 0] = 0.0
    factor = torch.clamp(clip / norms, max=1.0) * weight
    expected = (per_example * factor[..., None]).sum(1)
    assert torch.allclose(model.clipped_grad_sum(theta, x, y, weight, clip), expected, atol=1e-12)


@pytest.mark.filterwarnings("ignore:Full backward hook")
@pytest.mark.parametrize("model_name", ["logistic", "mlp"])
def test_one_step_matches_opacus(model_name, monkeypatch, training_config):
    pytest.importorskip("opacus")
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer
    from opacus.optimizers import optimizer as opacus_optimizer

    config = training_config(model=model_name, hidden=8, sigma=0.8, clip=0.5, lr=0.3)
    problem = build_problem(config)
    model = problem.model
    # One batch of 7 real examples (not the canary) and 3 padding slots; b = 10 expected.
    batch = np.array([[[3, 17, 22, 40, 41, 68, 99, -1, -1, -1]]], dtype=np.int32)
    seed = 123
    out = train(problem, batch, np.array([False]), _streams(1, seed=seed))

    # The same Gaussian noise, reshaped to Opacus's parameter layout (nn.Linear: W^T): torch's
    # normal_, or on the default compiled_philox route the Philox noise of row 0 at step 0.
    if audit.training.engine._route(model, torch.device("cpu"), None) == "compiled_philox":
        row = philox.gaussian_row(
            philox.noise_key(seed), 0, 0, model.size, config.sigma * config.clip
        )
        # variate j is the parameter at position j of the kernel's layout (each layer's block
        # transposed): logistic regression's one layer, or the MLP's two
        flat = (
            compiled.flat_order(row, model.classes)
            if model_name == "logistic"
            else mlp_flat_order(row, model.layers)
        )
        noise = torch.from_numpy(flat)[None]
    else:
        noise = torch.empty(1, model.size).normal_(0.0, config.sigma * config.clip,
                                                   generator=torch.Generator().manual_seed(seed))
    blocks = [b[0] for b in model.blocks(noise)]
    opacus_noise = [blk.T.contiguous() if blk.dim() == 2 else blk for blk in blocks]
    calls = iter(opacus_noise)

    def fixed_noise(std, reference, generator=None, secure_mode=False):
        value = next(calls)
        assert value.shape == reference.shape and std == pytest.approx(config.sigma * config.clip)
        return value.to(reference.dtype)

    monkeypatch.setattr(opacus_optimizer, "_generate_noise", fixed_noise)
    theta0 = torch.as_tensor(problem.theta0)
    init = [b[0] for b in model.blocks(theta0.reshape(1, -1))]
    if model_name == "logistic":
        net = torch.nn.Linear(model.features, model.classes)
        params = [net.weight, net.bias]
    else:
        act = {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh, "sigmoid": torch.nn.Sigmoid}[
            config.activation
        ]
        net = torch.nn.Sequential(torch.nn.Linear(model.features, config.hidden), act(),
                                  torch.nn.Linear(config.hidden, model.classes))
        params = [net[0].weight, net[0].bias, net[2].weight, net[2].bias]
    with torch.no_grad():
        for p, value in zip(params, init, strict=True):
            p.copy_(value.T if value.dim() == 2 else value)
    gsm = GradSampleModule(net)
    optimizer = DPOptimizer(
        torch.optim.SGD(gsm.parameters(), lr=config.lr),
        noise_multiplier=config.sigma,
        max_grad_norm=config.clip,
        expected_batch_size=config.batch_size,
    )
    idx = batch[0, 0][batch[0, 0] >= 0]
    xb = torch.as_tensor(problem.x[idx])
    yb = torch.as_tensor(problem.y[idx])
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(gsm(xb), yb).backward()
    optimizer.step()
    expected = torch.cat(
        [(p.detach().T if p.dim() == 2 else p.detach()).reshape(-1) for p in params]
    )
    assert torch.allclose(torch.as_tensor(out.theta[0]), expected, atol=1e-5, rtol=0)


def test_noise_scale_with_canary_out(training_config):
    """With the canary OUT (isolated Dirac), y_t = N_t[u]/C ~ N(0, sigma^2) i.i.d."""
    sigma = 1.7
    problem = build_problem(training_config(sigma=sigma))
    sampler = make_sampler("poisson", n=100, batch_size=10)
    batches = sampler.sample(np.random.default_rng(0), 40)
    out = train(problem, batches, np.zeros(40, dtype=bool), _streams(40))
    y = out.y.ravel()
    dof = y.size  # the mean is known to be 0
    s2 = float(np.mean(y**2))
    low, high = stats.chi2.ppf([ALPHA / 2, 1 - ALPHA / 2], dof) / dof
    assert low * sigma**2 <= s2 <= high * sigma**2
    assert abs(y.mean()) <= Z * sigma / np.sqrt(y.size)


@pytest.mark.parametrize(
    "sampler", ["deterministic", "dynamic_shuffle", "poisson", "truncated_poisson"]
)
def test_canary_signal_isolated_dirac(sampler, training_config):
    """IN: y_t - 1[canary in batch t] ~ N(0, sigma^2); with tiny sigma it is exact."""
    kwargs = {"max_batch_size": 12} if sampler == "truncated_poisson" else {}
    config = training_config(sampler=sampler, epochs=2, sigma=1e-4, **kwargs)
    problem = build_problem(config)
    batches = make_sampler(sampler, n=100, batch_size=10, epochs=2, **kwargs).sample(
        np.random.default_rng(1), 30
    )
    present = (batches == CANARY_INDEX).any(-1)
    out = train(problem, batches, np.ones(30, dtype=bool), _streams(30))
    assert np.allclose(out.y, present, atol=1e-3)  # 1e-3 = 10 sigma
    # Last iterate: final = sum_t y_t for the Dirac canary (real data never move u).
    assert np.allclose(out.final, out.y.sum(1), atol=1e-3)


def test_canary_signal_poisson_participation_law(training_config):
    """Poisson, IN: sum_t y_t = Binomial(T, q) participations + N(0, T sigma^2); OUT: noise only."""
    sigma, k, steps, q = 1.0, 400, 10, 0.1
    problem = build_problem(training_config(sigma=sigma))
    batches = make_sampler("poisson", n=100, batch_size=10).sample(np.random.default_rng(2), 2 * k)
    out = train(problem, batches, np.repeat([True, False], k), _streams(k, k))
    total_in, total_out = out.y[:k].sum(1), out.y[k:].sum(1)
    sd_in = np.sqrt(steps * (sigma**2 + q * (1 - q)))
    sd_out = np.sqrt(steps) * sigma
    assert abs(total_in.mean() - steps * q) <= Z * sd_in / np.sqrt(k)
    assert abs(total_out.mean()) <= Z * sd_out / np.sqrt(k)


@pytest.mark.parametrize("sampler", ["deterministic", "persistent_shuffle"])
def test_adversarial_fixed_size_reads_two_one_zero(sampler, training_config):
    """Adversarial: the canary step reads 2 (IN) or 1 (OUT: zero-out keeps the slot), others 0."""
    problem = build_problem(
        training_config(sampler=sampler, threat_model="adversarial", sigma=1e-4)
    )
    batches = make_sampler(sampler, n=100, batch_size=10).sample(np.random.default_rng(3), 20)
    present = (batches == CANARY_INDEX).any(-1)
    canary_in = np.repeat([True, False], 10)
    out = train(problem, batches, canary_in, _streams(10, 10))
    expected = present * np.where(canary_in, 2.0, 1.0)[:, None]
    assert np.allclose(out.y, expected, atol=1e-3)
    assert np.allclose(out.final, out.y.sum(1), atol=1e-3)  # last iterate, add-back included
    assert (out.batch_sizes == 10).all()


def test_adversarial_poisson_subtracts_expected_count(training_config):
    """Poisson adversarial: y_t = 1[IN and canary in batch] + (n-1) q - (others in batch)."""
    problem = build_problem(training_config(threat_model="adversarial", sigma=1e-4))
    assert problem.known == pytest.approx(99 * 0.1)
    batches = make_sampler("poisson", n=100, batch_size=10).sample(np.random.default_rng(4), 20)
    present = (batches == CANARY_INDEX).any(-1)
    others = ((batches >= 0) & (batches != CANARY_INDEX)).sum(-1)
    canary_in = np.repeat([True, False], 10)
    out = train(problem, batches, canary_in, _streams(10, 10))
    expected = present * canary_in[:, None] + 99 * 0.1 - others
    assert np.allclose(out.y, expected, atol=1e-3)


def test_zero_out_keeps_batches(training_config):
    """IN and OUT models on the same batches see the same batch sizes (the slot stays)."""
    problem = build_problem(training_config(canary="input"))
    batches = make_sampler("poisson", n=100, batch_size=10).sample(np.random.default_rng(5), 6)
    both = np.concatenate([batches, batches])
    out = train(problem, both, np.repeat([True, False], 6), _streams(6, 6))
    assert np.array_equal(out.batch_sizes[:6], out.batch_sizes[6:])
    assert np.array_equal(out.batch_sizes[:6], (batches >= 0).sum(-1))


def test_input_canary_isolated_signal_is_at_most_one(training_config):
    """OOD input canary, isolated: others have exactly 0 along u; each participation adds
    <clip(g), u>/C in (0, 1]."""
    problem = build_problem(
        training_config(canary="input", sampler="deterministic", sigma=1e-4, epochs=3)
    )
    batches = make_sampler("deterministic", n=100, batch_size=10, epochs=3).sample(
        np.random.default_rng(6), 4
    )
    out = train(problem, batches, np.array([True, True, False, False]), _streams(2, 2))
    present = (batches == CANARY_INDEX).any(-1)
    assert np.allclose(out.y[2:], 0.0, atol=1e-3)
    assert np.allclose(out.y[:2][~present[:2]], 0.0, atol=1e-3)
    signal = out.y[:2][present[:2]]
    assert (signal > 0.5).all() and (signal <= 1 + 1e-3).all()
    assert np.allclose(out.final, out.y.sum(1), atol=1e-3)


def test_same_seed_same_result(training_config):
    problem = build_problem(training_config(model="mlp", hidden=8))
    batches = make_sampler("poisson", n=100, batch_size=10).sample(np.random.default_rng(7), 5)
    a = train(problem, batches, np.ones(5, dtype=bool), _streams(5, seed=9))
    b = train(problem, batches, np.ones(5, dtype=bool), _streams(5, seed=9))
    c = train(problem, batches, np.ones(5, dtype=bool), _streams(5, seed=10))
    assert np.array_equal(a.y, b.y) and np.array_equal(a.theta, b.theta)
    assert not np.array_equal(a.y, c.y)


def test_chunked_masks_give_the_same_training(monkeypatch, training_config):
    """The per-chunk slot plan (bounded memory) changes nothing: 1 step per chunk vs all."""
    import audit.training.engine

    problem = build_problem(
        training_config(
            model="mlp",
            hidden=4,
            canary="input",
            threat_model="adversarial",
            sampler="truncated_poisson",
            max_batch_size=12,
        )
    )
    batches = make_sampler("truncated_poisson", n=100, batch_size=10, max_batch_size=12).sample(
        np.random.default_rng(8), 4)
    canary_in = np.array([True, False, True, False])
    whole = train(problem, batches, canary_in, _streams(4))
    monkeypatch.setattr(audit.training.engine, "CHUNK_SLOTS", 1)
    chunked = train(problem, batches, canary_in, _streams(4))
    assert np.array_equal(whole.y, chunked.y) and np.array_equal(whole.theta, chunked.theta)
    assert np.array_equal(whole.batch_sizes, chunked.batch_sizes)


def test_groups_cover_every_model_at_its_width():
    from audit.training.engine import MIN_GROUP, _groups

    counts = [3, 0, 400, 10, 300, 1, 0, 2]
    groups = _groups(counts, counts[0])
    widths = np.repeat(np.arange(len(counts)), counts)[counts[0]:]  # sorted, width-0 models skipped
    assert groups[0][0] == 0 and groups[-1][1] == len(widths)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(groups))
    for lo, hi, width in groups:
        assert widths[lo:hi].max() == width  # padded only to the group's widest batch
    assert all(hi - lo >= MIN_GROUP for lo, hi, _ in groups[:-1])


@pytest.mark.parametrize("model", ["logistic", "mlp"])
def test_width_groups_change_only_rounding(model, monkeypatch, training_config):
    """Models grouped by batch width (one group per width) against one group padded to the
    widest batch: the same training up to float32 rounding. The forward matmul's kernel (MKL)
    rounds a row's dot product differently for different row counts, so parameters may differ
    by a few float32 ulps per step; over T = 10 steps 1e-5 relative is ample (float32 eps is
    1.2e-7). The Dirac observations (noise plus the injected canary) are bit-identical."""
    import audit.training.engine

    problem = build_problem(training_config(model=model, hidden=6))
    batches = make_sampler("poisson", n=100, batch_size=10).sample(np.random.default_rng(5), 40)
    canary_in = np.arange(40) % 2 == 0
    monkeypatch.setattr(audit.training.engine, "MIN_GROUP", 1)
    grouped = train(problem, batches, canary_in, _streams(20, 20), route="grouped")
    monkeypatch.setattr(audit.training.engine, "MIN_GROUP", 10**9)
    padded = train(problem, batches, canary_in, _streams(20, 20), route="grouped")
    assert np.array_equal(grouped.y, padded.y) and np.array_equal(grouped.final, padded.final)
    np.testing.assert_allclose(grouped.theta, padded.theta, rtol=1e-5, atol=1e-6)
    assert np.array_equal(grouped.batch_sizes, padded.batch_sizes)


@pytest.mark.parametrize("model", ["logistic", "mlp"])
def test_widened_products_change_only_rounding(model, monkeypatch, training_config):
    """Products with fewer than GEMM_COLUMNS result columns go through a 16-column scratch
    matrix (audit.training.models): the same training as the direct products up to float32 rounding
    (MKL's kernels sum a dot product in a different order: a few ulps per step; over T = 10
    steps 1e-5 relative is ample, float32 eps being 1.2e-7). The Dirac observations are
    bit-identical: real data's gradient on the canary coordinate is exactly 0 in both routes."""
    import audit.training.models

    problem = build_problem(training_config(model=model, hidden=6))
    batches = make_sampler("poisson", n=100, batch_size=10).sample(np.random.default_rng(6), 30)
    canary_in = np.arange(30) % 2 == 0
    widened = train(problem, batches, canary_in, _streams(15, 15), route="grouped")
    monkeypatch.setattr(audit.training.models, "GEMM_COLUMNS", 0)
    direct = train(problem, batches, canary_in, _streams(15, 15), route="grouped")
    assert np.array_equal(widened.y, direct.y) and np.array_equal(widened.final, direct.final)
    np.testing.assert_allclose(widened.theta, direct.theta, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(widened.loss, direct.loss, rtol=1e-5, atol=1e-6)


def test_widened_scratch_content_is_irrelevant():
    """The scratch columns beyond a layer's outputs never reach the result: a workspace full of
    large finite values gives exactly the result of fresh zeros (float64, one call)."""
    model = make_model("logistic", features=6, classes=4)
    g = torch.Generator().manual_seed(3)
    theta = model.init(5, g).double()
    x = torch.randn(5, 7, model.features, generator=g, dtype=torch.float64)
    y = torch.randint(0, model.classes, (5, 7), generator=g)
    weight = torch.ones(5, 7, dtype=torch.float64)
    from audit.training.models import augment

    fresh = model.clipped_grad_sum_augmented(theta, augment(x), y, weight, 1.0)
    junk = {
        name: torch.full((10_000,), 1e30, dtype=torch.float64) for name in ("weights", "errors")
    }
    reused = model.clipped_grad_sum_augmented(theta, augment(x), y, weight, 1.0, workspace=junk)
    assert torch.equal(fresh, reused)
    per_example = model.per_example_grads(theta, x, y)
    factor = torch.clamp(1.0 / per_example.norm(dim=-1), max=1.0)
    assert torch.allclose(fresh, (per_example * factor[..., None]).sum(1), atol=1e-12)
