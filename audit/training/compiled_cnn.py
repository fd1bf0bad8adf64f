"""Compiled CPU kernel (numba) for the clipped gradient sums of K convolutional networks.

The ``batched`` method (:mod:`audit.training.batched_layers`) runs the K models' forward and
backward as whole-tensor torch operations: every layer streams all K S examples' activations
through memory once per operation (about 25 operations per layer, forward, backward, norms and
sums), and the second convolution's per-example gradients go through E tiny GEMMs and a gathered
unfold. Here one compiled loop does, model by model and example by example, with every operand
of an example in the L1/L2 cache, the same arithmetic for the networks it covers:

    CanaryModel(Sequential(block, ..., block, Flatten, Linear))
    block = Conv2d (groups 1, zero padding, numeric) [GroupNorm (affine)] [ReLU]

(the built-in ``cnn``, :func:`audit.training.torch_models.cnn`, and any network of this shape;
:func:`cnn_plan` says which). Per example i of model k (Goodfellow 2015, arXiv 1510.01799):

- forward: per block, the input's patches P_i (L, k_h k_w C) (channels-last maps: each kernel
  tap's C channels are one run), the convolution Z_i = P_i W^T + b (one GEMM through BLAS for
  all the model's examples, W permuted to (O, k_h, k_w, C)), the GroupNorm
  xhat = (Z - mu_g) / sqrt(var_g + eps) per group, y = gamma xhat + beta, the ReLU; the head's
  logits W_h a_i + b_h + s_i w_canary (s_i the canary feature, 0 for real rows);
- backward of the summed cross-entropy: e_i = softmax - onehot(y_i), then per block from the
  last: the ReLU mask, GroupNorm's backward (per group dZ = rstd (dxhat - mean dxhat -
  xhat mean(dxhat xhat)), dxhat = gamma dy), and the convolution's gradient to its input
  (W^T dZ, folded back onto the map) for the block before;
- the per-example parameter gradients: the convolution's G_i = dZ_i^T P_i (O, k_h k_w C), one
  small GEMM each (formed: L^2 (d + p) > 2 d p for these shapes,
  :func:`audit.training.ghost_norms._materialises`; permuted back to torch's order when summed)
  and bias
  sum_l dZ_i, GroupNorm's sum_l xhat dy and sum_l dy, the head's e_i a_i^T (normed by the ghost
  identity ||e_i||^2 ||a_i||^2, Li et al. 2022, arXiv 2110.05679) and e_i, the canary's s_i e_i;
- the clip factor c_i = w_i min(1, C / ||g_i||) (Abadi et al. 2016, arXiv 1607.00133, Alg. 1)
  and the sums sum_i c_i g_i, added to the model's row of ``out`` in the flat
  ``named_parameters`` order.

Slots of weight 0 (padding, zero-out and injected canaries) are skipped: they add exactly 0.
float32 throughout like the torch methods (squared norms accumulated in float64), so the sums
agree with theirs to float32 rounding (other summation orders); the canary's coordinates get
exactly s_i e_i from rows with s_i != 0 and nothing from real rows, so under the same noise the
Dirac canary's observations are bit for bit those of the torch methods (the engine draws this
method's noise from Philox, :attr:`audit.training.func_engine.TorchModel.philox_noise`). The
engine takes this method (``compiled``, :data:`audit.training.func_engine.GRADIENT_METHODS`) on
the CPU when numba is available (the ``fast`` extra; :func:`audit.sampling.compiled_rows.
available`) and the module fits; else ``batched``, the same sums up to float32 rounding on
torch. docs/design.md §12.4.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import numpy as np
import torch
from torch import nn

from audit.training import compiled
from audit.training.torch_models import CanaryModel

__all__ = ["BLOCK_FIELDS", "CnnPlan", "cnn_clipped_sums", "cnn_plan"]

BLOCK_FIELDS: tuple[str, ...] = (
    "channels", "height", "width", "out_channels", "kernel_h", "kernel_w", "stride_h",
    "stride_w", "pad_h", "pad_w", "dilation_h", "dilation_w", "out_h", "out_w", "weight",
    "bias", "gamma", "beta", "groups", "relu",
)
"""The columns of :attr:`CnnPlan.blocks`, one row per convolution block: the input map
(C, H, W), the output channels, the convolution's geometry, the output map, the flat offsets of
the convolution's weight and bias and GroupNorm's gamma and beta (-1: absent), GroupNorm's groups
(0: no GroupNorm) and whether a ReLU follows (1 or 0)."""

(_C, _H, _W, _O, _KH, _KW, _SH, _SW, _PH, _PW, _DH, _DW, _OH, _OW, _WOFF, _BOFF, _GOFF, _BEOFF,
 _GROUPS, _RELU) = range(len(BLOCK_FIELDS))

HEAD_FIELDS: tuple[str, ...] = ("features", "classes", "weight", "bias", "canary")
"""The columns of :attr:`CnnPlan.head`: the head's input width and classes, the flat offsets of
its weight, its bias (-1: absent) and the canary weights."""


@dataclass(frozen=True, eq=False)
class CnnPlan:
    """The geometry of a network :func:`cnn_plan` accepts, as the kernel reads it: ``blocks``
    (B, len(:data:`BLOCK_FIELDS`)) int64, ``eps`` (B,) GroupNorm's epsilons, ``head``
    (len(:data:`HEAD_FIELDS`),) int64, ``size`` the number of parameters P."""

    blocks: np.ndarray
    eps: np.ndarray
    head: np.ndarray
    size: int


def _conv_supported(layer: nn.Conv2d) -> bool:
    return (
        layer.groups == 1
        and layer.padding_mode == "zeros"
        and not isinstance(layer.padding, str)
        and layer.weight.dtype == torch.float32
    )


def _offsets(module: nn.Module) -> dict[str, int]:
    """Each parameter's flat offset in ``named_parameters`` order."""
    out, start = {}, 0
    for name, p in module.named_parameters():
        out[name] = start
        start += p.numel()
    return out


def cnn_plan(module: nn.Module) -> CnnPlan | None:
    """The :class:`CnnPlan` of ``module`` when it is a :class:`audit.training.torch_models.
    CanaryModel` around ``Sequential(block, ..., Flatten, Linear)`` with blocks Conv2d (groups
    1, numeric zero padding) ``[GroupNorm (affine)] [ReLU]``, float32, every parameter in these
    layers; else None (the engine keeps the ``batched`` method)."""
    # exact types: a subclass may change the forward
    if type(module) is not CanaryModel or type(module.inner) is not nn.Sequential:
        return None
    if len(module.input_shape) != 3 or module.canary.dtype != torch.float32:
        return None
    offsets = _offsets(module)
    layers = list(module.inner.named_children())
    channels, height, width = module.input_shape
    blocks: list[list[int]] = []
    eps: list[float] = []
    position = 0
    while position < len(layers) and isinstance(layers[position][1], nn.Conv2d):
        name, conv = layers[position]
        assert isinstance(conv, nn.Conv2d)
        if type(conv) is not nn.Conv2d or not _conv_supported(conv) or conv.in_channels != channels:
            return None
        kh, kw = conv.kernel_size
        sh, sw = conv.stride
        ph, pw = cast(tuple[int, int], conv.padding)  # numeric (checked)
        dh, dw = conv.dilation
        out_h = (height + 2 * ph - dh * (kh - 1) - 1) // sh + 1
        out_w = (width + 2 * pw - dw * (kw - 1) - 1) // sw + 1
        if out_h < 1 or out_w < 1:
            return None
        prefix = f"inner.{name}."
        row = [channels, height, width, conv.out_channels, kh, kw, sh, sw, ph, pw, dh, dw,
               out_h, out_w, offsets[prefix + "weight"],
               offsets[prefix + "bias"] if conv.bias is not None else -1, -1, -1, 0, 0]
        position += 1
        block_eps = 0.0
        if position < len(layers) and isinstance(layers[position][1], nn.GroupNorm):
            name, norm = layers[position]
            assert isinstance(norm, nn.GroupNorm)
            if (type(norm) is not nn.GroupNorm or not norm.affine
                    or norm.num_channels != conv.out_channels):
                return None
            prefix = f"inner.{name}."
            row[_GOFF], row[_BEOFF] = offsets[prefix + "weight"], offsets[prefix + "bias"]
            row[_GROUPS], block_eps = norm.num_groups, float(norm.eps)
            position += 1
        if position < len(layers) and type(layers[position][1]) is nn.ReLU:
            row[_RELU] = 1
            position += 1
        blocks.append(row)
        eps.append(block_eps)
        channels, height, width = conv.out_channels, out_h, out_w
    rest = [layer for _, layer in layers[position:]]
    if (
        not blocks
        or len(rest) != 2
        or type(rest[0]) is not nn.Flatten
        or (rest[0].start_dim, rest[0].end_dim) != (1, -1)
        or type(rest[1]) is not nn.Linear
    ):
        return None
    head_layer = rest[1]
    assert isinstance(head_layer, nn.Linear)
    features = channels * height * width
    classes = module.canary.numel()
    head_name = f"inner.{layers[-1][0]}."
    if head_layer.in_features != features or head_layer.out_features != classes:
        return None
    head = [features, classes, offsets[head_name + "weight"],
            offsets[head_name + "bias"] if head_layer.bias is not None else -1,
            offsets["canary"]]
    return CnnPlan(
        blocks=np.asarray(blocks, dtype=np.int64), eps=np.asarray(eps, dtype=np.float64),
        head=np.asarray(head, dtype=np.int64), size=sum(p.numel() for p in module.parameters()),
    )


def _permute_kernel(flat: np.ndarray, block: np.ndarray, permuted: np.ndarray) -> None:
    """permuted (O, k_h k_w C) <- the convolution's weight ``flat`` (O C k_h k_w,) in torch's
    order (output, input channel, kernel row, kernel column), reordered (output, kernel row,
    kernel column, input channel): the order of the channels-last patches (:func:`_unfold`)."""
    channels, kh, kw = block[_C], block[_KH], block[_KW]
    for o in range(permuted.shape[0]):
        row = permuted[o]
        source = flat[o * channels * kh * kw:(o + 1) * channels * kh * kw]
        for c in range(channels):
            for i in range(kh):
                for j in range(kw):
                    row[(i * kw + j) * channels + c] = source[(c * kh + i) * kw + j]


def _add_unpermuted(permuted: np.ndarray, block: np.ndarray, flat: np.ndarray) -> None:
    """flat (O C k_h k_w,) += ``permuted`` (O, k_h k_w C) put back in torch's order (the inverse
    of :func:`_permute_kernel`)."""
    channels, kh, kw = block[_C], block[_KH], block[_KW]
    for o in range(permuted.shape[0]):
        row = permuted[o]
        target = flat[o * channels * kh * kw:(o + 1) * channels * kh * kw]
        for c in range(channels):
            for i in range(kh):
                for j in range(kw):
                    target[(c * kh + i) * kw + j] += row[(i * kw + j) * channels + c]


def _unfold(
    source: np.ndarray, block: np.ndarray, padded: np.ndarray, patches: np.ndarray
) -> None:
    """patches (L, k_h k_w C) <- the patches of one example's channels-last map ``source``
    (H W C,), position by position, each (kernel row, kernel column, channel): the map copied
    into the interior of the zero-padded map ``padded`` ((H + 2 p_h) (W + 2 p_w) C,; its border is
    never written, so it stays 0), then each kernel tap's C channels copied as one run."""
    channels, height, width = block[_C], block[_H], block[_W]
    kh, kw, sh, sw = block[_KH], block[_KW], block[_SH], block[_SW]
    ph, pw, dh, dw = block[_PH], block[_PW], block[_DH], block[_DW]
    out_h, out_w = block[_OH], block[_OW]
    padded_w = width + 2 * pw
    run = width * channels
    for r in range(height):
        start = ((r + ph) * padded_w + pw) * channels
        target = padded[start:start + run]
        row = source[r * run:(r + 1) * run]
        for m in range(run):
            target[m] = row[m]
    for oh in range(out_h):
        for ow in range(out_w):
            patch = patches[oh * out_w + ow]
            for i in range(kh):
                for j in range(kw):
                    start = ((oh * sh + i * dh) * padded_w + ow * sw + j * dw) * channels
                    tap = padded[start:start + channels]
                    target = patch[(i * kw + j) * channels:(i * kw + j + 1) * channels]
                    for c in range(channels):
                        target[c] = tap[c]


def _fold(columns: np.ndarray, block: np.ndarray, padded: np.ndarray, target: np.ndarray) -> None:
    """target (H W C,) <- the patches' gradients ``columns`` (L, k_h k_w C) added back onto the
    channels-last map (the adjoint of :func:`_unfold`, ``torch.nn.functional.fold``), through
    the zero-padded map ``padded`` (cleared here), whose interior is then copied out."""
    channels, height, width = block[_C], block[_H], block[_W]
    kh, kw, sh, sw = block[_KH], block[_KW], block[_SH], block[_SW]
    ph, pw, dh, dw = block[_PH], block[_PW], block[_DH], block[_DW]
    out_h, out_w = block[_OH], block[_OW]
    padded_w = width + 2 * pw
    size = (height + 2 * ph) * padded_w * channels
    for m in range(size):
        padded[m] = 0.0
    for oh in range(out_h):
        for ow in range(out_w):
            patch = columns[oh * out_w + ow]
            for i in range(kh):
                for j in range(kw):
                    start = ((oh * sh + i * dh) * padded_w + ow * sw + j * dw) * channels
                    tap = padded[start:start + channels]
                    source = patch[(i * kw + j) * channels:(i * kw + j + 1) * channels]
                    for c in range(channels):
                        tap[c] += source[c]
    run = width * channels
    for r in range(height):
        start = ((r + ph) * padded_w + pw) * channels
        source = padded[start:start + run]
        row = target[r * run:(r + 1) * run]
        for m in range(run):
            row[m] = source[m]


def _group_norm(
    z: np.ndarray, groups: int, eps: float, rstd: np.ndarray, stats: np.ndarray
) -> None:
    """z (L, C) <- xhat, one example's channels-last map normalised per group of C / groups
    consecutive channels over all positions; rstd (groups,) <- 1 / sqrt(var + eps) (the biased
    variance, as torch's GroupNorm). ``stats`` (3, C) float32 scratch: per channel its sums, then
    its group's mean and 1 / sqrt(var + eps) (loops over the channels of a position, the
    contiguous axis, never dividing by the group size per element)."""
    positions, channels = z.shape
    per_group = channels // groups
    count = positions * per_group
    sums = stats[0]
    means = stats[1]
    inverses = stats[2]
    for c in range(channels):
        sums[c] = 0.0
    for m in range(positions):
        row = z[m]
        for c in range(channels):
            sums[c] += row[c]
    for g in range(groups):
        total = 0.0
        for c in range(g * per_group, (g + 1) * per_group):
            total += sums[c]
        for c in range(g * per_group, (g + 1) * per_group):
            means[c] = total / count
    for c in range(channels):
        sums[c] = 0.0
    for m in range(positions):
        row = z[m]
        for c in range(channels):
            d = row[c] - means[c]
            sums[c] += d * d
    for g in range(groups):
        total = 0.0
        for c in range(g * per_group, (g + 1) * per_group):
            total += sums[c]
        inverse = 1.0 / math.sqrt(total / count + eps)
        rstd[g] = inverse
        for c in range(g * per_group, (g + 1) * per_group):
            inverses[c] = inverse
    for m in range(positions):
        row = z[m]
        for c in range(channels):
            row[c] = (row[c] - means[c]) * inverses[c]


def _group_norm_backward(
    dy: np.ndarray, xhat: np.ndarray, gamma: np.ndarray, rstd: np.ndarray, dgamma: np.ndarray,
    dbeta: np.ndarray, stats: np.ndarray,
) -> None:
    """dy (L, C) (the gradient at y = gamma xhat + beta, channels-last) <- the gradient at the
    normalised input z, per group dz = rstd (dxhat - mean dxhat - xhat mean(dxhat xhat)) with
    dxhat = gamma dy; dgamma, dbeta (C,) <- this example's sum_l dy xhat and sum_l dy;
    ``stats`` (3, C) float32 scratch (per channel: the group's two means and rstd)."""
    positions, channels = dy.shape
    groups = rstd.shape[0]
    per_group = channels // groups
    count = positions * per_group
    for c in range(channels):
        dgamma[c] = 0.0
        dbeta[c] = 0.0
    for m in range(positions):
        row_d = dy[m]
        row_x = xhat[m]
        for c in range(channels):
            dgamma[c] += row_d[c] * row_x[c]
            dbeta[c] += row_d[c]
    # sum_l dxhat = gamma dbeta and sum_l dxhat xhat = gamma dgamma, per channel
    mean_d = stats[0]
    mean_dx = stats[1]
    inverses = stats[2]
    for g in range(groups):
        first = 0.0
        second = 0.0
        for c in range(g * per_group, (g + 1) * per_group):
            first += gamma[c] * dbeta[c]
            second += gamma[c] * dgamma[c]
        for c in range(g * per_group, (g + 1) * per_group):
            mean_d[c] = first / count
            mean_dx[c] = second / count
            inverses[c] = rstd[g]
    for m in range(positions):
        row_d = dy[m]
        row_x = xhat[m]
        for c in range(channels):
            row_d[c] = inverses[c] * (row_d[c] * gamma[c] - mean_d[c] - row_x[c] * mean_dx[c])


def _squares(values: np.ndarray) -> float:
    total = 0.0
    for m in range(values.shape[0]):
        total += np.float64(values[m]) * values[m]
    return total


def _cnn_clipped_sums(
    theta: np.ndarray,
    xa: np.ndarray,
    labels: np.ndarray,
    weight: np.ndarray,
    clip: float,
    out: np.ndarray,
    blocks: np.ndarray,
    eps: np.ndarray,
    head: np.ndarray,
) -> None:
    """out[k] += sum_i c_i g_ki for models k (the module docstring), rows xa (K, S, >= D + 1):
    the flattened image (C, H, W), the canary feature, then anything (the engine's ones).

    Maps are kept channels-last, (H, W, C) per example, so that one model's patches, of all its
    examples, form one matrix (n L, k_h k_w C) and its convolution is one GEMM by the permuted
    weights (:func:`_permute_kernel`), as is the gradient to the block's input; the per-example
    weight gradients are one small GEMM each, dZ_i^T (O, L) P_i (L, k_h k_w C)."""
    models, slots = weight.shape
    depth = blocks.shape[0]
    features, classes = head[0], head[1]
    head_w, head_b, canary = head[2], head[3], head[4]
    channels0, height0, width0 = blocks[0, _C], blocks[0, _H], blocks[0, _W]
    pixels = channels0 * height0 * width0
    # per block: its input maps (n, H W C), patches (n L, k_h k_w C), normalised outputs
    # (n L, O), the permuted weights, the formed gradients (n, O, k_h k_w C) and their sum
    maps = [np.empty(slots * pixels, dtype=np.float32)]
    patches = []
    normalised = []
    kernels = []
    formed = []
    formed_sum = []
    rstd = []
    small = []  # per example: conv bias, gamma, beta gradients (3, O)
    padded = []  # per block: its input map zero-padded (the border is never written)
    widest = pixels
    widest_padded = 0
    for b in range(depth):
        block = blocks[b]
        positions = block[_OH] * block[_OW]
        size = block[_C] * block[_KH] * block[_KW]
        out_size = block[_O] * positions
        maps.append(np.empty(slots * out_size, dtype=np.float32))
        patches.append(np.empty(slots * positions * size, dtype=np.float32))
        normalised.append(np.empty(slots * out_size, dtype=np.float32))
        kernels.append(np.empty((block[_O], size), dtype=np.float32))
        formed.append(np.empty((slots, block[_O], size), dtype=np.float32))
        formed_sum.append(np.empty((block[_O], size), dtype=np.float32))
        rstd.append(np.empty((slots, max(block[_GROUPS], 1)), dtype=np.float64))
        small.append(np.empty((slots, 3, block[_O]), dtype=np.float32))
        padded_size = block[_C] * (block[_H] + 2 * block[_PH]) * (block[_W] + 2 * block[_PW])
        padded.append(np.zeros(padded_size, dtype=np.float32))
        widest_padded = max(widest_padded, padded_size)
        widest = max(widest, out_size, positions * size, block[_C] * block[_H] * block[_W])
    grad_a = np.empty(slots * widest, dtype=np.float32)
    grad_b = np.empty(slots * widest, dtype=np.float32)
    columns = np.empty(slots * widest, dtype=np.float32)
    scratch = np.empty(widest_padded, dtype=np.float32)
    # GroupNorm's per-channel scratch (3, C)
    norm_stats = np.empty((3, max(1, blocks[:, _O].max())), dtype=np.float32)
    head_kernel = np.empty((classes, features), dtype=np.float32)
    head_sum = np.empty((classes, features), dtype=np.float32)
    logits = np.empty((slots, classes), dtype=np.float32)
    errors = np.empty((slots, classes), dtype=np.float32)
    scaled = np.empty((slots, classes), dtype=np.float32)
    sq = np.empty(slots, dtype=np.float64)
    factor = np.empty(slots, dtype=np.float32)
    feature = np.empty(slots, dtype=np.float32)
    used = np.empty(slots, dtype=np.int64)
    last = blocks[depth - 1]
    last_positions, last_channels = last[_OH] * last[_OW], last[_O]
    for k in range(models):
        n = 0
        for s in range(slots):
            if weight[k, s] != 0:
                used[n] = s
                n += 1
        if n == 0:
            continue
        params = theta[k]
        total = out[k]
        # the images, channels-last
        source = maps[0][:n * pixels].reshape((n, pixels))
        for t in range(n):
            row = xa[k, used[t]]
            image = source[t]
            for c in range(channels0):
                plane = row[c * height0 * width0:(c + 1) * height0 * width0]
                for m in range(height0 * width0):
                    image[m * channels0 + c] = plane[m]
            feature[t] = row[pixels]
            sq[t] = 0.0
        # forward
        for b in range(depth):
            block = blocks[b]
            positions = block[_OH] * block[_OW]
            size = block[_C] * block[_KH] * block[_KW]
            channels_out = block[_O]
            in_size = block[_C] * block[_H] * block[_W]
            out_size = channels_out * positions
            kernel = kernels[b]
            _permute_kernel(params[block[_WOFF]:block[_WOFF] + channels_out * size], block, kernel)
            inputs = maps[b][:n * in_size].reshape((n, in_size))
            taps = patches[b][:n * positions * size].reshape((n * positions, size))
            for t in range(n):
                _unfold(inputs[t], block, padded[b], taps[t * positions:(t + 1) * positions])
            z = normalised[b][:n * out_size].reshape((n * positions, channels_out))
            np.dot(taps, kernel.T, z)
            if block[_BOFF] >= 0:
                biases = params[block[_BOFF]:block[_BOFF] + channels_out]
                for m in range(n * positions):
                    row = z[m]
                    for o in range(channels_out):
                        row[o] += biases[o]
            y = maps[b + 1][:n * out_size].reshape((n * positions, channels_out))
            if block[_GROUPS] > 0:
                gammas = params[block[_GOFF]:block[_GOFF] + channels_out]
                betas = params[block[_BEOFF]:block[_BEOFF] + channels_out]
                for t in range(n):
                    _group_norm(z[t * positions:(t + 1) * positions], block[_GROUPS], eps[b],
                                rstd[b][t], norm_stats)
                for m in range(n * positions):
                    row, row_y = z[m], y[m]
                    for o in range(channels_out):
                        row_y[o] = row[o] * gammas[o] + betas[o]
            else:
                for m in range(n * positions):
                    row, row_y = z[m], y[m]
                    for o in range(channels_out):
                        row_y[o] = row[o]
            if block[_RELU]:
                flat_y = maps[b + 1][:n * out_size]
                for m in range(n * out_size):
                    if flat_y[m] < 0:
                        flat_y[m] = 0.0
        # the head, on the channels-last features (its weight permuted from torch's (C, H, W))
        hidden = maps[depth][:n * features].reshape((n, features))
        for j in range(classes):
            source_row = params[head_w + j * features:head_w + (j + 1) * features]
            target_row = head_kernel[j]
            for c in range(last_channels):
                for m in range(last_positions):
                    target_row[m * last_channels + c] = source_row[c * last_positions + m]
        np.dot(hidden, head_kernel.T, logits[:n])
        canary_weight = params[canary:canary + classes]
        head_bias = params[max(head_b, 0):max(head_b, 0) + classes]
        for t in range(n):
            top = -np.inf
            for j in range(classes):
                value = logits[t, j] + feature[t] * canary_weight[j]
                if head_b >= 0:
                    value += head_bias[j]
                logits[t, j] = value
                top = max(top, value)
            norm = 0.0
            for j in range(classes):
                e = math.exp(logits[t, j] - top)
                errors[t, j] = e
                norm += e
            for j in range(classes):
                errors[t, j] = np.float32(errors[t, j] / norm)
            errors[t, labels[k, used[t]]] -= 1.0
            e2 = _squares(errors[t])
            a2 = _squares(hidden[t]) + (1.0 if head_b >= 0 else 0.0)
            sq[t] += e2 * a2 + e2 * np.float64(feature[t]) * feature[t]
        # backward, block by block from the last
        current = grad_a
        np.dot(errors[:n], head_kernel, current[:n * features].reshape((n, features)))
        for b in range(depth - 1, -1, -1):
            block = blocks[b]
            positions = block[_OH] * block[_OW]
            size = block[_C] * block[_KH] * block[_KW]
            channels_out = block[_O]
            out_size = channels_out * positions
            in_size = block[_C] * block[_H] * block[_W]
            d = current[:n * out_size].reshape((n * positions, channels_out))
            if block[_RELU]:
                flat_d = current[:n * out_size]
                flat_y = maps[b + 1][:n * out_size]
                for m in range(n * out_size):
                    if flat_y[m] <= 0:
                        flat_d[m] = 0.0
            z = normalised[b][:n * out_size].reshape((n * positions, channels_out))
            taps = patches[b][:n * positions * size].reshape((n * positions, size))
            small_b = small[b]
            for t in range(n):
                d_t = d[t * positions:(t + 1) * positions]
                extra = small_b[t]
                if block[_GROUPS] > 0:
                    _group_norm_backward(
                        d_t, z[t * positions:(t + 1) * positions],
                        params[block[_GOFF]:block[_GOFF] + channels_out], rstd[b][t], extra[1],
                        extra[2], norm_stats,
                    )
                    sq[t] += _squares(extra[1]) + _squares(extra[2])
                if block[_BOFF] >= 0:
                    bias_grad = extra[0]
                    for o in range(channels_out):
                        bias_grad[o] = 0.0
                    for m in range(positions):
                        row = d_t[m]
                        for o in range(channels_out):
                            bias_grad[o] += row[o]
                    sq[t] += _squares(bias_grad)
                np.dot(d_t.T, taps[t * positions:(t + 1) * positions], formed[b][t])
                sq[t] += _squares(formed[b][t].reshape(channels_out * size))
            if b > 0:
                cols = columns[:n * positions * size].reshape((n * positions, size))
                np.dot(d, kernels[b], cols)
                previous = grad_b if current is grad_a else grad_a
                for t in range(n):
                    _fold(cols[t * positions:(t + 1) * positions], block, scratch,
                          previous[t * in_size:(t + 1) * in_size])
                current = previous
        # clip factors and sums
        for t in range(n):
            f = clip / max(math.sqrt(sq[t]), 1e-30)
            factor[t] = weight[k, used[t]] * min(f, 1.0)
        for t in range(n):
            c = factor[t]
            for j in range(classes):
                scaled[t, j] = c * errors[t, j]
        np.dot(scaled[:n].T, hidden, head_sum)
        for j in range(classes):
            source_row = head_sum[j]
            target_row = total[head_w + j * features:head_w + (j + 1) * features]
            for c in range(last_channels):
                for m in range(last_positions):
                    target_row[c * last_positions + m] += source_row[m * last_channels + c]
        head_bias_sum = total[max(head_b, 0):max(head_b, 0) + classes]
        canary_sum = total[canary:canary + classes]
        for j in range(classes):
            bias_acc = np.float32(0.0)
            canary_acc = np.float32(0.0)
            for t in range(n):
                bias_acc += scaled[t, j]
                canary_acc += scaled[t, j] * feature[t]
            if head_b >= 0:
                head_bias_sum[j] += bias_acc
            canary_sum[j] += canary_acc
        for b in range(depth):
            block = blocks[b]
            size = block[_C] * block[_KH] * block[_KW]
            channels_out = block[_O]
            count = channels_out * size
            accumulated = formed_sum[b].reshape(count)
            for m in range(count):
                accumulated[m] = 0.0
            grads_b = formed[b]
            for t in range(n):
                c = factor[t]
                grads = grads_b[t].reshape(count)
                for m in range(count):
                    accumulated[m] += c * grads[m]
            _add_unpermuted(formed_sum[b], block, total[block[_WOFF]:block[_WOFF] + count])
            small_b = small[b]
            for part in range(3):  # the convolution's bias, GroupNorm's gamma and beta
                offset = block[_BOFF + part]
                if offset < 0:
                    continue
                target = total[offset:offset + channels_out]
                for t in range(n):
                    c = factor[t]
                    grads = small_b[t, part]
                    for o in range(channels_out):
                        target[o] += c * grads[o]


_HELPERS: tuple[str, ...] = (
    "_permute_kernel", "_add_unpermuted", "_unfold", "_fold", "_group_norm",
    "_group_norm_backward", "_squares",
)
"""The helpers :func:`_cnn_clipped_sums` calls, compiled (not inlined) by :func:`_kernel`."""


@functools.cache
def _kernel() -> Callable[..., None]:
    """:func:`_cnn_clipped_sums` compiled by numba with :data:`audit.training.compiled.
    NUMBA_OPTIONS` (its GEMMs through numba's BLAS binding of ``np.dot``, scipy's BLAS)."""
    import numba

    module = globals()
    for name in _HELPERS:
        if not isinstance(module[name], numba.core.registry.CPUDispatcher):
            module[name] = numba.njit(**compiled.NUMBA_OPTIONS)(module[name])
    return numba.njit(**compiled.NUMBA_OPTIONS)(_cnn_clipped_sums)


def cnn_clipped_sums(
    plan: CnnPlan,
    theta: torch.Tensor,
    xa: torch.Tensor,
    labels: torch.Tensor,
    weight: torch.Tensor,
    clip: float,
    out: torch.Tensor,
) -> None:
    """out (K, P) += the clipped sums of models theta (K, P) on rows xa (K, S, >= D + 1) with
    labels (K, S) and weights (K, S), by the compiled kernel; CPU float32 tensors (the shapes,
    which the kernel indexes without bounds checks, are checked here)."""
    models, slots = weight.shape
    pixels = int(plan.blocks[0, _C] * plan.blocks[0, _H] * plan.blocks[0, _W])
    if (
        theta.shape != (models, plan.size)
        or out.shape != (models, plan.size)
        or xa.dim() != 3
        or xa.shape[:2] != (models, slots)
        or xa.shape[2] < pixels + 1
        or labels.shape != (models, slots)
        or any(t.device.type != "cpu" for t in (theta, xa, labels, weight, out))
        or any(t.dtype != torch.float32 for t in (theta, xa, weight, out))
    ):
        raise ValueError(
            f"compiled CNN kernel: shapes or dtypes disagree (theta {tuple(theta.shape)} "
            f"{theta.dtype}, out {tuple(out.shape)}, xa {tuple(xa.shape)} {xa.dtype}, labels "
            f"{tuple(labels.shape)}, weight {tuple(weight.shape)}; {plan.size} parameters, "
            f"{pixels} pixels)"
        )
    classes = int(plan.head[1])
    if models and slots and (int(labels.min()) < 0 or int(labels.max()) >= classes):
        raise ValueError(f"compiled CNN kernel: labels outside [0, {classes})")
    target = out if out.is_contiguous() else out.contiguous()
    _kernel()(
        theta.contiguous().numpy(), xa.contiguous().numpy(), labels.contiguous().numpy(),
        weight.contiguous().numpy(), float(clip), target.numpy(), plan.blocks, plan.eps,
        plan.head,
    )
    if target is not out:
        out.copy_(target)
