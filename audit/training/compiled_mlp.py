"""Compiled CPU kernel (numba) for the one-hidden-layer MLP: DP-SGD of K models, Philox noise.

The MLP's per-example gradients have a closed form as logistic regression's do
(:class:`audit.training.models.MLP`; Goodfellow 2015, arXiv 1510.01799): for a slot with input
[x, 1], hidden pre-activation ``z = [x, 1] [W1; c1]``, hidden ``a = act(z)``, logits
``[a, 1] [W2; c2]``,

    e = softmax(logits) - onehot(y),         d = (W2 e) * act'(z),
    g = ([x, 1] d^T, [a, 1] e^T),            ||g||^2 = ||[x, 1]||^2 ||d||^2 + ||[a, 1]||^2 ||e||^2,

clipped by f = min(1, C / ||g||) and summed over the batch (Abadi et al. 2016, arXiv 1607.00133,
Alg. 1). :func:`_mlp_step` does one step of K models in the passes of the logistic kernel
(:func:`audit.training.compiled._logistic_step`, whose helpers it calls): (1) per model the slot
rules, the canary's injection and observation, the hidden layer (:func:`_model_logits`' blocked
products over the padded inputs) and the logits (the same over the padded hidden rows [a, 1, 0..]);
(2) per model the softmax errors of its slots (never a block's at once: docs/design.md §12.4);
then per slot d, the two layers' norms
and the clip factor; (3) per model the two clipped sums (:func:`_clipped_sum`) and the update.
float32 throughout like the torch routes, so parameters agree with them to float32 rounding
(other summation orders); a Dirac canary sits on the first layer's private row, whose input is
always 0, so real examples add exactly 0 there and its observations are the noise plus the
injection, bit for bit.

**Layout.** Each layer's augmented matrix [W; c] (in + 1, out) is kept transposed, (out, in')
with in' = 16 ceil((in + 1) / 16) and zero padding (:func:`audit.training.compiled.
transposed_weights` per layer); the gradient and noise of one model are the two layers'
transposed blocks one after the other, (H, D + 1) then (C, H + 1): the *kernel order*
(:func:`mlp_kernel_order`), in which variate j of the Philox stream is the noise of position j
(:mod:`audit.training.philox`, docs/design.md §12.3), as for logistic regression.

**Route.** The engine takes it (``compiled_philox``) for the MLP on the CPU with a Dirac canary:
blocks of models through all their steps (:func:`mlp_philox_training`), as logistic regression's
:func:`audit.training.compiled.philox_training`; other canaries keep the ``grouped`` torch route
(docs/design.md §12.6). Without numba (the ``fast`` extra; :func:`audit.sampling.compiled_rows.
available`) the engine trains the MLP on the ``grouped`` torch route instead: the same
arithmetic up to float32 rounding, with torch's noise.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from audit.training import compiled, philox
from audit.training.compiled import flat_order, kernel_order

__all__ = [
    "ACTIVATION_CODES",
    "mlp_flat_order",
    "mlp_kernel_order",
    "mlp_philox_training",
    "mlp_step",
]

ACTIVATION_CODES: dict[str, int] = {"relu": 0, "tanh": 1, "sigmoid": 2}
"""The kernel's code of each hidden activation (:data:`audit.training.models.ACTIVATIONS`)."""


def mlp_kernel_order(flat: np.ndarray, layers: Sequence[tuple[int, int]]) -> np.ndarray:
    """Vectors over an MLP's parameters (..., P) from the flat layout (each layer's [W; c]
    (in + 1, out) row-major, layer after layer) to the kernel order (each layer's block
    transposed to (out, in + 1)), a C-contiguous copy."""
    flat = np.asarray(flat)
    parts, start = [], 0
    for fan_in, fan_out in layers:
        stop = start + (fan_in + 1) * fan_out
        parts.append(kernel_order(flat[..., start:stop], fan_out))
        start = stop
    return np.concatenate(parts, axis=-1)


def mlp_flat_order(kernel: np.ndarray, layers: Sequence[tuple[int, int]]) -> np.ndarray:
    """The inverse of :func:`mlp_kernel_order`."""
    kernel = np.asarray(kernel)
    parts, start = [], 0
    for fan_in, fan_out in layers:
        stop = start + (fan_in + 1) * fan_out
        parts.append(flat_order(kernel[..., start:stop], fan_out))
        start = stop
    return np.concatenate(parts, axis=-1)


def _activation(z: np.float32, code: int) -> np.float32:
    """act(z) in float32: relu (0), tanh (1), sigmoid (2)."""
    if code == 0:
        return max(z, np.float32(0.0))
    if code == 1:
        return np.tanh(z)
    return np.float32(1.0) / (np.float32(1.0) + np.exp(-z))


def _slope(a: np.float32, code: int) -> np.float32:
    """act'(z) from a = act(z), as :func:`audit.training.models._derivative` (relu'(0) = 0)."""
    if code == 0:
        return np.float32(1.0) if a > 0 else np.float32(0.0)
    if code == 1:
        return np.float32(1.0) - a * a
    return a * (np.float32(1.0) - a)


def _mlp_step(
    weights1: np.ndarray,
    weights2: np.ndarray,
    grad: np.ndarray,
    xa: np.ndarray,
    sqnorm: np.ndarray,
    labels: np.ndarray,
    index: np.ndarray,
    canary_in: np.ndarray,
    rules: np.ndarray,
    u: np.ndarray,
    clip: float,
    alpha: np.float32,
    observed: np.ndarray,
    sizes: np.ndarray,
    activation: int,
) -> None:
    """One DP-SGD step of K MLPs (module docstring): weights1 (K, H, D') and weights2 (K, C, H')
    in the kernel's layout, updated in place; grad (K, P) the step's noise in the kernel order
    (it receives the injected canary gradient); xa (n, D') padded augmented inputs, sqnorm
    ||[x, 1]||^2 (n,), labels (n,); index (K, S) the step's example indices (-1: padding);
    canary_in (K,); ``rules`` and u (in the kernel order) as :func:`audit.training.compiled.
    _logistic_step` takes them, for a Dirac canary (its coordinate in the first layer's block);
    observed (K,) and sizes (K,) receive the observations and batch sizes; alpha = -lr / b;
    ``activation`` a code of :data:`ACTIVATION_CODES`."""
    models, hidden, width = weights1.shape
    classes, width2 = weights2.shape[1], weights2.shape[2]
    rows_in = (grad.shape[1] - classes * (hidden + 1)) // hidden  # D + 1
    block1 = hidden * rows_in
    summed1 = min(width, -(-rows_in // 8) * 8)
    summed2 = min(width2, -(-(hidden + 1) // 8) * 8)
    capacity = models * index.shape[1]
    rows = np.empty(capacity, np.int64)  # the block's slots through the model, model by model
    first = np.empty(models + 1, np.int64)
    slot = np.arange(capacity)  # row m of ``hidden_rows`` is slot m
    hidden_z = np.empty((hidden, capacity), np.float32)  # z, then f d, hidden-major
    hidden_rows = np.zeros((capacity, width2), np.float32)  # [a, 1, 0 ...] per slot
    hidden_sq = np.empty(capacity, np.float32)  # ||[a, 1]||^2
    errors = np.empty((classes, capacity), np.float32)  # logits, then f e, class-major
    label = np.empty(capacity, np.int64)
    top = np.empty(capacity, np.float32)
    total = np.empty(capacity, np.float32)
    square = np.empty(capacity, np.float32)
    powers = np.empty(capacity, np.int32)
    back = np.empty(hidden, np.float32)  # W2 e of one slot
    sums1 = np.zeros((hidden, width), np.float32)
    sums2 = np.zeros((classes, width2), np.float32)
    bound = np.float32(clip)
    used = 0
    for k in range(models):  # (1) slot rules, injection, observation, both layers' products
        first[k] = used
        used = compiled._slot_rules(
            k, index, canary_in, rules, u, bound, grad, rows, used, observed, sizes
        )
        lo = first[k]
        for m in range(lo, used):
            label[m] = labels[rows[m]]
        compiled._model_logits(weights1[k], xa, rows, lo, used, hidden_z)
        for m in range(lo, used):
            row = hidden_rows[m]
            norm = np.float32(1.0)
            for h in range(hidden):
                a = _activation(hidden_z[h, m], activation)
                row[h] = a
                norm += a * a
            row[hidden] = np.float32(1.0)
            hidden_sq[m] = norm
        compiled._model_logits(weights2[k], hidden_rows, slot, lo, used, errors)
    first[models] = used
    # (2) per model, softmax errors of its slots, then per slot d, the norm and the clip factor
    for k in range(models):  # per model: a model's arithmetic never depends on its block
        compiled._softmax_errors(errors, label, first[k], first[k + 1], top, total, square, powers)
        w2 = weights2[k]
        for m in range(first[k], first[k + 1]):
            for h in range(hidden):
                back[h] = 0.0
            for c in range(classes):
                e_c = errors[c, m]
                w_c = w2[c]
                for h in range(hidden):
                    back[h] += e_c * w_c[h]
            row = hidden_rows[m]
            d_sq = np.float32(0.0)
            for h in range(hidden):
                d = back[h] * _slope(row[h], activation)
                hidden_z[h, m] = d
                d_sq += d * d
            norm = np.sqrt(sqnorm[rows[m]] * d_sq + hidden_sq[m] * square[m])
            factor = min(np.float32(1.0), bound / max(norm, np.float32(1e-30)))
            for h in range(hidden):
                hidden_z[h, m] *= factor
            for c in range(classes):
                errors[c, m] *= factor
    for k in range(models):  # (3) the two clipped sums and the update
        w1 = weights1[k]
        w2 = weights2[k]
        g1 = grad[k, :block1].reshape((hidden, rows_in))
        g2 = grad[k, block1:].reshape((classes, hidden + 1))
        if first[k] == first[k + 1]:  # noise (and injection) only
            for h in range(hidden):
                for j in range(rows_in):
                    w1[h, j] += alpha * g1[h, j]
            for c in range(classes):
                for j in range(hidden + 1):
                    w2[c, j] += alpha * g2[c, j]
            continue
        compiled._clipped_sum(xa, rows, first[k], first[k + 1], hidden_z, sums1, summed1)
        compiled._clipped_sum(hidden_rows, slot, first[k], first[k + 1], errors, sums2, summed2)
        for h in range(hidden):
            w_h, g_h, s_h = w1[h], g1[h], sums1[h]
            for j in range(rows_in):
                w_h[j] += alpha * (g_h[j] + s_h[j])
        for c in range(classes):
            w_c, g_c, s_c = w2[c], g2[c], sums2[c]
            for j in range(hidden + 1):
                w_c[j] += alpha * (g_c[j] + s_c[j])


_MLP_INLINED: tuple[str, ...] = ("_activation", "_slope")
"""This module's helpers the kernel calls, compiled and inlined into it."""

_mlp_step_kernel: Any = None
_gaussian_rows_kernel: Any = None
"""The compiled :func:`_mlp_step` and :func:`audit.training.philox._gaussian_rows` that
:func:`_mlp_philox_blocks` calls (set by :func:`_compiled_blocks` before compiling it)."""


def _mlp_philox_blocks(
    block: int,
    weights1: np.ndarray,
    weights2: np.ndarray,
    noise: np.ndarray,
    keys: np.ndarray,
    rows: np.ndarray,
    std: float,
    xa: np.ndarray,
    sqnorm: np.ndarray,
    labels: np.ndarray,
    index: np.ndarray,
    canary_in: np.ndarray,
    rules: np.ndarray,
    u: np.ndarray,
    clip: float,
    alpha: np.float32,
    observed: np.ndarray,
    sizes: np.ndarray,
    activation: int,
) -> None:
    """Every step of K MLPs, ``block`` models at a time through all their steps: per block and
    step t the block's Philox noise into ``noise`` (block, P), then :func:`_mlp_step` on
    index[:, t], observed[:, t] and sizes[:, t] (as :func:`audit.training.compiled.
    _philox_blocks` for logistic regression: each model's arithmetic is the step-major order's)."""
    models = weights1.shape[0]
    for lo in range(0, models, block):
        hi = min(lo + block, models)
        buffer = noise[: hi - lo]
        for t in range(index.shape[1]):
            _gaussian_rows_kernel(buffer, keys[lo:hi], rows[lo:hi], t, std)
            _mlp_step_kernel(
                weights1[lo:hi], weights2[lo:hi], buffer, xa, sqnorm, labels, index[lo:hi, t],
                canary_in[lo:hi], rules, u, clip, alpha, observed[lo:hi, t], sizes[lo:hi, t],
                activation,
            )


@functools.cache
def _compiled_step() -> Callable[..., None]:
    """:func:`_mlp_step` compiled (with the logistic kernel's helpers it calls)."""
    import numba

    compiled._compiled(compiled._logistic_step)  # compiles the shared helpers in place
    module = globals()
    for name in _MLP_INLINED:
        if not isinstance(module[name], numba.core.registry.CPUDispatcher):
            module[name] = numba.njit(inline="always", **compiled.NUMBA_OPTIONS)(module[name])
    return numba.njit(**compiled.NUMBA_OPTIONS)(_mlp_step)


@functools.cache
def _compiled_blocks() -> Callable[..., None]:
    """:func:`_mlp_philox_blocks` compiled, with the two kernels it calls."""
    import numba

    global _mlp_step_kernel, _gaussian_rows_kernel
    _mlp_step_kernel = _compiled_step()
    _gaussian_rows_kernel = compiled._compiled(philox._gaussian_rows)
    return numba.njit(**compiled.NUMBA_OPTIONS)(_mlp_philox_blocks)


def _check(
    weights1: np.ndarray, weights2: np.ndarray, grad_width: int, xa: np.ndarray, rules: np.ndarray
) -> None:
    """The shapes the kernel indexes by (it runs without bounds checks)."""
    models, hidden, width = weights1.shape
    classes = weights2.shape[1]
    rows_in = (grad_width - classes * (hidden + 1)) // hidden if hidden else 0
    if (
        weights2.shape[0] != models
        or hidden < 1
        or weights2.shape[2] < hidden + 1
        or xa.shape[1] != width
        or rows_in < 1
        or rows_in > width
        or grad_width != hidden * rows_in + classes * (hidden + 1)
        or rules[3] < 0
        or rules[3] >= hidden * rows_in
    ):
        raise ValueError(
            f"MLP kernel: shapes disagree (weights {weights1.shape} and {weights2.shape}, "
            f"{grad_width} parameters, xa {xa.shape}) or the canary is not a Dirac canary on the "
            "first layer"
        )


def mlp_step(
    weights1: np.ndarray,
    weights2: np.ndarray,
    grad: np.ndarray,
    xa: np.ndarray,
    sqnorm: np.ndarray,
    labels: np.ndarray,
    index: np.ndarray,
    canary_in: np.ndarray,
    rules: np.ndarray,
    u: np.ndarray,
    clip: float,
    alpha: np.float32,
    observed: np.ndarray,
    sizes: np.ndarray,
    activation: str,
) -> None:
    """One compiled DP-SGD step of K MLPs: :func:`_mlp_step` (the same code run by Python), the
    shapes checked here, ``activation`` by name."""
    _check(weights1, weights2, grad.shape[1], xa, rules)
    if grad.shape[0] != weights1.shape[0] or index.shape[0] != weights1.shape[0]:
        raise ValueError("MLP kernel: grad and index must have one row per model")
    _compiled_step()(
        weights1, weights2, grad, xa, sqnorm, labels, index, canary_in, rules, u, clip,
        np.float32(alpha), observed, sizes, ACTIVATION_CODES[activation],
    )


def mlp_philox_training(
    block: int,
    weights1: np.ndarray,
    weights2: np.ndarray,
    noise: np.ndarray,
    keys: np.ndarray,
    rows: np.ndarray,
    std: float,
    xa: np.ndarray,
    sqnorm: np.ndarray,
    labels: np.ndarray,
    index: np.ndarray,
    canary_in: np.ndarray,
    rules: np.ndarray,
    u: np.ndarray,
    clip: float,
    alpha: np.float32,
    observed: np.ndarray,
    sizes: np.ndarray,
    activation: str,
) -> None:
    """All T steps of K MLPs on the ``compiled_philox`` route in one compiled call
    (:func:`_mlp_philox_blocks`), for a Dirac canary: ``noise`` (block, P) float32 scratch,
    keys (K, 2) and rows (K,) uint32 the Philox streams (:func:`audit.training.compiled.
    gaussian_rows`), index (K, T, S), observed and sizes (K, T); the rest as :func:`mlp_step`."""
    models = weights1.shape[0]
    _check(weights1, weights2, noise.shape[1], xa, rules)
    if compiled.blocks_disagree(
        block, models, noise, keys, rows, index, observed, sizes, canary_in, xa, sqnorm, labels
    ):
        raise ValueError(
            f"mlp_philox_training: shapes disagree (noise {noise.shape}, keys {keys.shape}, "
            f"index {index.shape}, observed {observed.shape})"
        )
    if index.shape[1] > 2**32:
        raise ValueError(f"mlp_philox_training: {index.shape[1]} steps exceed 2^32")
    _compiled_blocks()(
        np.int64(block), weights1, weights2, noise, keys, rows, np.float64(std), xa, sqnorm,
        labels, index, canary_in, rules, u, clip, np.float32(alpha), observed, sizes,
        np.int64(ACTIVATION_CODES[activation]),
    )
