"""The forward pass of K models at once by batched layers written by hand, for the ghost sums.

The ``ghost`` method (:mod:`audit.training.ghost_norms`) needs, per step, every hooked layer's
input a_i and the gradient g_i of the summed loss with respect to its output, for the examples
of K models whose parameters differ. It gets them by ``torch.func.vmap`` over the models of one
forward and one backward (``torch.func.grad``): vmap's batching rules turn each layer into a
batched operation, with a Python-level dispatch per operator and per model chunk.

The ``batched`` method runs the module's own ``forward`` once on all K S rows (the K models'
batches stacked model by model, so rows [k S, (k + 1) S) belong to model k) and replaces, for the
duration of that call, the forward of every layer holding parameters by a batched layer from
:data:`BATCHED_LAYERS`, which applies model k's parameters to model k's rows:

- ``Linear`` (weight W (p, d), bias b): for each model, its rows (S T, d) times W_k^T plus b_k:
  one ``torch.baddbmm`` over the models (T positions of a sequence ride along with the rows);
- ``Conv2d`` (groups 1): model k's maps are channels [k C, (k + 1) C) of one map per example
  slot, and the K convolutions one grouped convolution (``groups = K``; the batching rule
  vmap applies too);
- ``GroupNorm`` / ``LayerNorm``: the normalisation has no parameters (torch's kernel, no affine),
  then xhat * gamma_k + beta_k broadcast over model k's rows;
- :class:`audit.training.torch_models.LearnedPosition`: h + table_k;
  :class:`audit.training.torch_models.CanaryModel`: inner(x) + s * w_canary,k.

Layers without parameters (activations, reshapes, attention's matmuls and softmax, pooling)
run unchanged on the K S rows: they treat every example alone (the ghost plan checks that the
forward never mixes the rows of a batch). The gradients g_i come from ordinary autograd (no
vmap): ``torch.autograd.grad`` of the summed cross-entropy with respect to every layer's output,
the parameters marked as requiring a gradient only so that the outputs lie on the graph (their
own gradients are never formed). :func:`batched_plan` builds the plan when every layer of the
ghost plan has a batched layer, and checks on two models with different parameters that the
batched forward gives each model's own logits (else None, and the engine keeps ``ghost``).

The arithmetic differs from ``ghost``'s (other kernels, other summation orders): the clipped sums
agree to float32 rounding, and the Dirac canary's observations are bit for bit the same (real
rows have s = 0, so their canary gradient is exactly 0 in both). docs/design.md §12.4.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import cast

import torch
from torch import nn
from torch.nn import functional as F

from audit.training import ghost_norms
from audit.training.ghost_norms import GhostPlan, Sums
from audit.training.torch_models import CanaryModel, LearnedPosition

__all__ = ["BATCHED_LAYERS", "BatchedPlan", "batched_plan"]

BatchedLayer = Callable[..., torch.Tensor]
"""``layer(module, params, x, models, saved)``: the outputs (K S, ...) of ``module`` on rows x
(K S, ...) for K = ``models`` models, ``params`` {local name: (K, *shape)}; what the layer's ghost
rule would recompute goes to ``saved`` (:func:`_terms`)."""


def _linear(module: nn.Linear, params: dict[str, torch.Tensor], x: torch.Tensor, models: int,
            saved: dict[str, torch.Tensor]):
    weight = params["weight"]  # (K, p, d)
    rows = x.reshape(models, -1, x.shape[-1])  # (K, S T, d)
    if module.bias is None:
        out = torch.bmm(rows, weight.mT)
    else:
        out = torch.baddbmm(params["bias"].unsqueeze(1), rows, weight.mT)
    return out.view(*x.shape[:-1], weight.shape[1])


def _conv2d(module: nn.Conv2d, params: dict[str, torch.Tensor], x: torch.Tensor, models: int,
            saved: dict[str, torch.Tensor]):
    weight = params["weight"]  # (K, C_out, C_in, k_h, k_w)
    e, c, h, w = x.shape
    slots, out_c = e // models, weight.shape[1]
    bias = params["bias"] if module.bias is not None else None
    if not x.requires_grad:
        # the data (no gradient flows to it): the patches (E, C k_h k_w, L) the ghost rule needs
        # anyway, times each model's weights (one bmm; a grouped convolution with one input
        # channel per group was 5x slower here)
        patches = ghost_norms._unfold(x, module)
        saved["patches"] = patches
        positions = patches.shape[2]
        rows = patches.view(models, slots, -1, positions).transpose(1, 2)
        rows = rows.reshape(models, -1, slots * positions)  # (K, C k_h k_w, S L)
        flat = weight.reshape(models, out_c, -1)
        out = torch.bmm(flat, rows) if bias is None else torch.baddbmm(
            bias.unsqueeze(2), flat, rows
        )
        out = out.view(models, out_c, slots, positions).transpose(1, 2)
        out_h, out_w = _output_size(module, h, w)
        return out.reshape(e, out_c, out_h, out_w)
    maps = x.view(models, slots, c, h, w).transpose(0, 1).reshape(slots, models * c, h, w)
    out = F.conv2d(
        maps, weight.reshape(-1, *weight.shape[2:]), None if bias is None else bias.reshape(-1),
        module.stride, module.padding, module.dilation, groups=models,
    )
    out = out.view(slots, models, out_c, *out.shape[2:]).transpose(0, 1)
    return out.reshape(e, out_c, *out.shape[3:])


def _output_size(module: nn.Conv2d, height: int, width: int) -> tuple[int, int]:
    padding = cast(tuple[int, int], module.padding)
    sizes = []
    for size, pad, dilation, kernel, stride in zip(
        (height, width), padding, module.dilation, module.kernel_size, module.stride, strict=True
    ):
        sizes.append((size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1)
    return sizes[0], sizes[1]


def _affine(normalised: torch.Tensor, params: dict[str, torch.Tensor], models: int,
            shape: tuple[int, ...]) -> torch.Tensor:
    """xhat * gamma_k + beta_k, gamma and beta (K, *shape) broadcast as ``shape`` (K, 1, ...)."""
    rows = normalised.view(models, -1, *normalised.shape[1:])
    gamma = params["weight"].view(models, 1, *shape)
    if "bias" in params:
        out = torch.addcmul(params["bias"].view(models, 1, *shape), rows, gamma)
    else:
        out = rows * gamma
    return out.view(normalised.shape)


def _group_norm(module: nn.GroupNorm, params: dict[str, torch.Tensor], x: torch.Tensor,
                models: int, saved: dict[str, torch.Tensor]):
    normalised = F.group_norm(x, module.num_groups, eps=module.eps)
    saved["normalised"] = normalised
    return _affine(normalised, params, models, (x.shape[1], *([1] * (x.dim() - 2))))


def _layer_norm(module: nn.LayerNorm, params: dict[str, torch.Tensor], x: torch.Tensor,
                models: int, saved: dict[str, torch.Tensor]):
    normalised = F.layer_norm(x, module.normalized_shape, eps=module.eps)
    saved["normalised"] = normalised
    trailing = tuple(module.normalized_shape)
    middle = (1,) * (x.dim() - 1 - len(trailing))
    return _affine(normalised, params, models, (*middle, *trailing))


def _position(module: LearnedPosition, params: dict[str, torch.Tensor], x: torch.Tensor,
              models: int, saved: dict[str, torch.Tensor]):
    table = params["table"]
    return (x.view(models, -1, *table.shape[1:]) + table.unsqueeze(1)).view(x.shape)


def _canary(module: CanaryModel, params: dict[str, torch.Tensor], x: torch.Tensor, models: int,
            saved: dict[str, torch.Tensor]):
    inner = module.inner(x[:, :-1].reshape(x.shape[0], *module.input_shape))
    canary = params["canary"]  # (K, classes)
    feature = x[:, -1].view(models, -1, 1)
    logits = inner.view(models, -1, canary.shape[1])
    return torch.addcmul(logits, feature, canary.unsqueeze(1)).view(inner.shape)


BATCHED_LAYERS: dict[type, BatchedLayer] = {
    nn.Linear: _linear,
    nn.Conv2d: _conv2d,
    nn.GroupNorm: _group_norm,
    nn.LayerNorm: _layer_norm,
    LearnedPosition: _position,
    CanaryModel: _canary,
}
"""The batched layers by exact layer type (the same types as the ghost rules,
:data:`audit.training.ghost_norms.RULES`)."""


class _Run:
    """One batched forward in progress: the parameters per layer and the recorded (input,
    output) of every layer."""

    def __init__(self, params: dict[str, dict[str, torch.Tensor]], models: int) -> None:
        self.params = params
        self.models = models
        self.inputs: dict[str, torch.Tensor] = {}
        self.outputs: dict[str, torch.Tensor] = {}
        self.saved: dict[str, dict[str, torch.Tensor]] = {}


@dataclass(frozen=True, eq=False)
class BatchedPlan:
    """The ghost plan of a module whose every hooked layer has a batched layer
    (:data:`BATCHED_LAYERS`); ``ghost`` gives the norms and sums from (a_i, g_i)."""

    module: nn.Module
    ghost: GhostPlan

    @contextmanager
    def _batched(self, run: _Run) -> Iterator[None]:
        """The module's hooked layers run their batched layer (instance ``forward``s, removed
        on exit)."""
        patched = []
        try:
            for name, layer, _ in self.ghost.layers:
                batched = BATCHED_LAYERS[type(layer)]

                def forward(x: torch.Tensor, name=name, layer=layer, batched=batched):
                    saved: dict[str, torch.Tensor] = {}
                    out = batched(layer, run.params[name], x, run.models, saved)
                    run.saved[name] = saved
                    run.inputs[name], run.outputs[name] = x, out
                    return out

                layer.forward = forward
                patched.append(layer)
            yield
        finally:
            for layer in patched:
                del layer.forward

    def _grouped(self, params: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
        grouped: dict[str, dict[str, torch.Tensor]] = {name: {} for name, _, _ in self.ghost.layers}
        for full, value in params.items():
            layer, local = self.ghost.names[full]
            grouped[layer][local] = value
        return grouped

    def logits(self, params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        """Logits (K, S, classes) of rows x (K, S, D), ``params`` {name: (K, *shape)}."""
        models, slots = x.shape[:2]
        run = _Run(self._grouped(params), models)
        with self._batched(run):
            out = self.module(x.reshape(models * slots, -1))
        return out.view(models, slots, -1)

    def clipped_sums(
        self, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
        weight: torch.Tensor, clip: float, order: tuple[str, ...],
    ) -> torch.Tensor:
        """sum_i w_i min(1, C / ||grad_i||) grad_i (K, P) of rows x (K, S, D), labels y (K, S),
        weights w (K, S), flat in ``order``: one batched forward, one autograd backward to the
        layers' outputs, then :meth:`audit.training.ghost_norms.GhostPlan.clipped_sums`."""
        models, slots = x.shape[:2]
        leaf = {name: value.detach().requires_grad_(True) for name, value in params.items()}
        run = _Run(self._grouped(leaf), models)
        with torch.enable_grad(), self._batched(run):
            logits = self.module(x.reshape(models * slots, -1))
            loss = F.cross_entropy(logits, y.reshape(-1), reduction="sum")
            names = [name for name, _, _ in self.ghost.layers]
            grads = torch.autograd.grad(loss, [run.outputs[name] for name in names])
        terms = []
        for (name, layer, rule), g in zip(self.ghost.layers, grads, strict=True):
            a = run.inputs[name].detach().view(models, slots, *run.inputs[name].shape[1:])
            terms.append(
                (name, *_terms(layer, rule, a, g.view(models, slots, *g.shape[1:]),
                               run.saved[name]))
            )
        return self.ghost.combine(terms, weight, clip, order)


def _terms(layer: nn.Module, rule: Callable, a: torch.Tensor, g: torch.Tensor,
           saved: dict[str, torch.Tensor]) -> tuple[torch.Tensor, Sums]:
    """The layer's ghost rule (:data:`audit.training.ghost_norms.RULES`) on its inputs a and
    output gradients g (R, S, ...), given what the batched layer computed already: a
    convolution's unfolded patches, a norm's normalised input (the same values as the rule's own
    recomputation: the same kernels on the same input)."""
    rows, slots = a.shape[:2]
    fast = ghost_norms._squared_rows_fast
    if "patches" in saved:
        layer = cast(nn.Conv2d, layer)
        left = g.reshape(rows * slots, g.shape[2], -1)  # (E, C_out, L)
        return ghost_norms._matrix_layer(
            left, saved["patches"], rows, layer.bias is not None, layer.weight.shape, fast
        )
    if isinstance(layer, nn.Linear):
        return ghost_norms._linear(layer, a, g, fast)
    if isinstance(layer, nn.Conv2d):
        return ghost_norms._conv2d(layer, a, g, fast)
    if "normalised" in saved:
        normalised = saved["normalised"].detach().view(a.shape)
        return ghost_norms._affine_norm(normalised, g, layer, isinstance(layer, nn.GroupNorm))
    return rule(layer, a, g)


def batched_plan(module: nn.Module, ghost: GhostPlan | None, features: int) -> BatchedPlan | None:
    """The :class:`BatchedPlan` of ``module`` (rows of ``features`` floats) with its ghost plan,
    or None when there is no ghost plan, a layer has no batched layer, or the batched forward of
    two models with different parameters on two rows each differs from each model's own forward
    (a module that moves the example axis away from the front, say)."""
    if ghost is None or any(type(layer) not in BATCHED_LAYERS for _, layer, _ in ghost.layers):
        return None
    candidate = BatchedPlan(module=module, ghost=ghost)
    generator = torch.Generator().manual_seed(0)
    named = dict(module.named_parameters())
    params = {
        name: torch.stack([p.detach(), p.detach() + 0.1 * torch.randn(
            p.shape, generator=generator, dtype=p.dtype).to(p.device)])
        for name, p in named.items()
    }
    rows = torch.randn(2, 2, features, generator=generator).to(next(module.parameters()).device)
    rows[..., -1] = torch.tensor([0.0, 1.0])
    buffers = dict(module.named_buffers())
    try:
        # as in training: the parameters on the graph, so that layers after the first see inputs
        # that require a gradient (a convolution's grouped form) and the first the data (patches)
        leaf = {name: value.requires_grad_(True) for name, value in params.items()}
        with torch.enable_grad():
            batched = candidate.logits(leaf, rows).detach()
        with torch.no_grad():
            alone = torch.stack([
                torch.func.functional_call(
                    module, ({n: v[k] for n, v in params.items()}, buffers), (rows[k],)
                )
                for k in range(2)
            ])
    except RuntimeError:  # a layer whose batched form does not fit the module's forward
        return None
    # other kernels round float32 differently (relative 1e-6 here); another model's parameters
    # (perturbed by 0.1 randn) move the logits by O(0.1) of their scale
    scale = cast(float, alone.abs().max().item()) or 1.0
    if batched.shape != alone.shape or not torch.allclose(
        batched, alone, rtol=1e-4, atol=1e-5 * scale
    ):
        return None
    return candidate
