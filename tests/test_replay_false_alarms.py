"""The replay never fails a correct DP-SGD training (issue 41, docs/design.md §14.7).

Small correct trainings of each class the issue names, plain torch and Opacus: randomness in the
forward (dropout after LayerNorm under ``vmap(randomness="different")`` and under Opacus with its
default generator, stochastic depth, random augmentation in the loop), post-processing of the
privatized gradient before ``optimizer.step()`` (momentum written on ``p.grad``, clipping the
noisy gradient, weight decay, an LR schedule, an EMA), Opacus as users configure it (C, b and
sigma read from its optimizer, per-layer clipping, ghost clipping, the functorch and ew modes,
``BatchMemoryManager``, a shuffling loader) and mixed precision (autocast). None may be FAILED;
where the replay cannot compare (the random stream moved when the absent probe removed a row) it
says so. Real bugs stay found under the same randomness and post-processing.

Every check is exact up to the replay's float rounding allowance (no statistical tolerance is
tuned here); the fresh-noise check's level is 1e-6 per training."""

from __future__ import annotations

import math
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.utils.data import DataLoader, TensorDataset

from audit.deployed.record_replay import ReplayResult, replay

N, BATCH, STEPS, SIGMA, CLIP = 60, 10, 6, 1.0, 1.0


class Poisson:
    """Poisson batches (each row w.p. q) from the loop's own seeded generator."""

    def __init__(self, n: int, q: float, generator: torch.Generator) -> None:
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


class StochasticDepth(nn.Module):
    """A residual block skipped at random per example (train mode), kept with probability p."""

    def __init__(self, width: int, p: float = 0.7) -> None:
        super().__init__()
        self.inner, self.p = nn.Linear(width, width), p

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        keep = torch.bernoulli(torch.full((*h.shape[:-1], 1), self.p))
        return h + keep * torch.tanh(self.inner(h)) / self.p


def model_for(kind: str) -> nn.Module:
    if kind in ("dropout", "dropout_global_noise", "dropout_per_tensor", "dropout_momentum"):
        return nn.Sequential(nn.Linear(5, 8), nn.LayerNorm(8), nn.Dropout(0.3), nn.Tanh(),
                             nn.Linear(8, 2))
    if kind == "stochastic_depth":
        return nn.Sequential(nn.Linear(5, 8), StochasticDepth(8), nn.Linear(8, 2))
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 2))


class Augmented(torch.utils.data.Dataset):
    """Random augmentation in ``__getitem__`` (in the DataLoader's worker processes)."""

    def __init__(self, base: TensorDataset) -> None:
        self.base = base

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, i: int):
        x, y = self.base[i]
        return x + 0.1 * torch.randn_like(x), y


def plain(kind: str = ""):
    """A correct plain torch DP-SGD loop (torch.func per-example gradients) of one class."""

    def train(canaries, seed: int) -> None:
        torch.manual_seed(seed)
        base = Augmented(data(seed)) if kind == "augment_workers" else data(seed)
        dataset = canaries.wrap(base)
        model = canaries.attach(model_for(kind))
        loader = DataLoader(dataset, batch_sampler=Poisson(
            len(dataset), BATCH / len(dataset), torch.Generator().manual_seed(seed)),
            num_workers=2 if kind == "augment_workers" else 0)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
        canaries.plain(optimizer, loader, noise_divisor=BATCH)
        params = dict(model.named_parameters())
        ema = {k: v.detach().clone() for k, v in params.items()}

        def loss(p, x, y):
            if kind == "autocast":
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    out = functional_call(model, p, (x[None],))
                return nn.functional.cross_entropy(out.float(), y[None])
            return nn.functional.cross_entropy(functional_call(model, p, (x[None],)), y[None])

        per_example = vmap(grad(loss), in_dims=(None, 0, 0), randomness="different")
        noise = torch.Generator().manual_seed(seed + 1)
        momentum: dict[str, torch.Tensor] = {}
        for x, y in loader:
            if kind == "augment":  # random augmentation inside the loop, per row
                x = x + 0.1 * torch.randn_like(x)
            g = per_example({k: v.detach() for k, v in params.items()}, x, y)
            canaries.inject(g)
            norms = torch.sqrt(sum(v.flatten(1).pow(2).sum(1) for v in g.values()))
            factor = torch.clamp(CLIP / (norms + 1e-12), max=1.0)
            for name, p in params.items():
                f = factor
                if kind == "dropout_per_tensor":  # a real bug, under dropout
                    f = torch.clamp(CLIP / (g[name].flatten(1).norm(dim=1) + 1e-12), max=1.0)
                summed = (g[name] * f.view(-1, *[1] * (g[name].dim() - 1))).sum(0)
                z = (torch.randn(p.shape) if kind == "dropout_global_noise"
                     else torch.randn(p.shape, generator=noise))
                p.grad = (summed + SIGMA * CLIP * z) / BATCH
            if kind == "momentum_marked":
                canaries.privatized()  # the mark: the privatized gradient is made here
            # post-processing of the privatized gradient, before optimizer.step()
            if kind in ("momentum", "dropout_momentum", "momentum_marked"):
                for name, p in params.items():
                    momentum[name] = 0.9 * momentum.get(name, torch.zeros_like(p)) + p.grad
                    p.grad = momentum[name].clone()
            if kind == "scaled":  # the privatized gradient scaled (a larger step size)
                for p in params.values():
                    p.grad *= 3.0
            if kind == "adam_on_grad":  # Adam's normalisation written on p.grad
                for name, p in params.items():
                    m1 = 0.9 * momentum.get(name, torch.zeros_like(p)) + 0.1 * p.grad
                    m2 = 0.999 * momentum.get(name + "^2", torch.zeros_like(p)) + 1e-3 * p.grad**2
                    momentum[name], momentum[name + "^2"] = m1, m2
                    p.grad = m1 / (m2.sqrt() + 1e-8)
            if kind == "clip_noisy":
                torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
            if kind == "weight_decay_ema_schedule":
                for p in params.values():
                    p.grad += 0.01 * p.detach()
            optimizer.step()
            schedule.step()
            with torch.no_grad():
                for k, v in params.items():
                    ema[k].mul_(0.9).add_(0.1 * v)

    return train


def opacus(kind: str = "", mode: str = "hooks", clipping: str = "flat", poisson: bool = True):
    """A correct Opacus training of one class (``make_private`` as users write it)."""

    def train(canaries, seed: int):
        from opacus import PrivacyEngine
        from opacus.utils.batch_memory_manager import BatchMemoryManager

        torch.manual_seed(seed)
        dataset = canaries.wrap(data(seed))
        model = canaries.attach(model_for("dropout" if kind == "dropout" else ""))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
        loader = DataLoader(dataset, batch_size=BATCH, shuffle=not poisson,
                            generator=torch.Generator().manual_seed(seed))
        count = len(list(model.parameters()))  # the canary block included
        norms = CLIP if clipping == "flat" else [CLIP / math.sqrt(count)] * count
        criterion = nn.CrossEntropyLoss()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            engine = PrivacyEngine(accountant="rdp")
            private = engine.make_private(
                module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=SIGMA,
                max_grad_norm=norms, poisson_sampling=poisson, grad_sample_mode=mode,
                clipping=clipping, criterion=criterion,
            )
            if mode == "ghost":
                model, optimizer, criterion, loader = private
            else:
                model, optimizer, loader = private
            canaries.opacus(model, optimizer, loader)
            batches = (BatchMemoryManager(data_loader=loader, max_physical_batch_size=4,
                                          optimizer=optimizer) if kind == "bmm" else None)
            for x, y in (batches.__enter__() if batches is not None else loader):
                optimizer.zero_grad()
                if kind == "autocast":
                    with torch.autocast("cpu", dtype=torch.bfloat16):
                        out = model(x)
                    criterion(out.float(), y).backward()
                else:
                    criterion(model(x), y).backward()
                optimizer.step()
            if batches is not None:
                batches.__exit__(None, None, None)
        return engine

    return train


def _opacus_divisor() -> int:
    """Opacus's expected batch size over the wrapped data: int(n q), q = 1 / len(loader)."""
    n = N + 64
    return int(n / -(-n // BATCH))


def not_failed(result: ReplayResult) -> ReplayResult:
    assert not result.failed, result.summary()
    assert result.verdict in ("passed", "inconclusive")
    return result


def absent(result: ReplayResult):
    return next(p for p in result.probes if p.probe == "absent")


@pytest.mark.parametrize(
    "kind", ["dropout", "dropout_global_noise", "stochastic_depth", "augment"]
)
def test_randomness_in_the_forward_is_never_failed(kind: str) -> None:
    result = not_failed(replay(plain(kind), seed=0, clip=CLIP, noise_divisor=BATCH))
    # the probes that keep the batch (same random draws in both runs) still test every step
    assert result.passed and result.sensitivity == pytest.approx(1.0, abs=result.tolerance)
    # the absent probe removed a row: the stream moved, so it says it could not compare
    probe = absent(result)
    assert probe.passed and probe.inconclusive_steps > 0
    assert "random stream moved" in probe.note
    assert any("random stream moved" in note for note in result.notes)
    assert "INCONCLUSIVE" not in result.summary().splitlines()[0]


def test_augmentation_in_loader_workers_is_not_read_as_mixing() -> None:
    """Worker processes draw random numbers no digest sees: the absent probe's differences
    there are left out (inconclusive), never a layer mixing examples."""
    result = not_failed(replay(plain("augment_workers"), seed=0, clip=CLIP, noise_divisor=BATCH))
    probe = absent(result)
    assert probe.passed and probe.inconclusive_steps > 0 and "num_workers" in probe.note


def test_a_bug_under_dropout_is_still_found() -> None:
    result = replay(plain("dropout_per_tensor"), seed=0, clip=CLIP, noise_divisor=BATCH)
    assert result.failed and result.first_failure is not None
    assert result.first_failure.probe == "crafted" and "per-tensor clipping" in result.message


@pytest.mark.parametrize("kind", ["momentum", "clip_noisy", "weight_decay_ema_schedule"])
def test_post_processing_before_the_step_is_not_a_leak(kind: str) -> None:
    result = not_failed(replay(plain(kind), seed=0, clip=CLIP, noise_divisor=BATCH))
    assert result.passed and result.sensitivity <= 1 + result.tolerance
    if kind == "momentum":  # 1.9 C before: the buffer carried earlier steps' slot
        assert any("carries earlier steps" in note for note in result.notes)
        assert result.sensitivity == pytest.approx(1.0, abs=result.tolerance)
        assert all(p.tested_steps == 1 for p in result.probes if p.probe != "absent")




def test_the_mark_records_before_the_post_processing() -> None:
    """With canaries.privatized() after the noise, momentum on p.grad is after the recording:
    every step is compared and nothing is carried."""
    result = not_failed(replay(plain("momentum_marked"), seed=0, clip=CLIP, noise_divisor=BATCH))
    assert result.passed and result.sensitivity == pytest.approx(1.0, abs=result.tolerance)
    assert any("canaries.privatized()" in note for note in result.notes)
    assert not any("carries earlier steps" in note for note in result.notes)
    assert all(p.tested_steps == STEPS for p in result.probes if p.probe != "absent")


def test_a_nonlinear_transform_with_state_is_inconclusive_not_failed() -> None:
    """Adam's normalisation written on p.grad (unmarked) reads far more than C at the first
    step; no correct step post-processed linearly does that, but a transform of the privatized
    gradient can: inconclusive, with the mark that makes it comparable."""
    result = replay(plain("adam_on_grad"), seed=0, clip=CLIP, noise_divisor=BATCH)
    assert result.inconclusive and not result.failed, result.summary()
    assert "canaries.privatized()" in result.message


def test_a_scaled_privatized_gradient_is_inconclusive_not_failed() -> None:
    """p.grad *= 3 after the noise reads 3 C for every probe (the real slot 3 min(||g||, C)):
    correct DP-SGD post-processed, or a divisor b / 3, or a leak if the noise was not scaled;
    the replay cannot see the noise's scale, so it says inconclusive and why. A clipping norm
    above C (clip=C/2 given for a loop clipping to C) reads min(||g||, 2 C) on the real slot and
    stays FAILED (tests/test_replay.py)."""
    result = replay(plain("scaled"), seed=0, clip=CLIP, noise_divisor=BATCH)
    assert result.inconclusive and not result.failed and result.verdict == "inconclusive"
    assert "exactly 3 times one correctly clipped example" in result.message
    assert f"noise_divisor={BATCH / 3:.4g}" in result.message


def test_mixed_precision_forward() -> None:
    not_failed(replay(plain("autocast"), seed=0, clip=CLIP, noise_divisor=BATCH))


@pytest.mark.parametrize(
    ("kind", "mode", "clipping", "poisson"),
    [
        ("dropout", "hooks", "flat", True),
        ("", "hooks", "per_layer", True),
        ("", "functorch", "flat", True),
        ("", "ew", "flat", True),
        ("bmm", "hooks", "flat", True),
        ("", "hooks", "flat", False),
        ("autocast", "hooks", "flat", True),
    ],
)
def test_opacus_as_users_configure_it(kind: str, mode: str, clipping: str, poisson: bool) -> None:
    pytest.importorskip("opacus")
    result = not_failed(replay(opacus(kind, mode, clipping, poisson), seed=1))
    assert result.passed and result.settings_from == "opacus"
    assert result.clip == pytest.approx(CLIP, rel=1e-6)  # per-layer: a float32 total
    assert result.noise_divisor == _opacus_divisor()
    # per-layer norms C / sqrt(K) each, total C: the crafted slot reads C exactly (each part
    # clipped to its C_k), the real one at most C
    assert result.sensitivity <= 1 + result.tolerance


def test_opacus_ghost_clipping_runs() -> None:
    pytest.importorskip("opacus")
    result = not_failed(replay(opacus(mode="ghost"), seed=1))
    assert result.passed
    assert [p.probe for p in result.probes] == ["real", "absent"]
    assert any("ghost" in note for note in result.notes)


def test_opacus_values_are_read_and_a_disagreeing_value_is_named() -> None:
    pytest.importorskip("opacus")
    result = not_failed(replay(opacus(), seed=1, clip=2.0, noise_divisor=BATCH))
    assert result.passed and result.noise_divisor == _opacus_divisor()
    assert any(f"noise_divisor={BATCH}" in n and f"by {_opacus_divisor()}" in n
               for n in result.notes)
    assert any("clip=2 was given" in n and "max_grad_norm = 1" in n for n in result.notes)


def test_a_plain_loop_without_clip_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="clip: required for a plain loop"):
        replay(plain(), seed=0)
    # the divisor of canaries.plain is used when none is given
    result = replay(plain(), seed=0, clip=CLIP, probes=("crafted",))
    assert result.passed and result.settings_from == "plain" and result.noise_divisor == BATCH


def test_opacus_mnist_example_replays_with_the_readme_line(capsys) -> None:
    """examples/opacus_mnist: Opacus's mnist.py shape; the README's --noise-divisor 64 is
    named (Opacus divides by its expected batch size over the wrapped data) and the replay
    passes; the ghost variant runs."""
    pytest.importorskip("opacus")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "opacus_mnist"))
    import mnist

    from audit.cli import main

    script = Path(mnist.__file__)
    assert main(["replay", f"{script}:train", "--seed", "0", "--noise-divisor", "64"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("PASSED") and "note: noise_divisor=64 was given" in out
    ghost = not_failed(replay(mnist.train_ghost, seed=0, probes=("real",)))
    assert ghost.passed
