"""K small models trained at once: per-example gradients in closed form, as batched matmuls.

Two models, each held for K independent trainings as one flat parameter tensor
``theta`` of shape (K, P) (views give the weight blocks):

- ``logistic``: multinomial logistic regression, logits = x W + c, W (D, classes).
- ``mlp``: one hidden layer, logits = act(x W1 + c1) W2 + c2, W1 (D, H), W2 (H, classes),
  with act in ``relu``, ``tanh``, ``sigmoid``.

Per-example loss: cross-entropy l_i = -log softmax(logits_i)[y_i]; e_i = p_i - onehot(y_i)
is its gradient with respect to the logits. Closed forms (Goodfellow 2015, "Efficient
per-example gradient computations", arXiv 1510.01799), for one example i:

- linear layer out = a W + c with upstream gradient d:  dW = a d^T, dc = d, and
  ||(dW, dc)||^2 = (||a||^2 + 1) ||d||^2, so per-example norms never materialise dW;
- logistic: (a, d) = (x_i, e_i);
- mlp: layer 2 (a, d) = (h_i, e_i); layer 1 (a, d) = (x_i, (W2 e_i) * act'(z_i)).

Writing the bias as the last row of an augmented matrix [W; c] applied to [a, 1], the
clipped sum (Abadi et al. 2016, arXiv 1607.00133, Alg. 1) is, per layer,
sum_i w_i min(1, C/||g_i||) g_i = [a, 1]^T (f * d) with f_i = w_i min(1, C/||g_i||): one
batched matmul per layer, written straight into the flat gradient. Slot weights w_i in
{0, 1} drop padding slots and zero-out canaries.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from audit.core.names import ACTIVATIONS, MODELS
from audit.core.validation import check_choice, check_int

__all__ = [
    "ACTIVATIONS",
    "MLP",
    "MODELS",
    "BatchedModel",
    "LogisticRegression",
    "PerExampleModel",
    "augment",
    "cross_entropy",
    "make_model",
]


class PerExampleModel:
    """The interface the engine trains: K models as one flat parameter tensor theta (K, P).

    Two implementations: the closed-form models (:class:`BatchedModel`) and any torch module
    (:class:`audit.training.func_engine.TorchModel`, docs/design.md §12.1). Rows are x (K, S, D)
    with labels y (K, S); ``xa`` is x with a trailing column of ones (:func:`augment`), what the
    engine passes. A subclass provides ``features``, ``classes``, ``size`` (P), ``private_start``
    and ``private_width`` (the canary's block), :meth:`on`, :meth:`logits`,
    :meth:`per_example_grads` and the clipped sum :meth:`_clipped_sum`.
    """

    features: int
    classes: int
    if TYPE_CHECKING:  # each subclass gives them (a property or a field): declared for the checker

        @property
        def size(self) -> int: ...
        @property
        def private_start(self) -> int: ...
        @property
        def private_width(self) -> int: ...

    def on(self, device: str | torch.device) -> PerExampleModel:
        """The model for ``device``."""
        raise NotImplementedError

    def logits(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Logits (K, S, classes) of inputs x (K, S, D)."""
        raise NotImplementedError

    def per_example_grads(
        self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor
    ) -> torch.Tensor:
        """Per-example gradients (K, S, P) of the cross-entropy (memory K*S*P: for tests)."""
        raise NotImplementedError

    def losses(self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Per-example cross-entropy (K, S)."""
        return cross_entropy(self.logits(theta, x), y)

    def clipped_grad_sum(
        self,
        theta: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        weight: torch.Tensor,
        clip: float,
    ) -> torch.Tensor:
        """sum_i weight_i * min(1, clip/||g_i||) * g_i, flat (K, P) (Abadi et al. 2016, Alg. 1).

        ``weight`` (K, S) is 1 for a slot that contributes its gradient, 0 otherwise
        (padding, a zero-out canary, a slot whose gradient is injected instead).
        """
        return self.clipped_grad_sum_augmented(theta, augment(x), y, weight, clip)

    def clipped_grad_sum_augmented(
        self,
        theta: torch.Tensor,
        xa: torch.Tensor,
        y: torch.Tensor,
        weight: torch.Tensor,
        clip: float,
        *,
        xa_sqnorm: torch.Tensor | None = None,
        out: torch.Tensor | None = None,
        accumulate: bool = False,
        workspace: dict[str, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """:meth:`clipped_grad_sum` for augmented inputs ``xa`` (K, S, D + 1), the engine's
        entry point: with the optional precomputed ||xa_i||^2 (K, S) (a hint a model may
        ignore), written into ``out`` (K, P) if given (added to its content when
        ``accumulate``); ``workspace`` keeps scratch buffers from one call to the next (a dict
        the caller owns; a model may ignore it). Returns ``out`` (a new tensor if none was
        given)."""
        return self._clipped_sum(theta, xa, y, weight, clip, xa_sqnorm, out, accumulate, workspace)

    def _clipped_sum(
        self, theta, xa, y, weight, clip, xa_sqnorm, out, accumulate, workspace
    ) -> torch.Tensor:
        """:meth:`clipped_grad_sum_augmented`, positional (the one method a model implements)."""
        raise NotImplementedError


@dataclass(frozen=True)
class BatchedModel(PerExampleModel):
    """Shared logic: flat parameters (K, P) and the clipped per-example gradient sum.

    Each linear layer's weight W (in, out) is followed in the flat vector by its bias c
    (out), so the pair is one contiguous *augmented* matrix [W; c] of shape (in + 1, out),
    applied to the augmented input [a, 1]. The engine passes inputs already augmented
    (``xa``, a trailing column of ones) to the ``*_augmented`` methods; the plain methods
    take x (K, S, D) and augment it themselves.
    """

    features: int
    classes: int

    @property
    def shapes(self) -> tuple[tuple[int, ...], ...]:
        """Shapes of the parameter blocks of one model, in flat order."""
        raise NotImplementedError

    @property
    def layers(self) -> tuple[tuple[int, int], ...]:
        """(in, out) of each linear layer."""
        raise NotImplementedError

    @property
    def size(self) -> int:
        """P, the number of parameters of one model."""
        return sum(math.prod(s) for s in self.shapes)

    @property
    def private_width(self) -> int:
        """Width of the private row: the first layer's weights from the always-zero input
        feature D-1 (:mod:`audit.training.canaries`)."""
        return self.shapes[0][1]

    @property
    def private_start(self) -> int:
        """Flat index of the private row's first weight."""
        return (self.features - 1) * self.private_width

    def on(self, device: str | torch.device) -> BatchedModel:
        """The model for ``device`` (stateless: itself)."""
        del device
        return self

    def blocks(self, theta: torch.Tensor) -> list[torch.Tensor]:
        """Views of flat parameters (K, P) as blocks (K, *shape)."""
        out, start = [], 0
        for shape in self.shapes:
            stop = start + math.prod(shape)
            out.append(theta[:, start:stop].view(theta.shape[0], *shape))
            start = stop
        return out

    def augmented_blocks(self, theta: torch.Tensor) -> list[torch.Tensor]:
        """Views of flat parameters (K, P) as augmented layer matrices (K, in + 1, out)."""
        out, start = [], 0
        for fan_in, fan_out in self.layers:
            stop = start + (fan_in + 1) * fan_out
            out.append(theta[:, start:stop].view(theta.shape[0], fan_in + 1, fan_out))
            start = stop
        return out

    def init(self, k: int, generator: torch.Generator) -> torch.Tensor:
        """K initial parameter vectors (K, P): weights U(-1/sqrt(fan_in), 1/sqrt(fan_in)) as
        torch.nn.Linear, biases 0."""
        theta = torch.zeros(k, self.size)
        for block in self.blocks(theta):
            if block.dim() == 3:
                bound = 1.0 / math.sqrt(block.shape[1])
                block.uniform_(-bound, bound, generator=generator)
        return theta

    def logits(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return self._forward(theta, augment(x))[-1]

    def per_example_grads(
        self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor
    ) -> torch.Tensor:
        parts = [
            (a.unsqueeze(-1) * d.unsqueeze(-2)).flatten(2)
            for a, d in self._layer_grads(theta, augment(x), y)
        ]
        return torch.cat(parts, dim=2)

    def per_example_norms(
        self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor
    ) -> torch.Tensor:
        """||g_i|| (K, S) without materialising g_i."""
        return _norms(self._layer_grads(theta, augment(x), y))

    def _clipped_sum(
        self, theta, xa, y, weight, clip, xa_sqnorm, out, accumulate, workspace
    ) -> torch.Tensor:
        """Per layer [a, 1]^T (f * d), f_i = w_i min(1, C/||g_i||), by batched matmuls (module
        docstring); ||g_i|| from the layers' closed forms (with ``xa_sqnorm`` if given); scratch
        buffers of the 16-column route kept in ``workspace`` (fresh ones if None)."""
        layers = self._layer_grads(theta, xa, y, workspace)
        norms = _norms(layers, xa_sqnorm)
        factor = weight * torch.clamp(clip / norms.clamp_min(1e-30), max=1.0)
        if out is None:
            out = torch.empty(theta.shape, dtype=theta.dtype, device=theta.device)
        for (a, d), target in zip(layers, self.augmented_blocks(out), strict=True):
            if _widened(target):  # [a, 1]^T (f * d) through a padded (in + 1, GEMM_COLUMNS) product
                wide = _scratch(workspace, "errors", (*d.shape[:-1], GEMM_COLUMNS), d)
                torch.mul(d, factor.unsqueeze(-1), out=wide[..., : d.shape[-1]])
                shape = (a.shape[0], a.shape[2], GEMM_COLUMNS)
                product = _product(a.transpose(1, 2), wide, workspace, "products", shape)[
                    ..., : d.shape[-1]
                ]
                if accumulate:
                    target.add_(product)
                else:
                    target.copy_(product)
                continue
            d.mul_(factor.unsqueeze(-1))  # in place: d is this call's temporary, its norm taken
            if accumulate and target.is_contiguous():
                target.baddbmm_(a.transpose(1, 2), d)
            elif accumulate:  # a strided block: bmm into a temporary is faster than baddbmm_
                target.add_(torch.bmm(a.transpose(1, 2), d))
            else:
                torch.bmm(a.transpose(1, 2), d, out=target)
        return out

    def _forward(
        self,
        theta: torch.Tensor,
        xa: torch.Tensor,
        workspace: dict[str, torch.Tensor] | None = None,
    ) -> list[torch.Tensor]:
        raise NotImplementedError

    def _layer_grads(
        self,
        theta: torch.Tensor,
        xa: torch.Tensor,
        y: torch.Tensor,
        workspace: dict[str, torch.Tensor] | None = None,
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer, (augmented input [a, 1] (K,S,in+1), gradient w.r.t. its output
        d (K,S,out)); the per-example gradient of [W; c] is [a, 1] d^T."""
        raise NotImplementedError


@dataclass(frozen=True)
class LogisticRegression(BatchedModel):
    """Multinomial logistic regression: blocks W (D, classes), c (classes)."""

    @property
    def shapes(self) -> tuple[tuple[int, ...], ...]:
        return ((self.features, self.classes), (self.classes,))

    @property
    def layers(self) -> tuple[tuple[int, int], ...]:
        return ((self.features, self.classes),)

    def _forward(self, theta, xa, workspace=None):
        (wa,) = self.augmented_blocks(theta)
        return [_bmm(xa, wa, workspace)]

    def _layer_grads(self, theta, xa, y, workspace=None):
        return [(xa, _error(self._forward(theta, xa, workspace)[0], y))]


@dataclass(frozen=True)
class MLP(BatchedModel):
    """One hidden layer of width ``hidden``: blocks W1 (D, H), c1 (H), W2 (H, classes), c2."""

    hidden: int = 32
    activation: str = "relu"

    @property
    def shapes(self) -> tuple[tuple[int, ...], ...]:
        return (
            (self.features, self.hidden),
            (self.hidden,),
            (self.hidden, self.classes),
            (self.classes,),
        )

    @property
    def layers(self) -> tuple[tuple[int, int], ...]:
        return ((self.features, self.hidden), (self.hidden, self.classes))

    def _forward(self, theta, xa, workspace=None):
        w1a, w2a = self.augmented_blocks(theta)
        z = torch.bmm(xa, w1a)
        ha = augment(_ACT[self.activation](z))
        return [z, ha, _bmm(ha, w2a, workspace)]

    def _layer_grads(self, theta, xa, y, workspace=None):
        z, ha, logits = self._forward(theta, xa, workspace)
        e = _error(logits, y)
        w2 = self.augmented_blocks(theta)[1][:, : self.hidden, :]
        d1 = torch.bmm(e, w2.transpose(1, 2)).mul_(
            _derivative(self.activation, z, ha[..., : self.hidden])
        )
        return [(xa, d1), (ha, e)]


GEMM_COLUMNS = 16
"""Matrix products whose result has fewer columns than this (a layer's ``out``: the 10 classes)
are computed, on the CPU, with the narrow operand copied into the first columns of a scratch
matrix this wide; the extra columns of the product are dropped. MKL's batched kernel is several
times slower for products with 10 result columns, copies included (figures: bench/README.md)."""


def _widened(w: torch.Tensor) -> bool:
    """Whether products with result columns ``w.shape[-1]`` go through the padded route."""
    return w.shape[-1] < GEMM_COLUMNS and w.device.type == "cpu"


def _bmm(
    a: torch.Tensor, w: torch.Tensor, workspace: dict[str, torch.Tensor] | None = None
) -> torch.Tensor:
    """a @ w, batched (K, S, in) x (K, in, out) -> (K, S, out); for narrow ``w`` (out <
    :data:`GEMM_COLUMNS`, CPU) through w copied into the first columns of a wider matrix. Each
    column of a product depends on its own column of ``w`` only, so the extra columns (any
    finite scratch content) change nothing; they are dropped (the result is a strided view, of
    the workspace's ``logits`` buffer when a workspace is given: valid until the next call)."""
    if not _widened(w):
        return torch.bmm(a, w)
    wide = _scratch(workspace, "weights", (*w.shape[:-1], GEMM_COLUMNS), w)
    wide[..., : w.shape[-1]].copy_(w)
    return _product(a, wide, workspace, "logits", (*a.shape[:-1], GEMM_COLUMNS))[..., : w.shape[-1]]


def _product(
    a: torch.Tensor,
    b: torch.Tensor,
    workspace: dict[str, torch.Tensor] | None,
    name: str,
    shape: tuple[int, ...],
) -> torch.Tensor:
    """torch.bmm(a, b), written into the workspace's buffer ``name`` when there is a workspace
    (a fresh result each call otherwise: usable under autograd)."""
    if workspace is None:
        return torch.bmm(a, b)
    return torch.bmm(a, b, out=_scratch(workspace, name, shape, b))


def _scratch(
    workspace: dict[str, torch.Tensor] | None, name: str, shape: tuple[int, ...], like: torch.Tensor
) -> torch.Tensor:
    """A (shape) buffer of ``like``'s dtype and device: a view of ``workspace[name]`` (created
    zero-filled, grown when too small, so its content is always finite), or new zeros."""
    size = math.prod(shape)
    if workspace is None:
        return like.new_zeros(shape)
    buffer = workspace.get(name)
    if (
        buffer is None
        or buffer.numel() < size
        or buffer.dtype != like.dtype
        or buffer.device != like.device
    ):
        buffer = workspace[name] = like.new_zeros(size)
    return buffer[:size].view(shape)


def augment(x: torch.Tensor) -> torch.Tensor:
    """[x, 1]: inputs with a trailing column of ones (the bias as a weight row)."""
    return torch.cat([x, torch.ones(*x.shape[:-1], 1, dtype=x.dtype, device=x.device)], dim=-1)


def cross_entropy(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-example cross-entropy -log softmax(logits)[y], (K, S) from logits (K, S, classes)."""
    logp = torch.log_softmax(logits, dim=-1)
    return -logp.gather(-1, y.unsqueeze(-1)).squeeze(-1)


def make_model(
    name: str, *, features: int, classes: int, hidden: int = 32, activation: str = "relu"
) -> BatchedModel:
    """The model ``name`` (``logistic`` or ``mlp``) for ``features`` inputs and ``classes``."""
    name = check_choice("model", name, MODELS)
    features = check_int("features", features, minimum=1)
    classes = check_int("classes", classes, minimum=2)
    if name == "logistic":
        return LogisticRegression(features=features, classes=classes)
    hidden = check_int("hidden", hidden, minimum=1)
    activation = check_choice("activation", activation, ACTIVATIONS)
    return MLP(features=features, classes=classes, hidden=hidden, activation=activation)


_ACT = {"relu": torch.relu, "tanh": torch.tanh, "sigmoid": torch.sigmoid}


def _derivative(activation: str, z: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """act'(z), from z or from h = act(z) (relu'(0) = 0, as torch's autograd)."""
    if activation == "relu":
        return torch.sign(h)  # h = relu(z) >= 0, so sign(h) = 1[z > 0]
    if activation == "tanh":
        return 1.0 - h * h
    return h * (1.0 - h)


def _error(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """d CE / d logits = softmax(logits) - onehot(y), (K, S, classes).

    The softmax is written out (exp(z - max z) / sum): torch.softmax over a last dimension
    of ~10 classes is several times slower on the CPU.
    """
    e = (logits - logits.amax(-1, keepdim=True)).exp_()
    e.div_(e.sum(-1, keepdim=True))
    return e.scatter_add_(-1, y.unsqueeze(-1), -torch.ones_like(e[..., :1]))


def _norms(
    layers: list[tuple[torch.Tensor, torch.Tensor]], xa_sqnorm: torch.Tensor | None = None
) -> torch.Tensor:
    """sqrt(sum over layers of ||[a, 1]||^2 ||d||^2), (K, S); ``xa_sqnorm`` = ||[x, 1]||^2 of
    the first layer when precomputed."""
    total = None
    for layer, (a, d) in enumerate(layers):
        a_sq = xa_sqnorm if layer == 0 and xa_sqnorm is not None else a.square().sum(-1)
        term = a_sq * d.square().sum(-1)
        total = term if total is None else total + term
    if total is None:
        raise ValueError("gradient norms of a model without layers")
    return total.sqrt()
