"""Record-replay sensitivity (audit.deployed.replay, docs/design.md §14.7): a correct plain loop
and a correct Opacus training pass; per-tensor clipping, the batch's summed gradient clipped,
no clipping, noise re-seeded inside the loop and a training not seeded are caught, each with
its kind named in the message."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.utils.data import DataLoader, TensorDataset

import audit.deployed
from audit.cli import main
from audit.deployed.record_replay import ReplayFailure, ReplayResult, replay

N, BATCH, STEPS, SIGMA, CLIP = 60, 10, 6, 1.0, 1.0


class Poisson:
    """Poisson batches from the loop's own seeded generator (or the global RNG if None)."""

    def __init__(self, n: int, q: float, generator: torch.Generator | None) -> None:
        self.n, self.q, self.generator = n, q, generator

    def __len__(self) -> int:
        return STEPS

    def __iter__(self):
        for _ in range(STEPS):
            draw = torch.rand(self.n, generator=self.generator) < self.q
            yield torch.nonzero(draw).flatten().tolist()


def data(seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N, 5, generator=g)
    return TensorDataset(x, (x[:, 0] > 0).long())


def plain_training(bug: str = ""):
    """A plain torch DP-SGD loop as a user writes it, with one optional bug."""

    def train(canaries, seed: int) -> None:
        if bug != "unseeded":
            torch.manual_seed(seed)
        dataset = canaries.wrap(data(seed))
        model = canaries.attach(nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 2)))
        sampler_rng = None if bug == "unseeded" else torch.Generator().manual_seed(seed)
        loader = DataLoader(dataset, batch_sampler=Poisson(len(dataset), BATCH / len(dataset),
                                                            sampler_rng))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        canaries.plain(optimizer, loader, noise_divisor=BATCH)
        params = dict(model.named_parameters())

        def loss(p, x, y):
            return nn.functional.cross_entropy(functional_call(model, p, (x[None],)), y[None])

        per_example = vmap(grad(loss), in_dims=(None, 0, 0))
        noise = None if bug == "unseeded" else torch.Generator().manual_seed(seed + 1)
        for step, (x, y) in enumerate(loader):
            g = per_example({k: v.detach() for k, v in params.items()}, x, y)
            canaries.inject(g)
            norms = torch.sqrt(sum(v.flatten(1).pow(2).sum(1) for v in g.values()))
            factor = torch.clamp(CLIP / (norms + 1e-12), max=1.0)
            if bug == "batch_sum":
                total = torch.sqrt(sum(v.sum(0).pow(2).sum() for v in g.values()))
                factor = torch.clamp(CLIP / (total + 1e-12), max=1.0).expand(len(norms))
            if bug == "no_clipping":
                factor = torch.ones_like(norms)
            if bug == "reseeded_same":
                noise = torch.Generator().manual_seed(seed + 1)
            if bug == "reseeded_per_step":
                noise = torch.Generator().manual_seed(1000 * seed + step)
            for name, p in params.items():
                f = factor
                if bug == "per_tensor":
                    f = torch.clamp(CLIP / (g[name].flatten(1).norm(dim=1) + 1e-12), max=1.0)
                summed = (g[name] * f.view(-1, *[1] * (g[name].dim() - 1))).sum(0)
                z = torch.randn(p.shape, generator=noise)
                p.grad = (summed + SIGMA * CLIP * z) / BATCH
            optimizer.step()

    return train


def opacus_training(canaries, seed: int) -> None:
    """A correct Opacus training (Poisson batches), as docs/auditing-your-training.md shows."""
    from opacus import PrivacyEngine

    torch.manual_seed(seed)
    dataset = canaries.wrap(data(seed))
    model = canaries.attach(nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 2)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(dataset, batch_size=BATCH)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engine = PrivacyEngine(accountant="rdp")
        model, optimizer, loader = engine.make_private(
            module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=SIGMA,
            max_grad_norm=CLIP, poisson_sampling=True,
        )
        canaries.opacus(model, optimizer, loader)
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()


def check(result: ReplayResult) -> ReplayResult:
    assert isinstance(result, ReplayResult)
    json.dumps(result.to_dict())  # JSON-ready
    return result


def test_correct_plain_loop_passes_at_sensitivity_one():
    result = check(replay(plain_training(), seed=0, clip=CLIP, noise_divisor=BATCH))
    assert result.passed, result.message
    assert result.reproducible and result.control_flow_independent and result.fresh_noise
    assert result.first_failure is None
    # the crafted slot (norm g C, g > 1) is clipped to exactly C: sensitivity 1 up to rounding
    assert result.sensitivity == pytest.approx(1.0, abs=result.tolerance)
    assert result.tolerance < 1e-2
    assert all(p.tested_steps > 0 for p in result.probes)
    assert len(result.per_step) == result.steps == STEPS


def test_correct_opacus_training_passes():
    pytest.importorskip("opacus")
    # Opacus divides the noisy sum by its expected batch size int(n q), q = 1 / len(loader),
    # n = N + 64 slots: a wrong divisor fails (sensitivity b / expected)
    n = N + 64
    divisor = int(n / -(-n // BATCH))
    result = check(replay(opacus_training, seed=1, clip=CLIP, noise_divisor=divisor))
    assert result.passed, result.message
    assert result.sensitivity <= 1 + result.tolerance
    # the estimate is a standard deviation over 64 x 6 draws: relative s.e. 1/sqrt(2 x 384) =
    # 3.6 %, so 25 % is ~7 standard errors
    assert result.noise_multiplier == pytest.approx(SIGMA, rel=0.25)


def test_per_tensor_clipping_is_named():
    result = check(replay(plain_training("per_tensor"), seed=0, clip=CLIP, noise_divisor=BATCH))
    assert not result.passed
    failure = result.first_failure
    assert isinstance(failure, ReplayFailure) and failure.probe == "crafted"
    # K = 4 tensors each clipped to C: sqrt(4) C = 2 C
    assert failure.sensitivity == pytest.approx(2.0, abs=1e-3)
    assert set(failure.tensors) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    assert "per-tensor clipping" in result.message and f"step {failure.step}" in result.message


def test_batch_sum_clipping_is_exposed_by_the_co_batch():
    result = check(replay(plain_training("batch_sum"), seed=0, clip=CLIP, noise_divisor=BATCH))
    assert not result.passed
    assert result.first_failure is not None and result.first_failure.probe == "co-batch"
    assert result.first_failure.sensitivity == pytest.approx(2.0, abs=1e-3)  # C u to -C u
    assert "summed gradient clipped" in result.message


def test_missing_clipping_is_named():
    result = check(replay(plain_training("no_clipping"), seed=0, clip=CLIP, noise_divisor=BATCH))
    assert not result.passed
    assert result.first_failure is not None
    assert result.first_failure.sensitivity == pytest.approx(result.crafted_norm, rel=1e-3)
    assert "unclipped" in result.message


def test_noise_reseeded_inside_the_loop():
    same = check(replay(plain_training("reseeded_same"), seed=0, clip=CLIP, noise_divisor=BATCH))
    # the sensitivity is right (the same noise in both runs) but the noise repeats every step
    assert same.sensitivity <= 1 + same.tolerance
    assert not same.passed and not same.fresh_noise
    assert same.max_noise_correlation == pytest.approx(1.0)
    assert "same noise at steps" in same.message
    # re-seeded at every step from distinct seeds: fresh draws; replay cannot object (the noise
    # is then a function of the seed, as any PRNG's is)
    fresh = check(
        replay(plain_training("reseeded_per_step"), seed=0, clip=CLIP, noise_divisor=BATCH)
    )
    assert fresh.passed, fresh.message


def test_training_without_a_seed_is_not_reproducible():
    result = check(replay(plain_training("unseeded"), seed=0, clip=CLIP, noise_divisor=BATCH))
    assert not result.passed and not result.reproducible
    assert result.message.startswith("not reproducible from the seed")
    assert "torch.manual_seed" in result.message and "Generator" in result.message
    assert result.runs == 2


def test_wrong_divisor_or_clip_fails_generically():
    result = check(replay(plain_training(), seed=0, clip=CLIP / 2, noise_divisor=BATCH))
    # a clipping norm above the given C: the real slot reads min(||g||, 2 C), not 2 min(||g||,
    # C), so this is no uniform scale (post-processing) but a failure
    assert result.failed and not result.inconclusive
    assert result.first_failure is not None
    assert result.first_failure.sensitivity == pytest.approx(2.0, abs=1e-3)


def test_bad_input_names_the_field():
    with pytest.raises(ValueError, match="probes"):
        replay(plain_training(), seed=0, clip=1.0, noise_divisor=10, probes=["nope"])
    with pytest.raises(ValueError, match="clip"):
        replay(plain_training(), seed=0, clip=0.0, noise_divisor=10)


def test_lazy_export_and_callable_module():
    assert audit.deployed.ReplayResult is ReplayResult
    assert callable(audit.deployed.replay)


def test_cli(tmp_path, capsys):
    script = tmp_path / "mytrain.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from test_replay import plain_training\n"
        "train = plain_training()\n"
        "bad = plain_training('per_tensor')\n"
    )
    assert main(["replay", f"{script}:train", "--seed", "0", "--clip", "1.0",
                 "--noise-divisor", str(BATCH), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["passed"] is True and out["first_failure"] is None
    assert main(["replay", f"{script}:bad", "--clip", "1.0", "--noise-divisor", str(BATCH)]) == 1
    assert "per-tensor clipping" in capsys.readouterr().out


def test_noise_estimate_is_the_root_mean_square_and_exact_repeats_are_not_fresh():
    """The canary block's noise has mean 0 under the mechanism: its scale is sqrt(mean(y^2))
    (y.std() subtracts a mean the noise does not have, and reads 0 when the noise repeats
    exactly with one slot); two steps with exactly the same noise vector are not fresh, which
    |cos| cannot show with one slot (two 1-vectors always have |cos| 1)."""
    import numpy as np

    from audit.deployed.record_replay import _BLOCK, _fresh_noise, _Probe

    ref = _Probe("zero", False, clip=2.0, divisor=BATCH, direction_seed=0)
    ref.received = [{_BLOCK: np.array([0.3])} for _ in range(STEPS)]  # one slot, repeated
    noise = _fresh_noise(ref)
    assert noise.noise_multiplier == pytest.approx(0.3 * BATCH / 2.0, rel=1e-12)
    assert noise.repeated and not noise.fresh and noise.pair == (0, 1)
    rng = np.random.default_rng(0)
    ref.received = [{_BLOCK: rng.standard_normal(1)} for _ in range(STEPS)]
    fresh = _fresh_noise(ref)
    assert fresh.fresh and not fresh.repeated  # m = 1, fresh draws: |cos| 1 <= threshold 1
    y = np.array([r[_BLOCK][0] for r in ref.received])
    assert fresh.noise_multiplier == pytest.approx(np.sqrt(np.mean(y**2)) * BATCH / 2.0)


def test_noise_reseeded_inside_the_loop_with_one_slot():
    # one slot (replay_script's default): the noise repeats exactly; it used to read "no noise
    # reached the optimizer" (the repeats' standard deviation is 0)
    result = check(
        replay(plain_training("reseeded_same"), seed=0, clip=CLIP, noise_divisor=BATCH, slots=1)
    )
    assert not result.passed and not result.fresh_noise
    assert "same noise at steps 0 and 1 (exactly equal on the canary block)" in result.message
    assert result.noise_multiplier > 0


def test_failing_tensors_are_listed_in_the_same_order_on_every_run() -> None:
    """Parts equal up to float rounding (per-tensor clipping: each is C) are ordered by name,
    so a regenerated report does not reorder them; a clearly larger part still comes first."""
    from audit.deployed.record_replay import _by_part

    parts = {"2.bias": 1.0000001, "0.weight": 0.9999999, "0.bias": 1.0, "2.weight": 1.0000002}
    assert [k for k, _ in _by_part(parts)] == ["0.bias", "0.weight", "2.bias", "2.weight"]
    parts["2.weight"] = 1.5
    assert _by_part(parts)[0][0] == "2.weight"
