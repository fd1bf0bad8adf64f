"""A small numpy DP-SGD implementation, correct and deliberately broken, for bug-finding tests.

:func:`correct` is plain DP-SGD for multinomial logistic regression (Abadi et al. 2016,
arXiv 1607.00133, Alg. 1) written against the plug-in contract of
:mod:`audit.plugins.contract`: batches from the setup's sampler (:mod:`audit.sampling.factory`),
per-example gradients in closed form, each clipped to C, summed, plus N(0, sigma^2 C^2 I),
divided by b, one SGD step. Parameters are laid out as ``torch.nn.Linear``: W (classes, D)
row-major, then the bias (classes).

Each broken variant differs from it by one bug that a sound audit must catch (the setup and
the claim are those of the correct mechanism; only the code is wrong):

- :func:`noise_halved`: the noise std is sigma C / 2 (a wrong factor, e.g. std vs variance);
- :func:`canary_unclipped`: the canary's gradient skips clipping (its raw norm is
  ``gradient_norm * C``, 2C by default);
- :func:`noise_once_per_epoch`: the noise is added at the last step of each epoch only;
- :func:`shuffled_not_poisson`: batches from a fresh shuffle every epoch (``dynamic_shuffle``)
  whatever sampler is configured, while the claim accounts the configured one (Poisson):
  Opacus's ``poisson_sampling=False`` situation.

Built for speed over generality (one model, numpy, a few tens of microseconds per step), so
that tests can afford thousands of trainings.
"""

from __future__ import annotations

import numpy as np

from audit.core.seeding import rng_for
from audit.core.validation import check_choice
from audit.plugins.contract import CANARY_INDEX, Canary, TrainingData, TrainingResult, TrainingSetup
from audit.sampling import get_sampler, sampler_names
from audit.sampling.factory import make_sampler

__all__ = [
    "BROKEN",
    "canary_unclipped",
    "correct",
    "dpsgd",
    "noise_halved",
    "noise_once_per_epoch",
    "shuffled_not_poisson",
]


def initial_parameters(setup: TrainingSetup, features: int, classes: int) -> np.ndarray:
    """theta_0 from ``setup.init_seed``: W ~ U(-1/sqrt(D), 1/sqrt(D)) as torch.nn.Linear, bias 0."""
    rng = rng_for(setup.init_seed, "numpy-reference", "init")
    bound = 1.0 / np.sqrt(features)
    weights = rng.uniform(-bound, bound, size=(classes, features))
    return np.concatenate([weights.ravel(), np.zeros(classes)])


def dpsgd(
    data: TrainingData,
    canary: Canary,
    setup: TrainingSetup,
    seed: int,
    *,
    noise_scale: float = 1.0,
    clip_canary: bool = True,
    noise_every_step: bool = True,
    sampler: str | None = None,
) -> TrainingResult:
    """DP-SGD on logistic regression; the keyword arguments switch the bugs on (defaults: none)."""
    if setup.model != "logistic":
        raise ValueError(
            f"model={setup.model!r}: the numpy reference implementation trains 'logistic' only"
        )
    sampler = check_choice("sampler", sampler or setup.sampler, sampler_names())
    rng = np.random.default_rng(seed)
    x, y, weight = canary.place(data)
    x = x.astype(np.float64)
    classes, features = data.classes, data.features
    batches = make_sampler(
        sampler,
        n=setup.n,
        batch_size=setup.batch_size,
        epochs=setup.epochs,
        max_batch_size=setup.max_batch_size
        if "max_batch_size" in get_sampler(sampler).parameters
        else None,
    ).sample(rng, 1)[0]
    theta = initial_parameters(setup, features, classes)
    k = canary.coordinate(data)
    clip, b, lr = setup.clip, setup.batch_size, setup.lr
    std = noise_scale * setup.sigma * clip
    onehot = np.eye(classes)
    steps_per_epoch = setup.steps_per_epoch
    iterates = np.empty((len(batches) + 1, theta.size))
    iterates[0] = theta
    for t, row in enumerate(batches):
        index = row[row >= 0]
        w_matrix = theta[: classes * features].reshape(classes, features)
        xb = x[index]
        logits = xb @ w_matrix.T + theta[classes * features :]
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(axis=1, keepdims=True)
        e = (p - onehot[y[index]]) * weight[index, None]
        grads = np.concatenate(
            [(e[:, :, None] * xb[:, None, :]).reshape(len(index), classes * features), e], axis=1
        )
        is_canary = index == CANARY_INDEX
        if canary.kind == "dirac":
            grads[is_canary] = 0.0
            grads[is_canary, k] = -weight[index[is_canary]] * canary.gradient_norm * clip
        if canary.threat_model == "adversarial" and canary.kind == "dirac":
            grads[~is_canary] = 0.0
            grads[~is_canary, k] = canary.gradient_norm * clip
        norms = np.linalg.norm(grads, axis=1)
        factor = np.minimum(1.0, clip / np.maximum(norms, 1e-300))
        if not clip_canary:
            factor[is_canary] = 1.0
        total = factor @ grads
        if noise_every_step or t % steps_per_epoch == steps_per_epoch - 1:
            total = total + rng.normal(0.0, std, size=theta.size)
        theta = theta - lr * total / b
        iterates[t + 1] = theta
    w_matrix = theta[: classes * features].reshape(classes, features)
    logits = canary.x.astype(np.float64) @ w_matrix.T + theta[classes * features :]
    shifted = logits - logits.max()
    loss = float(np.log(np.exp(shifted).sum()) - shifted[canary.y])
    return TrainingResult(
        final_params=theta,
        canary_coordinate=k,
        iterates=iterates,
        canary_loss=loss,
        canary_logits=logits,
    )


def correct(data: TrainingData, canary: Canary, setup: TrainingSetup, seed: int) -> TrainingResult:
    """Correct DP-SGD (the control: its audit must come out ``consistent``)."""
    return dpsgd(data, canary, setup, seed)


def noise_halved(
    data: TrainingData, canary: Canary, setup: TrainingSetup, seed: int
) -> TrainingResult:
    """Bug: noise std sigma C / 2."""
    return dpsgd(data, canary, setup, seed, noise_scale=0.5)


def canary_unclipped(
    data: TrainingData, canary: Canary, setup: TrainingSetup, seed: int
) -> TrainingResult:
    """Bug: the canary's gradient is not clipped."""
    return dpsgd(data, canary, setup, seed, clip_canary=False)


def noise_once_per_epoch(
    data: TrainingData, canary: Canary, setup: TrainingSetup, seed: int
) -> TrainingResult:
    """Bug: noise only at the last step of each epoch."""
    return dpsgd(data, canary, setup, seed, noise_every_step=False)


def shuffled_not_poisson(
    data: TrainingData, canary: Canary, setup: TrainingSetup, seed: int
) -> TrainingResult:
    """Bug: a fresh shuffle every epoch instead of the configured (accounted) sampler."""
    return dpsgd(data, canary, setup, seed, sampler="dynamic_shuffle")


BROKEN: dict[str, str] = {
    "noise_halved": "audit.plugins.broken:noise_halved",
    "canary_unclipped": "audit.plugins.broken:canary_unclipped",
    "noise_once_per_epoch": "audit.plugins.broken:noise_once_per_epoch",
    "shuffled_not_poisson": "audit.plugins.broken:shuffled_not_poisson",
}
"""The broken implementations, by bug, as spec paths."""
