"""The built-in ``opacus`` implementation: Opacus's ``PrivacyEngine.make_private`` as users call it.

One training = the standard Opacus recipe on a small torch model (logistic regression or a
one-hidden-layer MLP), with nothing re-implemented: a ``DataLoader`` over a ``TensorDataset``,
``torch.optim.SGD``, ``PrivacyEngine(accountant=...)``, ``make_private(module, optimizer,
data_loader, noise_multiplier=sigma, max_grad_norm=C, poisson_sampling=...)``, then the usual
loop ``zero_grad / loss.backward() / step`` (:func:`make_private`). The sampler of the setup
builds the loader (registered for it in :mod:`audit.plugins.opacus_loaders`):

- ``poisson``: ``poisson_sampling=True`` (Opacus replaces the loader by its Poisson
  ``DPDataLoader``, q = 1 / len(loader) = b / n);
- ``dynamic_shuffle``: ``poisson_sampling=False`` and ``DataLoader(shuffle=True)`` -- the
  common deployed configuration; Opacus still accounts it as Poisson with q = 1/len(loader);
- ``deterministic``: ``poisson_sampling=False`` and ``DataLoader(shuffle=False)``;
- ``persistent_shuffle``: ``poisson_sampling=False``, one permutation per training cut into
  the same T batches every epoch;
- ``balls_and_bins``: ``poisson_sampling=False`` and a batch sampler drawing, every epoch,
  each example's step uniformly (T batches of Binomial(n, 1/T) sizes); Opacus divides by its
  expected batch size n / len(loader) = b and accounts it as Poisson with q = 1/T;
- ``sampled_without_replacement``: ``poisson_sampling=False`` and a batch sampler drawing a
  uniform b-subset at every step, independently (Opacus accounts it as Poisson with q = 1/T,
  which under-reports it: docs/design.md §6.11).

A sampler without one (truncated Poisson) has no Opacus counterpart (an error says so).

The harness's part is only the canary protocol of :mod:`audit.plugins.contract`: per-example
losses are multiplied by the canary's weight (zero-out), and for a Dirac canary
:func:`inject_dirac` rewrites the per-example gradients that Opacus's hooks stored in
``p.grad_sample`` between ``backward()`` and ``optimizer.step()`` (which clips, sums, adds
N(0, sigma^2 C^2) and divides by the expected batch size b). Per-step parameters are
recorded by :class:`audit.plugins.contract.IterateRecorder`, a hook after every optimizer step.
The claimed epsilon is ``privacy_engine.get_epsilon(delta)`` of the run's own accountant.

Speed: a few hundred steps per second for one model on one core; Opacus trains one model at a time,
so keep trial counts moderate (the batched engine, :mod:`audit.training.trials`, is the fast path).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from audit.accounting.adapters import opacus_epsilon as accountant_epsilon
from audit.core.validation import check_choice
from audit.plugins.contract import (
    CANARY_INDEX,
    Canary,
    IterateRecorder,
    TrainingData,
    TrainingResult,
    TrainingSetup,
)
from audit.plugins.opacus_loaders import has_opacus_loader, opacus_loader
from audit.sampling import registered_samplers

__all__ = [
    "ACCOUNTANTS",
    "OPACUS_SAMPLERS",
    "build_model",
    "check_opacus_sampler",
    "claimed_epsilon",
    "inject_dirac",
    "input_canary_direction",
    "make_private",
    "opacus_epsilon",
    "train",
    "train_rdp",
]

OPACUS_SAMPLERS: tuple[str, ...] = tuple(
    s.name for s in registered_samplers() if has_opacus_loader(s)
)
"""Built-in samplers this implementation can run (those with an Opacus DataLoader: everything but
truncated Poisson); a sampler registered later is asked directly (:func:`check_opacus_sampler`)."""

ACCOUNTANTS: tuple[str, ...] = ("prv", "rdp", "gdp")
"""Opacus accountants; ``prv`` is Opacus's default (what users get without choosing)."""

DEFAULT_ACCOUNTANT = "prv"


def check_opacus_sampler(sampler: str, what: str = "opacus implementation") -> str:
    """``sampler`` if it has an Opacus DataLoader
    (:func:`audit.plugins.opacus_loaders.opacus_loader`).

    Raises:
        ValueError: naming the sampler, the capability and the samplers that have one.
    """
    if not has_opacus_loader(sampler):
        allowed = ", ".join(s.name for s in registered_samplers() if has_opacus_loader(s))
        raise ValueError(
            f"sampler={sampler!r} is not supported by the {what}: sampler {sampler!r} has no "
            f"Opacus DataLoader; allowed: {allowed}"
        )
    return sampler


def make_private(
    model: Any,
    dataset: Any,
    *,
    sampler: str,
    batch_size: int,
    epochs: int,
    lr: float,
    sigma: float,
    clip: float,
    seeds: Sequence[int] | np.ndarray,
    accountant: str = DEFAULT_ACCOUNTANT,
    device: str = "cpu",
) -> tuple[Any, Any, Any, Any]:
    """Opacus's recipe as users call it: the sampler's loader, ``torch.optim.SGD`` and
    ``PrivacyEngine(accountant).make_private(...)``.

    Args:
        model: the torch module to train.
        dataset: a map-style torch dataset of the n rows.
        sampler: a registered sampler with an Opacus DataLoader (:func:`check_opacus_sampler`).
        batch_size: b.
        epochs: E.
        lr: the SGD learning rate.
        sigma: the noise multiplier.
        clip: the clipping norm C.
        seeds: four integers: ``seeds[0]`` seeds the loader's ``torch.Generator``, ``seeds[2]``
            Opacus's noise generator, ``seeds[3]`` the sampler's own numpy draws.
        accountant: Opacus's accountant (:data:`ACCOUNTANTS`).
        device: where the model's parameters live (Opacus draws the noise there).

    Returns:
        ``(privacy_engine, private model, DPOptimizer, loader)``, as ``make_private`` returns
        them (the loader is the sampler's, or Opacus's Poisson ``DPDataLoader``).

    Raises:
        ValueError: a sampler without an Opacus DataLoader, an unknown accountant, or a loader
            whose expected batch size n / len(loader) is not b (Opacus would divide the noisy
            sum by another b than the harness's, docs/design.md §3.1).
    """
    import torch
    from opacus import PrivacyEngine

    check_choice("accountant", accountant, ACCOUNTANTS)
    check_opacus_sampler(sampler)
    plan = opacus_loader(
        sampler,
        dataset,
        batch_size=batch_size,
        epochs=epochs,
        generator=torch.Generator().manual_seed(int(seeds[0])),
        rng=np.random.default_rng(int(seeds[3])),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    with warnings.catch_warnings():
        # "Secure RNG turned off", "Optimal order is the largest alpha", ...
        warnings.simplefilter("ignore")
        engine = PrivacyEngine(accountant=accountant)
        model, optimizer, loader = engine.make_private(
            module=model,
            optimizer=optimizer,
            data_loader=plan.loader,
            noise_multiplier=sigma,
            max_grad_norm=clip,
            poisson_sampling=plan.poisson_sampling,
            noise_generator=torch.Generator(device=device).manual_seed(int(seeds[2])),
        )
    if optimizer.expected_batch_size != batch_size:
        raise ValueError(
            f"sampler={sampler!r}: Opacus's expected batch size n / len(loader) = "
            f"{optimizer.expected_batch_size} is not batch_size={batch_size}; use n = batch_size "
            "* T"
        )
    return engine, model, optimizer, loader


def build_model(setup: TrainingSetup, features: int, classes: int) -> Any:
    """The torch model of ``setup``, initialised as torch does by default, seeded by ``init_seed``.

    Logistic regression is ``nn.Linear(D, classes)``; the MLP is ``Linear(D, hidden)``,
    activation, ``Linear(hidden, classes)``. The same ``init_seed`` gives the same theta_0 in
    every training (the attacker knows theta_0, as in the engine).
    """
    import torch
    from torch import nn

    activations = {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(setup.init_seed)
        if setup.model == "logistic":
            return nn.Sequential(nn.Linear(features, classes))
        act = activations[check_choice("activation", setup.activation, tuple(activations))]
        return nn.Sequential(
            nn.Linear(features, setup.hidden), act(), nn.Linear(setup.hidden, classes)
        )


def input_canary_direction(model: Any, canary: Canary) -> np.ndarray:
    """u for an input canary: its loss gradient at theta_0 on the private row, normalised.

    The private row is the first-layer weight column of the canary feature (D - 1), the only
    weights real data never move (as :func:`audit.training.canaries.make_canary` does for ``ood``).
    """
    import torch
    import torch.nn.functional as F

    params = list(model.parameters())
    loss = F.cross_entropy(
        model(torch.as_tensor(canary.x[None, :], dtype=torch.float32)), torch.tensor([canary.y])
    )
    grads = torch.autograd.grad(loss, params)
    mask = [torch.zeros_like(p) for p in params]
    mask[0][:, -1] = 1.0
    flat = (
        torch.cat([(g * m).reshape(-1) for g, m in zip(grads, mask, strict=True)]).double().numpy()
    )
    norm = float(np.linalg.norm(flat))
    if norm == 0.0:
        raise ValueError(
            "the input canary has zero gradient at theta_0; change canary_label or canary_scale"
        )
    return flat / norm


def inject_dirac(model: Any, batch_index: Any, canary: Canary, clip: float) -> None:
    """Rewrite Opacus's per-example gradients for a Dirac canary (before ``optimizer.step()``).

    With u = -e_k (k: the first-layer weight from the canary feature to ``canary.unit``), the
    canary's row (dataset index :data:`CANARY_INDEX`) becomes ``weight * gradient_norm * C * u``;
    under ``adversarial`` every other row becomes ``-gradient_norm * C * u``; under
    ``isolated`` the others stay as computed (their canary feature is 0, so their component
    on u is 0). ``model`` is the module ``make_private`` returned; ``batch_index`` holds the
    dataset indices of the batch's rows.
    """
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    first = _first_layer_weight(model)
    feature = first.shape[1] - 1
    is_canary = batch_index == CANARY_INDEX
    magnitude = canary.gradient_norm * clip
    with torch.no_grad():
        if bool(is_canary.any()):
            for p in params:
                p.grad_sample[is_canary] = 0.0
            first.grad_sample[is_canary, canary.unit, feature] = -canary.weight * magnitude
        if canary.threat_model == "adversarial":
            others = ~is_canary
            for p in params:
                p.grad_sample[others] = 0.0
            first.grad_sample[others, canary.unit, feature] = magnitude


def _first_layer_weight(model: Any) -> Any:
    for p in model.parameters():
        if p.dim() == 2:
            return p
    raise ValueError("the model has no 2-D (linear) first-layer weight")


def opacus_epsilon(
    accountant: str, history: tuple[tuple[float, float, int], ...], delta: float
) -> float:
    """Epsilon of an Opacus accountant with this ``history`` of (sigma, q, steps) at ``delta``.

    The computation ``privacy_engine.get_epsilon(delta)`` does, cached
    (:func:`audit.accounting.adapters.opacus_epsilon`, the same one behind ``opacus-rdp``,
    ``opacus-prv`` and ``opacus-gdp``). Where the accountant fails (e.g. a noise multiplier
    near 0), the claim is +inf (no finite claim).
    """
    try:
        return accountant_epsilon(accountant, history, delta)
    except (ValueError, OverflowError, FloatingPointError, MemoryError):
        return float("inf")  # the accountant cannot represent it (e.g. sigma ~ 0): no finite claim


def train(
    data: TrainingData,
    canary: Canary,
    setup: TrainingSetup,
    seed: int,
    *,
    accountant: str = DEFAULT_ACCOUNTANT,
) -> TrainingResult:
    """One DP-SGD training with Opacus, as its users run it (see the module docstring)."""
    import torch
    import torch.nn.functional as F
    from torch.utils.data import TensorDataset

    check_opacus_sampler(setup.sampler)
    check_choice("accountant", accountant, ACCOUNTANTS)
    seeds = np.random.SeedSequence(seed).generate_state(4, dtype=np.uint32).astype(np.int64)
    x, y, weight = canary.place(data)
    dataset = TensorDataset(
        torch.as_tensor(x, dtype=torch.float32),
        torch.as_tensor(y, dtype=torch.int64),
        torch.as_tensor(weight, dtype=torch.float32),
        torch.as_tensor(np.arange(len(y)), dtype=torch.int64),
    )
    model = build_model(setup, data.features, data.classes)
    theta0 = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).double().numpy()
    direction = input_canary_direction(model, canary) if canary.kind == "input" else None
    engine, model, optimizer, loader = make_private(
        model, dataset, sampler=setup.sampler, batch_size=setup.batch_size, epochs=setup.epochs,
        lr=setup.lr, sigma=setup.sigma, clip=setup.clip, seeds=seeds, accountant=accountant,
    )
    recorder = (
        IterateRecorder(model.parameters()).attach(optimizer)
        if setup.observation != "black_box"
        else None
    )
    with warnings.catch_warnings():
        # Opacus's hooks, harmless
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        for _ in range(setup.epochs):
            for xb, yb, wb, ib in loader:
                optimizer.zero_grad()
                losses = F.cross_entropy(model(xb), yb, reduction="none") * wb
                # the mean Opacus expects (loss_reduction="mean")
                (losses.sum() / max(1, len(yb))).backward()
                if canary.kind == "dirac":
                    inject_dirac(model, ib, canary, setup.clip)
                optimizer.step()
    with torch.no_grad():
        final = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).double().numpy()
        logits = model(torch.as_tensor(canary.x[None, :], dtype=torch.float32))[0]
        loss = float(F.cross_entropy(logits[None], torch.tensor([canary.y])))
    history = tuple((float(s), float(q), int(k)) for s, q, k in engine.accountant.history)
    return TrainingResult(
        final_params=final,
        canary_coordinate=canary.coordinate(data) if canary.kind == "dirac" else None,
        canary_direction=direction,
        initial_params=theta0,
        iterates=recorder.iterates if recorder is not None else None,
        canary_loss=loss,
        canary_logits=logits.double().numpy(),
        claimed_epsilon=opacus_epsilon(accountant, history, float(setup.delta)),
        claimed_delta=float(setup.delta),
        metadata={
            "accountant": accountant,
            "sample_rate": 1.0 / len(loader),
            "steps": len(recorder.iterates) - 1 if recorder else None,
        },
    )


def train_rdp(
    data: TrainingData, canary: Canary, setup: TrainingSetup, seed: int
) -> TrainingResult:
    """:func:`train` with Opacus's RDP accountant (``PrivacyEngine(accountant="rdp")``)."""
    return train(data, canary, setup, seed, accountant="rdp")


def claimed_epsilon(
    setup: TrainingSetup, delta: float, *, accountant: str = DEFAULT_ACCOUNTANT
) -> float:
    """What ``privacy_engine.get_epsilon(delta)`` reports after a run of ``setup``, without
    training.

    ``make_private`` accounts every loader as Poisson with q = 1 / len(loader) = 1 / T (the
    shuffling loader included) for T*E steps at noise multiplier sigma: the history
    [(sigma, 1/T, T*E)] its accountant holds at the end of a run.
    """
    check_choice("accountant", accountant, ACCOUNTANTS)
    mechanism = setup.mechanism  # len(DataLoader) = ceil(n / b) = T: the setup has n = b T
    history = ((float(setup.sigma), 1.0 / mechanism.steps_per_epoch, mechanism.total_steps),)
    return opacus_epsilon(accountant, history, float(delta))


def _claimed_epsilon_rdp(setup: TrainingSetup, delta: float) -> float:
    return claimed_epsilon(setup, delta, accountant="rdp")


train.claimed_epsilon = claimed_epsilon  # type: ignore[attr-defined]
train_rdp.claimed_epsilon = _claimed_epsilon_rdp  # type: ignore[attr-defined]
