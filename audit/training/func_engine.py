"""Per-example gradients of any ``torch.nn.Module`` for K models at once, with ``torch.func``.

:class:`TorchModel` holds one module and treats K independent copies of its parameters as
one flat tensor ``theta`` (K, P) (the parameters in ``named_parameters`` order, each
flattened), like :class:`audit.training.models.BatchedModel` (both implement
:class:`audit.training.models.PerExampleModel`); :func:`audit.training.engine.train` trains it
with the same loop, sampler index arrays, noise, canary and observations as the closed-form
models. Per step and model k, for the slots i of its batch (weights w_i in {0, 1}: 0 for
padding, a zero-out canary, or a slot whose gradient is injected):

    g_ki = grad_theta CE(f(theta_k; x_ki), y_ki)                  (torch.func.grad)
    G_k  = sum_i w_i min(1, C / ||g_ki||) g_ki                     (Abadi et al. 2016, Alg. 1)

computed as ``vmap`` over models (stacked parameters, in_dims 0) of ``vmap`` over slots
(shared parameters) of ``grad`` of the one-example loss evaluated by ``functional_call``
(the per-sample-gradient recipe of torch.func; Horace He and Richard Zou, functorch 2021).
Padding slots are evaluated on a real row (index clamped to 0) and multiplied by w_i = 0,
so they add exactly 0. Models are processed in chunks so that the per-example gradients of
a chunk stay below :data:`CHUNK_ELEMENTS` floats.

The module maps rows (S, features) to logits (S, classes); for factory models it is an
:class:`audit.training.torch_models.CanaryModel` whose leading parameter block (the canary weights,
``private_start = 0``, ``private_width = classes``) real data never move.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from audit.sampling.compiled_rows import available
from audit.training.batched_layers import BatchedPlan, batched_plan
from audit.training.compiled import TORCH_GRADIENT_METHOD
from audit.training.compiled_cnn import CnnPlan, cnn_clipped_sums, cnn_plan
from audit.training.ghost_norms import GhostPlan, plan
from audit.training.heap import retain_freed_memory
from audit.training.models import PerExampleModel
from audit.training.torch_models import ModelFactory, build_canary_model

__all__ = ["CHUNK_ELEMENTS", "GRADIENT_METHODS", "TorchModel", "torch_model"]

GRADIENT_METHODS: tuple[str, ...] = ("ghost", "vmap", "batched", "compiled")
"""How :class:`TorchModel` computes the clipped sums: ``ghost``, per-example norms from each layer's
input and output gradient and one product per layer for the sum (:mod:`audit.training.ghost_norms`;
modules it does not cover fall back to ``vmap``), the inputs and output gradients from a forward
and backward vmapped over the models; ``vmap``, ``torch.func`` per-example gradients, materialised
chunk by chunk; ``batched``, ``ghost``'s norms and sums with the K models' forward run once by
hand-batched layers and one autograd backward (:mod:`audit.training.batched_layers`; modules it
does not fit fall back to ``ghost``, then ``vmap``); ``compiled`` (the default,
:data:`GRADIENT_METHOD`), the same sums by one compiled loop over models and examples for the
convolutional networks :func:`audit.training.compiled_cnn.cnn_plan` accepts, on the CPU in
float32 with numba, and Philox noise (:attr:`TorchModel.philox_noise`); other modules, devices
and dtypes take ``batched``."""

CHUNK_ELEMENTS = 2**22
"""Per-example gradient floats (models x slots x P) held at once (16 MiB in float32; larger
chunks were slower here, the working set leaving the cache, and raise the peak memory)."""

GRADIENT_METHOD = TORCH_GRADIENT_METHOD
"""The method :func:`torch_model` gives its models (:data:`GRADIENT_METHODS`): ``compiled``
(:data:`audit.training.compiled.TORCH_GRADIENT_METHOD`, recorded in shard fingerprints; a step
of 1,000 built-in CNNs in 0.49x ``batched``'s CPU time with its Philox noise, docs/design.md
§12.4), whose fallback ``batched``'s
clipped sums of one step of 1,000 models took 0.68-0.78x the ``ghost`` method's CPU time on the
built-in CNN and 0.76-0.80x on the transformer (interleaved rounds on the shared 2-core
machine); whole runs of 1,000 trainings 1.15-1.2x ghost's trainings per CPU second (CNN) and
1.3x (transformer) (bench/any_model_throughput.py, docs/design.md §12.4). ``ghost`` took 0.88x
``vmap``'s time per step on the CNN and as much on the transformer."""

WIDTH_SLACK = 2
"""Models whose batch widths differ by at most this many slots share one chunk."""

BATCHED_CHUNK_EXAMPLES = 2048
"""The ``batched`` method's chunks: at most this many example slots (models x width) at once
(1,024-8,192 measured, 2,048 among the fastest: bench/README.md; it holds no P-sized per-example
gradients, so the chunk is counted in examples, not floats)."""

BATCHED_WIDTH_SLACK = 2
"""The ``batched`` method's :data:`WIDTH_SLACK`."""


@dataclass(frozen=True, eq=False)
class TorchModel(PerExampleModel):
    """K copies of ``module`` as flat parameters (K, P), trained by
    :func:`audit.training.engine.train`.

    Attributes:
        module: maps float rows (S, features) to logits (S, classes); its parameters give
            the names, shapes and the initial values (:meth:`initial`).
        features, classes: the row width and the number of classes.
        private_start, private_width: the flat block of parameters that real data never move
            (the canary's coordinates, :mod:`audit.training.canaries`).
        method: :data:`GRADIENT_METHODS` (``vmap`` for a module built directly; :func:`torch_model`
            gives :data:`GRADIENT_METHOD`, ``compiled``: the same sums, without the per-example
            gradients of the whole model, where every parameter's layer has a rule); ``ghost``
            holds the module's :class:`audit.training.ghost_norms.GhostPlan` or None (methods
            ``ghost``, ``batched`` and ``compiled``), ``batched`` its
            :class:`audit.training.batched_layers.BatchedPlan` or None (methods ``batched`` and
            ``compiled``), ``cnn`` its :class:`audit.training.compiled_cnn.CnnPlan` or None
            (method ``compiled`` with numba available).
    """

    module: nn.Module
    features: int
    classes: int
    private_start: int
    private_width: int
    method: str = "vmap"
    names: tuple[str, ...] = field(init=False)
    shapes: tuple[tuple[int, ...], ...] = field(init=False)
    ghost: GhostPlan | None = field(init=False)
    batched: BatchedPlan | None = field(init=False)
    cnn: CnnPlan | None = field(init=False)

    def __post_init__(self) -> None:
        named = [(n, tuple(p.shape)) for n, p in self.module.named_parameters()]
        object.__setattr__(self, "names", tuple(n for n, _ in named))
        object.__setattr__(self, "shapes", tuple(s for _, s in named))
        if self.method not in GRADIENT_METHODS:
            raise ValueError(f"method={self.method!r} is not valid; use one of {GRADIENT_METHODS}")
        planned = self.method in ("ghost", "batched", "compiled")
        ghost = plan(self.module, self.features) if planned else None
        object.__setattr__(
            self, "batched",
            batched_plan(self.module, ghost, self.features)
            if self.method in ("batched", "compiled") else None,
        )
        object.__setattr__(self, "ghost", ghost)
        object.__setattr__(
            self, "cnn",
            cnn_plan(self.module) if self.method == "compiled" and available() else None,
        )

    @property
    def philox_noise(self) -> bool:
        """Whether :func:`audit.training.engine.train` draws this model's noise from Philox on the
        CPU (:func:`audit.training.compiled.gaussian_rows`, the ``compiled_philox`` route's
        stream in the flat parameter order): with the ``compiled`` method's kernel, which
        replaces the step's torch work, torch's ``normal_`` (160 M variates/s here, against
        Philox's 340 M/s) was an eighth of a built-in CNN step."""
        return self.cnn is not None

    @property
    def size(self) -> int:
        """P, the number of parameters of one model."""
        return sum(math.prod(s) for s in self.shapes)

    @property
    def device(self) -> torch.device:
        return next(self.module.parameters()).device

    def on(self, device: str | torch.device) -> TorchModel:
        """A copy whose module lives on ``device`` (a private module: ``functional_call``
        swaps the module's tensors while it runs, so concurrent trainings must not share one).
        Training allocates and frees the same large tensors every step: the process keeps freed
        memory in its heap from here on (:func:`audit.training.heap.retain_freed_memory`)."""
        retain_freed_memory()
        return TorchModel(
            module=copy.deepcopy(self.module).to(device),
            features=self.features,
            classes=self.classes,
            private_start=self.private_start,
            private_width=self.private_width,
            method=self.method,
        )

    def initial(self) -> np.ndarray:
        """The module's current parameters, flat (P,) float32: theta_0."""
        return torch.cat([p.detach().reshape(-1).cpu() for p in self.module.parameters()]).numpy()

    def params(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        """Views of flat parameters (K, P) as named blocks (K, *shape)."""
        out, start = {}, 0
        for name, shape in zip(self.names, self.shapes, strict=True):
            stop = start + math.prod(shape)
            out[name] = theta[:, start:stop].view(theta.shape[0], *shape)
            start = stop
        return out

    def _buffers(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        return {n: b.to(theta.device) for n, b in self.module.named_buffers()}

    def _one_loss(self, params, buffers, x, y):
        logits = functional_call(self.module, (params, buffers), (x.unsqueeze(0),))
        return nn.functional.cross_entropy(logits, y.unsqueeze(0))

    def _per_example(
        self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """Per-example gradients {name: (K, S, *shape)} of rows x (K, S, D), labels (K, S)."""
        params = self.params(theta.to(x.dtype) if theta.dtype != x.dtype else theta)
        buffers = {n: b.to(x.dtype) for n, b in self._buffers(theta).items()}
        per_slot = vmap(grad(self._one_loss), in_dims=(None, None, 0, 0))
        return vmap(per_slot, in_dims=(0, None, 0, 0))(params, buffers, x, y)

    def logits(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Logits (K, S, classes) of rows x (K, S, D)."""
        buffers = self._buffers(theta)

        def forward(params, rows):
            return functional_call(self.module, (params, buffers), (rows,))

        with torch.no_grad():
            return vmap(forward)(self.params(theta), x)

    def per_example_grads(
        self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor
    ) -> torch.Tensor:
        grads = self._per_example(theta, x, y)
        return torch.cat([g.reshape(*g.shape[:2], -1) for g in grads.values()], dim=2)

    def _clipped_sum(
        self, theta, xa, y, weight, clip, xa_sqnorm, out, accumulate, workspace
    ) -> torch.Tensor:
        """``xa`` holds rows with a trailing column of ones, dropped here; ``xa_sqnorm`` and
        ``workspace`` are unused (the per-example gradients are materialised, chunk by chunk)."""
        del xa_sqnorm, workspace
        if out is None:
            out = torch.zeros(theta.shape, dtype=theta.dtype, device=theta.device)
        elif not accumulate:
            out.zero_()
        if self.cnn is not None and self._compiled_fits(theta, xa, weight, out):
            cnn_clipped_sums(self.cnn, theta, xa, y, weight.to(torch.float32), clip, out)
            return out
        self._accumulate(theta, xa[..., :-1], y, weight, clip, out)
        return out

    @staticmethod
    def _compiled_fits(theta, xa, weight, out) -> bool:
        """Whether the compiled kernel takes these tensors: all on the CPU, float32."""
        return all(
            t.device.type == "cpu" and t.dtype == torch.float32 for t in (theta, xa, out)
        ) and weight.device.type == "cpu"

    def _ghost_sums(self, theta, x, y, weight, clip) -> torch.Tensor:
        """The clipped sums (R, P) of models ``theta`` (R, P) on rows x (R, S, D) by the ghost plan
        (:meth:`audit.training.ghost_norms.GhostPlan.clipped_sum`), vmapped over the models."""
        params = self.params(theta.to(x.dtype) if theta.dtype != x.dtype else theta)
        buffers = {n: b.to(x.dtype) for n, b in self._buffers(theta).items()}
        ghost = self.ghost
        assert ghost is not None  # called only with a plan (_accumulate_rows)

        def one_model(params, x, y):
            def forward(rows):
                return functional_call(self.module, (params, buffers), (rows,))

            return ghost.probe_gradients(forward, x, y)

        inputs, grads = vmap(one_model)(params, x, y)
        return ghost.clipped_sums(inputs, grads, weight.to(x.dtype), clip, self.names)

    def _accumulate(self, theta, x, y, weight, clip, out) -> None:
        """Add the clipped sums of models whose batches use a slot to ``out``.

        Models are sorted by the width of their batch (last slot with a non-zero weight,
        + 1) and processed in chunks that share a width, so that padding beyond a model's
        last used slot costs nothing (Poisson batches vary: max and mean widths differ ~2x).
        """
        k, slots = x.shape[:2]
        used = weight != 0
        position = torch.arange(1, slots + 1, device=weight.device)
        widths = (
            torch.where(used, position, 0).amax(-1)
            if slots
            else torch.zeros(k, dtype=torch.long, device=weight.device)
        )
        order = torch.argsort(widths, stable=True)
        sorted_widths = widths[order].tolist()
        start = next((i for i, w in enumerate(sorted_widths) if w > 0), k)
        if self.batched is not None:
            slack, budget, per_slot = BATCHED_WIDTH_SLACK, BATCHED_CHUNK_EXAMPLES, 1
        else:
            slack, budget, per_slot = WIDTH_SLACK, CHUNK_ELEMENTS, self.size
        while start < k:
            # the widest model of the chunk sets its width; grow the chunk within the budget
            stop = start + 1
            while (
                stop < k
                and sorted_widths[stop] <= sorted_widths[start] + slack
                and (stop + 1 - start) * sorted_widths[stop] * per_slot <= budget
            ):
                stop += 1
            width = sorted_widths[stop - 1]
            rows = order[start:stop]
            self._accumulate_rows(theta, x, y, weight, clip, out, rows, width)
            start = stop

    def _accumulate_rows(self, theta, x, y, weight, clip, out, rows, width) -> None:
        if self.batched is not None:
            chunk = theta[rows]
            params = self.params(chunk.to(x.dtype) if chunk.dtype != x.dtype else chunk)
            out.index_add_(
                0,
                rows,
                self.batched.clipped_sums(
                    params, x[rows, :width], y[rows, :width], weight[rows, :width].to(x.dtype),
                    clip, self.names,
                ),
            )
            return
        if self.ghost is not None:
            out.index_add_(
                0,
                rows,
                self._ghost_sums(
                    theta[rows], x[rows, :width], y[rows, :width], weight[rows, :width], clip
                ),
            )
            return
        count = rows.shape[0]
        grads = self._per_example(theta[rows], x[rows, :width], y[rows, :width])
        flat = [g.reshape(count, width, -1) for g in grads.values()]
        sqnorm = torch.stack([torch.linalg.vecdot(g, g) for g in flat]).sum(0)
        factor = weight[rows, :width] * torch.clamp(clip / sqnorm.sqrt().clamp_min(1e-30), max=1.0)
        total = torch.cat([torch.bmm(factor.unsqueeze(1), g).squeeze(1) for g in flat], dim=1)
        out.index_add_(0, rows, total)


def torch_model(
    factory: ModelFactory, input_shape: tuple[int, ...], classes: int, *, seed: int
) -> TorchModel:
    """The factory's module wrapped with the canary weights
    (:class:`audit.training.torch_models.CanaryModel`): rows are the flattened input plus the
    always-zero canary feature."""
    module = build_canary_model(factory, input_shape, classes, seed=seed)
    return TorchModel(
        module=module,
        features=math.prod(input_shape) + 1,
        classes=classes,
        private_start=0,
        private_width=classes,
        method=GRADIENT_METHOD,
    )
