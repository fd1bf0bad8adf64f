"""Compiled CPU kernels (numba): one DP-SGD step of K logistic regressions fused model by
model.

**The step.** The engine's torch routes (:mod:`audit.training.models`, :mod:`audit.training.engine`)
compute the clipped per-example gradient sum with batched products over models sorted by batch
width: each step permutes the models' parameters and noise into width order and gathers the batch
rows into (K, width, D + 1) blocks (two (K, P) permutations and a gather per step: most of the
step's time outside the noise; bench/README.md). For multinomial logistic regression on the
CPU, :func:`logistic_step` does the same arithmetic model by model in one compiled loop (numba,
https://numba.pydata.org), with every operand of a model in the L1 cache: no permutation, no gather,
no padding to a group's width. Per model k with parameters [W; c] (D + 1, C) and the slots i of its
batch whose gradient goes through the model, the closed forms of :mod:`audit.training.models`:

    z_i = [x_i, 1] [W; c],   e_i = softmax(z_i) - onehot(y_i),
    ||g_i||^2 = ||[x_i, 1]||^2 ||e_i||^2,   f_i = min(1, C / ||g_i||),
    theta_k += alpha (N_k + I_k + sum_i [x_i, 1]^T (f_i e_i))
                 (Abadi et al. 2016, arXiv 1607.00133, Alg. 1; Goodfellow 2015, arXiv 1510.01799)

with N_k the step's Gaussian noise (drawn by torch, in model order, into ``grad`` before the
call), I_k the injected canary gradient and alpha = -lr / b. The slot rules (which slots go
through the model, the injection, the Dirac observation) are the engine's ``_plan``; the
update is one fused multiply-add per parameter like torch's ``add_(grad, alpha=...)``.
Everything is float32 like the torch routes; only the summation order of the products and the
exponential's last bit differ (as MKL's blocking differs from one shape to another, and Sleef's
exp from glibc's), so parameters agree with the
torch routes to float32 rounding (tests/test_compiled.py), and a Dirac canary's coordinate (an
always-zero input feature: every real row adds exactly 0 to it) gets exactly the same bits:
its observations and final projection are bit-identical.

The parameters live in the kernel's layout from the first step to the last
(:func:`transposed_weights`, :func:`natural_weights`): each model's W^T (C, D') with the
inputs zero-padded to D' = 16 * ceil((D + 1) / 16) columns (:func:`padded_rows`), so that
the forward pass is C dot products and the backward pass C axpys over contiguous rows, which
LLVM vectorises (the padding multiplies zeros: it changes nothing). Both are register-blocked
(:func:`_model_logits`: two slots by five classes, ten running sums sharing each load;
:func:`_clipped_sum`: four slots per read and write of a class's running sum): a dot product or
an axpy of ~72 floats alone spends more on its loop's entry and tail than on its products
(forward 1.3 -> 0.6 us, clipped sum 1.2 -> 0.7 us per model and step, bench/README.md). The
softmax errors and clip factors of a model's slots are computed together, class by class over
the slots, with a branch-free exponential (:func:`_exp_parts`, at most 1.3 ulp from the exact
one): loops that vectorise, where a per-slot softmax over ~10 classes costs a quarter of the
step in scalar code and library calls (the layouts and block sizes tried: bench/README.md). Never
over a whole block's slots: a vectorised loop's body and scalar remainder may round differently
under fastmath, so that made a model's results depend on its block (:data:`KERNEL_VERSION`).

**The noise** (:func:`gaussian_rows`): the ``compiled_philox`` route draws each model's Gaussian
noise in compiled code too, from the counter-based Philox4x32-10 generator keyed by the model's
noise stream and addressed by (step, row) (:mod:`audit.training.philox`, docs/design.md §12.3), by
the ziggurat method in float64, instead of torch's ``normal_``: a different stream of the same
law, vectorised over the counters.

numba is an optional speed-up, the ``fast`` extra (``pip install "dpsgd-audit[fast]"``):
without it (or with ``AUDIT_COMPILED=0`` in the environment) the engine keeps the torch routes
(``grouped`` on the CPU), with the same results up to float32 rounding under the same noise
(the default route then draws torch's noise instead of Philox's: another stream of the same
law), slower on the CPU (bench/optional_numba.py); a shard's fingerprint records which
(:func:`default_routes`), so shards of the two are never mixed. The switch (:func:`available`)
is shared with the Poisson sampler's compiled sort (:mod:`audit.sampling.compiled_rows`),
which defines it; numba is imported only inside the functions that compile a kernel.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, Literal, TypedDict

import numpy as np

from audit.sampling.compiled_rows import available
from audit.training import philox

__all__ = [
    "blocks_disagree",
    "default_routes",
    "exp_nonpositive",
    "flat_order",
    "gaussian_rows",
    "kernel_coordinate",
    "kernel_order",
    "logistic_step",
    "natural_weights",
    "padded_rows",
    "padded_width",
    "philox4x32",
    "philox_training",
    "step_rules",
    "transposed_weights",
    "ziggurat_variates",
]


TORCH_GRADIENT_METHOD = "compiled"
"""How the torch.func engine computes any module's clipped sums by default
(:data:`audit.training.func_engine.GRADIENT_METHODS`): ``compiled``, one compiled loop over the
models and their examples for the convolutional networks it covers
(:mod:`audit.training.compiled_cnn`), else ``batched``, the K models' forward by hand-batched
layers (:mod:`audit.training.batched_layers`) and per-example norms from each layer's inputs and
output gradients (:mod:`audit.training.ghost_norms`; ``ghost``, then ``vmap``, for modules
without a plan). ``compiled`` models draw their noise from Philox as the ``compiled_philox``
route does (:attr:`audit.training.func_engine.TorchModel.philox_noise`; the stream's version is
the routes' ``noise``). Recorded by :func:`default_routes` (``batched`` where numba is
unavailable or off the CPU; formerly ``batched``, before that ``ghost``): the methods agree only
up to float32 rounding (the Dirac canary's observations bit for bit under the same noise),
docs/design.md §12.4."""


KERNEL_VERSION = "per-model-softmax-1"
"""The compiled kernels' arithmetic (``kernel`` in :func:`default_routes`): since
``per-model-softmax-1`` every loop runs over one model's slots, never a block's, so a model's
results are the same bit for bit whatever its block and worker count (:func:`_softmax_errors`;
docs/design.md §12.4). Formerly unversioned (the softmax over a block's slots at once)."""


def default_routes(device: str = "cpu") -> dict[str, str]:
    """The route the engine takes by default on ``device``, per closed-form model
    (:func:`audit.training.engine.train`'s ``route``): ``compiled_philox`` (the compiled kernel
    with its own Philox noise, :func:`gaussian_rows`) for logistic regression on the CPU when
    numba is available, and for the MLP with a Dirac canary (:mod:`audit.training.compiled_mlp`;
    with another canary the MLP takes ``grouped``), else ``grouped`` on the CPU and ``padded``
    on a GPU. Recorded in every shard's fingerprint (:mod:`audit.run.fingerprint`): the torch
    routes agree only up to float32 rounding, and ``compiled_philox`` draws another noise stream
    of the same law, so shards of two routes are never mixed; ``noise`` names the Philox route's
    stream (:data:`audit.training.philox.STREAM_VERSION`: its versions are listed there), so
    shards of an older stream are never reused either; ``kernel`` the kernels' arithmetic
    (:data:`KERNEL_VERSION`); ``torch``: the torch modules' gradient
    method, :data:`TORCH_GRADIENT_METHOD` where numba runs on the CPU, else ``batched``. Off the
    CPU, ``batches = "device"``: the samplers that
    allow it draw on the device (:mod:`audit.training.device_batches`: the same laws, other
    draws than numpy's)."""
    if device != "cpu":
        return {
            "logistic": "padded", "mlp": "padded", "batches": "device", "torch": "batched",
        }
    if not available():
        return {"logistic": "grouped", "mlp": "grouped", "torch": "batched"}
    return {
        "logistic": "compiled_philox", "mlp": "compiled_philox", "noise": philox.STREAM_VERSION,
        "kernel": KERNEL_VERSION, "torch": TORCH_GRADIENT_METHOD,
    }


def padded_width(columns: int) -> int:
    """D' = 16 * ceil(columns / 16): the row length of both the kernel's inputs
    (:func:`padded_rows`) and its weights (:func:`transposed_weights`), which the dot products
    run over as whole SIMD vectors (:func:`logistic_step` checks that the two agree)."""
    return -(-columns // 16) * 16


def padded_rows(xa: np.ndarray) -> np.ndarray:
    """The augmented inputs [x, 1] (n, D + 1) copied into zero columns up to a multiple of 16
    (float32, C-contiguous): the kernel's dot products then run over whole SIMD vectors."""
    n, width = xa.shape
    out = np.zeros((n, padded_width(width)), dtype=np.float32)
    out[:, :width] = xa
    return out


def transposed_weights(theta: np.ndarray, features: int) -> np.ndarray:
    """The kernel's layout of K logistic regressions: flat parameters (K, P), P = features * C,
    row-major augmented weight matrices [W; c] (features, C), copied to W^T (K, C, D') with
    D' = 16 * ceil(features / 16) and zero padding columns (the dot products then run over
    whole SIMD vectors, the padding multiplying zeros)."""
    models, params = theta.shape
    classes = params // features
    out = np.zeros((models, classes, padded_width(features)), dtype=np.float32)
    out[:, :, :features] = theta.reshape(models, features, classes).transpose(0, 2, 1)
    return out


def natural_weights(weights: np.ndarray, features: int) -> np.ndarray:
    """Back from :func:`transposed_weights`: flat parameters (K, P), float32, C-contiguous."""
    models, classes, _ = weights.shape
    return np.ascontiguousarray(weights[:, :, :features].transpose(0, 2, 1)).reshape(
        models, features * classes
    )



def kernel_order(flat: np.ndarray, classes: int) -> np.ndarray:
    """Vectors over the parameters (..., P) from the flat layout (entry j C + c: input row j of
    [W; c], class c) to the kernel's class-major layout (entry c (D + 1) + j), a C-contiguous
    copy: the layout of the kernel's ``grad``, ``u`` and Dirac coordinate (:func:`logistic_step`),
    in which each class's update reads its noise contiguously."""
    flat = np.asarray(flat)
    rows = flat.shape[-1] // classes
    moved = np.swapaxes(flat.reshape(*flat.shape[:-1], rows, classes), -1, -2)
    return np.ascontiguousarray(moved).reshape(flat.shape)


def flat_order(kernel: np.ndarray, classes: int) -> np.ndarray:
    """The inverse of :func:`kernel_order`: (..., P) in the kernel's layout back to the flat one."""
    kernel = np.asarray(kernel)
    rows = kernel.shape[-1] // classes
    moved = np.swapaxes(kernel.reshape(*kernel.shape[:-1], classes, rows), -1, -2)
    return np.ascontiguousarray(moved).reshape(kernel.shape)


def kernel_coordinate(flat: int, classes: int, size: int) -> int:
    """The kernel-layout position of the flat parameter ``flat`` = j C + c (:func:`kernel_order`)
    among ``size`` parameters: c (D + 1) + j."""
    return (flat % classes) * (size // classes) + flat // classes

def _exp_parts(t: np.float32) -> tuple[np.float32, np.int32]:
    """exp(t) for t <= 0 in float32 as (m, n) with exp(t) = m 2^n: Cody-Waite reduction
    t = n ln 2 + r, |r| <= ln(2)/2 (ln 2 split into 0.693359375 - 2.12194440e-4), and m = e^r
    by Cephes' degree-7 polynomial for expf (S. Moshier, Cephes Math Library, expf.c). Maximum
    error 1.26 ulp over [-87, 0] against the float64 exponential (tests/test_compiled.py; numpy's
    float32 exp: 2.4 ulp). t < -87 is taken as -87 (exp(-87) = 1.6e-38, the smallest normal
    float32's order): a softmax term that small is below the resolution of every other term.
    Branch-free, so that a loop calling it vectorises."""
    t = max(t, np.float32(-87.0))
    # round(t / ln 2), t <= 0
    exponent = np.int32(t * np.float32(1.4426950408889634) - np.float32(0.5))
    n = np.float32(exponent)
    r = t - n * np.float32(0.693359375) + n * np.float32(2.12194440e-4)
    m = np.float32(1.9875691500e-4)
    m = m * r + np.float32(1.3981999507e-3)
    m = m * r + np.float32(8.3334519073e-3)
    m = m * r + np.float32(4.1665795894e-2)
    m = m * r + np.float32(1.6666665459e-1)
    m = m * r + np.float32(5.0000001201e-1)
    return m * r * r + r + np.float32(1.0), exponent


def exp_nonpositive(values: np.ndarray) -> np.ndarray:
    """exp of float32 values <= 0 as the kernel computes it (:func:`_exp_parts`): the mantissa
    times 2^n, 2^n built from its float32 bit pattern (n + 127) << 23."""
    values = np.asarray(values, dtype=np.float32)
    out = np.empty_like(values)
    powers = np.empty(values.shape, dtype=np.int32)
    for position, value in np.ndenumerate(values):
        out[position], exponent = _exp_parts(np.float32(value))
        powers[position] = (exponent + 127) << 23
    return out * powers.view(np.float32)


LOGIT_CLASSES = 5
"""Classes per block of the forward products (:func:`_model_logits`): with two slots at a time,
ten running dot products share each load of the inputs and weights (bench/README.md)."""


def _model_logits(
    weights_k: np.ndarray, xa: np.ndarray, rows: np.ndarray, lo: int, hi: int, errors: np.ndarray
) -> None:
    """errors[c, m] <- z_mc = [x_m, 1] . w_c for the slots m = lo .. hi - 1 of one model (rows
    ``rows[m]`` of ``xa``), weights_k (C, D') in the kernel's layout: two slots and
    :data:`LOGIT_CLASSES` classes at a time (ten sums in one loop over the D' columns, which LLVM
    vectorises with a vector accumulator each; one class at a time after the last whole block).
    An odd last slot is paired with itself and its copy discarded. The same products as one dot
    product per (slot, class); only the order of the additions differs (fastmath reassociation)."""
    classes, width = weights_k.shape
    blocks = classes - classes % LOGIT_CLASSES
    for m in range(lo, hi, 2):
        second = m + 1 < hi
        x = xa[rows[m]]
        y = xa[rows[m + 1]] if second else x
        for c in range(0, blocks, LOGIT_CLASSES):
            w0, w1, w2, w3, w4 = (
                weights_k[c], weights_k[c + 1], weights_k[c + 2], weights_k[c + 3], weights_k[c + 4]
            )
            x0 = x1 = x2 = x3 = x4 = y0 = y1 = y2 = y3 = y4 = np.float32(0.0)
            for j in range(width):
                xj = x[j]
                yj = y[j]
                a = w0[j]
                x0 += xj * a
                y0 += yj * a
                a = w1[j]
                x1 += xj * a
                y1 += yj * a
                a = w2[j]
                x2 += xj * a
                y2 += yj * a
                a = w3[j]
                x3 += xj * a
                y3 += yj * a
                a = w4[j]
                x4 += xj * a
                y4 += yj * a
            errors[c, m] = x0
            errors[c + 1, m] = x1
            errors[c + 2, m] = x2
            errors[c + 3, m] = x3
            errors[c + 4, m] = x4
            if second:
                errors[c, m + 1] = y0
                errors[c + 1, m + 1] = y1
                errors[c + 2, m + 1] = y2
                errors[c + 3, m + 1] = y3
                errors[c + 4, m + 1] = y4
        for c in range(blocks, classes):
            w0 = weights_k[c]
            x0 = y0 = np.float32(0.0)
            for j in range(width):
                a = w0[j]
                x0 += x[j] * a
                y0 += y[j] * a
            errors[c, m] = x0
            if second:
                errors[c, m + 1] = y0


CLIPPED_SLOTS = 4
"""Slots per pass of the clipped sum (:func:`_clipped_sum`): each class's running sum is read and
written once per four slots instead of once per slot (the axpys were bound by those stores)."""


def _clipped_sum(
    xa: np.ndarray,
    rows: np.ndarray,
    lo: int,
    hi: int,
    errors: np.ndarray,
    sums: np.ndarray,
    summed: int,
) -> None:
    """sums[c, :summed] <- sum_m (f_m e_mc) [x_m, 1] over the slots m = lo .. hi - 1 of one model
    (errors holding f_m e_mc): :data:`CLIPPED_SLOTS` slots at a time, then one at a time."""
    classes = sums.shape[0]
    for c in range(classes):
        total_c = sums[c]
        for j in range(summed):
            total_c[j] = 0.0
    quads = lo + (hi - lo) // CLIPPED_SLOTS * CLIPPED_SLOTS
    for m in range(lo, quads, CLIPPED_SLOTS):
        x0, x1, x2, x3 = xa[rows[m]], xa[rows[m + 1]], xa[rows[m + 2]], xa[rows[m + 3]]
        for c in range(classes):
            total_c = sums[c]
            e0, e1, e2, e3 = errors[c, m], errors[c, m + 1], errors[c, m + 2], errors[c, m + 3]
            for j in range(summed):
                total_c[j] += (e0 * x0[j] + e1 * x1[j]) + (e2 * x2[j] + e3 * x3[j])
    for m in range(quads, hi):
        x0 = xa[rows[m]]
        for c in range(classes):
            total_c = sums[c]
            e0 = errors[c, m]
            for j in range(summed):
                total_c[j] += e0 * x0[j]



def _slot_rules(
    k: int,
    index: np.ndarray,
    canary_in: np.ndarray,
    rules: np.ndarray,
    u: np.ndarray,
    bound: np.float32,
    grad: np.ndarray,
    rows: np.ndarray,
    used: int,
    observed: np.ndarray,
    sizes: np.ndarray,
) -> int:
    """Model k's slot rules (:func:`audit.training.engine._plan`'s): appends to ``rows`` from
    position ``used`` the examples whose gradient goes through the model, sets ``sizes[k]`` (its
    batch size), adds the injected canary gradient to ``grad[k]`` (+C u per IN Dirac canary
    sampled, -C u per other example under ``adversarial``) and, for a Dirac canary, observes
    ``observed[k] = u_j grad[k, j]`` (``rules`` and the layouts: :func:`_logistic_step`).
    Returns the new ``used``."""
    canary, injected_canary, adversarial, coordinate = (
        rules[0],
        rules[1] != 0,
        rules[2] != 0,
        rules[3],
    )
    real = 0
    sampled = 0  # IN canary slots whose gradient is injected
    others = 0
    for s in range(index.shape[1]):
        i = index[k, s]
        if i < 0:
            continue
        real += 1
        if i == canary:
            if canary_in[k]:
                if injected_canary:
                    sampled += 1
                else:
                    rows[used] = i
                    used += 1
        else:
            others += 1
            if not adversarial:
                rows[used] = i
                used += 1
    sizes[k] = real
    injected = np.float32(0.0)
    if injected_canary:
        injected += np.float32(sampled) * bound
    if adversarial:
        injected -= np.float32(others) * bound
    sign = u[coordinate] if coordinate >= 0 else np.float32(0.0)
    if injected != 0:
        if coordinate >= 0:
            grad[k, coordinate] += sign * injected
        else:
            for p in range(grad.shape[1]):
                grad[k, p] += injected * u[p]
    if coordinate >= 0:
        observed[k] = sign * grad[k, coordinate]
    return used


def _softmax_errors(
    errors: np.ndarray,
    label: np.ndarray,
    lo: int,
    hi: int,
    top: np.ndarray,
    total: np.ndarray,
    square: np.ndarray,
    powers: np.ndarray,
) -> None:
    """errors[:, lo:hi] (C, .) from logits to e = softmax - onehot(label), class by class over
    the slots lo .. hi - 1 of one model (loops that vectorise), with ||e||^2 into ``square``;
    ``top``, ``total`` and ``powers`` are scratch (the exponential as :func:`_exp_parts`' mantissa
    times 2^n). Called once per model, never over a whole block's slots: under fastmath a loop's
    vector body and its scalar remainder may round differently (reassociated polynomial, FMAs),
    and which slots fall in which depends on the loop's bounds, so a loop over the block's slots
    made a model's errors depend on the models before it (docs/design.md §12.4). Over one model's
    slots, slot m's code path depends only on m - lo and hi - lo: the model's own."""
    classes = errors.shape[0]
    scale = powers.view(np.float32)  # 2^n from its bit pattern
    for m in range(lo, hi):
        top[m] = errors[0, m]
        total[m] = 0.0
        square[m] = 0.0
    for c in range(1, classes):
        e_c = errors[c]
        for m in range(lo, hi):
            top[m] = max(top[m], e_c[m])
    for c in range(classes):
        e_c = errors[c]
        for m in range(lo, hi):
            mantissa, exponent = _exp_parts(e_c[m] - top[m])
            e_c[m] = mantissa
            powers[m] = (exponent + np.int32(127)) << np.int32(23)
        for m in range(lo, hi):
            p = e_c[m] * scale[m]
            e_c[m] = p
            total[m] += p
    for m in range(lo, hi):
        total[m] = np.float32(1.0) / total[m]
    for c in range(classes):
        e_c = errors[c]
        for m in range(lo, hi):
            v = e_c[m] * total[m] - (np.float32(1.0) if label[m] == c else np.float32(0.0))
            e_c[m] = v
            square[m] += v * v


def _logistic_step(
    weights: np.ndarray,
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
) -> None:
    """One DP-SGD step of K logistic regressions: weights_k += alpha * (grad_k + G_k) with G_k the
    clipped per-example gradient sum (module docstring), in three passes over the block of
    models: (1) per model, which slots go through the model, the canary's injected gradient,
    its observation and the slots' logits; (2) per model, the softmax errors and clip factors of
    its slots, class by class over the slots (loops that vectorise: a per-slot softmax over ~10
    classes does not, and cost a quarter of the step); (3) per model, the
    clipped sum and the update.

    weights: float32 (K, C, D') from :func:`transposed_weights`, updated in place. grad: float32 (K,
    P) in the kernel's class-major layout (:func:`kernel_order`: class c's D + 1 entries at
    c (D + 1) .. c (D + 1) + D, contiguous for the update), holding the step's noise; it receives
    the injected canary gradient, and G_k too when the observation is along a general direction
    (read from it afterwards). xa: padded augmented inputs (n, D') from
    :func:`padded_rows`; sqnorm: ||[x_i, 1]||^2 (n,); labels (n,). index (K, S): the step's example
    indices (-1: padding); canary_in (K,): IN or OUT. ``rules`` (int64): the canary's index, whether
    its gradient is injected (a Dirac canary: +C u when IN and sampled, never through the model),
    whether the threat model is adversarial (every other example injects -C u instead of its
    gradient), and the Dirac coordinate j of u in the kernel's layout (-1 for a general u). u (P,)
    float32: the canary direction, in the kernel's layout. The slot rules are
    :func:`audit.training.engine._plan`'s, the injection is the torch routes' ``grad[:, j] += u_j *
    injected`` (``addr_`` for a general u), and the observation ``u_j * grad[:, j]`` goes to
    ``observed`` (K,) for a Dirac canary: G_k adds exactly 0 on its coordinate. ``sizes`` (K,)
    receives the batch sizes (non-padding slots). alpha = -lr / b, float32; the update is one fused
    multiply-add per parameter, as torch's ``add_(grad, alpha=...)``.
    """
    models, classes, width = weights.shape
    features = grad.shape[1] // classes
    slots = index.shape[1]
    write_grad = rules[3] < 0
    # the clipped sums' columns that the update reads (features), rounded up to whole 8-float
    # vectors: each column is summed alone, so its bits do not depend on this length
    summed = min(width, -(-features // 8) * 8)
    capacity = models * slots
    rows = np.empty(capacity, np.int64)  # the block's slots through the model, model by model
    first = np.empty(models + 1, np.int64)  # model k's slots: first[k] .. first[k + 1] - 1
    errors = np.empty((classes, capacity), np.float32)  # logits, then f_i e_i, class-major
    label = np.empty(capacity, np.int64)
    top = np.empty(capacity, np.float32)
    total = np.empty(capacity, np.float32)
    square = np.empty(capacity, np.float32)
    powers = np.empty(capacity, np.int32)
    sums = np.zeros((classes, width), np.float32)  # G_k, transposed
    bound = np.float32(clip)
    used = 0
    for k in range(models):  # (1) slot rules, injection, observation, logits
        first[k] = used
        used = _slot_rules(k, index, canary_in, rules, u, bound, grad, rows, used, observed, sizes)
        for m in range(first[k], used):
            label[m] = labels[rows[m]]
        _model_logits(weights[k], xa, rows, first[k], used, errors)
    first[models] = used
    # (2) softmax errors and clip factors, model by model
    # per model (:func:`_softmax_errors`: a model's arithmetic never depends on its block)
    for k in range(models):
        lo, hi = first[k], first[k + 1]
        _softmax_errors(errors, label, lo, hi, top, total, square, powers)
        for m in range(lo, hi):
            norm = math.sqrt(sqnorm[rows[m]] * square[m])
            top[m] = min(np.float32(1.0), bound / max(norm, np.float32(1e-30)))  # clip factor f_i
        for c in range(classes):
            e_c = errors[c]
            for m in range(lo, hi):
                e_c[m] *= top[m]
    for k in range(models):  # (3) clipped sum and update
        weights_k = weights[k]
        grad_k = grad[k].reshape((classes, features))
        if first[k] == first[k + 1]:  # no model gradient this step: noise (and injection) only
            for c in range(classes):
                w_c = weights_k[c]
                g_c = grad_k[c]
                for j in range(features):
                    w_c[j] += alpha * g_c[j]
            continue
        # G_k^T = sum_i (f_i e_i) [x_i, 1]^T
        _clipped_sum(xa, rows, first[k], first[k + 1], errors, sums, summed)
        for c in range(classes):
            total_c = sums[c]
            w_c = weights_k[c]
            g_c = grad_k[c]
            if write_grad:
                for j in range(features):
                    g = g_c[j] + total_c[j]
                    g_c[j] = g
                    w_c[j] += alpha * g
            else:
                for j in range(features):
                    w_c[j] += alpha * (g_c[j] + total_c[j])


_INLINED: tuple[str, ...] = (
    "_exp_parts", "_model_logits", "_clipped_sum", "_slot_rules", "_softmax_errors"
)
"""Module functions the kernels call; :func:`_compiled` replaces each by its compiled version
(numba compiles only calls to compiled functions), which the Python kernels call as well."""

_PHILOX_INLINED: tuple[str, ...] = (
    "_philox",
    "_density",
    "_unit32",
    "_unit64",
    "_abscissa",
)
"""The functions of :mod:`audit.training.philox` its kernels call, compiled and inlined likewise."""

_PHILOX_CALLED: tuple[str, ...] = (
    "_slow_variate",
    "_philox_words",
    "_ziggurat_row",
    "_gaussian_row",
)
"""The loops of :mod:`audit.training.philox`, compiled as functions of their own (not inlined: the
Philox loop vectorises alone, and the ziggurat's rare slow path stays out of its main loop)."""

class NumbaOptions(TypedDict):
    """The keyword arguments of ``numba.njit`` that every kernel is compiled with."""

    nogil: bool
    fastmath: set[str]
    boundscheck: bool
    error_model: Literal["python", "numpy"]
    cache: bool


NUMBA_OPTIONS: NumbaOptions = {
    "nogil": True,
    "fastmath": {"reassoc", "contract", "nsz"},
    "boundscheck": False,
    "error_model": "numpy",
    "cache": True,
}
"""numba's options for every kernel (:func:`_compiled`; :mod:`audit.training.compiled_mlp`)."""


@functools.cache
def _compiled(function: Callable[..., None]) -> Callable[..., None]:
    """``function`` compiled by numba (once per process; numba's on-disk cache spares the
    compilation in later processes). fastmath is limited to reassociation and contraction (the
    vectorised sums and FMAs): no finite-math assumption, so a diverging training still
    propagates inf and NaN as torch does."""
    import numba
    import numba.extending

    options = NUMBA_OPTIONS
    philox_module = vars(philox)
    for module, names in ((globals(), _INLINED), (philox_module, _PHILOX_INLINED)):
        for name in names:  # helpers the kernels call: compiled and inlined into them
            if not isinstance(module[name], numba.core.registry.CPUDispatcher):
                module[name] = numba.njit(inline="always", **options)(module[name])
    for name in _PHILOX_CALLED:
        if not isinstance(philox_module[name], numba.core.registry.CPUDispatcher):
            philox_module[name] = numba.njit(**options)(philox_module[name])
    return numba.njit(**options)(function)


def logistic_step(
    weights: np.ndarray,
    grad: np.ndarray,
    xa: np.ndarray,
    sqnorm: np.ndarray,
    labels: np.ndarray,
    index: np.ndarray,
    *rest: np.ndarray | float | np.float32,
) -> None:
    """One compiled DP-SGD step of K logistic regressions: the arguments of
    :func:`_logistic_step` (the same code, run by Python), ``alpha`` as ``np.float32``. The
    kernel runs without bounds checks, so the shapes it indexes by are checked here."""
    models, classes, width = weights.shape
    if (
        xa.shape[1] != width
        or grad.shape[0] != models
        or grad.shape[1] % classes
        or grad.shape[1] // classes > width
        or index.shape[0] != models
        or sqnorm.shape[0] != xa.shape[0]
        or labels.shape[0] != xa.shape[0]
    ):
        raise ValueError(
            f"logistic_step: shapes disagree (weights {weights.shape}, grad {grad.shape}, xa "
            f"{xa.shape}, index {index.shape}); build them with transposed_weights and padded_rows"
        )
    _compiled(_logistic_step)(weights, grad, xa, sqnorm, labels, index, *rest)


def gaussian_rows(
    out: np.ndarray, keys: np.ndarray, rows: np.ndarray, step: int, std: float
) -> None:
    """Row i of ``out`` (K, P) float32 <- the N(0, std^2) noise of model ``rows[i]`` of the stream
    with Philox key ``keys[i]`` (K, 2) uint32 at ``step`` (:mod:`audit.training.philox`, compiled:
    :func:`audit.training.philox.gaussian_row` is the same code run by Python)."""
    if (
        out.dtype != np.float32
        or not out.flags.c_contiguous
        or keys.dtype != np.uint32
        or rows.dtype != np.uint32
        or keys.shape != (out.shape[0], 2)
        or rows.shape != (out.shape[0],)
    ):
        raise ValueError(
            "gaussian_rows: out (K, P) float32 C-contiguous, keys (K, 2) and rows (K,) uint32; "
            "got out "
            f"{out.dtype} {out.shape}, keys {keys.dtype} {keys.shape}, rows {rows.dtype} "
            f"{rows.shape}"
        )
    if not 0 <= step < 2**32:
        raise ValueError(f"gaussian_rows: step={step} must be in [0, 2^32) (a Philox counter word)")
    _compiled(philox._gaussian_rows)(out, keys, rows, np.int64(step), np.float64(std))


def ziggurat_variates(
    words: np.ndarray, key: np.ndarray, step: int = 0, row: int = 0, std: float = 1.0
) -> np.ndarray:
    """The noise's transform of given main words (n,) uint32 -> (n,) float32, compiled
    (:func:`audit.training.philox._variates`): variate j is the ziggurat variate of ``words[j]``,
    its slow path (tail or wedge) drawing further words from the Philox counters (j, step, row,
    a) under ``key``. Tests feed it words conditioned on the slow paths, where the generator's own
    draws are too rare to count."""
    words = np.ascontiguousarray(words, dtype=np.uint32)
    if words.ndim != 1:
        raise ValueError(f"ziggurat_variates: words must be a 1-d uint32 array, got {words.shape}")
    out = np.empty(words.shape[0], np.float32)
    _compiled(philox._variates)(
        words, np.ascontiguousarray(key, dtype=np.uint32), np.int64(step), np.int64(row),
        np.float64(std), out,
    )
    return out


def philox4x32(counters: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Philox4x32-10, compiled (:func:`audit.training.philox.philox4x32` is the same code run by
    Python): (n, 4) uint32 counters and a (2,) uint32 key -> (n, 4) uint32 random words."""
    counters = np.ascontiguousarray(np.atleast_2d(counters), dtype=np.uint32)
    out = np.empty_like(counters)
    _compiled(philox._philox_block)(counters, np.ascontiguousarray(key, dtype=np.uint32), out)
    return out


_logistic_step_kernel: Any = None
_gaussian_rows_kernel: Any = None
"""The compiled :func:`_logistic_step` and :func:`audit.training.philox._gaussian_rows` that
:func:`_philox_blocks` calls (set by :func:`_compiled_philox_blocks` before compiling it)."""


def _philox_blocks(
    block: int,
    weights: np.ndarray,
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
) -> None:
    """Every step of the ``compiled_philox`` route for K models, ``block`` models at a time: per
    block and step t, the block's Philox noise (:func:`audit.training.philox._gaussian_rows`) into
    ``noise`` (block, P), then :func:`_logistic_step` on index[:, t], observed[:, t] and
    sizes[:, t] ((K, T, S), (K, T), (K, T)). The models are independent and a model's noise is a
    function of its address (key, step, row), so running all T steps of a block before the next
    gives each model exactly the arithmetic of the step-major order, while its parameters stay in
    the core's L2 cache for the whole training instead of streaming from memory every step."""
    models = weights.shape[0]
    for lo in range(0, models, block):
        hi = min(lo + block, models)
        buffer = noise[: hi - lo]
        for t in range(index.shape[1]):
            _gaussian_rows_kernel(buffer, keys[lo:hi], rows[lo:hi], t, std)
            _logistic_step_kernel(
                weights[lo:hi], buffer, xa, sqnorm, labels, index[lo:hi, t], canary_in[lo:hi],
                rules, u, clip, alpha, observed[lo:hi, t], sizes[lo:hi, t],
            )


@functools.cache
def _compiled_philox_blocks() -> Callable[..., None]:
    """:func:`_philox_blocks` compiled, with the two kernels it calls."""
    global _logistic_step_kernel, _gaussian_rows_kernel
    _logistic_step_kernel = _compiled(_logistic_step)
    _gaussian_rows_kernel = _compiled(philox._gaussian_rows)
    return _compiled(_philox_blocks)


def blocks_disagree(
    block: int,
    models: int,
    noise: np.ndarray,
    keys: np.ndarray,
    rows: np.ndarray,
    index: np.ndarray,
    observed: np.ndarray,
    sizes: np.ndarray,
    canary_in: np.ndarray,
    xa: np.ndarray,
    sqnorm: np.ndarray,
    labels: np.ndarray,
) -> bool:
    """Whether the arguments every model-by-block training call shares (:func:`philox_training`,
    :func:`audit.training.compiled_mlp.mlp_philox_training`) fail the shapes the kernels index by
    without bounds checks: the noise scratch (block, P) float32 C-contiguous, the Philox keys
    (K, 2) and rows (K,) uint32, index (K, T, S) with observed and sizes (K, T), canary_in (K,),
    one sqnorm and label per input row, and block >= 1."""
    return bool(
        noise.dtype != np.float32
        or not noise.flags.c_contiguous
        or noise.shape[0] < min(block, models)
        or keys.shape != (models, 2)
        or keys.dtype != np.uint32
        or rows.shape != (models,)
        or rows.dtype != np.uint32
        or index.ndim != 3
        or index.shape[0] != models
        or observed.shape != index.shape[:2]
        or sizes.shape != index.shape[:2]
        or canary_in.shape != (models,)
        or sqnorm.shape[0] != xa.shape[0]
        or labels.shape[0] != xa.shape[0]
        or block < 1
    )

def philox_training(
    block: int,
    weights: np.ndarray,
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
) -> None:
    """All T steps of the ``compiled_philox`` route for K models in one compiled call
    (:func:`_philox_blocks`: block by block, each block's noise as :func:`gaussian_rows` draws it
    at step t, then :func:`logistic_step`), for a Dirac canary (``rules[3] >= 0``: the kernel
    makes its observations). ``noise`` (block, P) float32 scratch; index (K, T, S), observed and
    sizes (K, T); the other arguments as :func:`gaussian_rows` and :func:`logistic_step` take
    them, checked here."""
    models, classes, width = weights.shape
    if (
        blocks_disagree(block, models, noise, keys, rows, index, observed, sizes, canary_in, xa,
                        sqnorm, labels)
        or noise.shape[1] % classes
        or noise.shape[1] // classes > width
        or xa.shape[1] != width
        or rules[3] < 0
    ):
        raise ValueError(
            f"philox_training: shapes disagree (weights {weights.shape}, noise {noise.shape}, "
            f"keys {keys.shape}, xa {xa.shape}, index {index.shape}, observed {observed.shape}), "
            "or the canary is not a Dirac canary"
        )
    if index.shape[1] > 2**32:
        raise ValueError(f"philox_training: {index.shape[1]} steps exceed 2^32 (a counter word)")
    _compiled_philox_blocks()(
        np.int64(block), weights, noise, keys, rows, np.float64(std), xa, sqnorm, labels, index,
        canary_in, rules, u, clip, alpha, observed, sizes,
    )


def step_rules(
    canary_index: int, injected_canary: bool, adversarial: bool, coordinate: int | None
) -> np.ndarray:
    """The ``rules`` argument of :func:`logistic_step` (int64: canary index, injected, adversarial,
    Dirac coordinate or -1)."""
    return np.array(
        [
            canary_index,
            int(injected_canary),
            int(adversarial),
            -1 if coordinate is None else coordinate,
        ],
        dtype=np.int64,
    )
