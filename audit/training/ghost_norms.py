"""Clipped per-example gradient sums without materialising the whole per-example gradients.

For a layer whose parameter gradient is a product of its input a and the gradient g of the loss
with respect to its output (Goodfellow 2015, arXiv 1510.01799), one example's gradient and its
norm follow from (a_i, g_i) alone:

- ``Linear`` (weight W (p, d)), a_i (T, d), g_i (T, p) over T positions (T = 1 for a row):
  grad W = g_i^T a_i, and the *ghost norm* identity (Li, Tramer, Liang, Hashimoto 2022,
  arXiv 2110.05679; Bu et al. 2023, arXiv 2210.00038)

      ||g_i^T a_i||_F^2 = sum_{s,t} (a_is . a_it)(g_is . g_it)

  costs T^2 (d + p); the layer's gradient formed per example costs T d p, after which its norm
  and the clipped sum are cheap (d p each): per layer and shape the fewer flops are used, norm
  and sum counted (:func:`_materialises`; Bu et al.'s mixed ghost clipping); bias:
  ||sum_t g_it||^2.
- ``Conv2d`` (groups 1): the same with a_i the unfolded input (L positions x C_in k_h k_w, as
  ``torch.nn.functional.unfold``, by one gather: :func:`_unfold`) and g_i (L x C_out).
- ``GroupNorm`` / ``LayerNorm`` (affine): gamma's gradient is sum over positions of
  xhat_i * g_i (xhat the normalised input, recomputed), beta's sum of g_i.
- :class:`audit.training.torch_models.LearnedPosition` (h + table): the gradient is g_i itself.
- :class:`audit.training.torch_models.CanaryModel` (logits + s w_canary): s_i g_i, with s_i the
  canary feature (0 for real rows: exactly 0, as the Dirac observations need).

The clipped sum sum_i c_i grad_i, c_i = w_i min(1, C / ||grad_i||), is then one product per
layer over all examples' (a, g) (the "book-keeping" of Bu et al. 2023), or the weighted sum of
the formed layer gradients: one forward and one backward of the summed loss per step, never the
whole per-example gradient in memory (formed layers only, chunk by chunk).

:func:`plan` hooks a module's supported layers (forward hooks that record each layer's input
and add a zero *probe* to its output, whose gradient is g); a module with a parameter in any
other layer, a layer called twice, or a forward that mixes the examples of a batch (checked on
two random rows) gets no plan, and the engine keeps ``torch.func``'s per-example gradients
(:mod:`audit.training.func_engine`). docs/design.md §12.4.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import torch
from torch import nn
from torch.nn import functional as F

from audit.training.torch_models import CanaryModel, LearnedPosition

__all__ = ["GhostPlan", "plan"]


class _Capture:
    """The probes to add to the hooked layers' outputs and the inputs they recorded."""

    def __init__(self, probes: dict[str, torch.Tensor] | None) -> None:
        self.probes = probes
        self.inputs: dict[str, torch.Tensor] = {}
        self.shapes: dict[str, tuple[int, ...]] = {}


_ACTIVE: list[_Capture] = []
"""The capture in progress (at most one): the hooks do nothing when it is empty."""


def _hook(name: str) -> Callable:
    def hook(module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor | None:
        if not _ACTIVE:
            return None
        capture = _ACTIVE[-1]
        if name in capture.inputs:
            raise RuntimeError(f"layer {name!r} called twice in one forward pass")
        capture.inputs[name] = args[0]
        capture.shapes[name] = tuple(output.shape[1:])
        return None if capture.probes is None else output + capture.probes[name]

    return hook


# Per layer type, for inputs a and output gradients g with leading dims (R models, S examples):
# the per-example squared norm (R, S) of the gradient of the layer's parameters, and a function
# of the clip factors c (R, S) giving the clipped sums {local parameter name: (R, *shape)}
# (which reuses what the norms computed).
Sums = Callable[[torch.Tensor], dict[str, torch.Tensor]]
Rule = Callable[[nn.Module, torch.Tensor, torch.Tensor], tuple[torch.Tensor, Sums]]


def _materialises(positions: int, inputs: int, outputs: int) -> bool:
    """Whether a layer's per-example gradients (p x d over T positions) are cheaper formed than
    ghost-normed, counting the flops of the norm and of the clipped sum per example:

    - formed: the product g_i^T a_i (T d p), its squared norm (d p), the weighted sum over the
      batch (d p): T d p + 2 d p;
    - ghost: both Gram matrices (T^2 (d + p)), then the clipped sum as one product over the
      batch's positions (T d p) (Li et al. 2022; the choice of Bu et al. 2023's mixed ghost
      clipping, here by flops: the engine's chunks bound the memory either way).

    The forming wins unless 2 d p > T^2 (d + p), i.e. for rows (T = 1) and short sequences of wide
    layers. Measured on chunks of 1,000 examples of the built-in CNN (T = 16) and transformer
    (T = 8), the two forms' norms and sums took the same time within the shared machine's spread
    (about 15 ms per chunk either way); both are far cheaper than the former einsum sums
    (docs/design.md §12.4)."""
    return positions > 1 and 2 * inputs * outputs <= positions * positions * (inputs + outputs)


def _squared_rows(formed: torch.Tensor) -> torch.Tensor:
    """The squared norm of each row of ``formed`` (E, n), as ``ghost`` computes it."""
    return torch.linalg.vecdot(formed, formed)


def _squared_rows_fast(formed: torch.Tensor) -> torch.Tensor:
    """The squared norm of each row, by torch's norm kernel (the ``batched`` method: the same
    value to float32 rounding; ``vecdot`` took 4-5x longer on rows of 512-1,152 floats here)."""
    return torch.linalg.vector_norm(formed, dim=-1).square()


def _matrix_layer(
    left: torch.Tensor, right: torch.Tensor, rows: int, bias: bool, shape: torch.Size,
    squared_rows: Callable[[torch.Tensor], torch.Tensor] = _squared_rows,
):
    """A layer whose per-example gradient is left_i @ right_i^T (p, d): left (E, p, T) the output
    gradients, right (E, d, T) the inputs, over T positions (E = R S examples of R = ``rows``
    models); its bias gradient, left_i summed over T. Formed or ghost-normed per
    :func:`_materialises`; a formed gradient's squared norm by ``squared_rows``."""
    e, p, t = left.shape
    d = right.shape[1]
    bias_grad = left.sum(-1) if bias else None
    if _materialises(t, d, p):
        # the per-example gradients (E, p d), then norms and the weighted sum over each batch
        formed = torch.bmm(left, right.mT).view(e, p * d)
        sq = squared_rows(formed)

        def formed_sums(c: torch.Tensor) -> dict[str, torch.Tensor]:
            weight = torch.bmm(c.unsqueeze(1), formed.view(rows, -1, p * d)).view(rows, *shape)
            out = {"weight": weight}
            if bias_grad is not None:  # bias
                out["bias"] = torch.bmm(c.unsqueeze(1), bias_grad.view(rows, -1, p)).squeeze(1)
            return out

        sums = formed_sums
    else:
        if t == 1:
            sq = left[:, :, 0].square().sum(-1) * right[:, :, 0].square().sum(-1)
        else:  # the ghost identity: sum_{s,t} (left_s . left_t)(right_s . right_t)
            sq = ((left.mT @ left) * (right.mT @ right)).sum((1, 2))

        def ghost_sums(c: torch.Tensor) -> dict[str, torch.Tensor]:
            # sum_i c_i left_i right_i^T as one product per model over its batch's positions
            weighted = (left * c.reshape(e, 1, 1)).view(rows, -1, p, t)
            weighted = weighted.permute(0, 2, 1, 3).reshape(rows, p, -1)  # (R, p, S T)
            inputs = right.view(rows, -1, d, t).permute(0, 1, 3, 2).reshape(rows, -1, d)
            out = {"weight": torch.bmm(weighted, inputs).view(rows, *shape)}
            if bias_grad is not None:  # bias
                out["bias"] = torch.bmm(c.unsqueeze(1), bias_grad.view(rows, -1, p)).squeeze(1)
            return out

        sums = ghost_sums
    if bias_grad is not None:  # bias
        sq = sq + bias_grad.square().sum(-1)
    return sq.view(rows, -1), sums


def _linear(
    module: nn.Linear, a: torch.Tensor, g: torch.Tensor,
    squared_rows: Callable[[torch.Tensor], torch.Tensor] = _squared_rows,
):
    r, s = a.shape[:2]
    right = a.reshape(r * s, -1, a.shape[-1]).mT  # (E, d, T)
    left = g.reshape(r * s, -1, g.shape[-1]).mT  # (E, p, T)
    return _matrix_layer(
        left, right, r, module.bias is not None, module.weight.shape, squared_rows
    )


@functools.lru_cache(maxsize=64)
def _patch_index(
    channels: int, height: int, width: int, kernel: tuple[int, ...], dilation: tuple[int, ...],
    padding: tuple[int, ...], stride: tuple[int, ...],
) -> tuple[torch.Tensor, int]:
    """For ``torch.nn.functional.unfold``'s patches of a (C, H, W) map: the index (C k_h k_w L,)
    of each patch entry in the zero-padded map flattened, in unfold's order (channel, kernel row,
    kernel column; then output position), and the number of output positions L."""
    padded_width = width + 2 * padding[1]
    out_h = (height + 2 * padding[0] - dilation[0] * (kernel[0] - 1) - 1) // stride[0] + 1
    out_w = (width + 2 * padding[1] - dilation[1] * (kernel[1] - 1) - 1) // stride[1] + 1
    c = torch.arange(channels).view(-1, 1, 1, 1, 1)
    i = torch.arange(kernel[0]).view(1, -1, 1, 1, 1) * dilation[0]
    j = torch.arange(kernel[1]).view(1, 1, -1, 1, 1) * dilation[1]
    h = torch.arange(out_h).view(1, 1, 1, -1, 1) * stride[0]
    w = torch.arange(out_w).view(1, 1, 1, 1, -1) * stride[1]
    padded_height = height + 2 * padding[0]
    index = c * padded_height * padded_width + (h + i) * padded_width + (w + j)
    return index.reshape(-1), out_h * out_w


def _unfold(a: torch.Tensor, module: nn.Conv2d) -> torch.Tensor:
    """``F.unfold(a, ...)`` (E, C k_h k_w, L) of maps a (E, C, H, W) for ``module``'s geometry,
    as one gather from the zero-padded maps: the same values (copies), 3x faster here than
    unfold's im2col, which loops over the examples."""
    e, c, h, w = a.shape
    padding = cast(tuple[int, int], module.padding)  # numeric: a string padding has no rule
    kernel, dilation = cast(tuple[int, int], module.kernel_size), module.dilation
    index, positions = _patch_index(c, h, w, kernel, dilation, padding, module.stride)
    padded = F.pad(a, (padding[1], padding[1], padding[0], padding[0])) if any(padding) else a
    index = index.to(a.device)
    return torch.index_select(padded.reshape(e, -1), 1, index).view(e, -1, positions)


def _conv2d(
    module: nn.Conv2d, a: torch.Tensor, g: torch.Tensor,
    squared_rows: Callable[[torch.Tensor], torch.Tensor] = _squared_rows,
):
    r, s = a.shape[:2]
    # the input patches (E, C_in k_h k_w, L), in the weight's order (outside vmap: the models'
    # examples at once)
    right = _unfold(a.flatten(0, 1), module)
    left = g.reshape(r * s, g.shape[2], -1)  # (E, C_out, L)
    return _matrix_layer(
        left, right, r, module.bias is not None, module.weight.shape, squared_rows
    )


def _affine_norm(
    normalised: torch.Tensor, g: torch.Tensor, module: nn.Module, channels_first: bool
):
    """gamma_i = sum over positions of xhat_i * g_i, beta_i = sum of g_i (R, S, *shape)."""
    r, s = g.shape[:2]
    shape = cast(torch.Tensor, module.weight).shape  # an affine norm: weight is a tensor
    if channels_first:  # GroupNorm: per channel, dim 2
        gamma = (normalised * g).reshape(r, s, shape[0], -1).sum(-1)
        beta = g.reshape(r, s, shape[0], -1).sum(-1)
    else:  # LayerNorm: the trailing dims
        gamma = (normalised * g).reshape(r, s, -1, *shape).sum(2)
        beta = g.reshape(r, s, -1, *shape).sum(2)
    bias = module.bias is not None
    sq = gamma.reshape(r, s, -1).square().sum(-1)
    if bias:
        sq = sq + beta.reshape(r, s, -1).square().sum(-1)

    def sums(c: torch.Tensor) -> dict[str, torch.Tensor]:
        out = {"weight": torch.einsum("rs,rs...->r...", c, gamma)}
        if bias:
            out["bias"] = torch.einsum("rs,rs...->r...", c, beta)
        return out

    return sq, sums


def _group_norm(module: nn.GroupNorm, a: torch.Tensor, g: torch.Tensor):
    normalised = F.group_norm(a.flatten(0, 1), module.num_groups, eps=module.eps).view(a.shape)
    return _affine_norm(normalised, g, module, True)


def _layer_norm(module: nn.LayerNorm, a: torch.Tensor, g: torch.Tensor):
    normalised = F.layer_norm(a, module.normalized_shape, eps=module.eps)
    return _affine_norm(normalised, g, module, False)


def _position(module: LearnedPosition, a: torch.Tensor, g: torch.Tensor):
    return g.flatten(2).square().sum(-1), lambda c: {"table": torch.einsum("rs,rs...->r...", c, g)}


def _canary(module: CanaryModel, a: torch.Tensor, g: torch.Tensor):
    feature = a[..., -1]
    sq = feature.square() * g.square().sum(-1)
    return sq, lambda c: {"canary": torch.einsum("rs,rsk->rk", c * feature, g)}


# each rule takes its own layer type (which a dict's type cannot say): called as a Rule
RULES: dict[type, Callable[..., tuple[torch.Tensor, Sums]]] = {
    nn.Linear: _linear,
    nn.Conv2d: _conv2d,
    nn.GroupNorm: _group_norm,
    nn.LayerNorm: _layer_norm,
    LearnedPosition: _position,
    CanaryModel: _canary,
}
"""The layers with a closed-form per-example gradient (exact types: a subclass may change the
forward)."""


def _supported(module: nn.Module) -> bool:
    rule = RULES.get(type(module))
    if rule is None:
        return False
    if isinstance(module, nn.Conv2d):
        return (
            module.groups == 1
            and module.padding_mode == "zeros"
            and not isinstance(module.padding, str)
        )
    if isinstance(module, nn.GroupNorm | nn.LayerNorm):
        return module.weight is not None
    return True


@dataclass(frozen=True, eq=False)
class GhostPlan:
    """The hooked layers of a module: ``layers`` (name, module, rule) in forward order and
    ``shapes`` the per-example shape of each layer's output; ``names`` maps each parameter's
    ``named_parameters`` name to (layer name, local name)."""

    layers: tuple[tuple[str, nn.Module, Rule], ...]
    shapes: dict[str, tuple[int, ...]]
    names: dict[str, tuple[str, str]]

    def probe_gradients(
        self, forward: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, y: torch.Tensor
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """Each hooked layer's input and the gradient of the summed loss with respect to its
        output, per example, for rows x (S, D) and labels y (S,) of one model (``forward`` its
        logits): one forward and one backward (vmapped over models by the caller)."""
        probes = {name: x.new_zeros((x.shape[0], *self.shapes[name])) for name, _, _ in self.layers}

        def loss(probes: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
            capture = _Capture(probes)
            _ACTIVE.append(capture)
            try:
                logits = forward(x)
            finally:
                _ACTIVE.pop()
            return F.cross_entropy(logits, y, reduction="sum"), capture.inputs

        grads, inputs = torch.func.grad(loss, has_aux=True)(probes)
        return inputs, grads

    def clipped_sums(
        self, inputs: dict[str, torch.Tensor], grads: dict[str, torch.Tensor], weight: torch.Tensor,
        clip: float, order: tuple[str, ...],
    ) -> torch.Tensor:
        """sum_i w_i min(1, C / ||grad_i||) grad_i (R, P), flat in ``order`` (the parameter
        names), from :meth:`probe_gradients` of R models (leading dims (R, S)) and weights
        w (R, S): per-example norms layer by layer, then one product per layer and model."""
        terms = [
            (name, *rule(module, inputs[name], grads[name])) for name, module, rule in self.layers
        ]
        return self.combine(terms, weight, clip, order)

    def combine(
        self, terms: list[tuple[str, torch.Tensor, Sums]], weight: torch.Tensor, clip: float,
        order: tuple[str, ...],
    ) -> torch.Tensor:
        """The clipped sums (R, P) flat in ``order`` from each layer's (name, squared norms
        (R, S), sums of the clip factors) (a :data:`Rule`'s result per layer)."""
        sqnorm = cast(torch.Tensor, sum(sq for _, sq, _ in terms))  # a plan has layers
        factor = weight * torch.clamp(clip / sqnorm.sqrt().clamp_min(1e-30), max=1.0)
        sums = {}
        for name, _, layer_sums in terms:
            for local, value in layer_sums(factor).items():
                sums[(name, local)] = value
        return torch.cat([sums[self.names[full]].flatten(1) for full in order], dim=1)


def plan(module: nn.Module, features: int) -> GhostPlan | None:
    """The :class:`GhostPlan` of ``module`` (rows of ``features`` floats), hooks registered, or
    None when a parameter lives outside the supported layers, a layer runs twice, or the
    forward mixes the rows of a batch (two random rows through the module together and alone
    differ); the engine then keeps per-example gradients."""
    names: dict[str, tuple[str, str]] = {}
    layers = []
    for name, layer in module.named_modules():
        own = list(layer.named_parameters(recurse=False))
        if not own:
            continue
        if not _supported(layer):
            return None
        layers.append((name, layer))
        for local, _ in own:
            names[f"{name}.{local}" if name else local] = (name, local)
    if set(names) != {n for n, _ in module.named_parameters()}:
        return None
    for name, layer in layers:
        if not getattr(layer, "_ghost_hooked", False):
            layer.register_forward_hook(_hook(name))
            layer._ghost_hooked = True
    rows = torch.randn(2, features, generator=torch.Generator().manual_seed(0))
    rows[:, -1] = torch.tensor([0.0, 1.0])
    capture = _Capture(None)
    _ACTIVE.append(capture)
    try:
        with torch.no_grad():
            together = module(rows)
    except RuntimeError:  # a layer called twice
        return None
    finally:
        _ACTIVE.pop()
    with torch.no_grad():
        alone = torch.cat([module(rows[:1]), module(rows[1:])])
    if set(capture.shapes) != {name for name, _ in layers} or not torch.allclose(
        together, alone, rtol=1e-5, atol=1e-6
    ):
        return None
    order = [name for name in capture.inputs]  # forward order
    by_name = dict(layers)
    return GhostPlan(
        layers=tuple((name, by_name[name], RULES[type(by_name[name])]) for name in order),
        shapes=capture.shapes,
        names=names,
    )
