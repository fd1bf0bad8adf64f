"""Compiled CPU kernel: one DP-SGD step's clipped gradient sum of K logistic regressions, fused.

The engine's generic route (:mod:`audit.models`) computes the clipped per-example gradient sum
with batched torch products over models sorted by batch width: each step gathers the models'
parameters and noise into width order and the batch rows into (K, width, D + 1) blocks
(two (K, P) permutations and a (K, width, D + 1) gather per step, about 60% of the step's
time outside the noise on the issue-16 workload). For multinomial logistic regression on
the CPU this module does the same arithmetic model by model in one compiled loop (numba,
https://numba.pydata.org), with every operand in the L1 cache: no permutation, no gather,
no padding to a group's width.

Per model k with parameters W = [W; c] (D + 1, C) (row-major in the flat theta, as
:class:`audit.models.LogisticRegression` lays them out) and its batch rows i with weight
w_i in {0, 1} (the engine's ``through`` mask), the closed forms of :mod:`audit.models`:

    z_i = [x_i, 1] W,   e_i = softmax(z_i) - onehot(y_i),
    ||g_i||^2 = ||[x_i, 1]||^2 ||e_i||^2,   f_i = w_i min(1, C / ||g_i||),
    grad_k += sum_i [x_i, 1]^T (f_i e_i)     (Abadi et al. 2016, arXiv 1607.00133, Alg. 1;
                                               Goodfellow 2015, arXiv 1510.01799)

``grad_k`` holds the step's Gaussian noise when called (the engine draws it first, in model
order), so the sum lands on it as the generic route's accumulate does. The arithmetic is
float32 like the generic route; only the summation order of the products differs (as MKL's
blocking differs from one shape to another), so parameters agree with the generic route to
float32 rounding, and a Dirac canary's coordinate (an always-zero input feature: every
real row contributes exactly 0 to it) receives exactly the same bits.

Layout inside the kernel: the products run as dot products over contiguous rows, the
parameters transposed to (C, D') and the inputs padded to D' = 16 * ceil((D + 1) / 16)
zero columns (the padding multiplies zeros: it changes nothing), so that LLVM vectorises
them for the machine's SIMD width. numba is an optional speed-up: without it (or with
``AUDIT_COMPILED=0`` in the environment) the engine keeps the generic route, with the same
results up to float32 rounding.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import os
from collections.abc import Callable

import numpy as np

__all__ = ["available", "default_routes", "logistic_clipped_sum", "padded_rows"]


def available() -> bool:
    """Whether the compiled kernel can run here: numba installed (it is imported, and the
    kernel compiled, only when a training first asks) and not disabled by ``AUDIT_COMPILED=0``."""
    return os.environ.get("AUDIT_COMPILED", "1") != "0" and importlib.util.find_spec("numba") is not None


def default_routes() -> dict[str, str]:
    """The route the engine takes by default on the CPU, per closed-form model
    (:func:`audit.engine.train`'s ``route``). Recorded in every shard's fingerprint
    (:mod:`audit.fingerprint`): the routes agree only up to float32 rounding."""
    return {"logistic": "compiled" if available() else "grouped", "mlp": "grouped"}


def padded_rows(xa: np.ndarray) -> np.ndarray:
    """The augmented inputs [x, 1] (n, D + 1) copied into zero columns up to a multiple of 16
    (float32, C-contiguous): the kernel's dot products then run over whole SIMD vectors."""
    n, width = xa.shape
    out = np.zeros((n, -(-width // 16) * 16), dtype=np.float32)
    out[:, :width] = xa
    return out


def _logistic_clipped_sum(
    theta: np.ndarray,
    grad: np.ndarray,
    xa: np.ndarray,
    sqnorm: np.ndarray,
    labels: np.ndarray,
    index: np.ndarray,
    through: np.ndarray,
    clip: float,
    features: int,
) -> None:
    """grad[k] += sum_i f_i [x_i, 1]^T e_i for each model k (module docstring).

    theta, grad: float32 (K, P), P = features * C, C-contiguous (``features`` = D + 1 rows
    of the augmented weight matrix). xa: padded augmented inputs (n, D') from
    :func:`padded_rows`; sqnorm: ||[x_i, 1]||^2 (n,); labels (n,). index (K, S) example
    indices and through (K, S) the slots whose gradient goes through the model (padding,
    a zero-out or injected canary: False).
    """
    models, params = theta.shape
    width = xa.shape[1]
    classes = params // features
    slots = index.shape[1]
    blocks = (slots + 3) // 4 * 4
    weights = np.zeros((classes, width), np.float32)  # W^T, zero-padded columns
    errors = np.zeros((blocks, classes), np.float32)  # f_i e_i per slot
    sums = np.zeros((classes, width), np.float32)  # the clipped sum, transposed
    rows = np.zeros(blocks, np.int64)
    bound = np.float32(clip)
    for k in range(models):
        used = 0
        for s in range(slots):
            if through[k, s]:
                rows[used] = index[k, s]
                used += 1
        if used == 0:
            continue
        for s in range(used, (used + 3) // 4 * 4):
            rows[s] = rows[0]  # padding slots of the last block of four: weight 0
            for c in range(classes):
                errors[s, c] = 0.0
        theta_k = theta[k].reshape((features, classes))
        for c in range(classes):
            w_c = weights[c]
            for j in range(features):
                w_c[j] = theta_k[j, c]
        for s in range(used):
            x = xa[rows[s]]
            e = errors[s]
            for c in range(classes):
                w_c = weights[c]
                z = np.float32(0.0)
                for j in range(width):
                    z += x[j] * w_c[j]
                e[c] = z
            top = e[0]
            for c in range(1, classes):
                top = max(top, e[c])
            total = np.float32(0.0)
            for c in range(classes):
                p = math.exp(e[c] - top)
                e[c] = p
                total += p
            inverse = np.float32(1.0) / total
            square = np.float32(0.0)
            label = labels[rows[s]]
            for c in range(classes):
                v = e[c] * inverse
                if c == label:
                    v -= np.float32(1.0)
                e[c] = v
                square += v * v
            norm = math.sqrt(sqnorm[rows[s]] * square)
            factor = min(np.float32(1.0), bound / max(norm, np.float32(1e-30)))
            for c in range(classes):
                e[c] *= factor
        for c in range(classes):
            total_c = sums[c]
            for j in range(width):
                total_c[j] = 0.0
            for s0 in range(0, used, 4):  # four slots at a time: one pass over the row sum
                x0, x1, x2, x3 = xa[rows[s0]], xa[rows[s0 + 1]], xa[rows[s0 + 2]], xa[rows[s0 + 3]]
                e0, e1, e2, e3 = errors[s0, c], errors[s0 + 1, c], errors[s0 + 2, c], errors[s0 + 3, c]
                for j in range(width):
                    total_c[j] += e0 * x0[j] + e1 * x1[j] + e2 * x2[j] + e3 * x3[j]
        grad_k = grad[k].reshape((features, classes))
        for c in range(classes):
            total_c = sums[c]
            for j in range(features):
                grad_k[j, c] += total_c[j]


@functools.cache
def _compiled() -> Callable[..., None]:
    """The kernel compiled by numba (once per process; numba's on-disk cache spares the
    compilation in later processes). fastmath is limited to reassociation and contraction (the
    vectorised sums and FMAs): no finite-math assumption, so a diverging training still
    propagates inf and NaN as torch does."""
    import numba

    return numba.njit(
        nogil=True, fastmath={"reassoc", "contract", "nsz"}, boundscheck=False, error_model="numpy", cache=True
    )(_logistic_clipped_sum)


def logistic_clipped_sum(
    theta: np.ndarray,
    grad: np.ndarray,
    xa: np.ndarray,
    sqnorm: np.ndarray,
    labels: np.ndarray,
    index: np.ndarray,
    through: np.ndarray,
    clip: float,
    features: int,
) -> None:
    """Add each model's clipped per-example gradient sum to ``grad`` in place (compiled;
    arguments as :func:`_logistic_clipped_sum`, which is the same code run by Python)."""
    if not available():
        raise RuntimeError("audit.compiled needs numba (pip install numba); the engine checks available()")
    _compiled()(theta, grad, xa, sqnorm, labels, index, through, clip, features)
