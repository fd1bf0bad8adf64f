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

The clipped sum (Abadi et al. 2016, arXiv 1607.00133, Alg. 1) is then
sum_i w_i min(1, C/||g_i||) g_i = [x^T (f * e), sum_i f_i e_i] per layer with
f_i = w_i min(1, C/||g_i||): one batched matmul per weight block. Slot weights w_i in
{0, 1} drop padding slots and zero-out canaries.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from audit.validation import check_choice, check_int

__all__ = ["ACTIVATIONS", "MLP", "MODELS", "BatchedModel", "LogisticRegression", "make_model"]

MODELS: tuple[str, ...] = ("logistic", "mlp")
"""Model names accepted by :func:`make_model` (and ``audit train --model``)."""

ACTIVATIONS: tuple[str, ...] = ("relu", "tanh", "sigmoid")
"""Hidden activations of the MLP."""


@dataclass(frozen=True)
class BatchedModel:
    """Shared logic: flat parameters (K, P) and the clipped per-example gradient sum."""

    features: int
    classes: int

    @property
    def shapes(self) -> tuple[tuple[int, ...], ...]:
        """Shapes of the parameter blocks of one model, in flat order."""
        raise NotImplementedError

    @property
    def size(self) -> int:
        """P, the number of parameters of one model."""
        return sum(math.prod(s) for s in self.shapes)

    def blocks(self, theta: torch.Tensor) -> list[torch.Tensor]:
        """Views of flat parameters (K, P) as blocks (K, *shape)."""
        out, start = [], 0
        for shape in self.shapes:
            stop = start + math.prod(shape)
            out.append(theta[:, start:stop].view(theta.shape[0], *shape))
            start = stop
        return out

    def offset(self, block: int) -> int:
        """Flat index of the first entry of parameter block ``block``."""
        return sum(math.prod(s) for s in self.shapes[:block])

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
        """Logits (K, S, classes) of inputs x (K, S, D)."""
        raise NotImplementedError

    def per_example_grads(
        self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor
    ) -> torch.Tensor:
        """Per-example gradients (K, S, P) of the cross-entropy (memory K*S*P: for tests)."""
        parts = []
        for a, d in self._layer_grads(theta, x, y):
            parts.append((a.unsqueeze(-1) * d.unsqueeze(-2)).flatten(2))
            parts.append(d)
        return torch.cat(parts, dim=2)

    def per_example_norms(self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """||g_i|| (K, S) without materialising g_i."""
        layers = self._layer_grads(theta, x, y)
        return _norms(layers)

    def clipped_grad_sum(
        self,
        theta: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        weight: torch.Tensor,
        clip: float,
    ) -> torch.Tensor:
        """sum_i weight_i * min(1, clip/||g_i||) * g_i, flat (K, P).

        ``weight`` (K, S) is 1 for a slot that contributes its gradient, 0 otherwise
        (padding, a zero-out canary, a slot whose gradient is injected instead).
        """
        layers = self._layer_grads(theta, x, y)
        norms = _norms(layers)
        factor = weight * torch.clamp(clip / norms.clamp_min(1e-30), max=1.0)
        parts = []
        for a, d in layers:
            fd = d * factor.unsqueeze(-1)
            parts.append(torch.bmm(a.transpose(1, 2), fd).flatten(1))
            parts.append(fd.sum(dim=1))
        return torch.cat(parts, dim=1)

    def losses(self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Per-example cross-entropy (K, S)."""
        logp = torch.log_softmax(self.logits(theta, x), dim=-1)
        return -logp.gather(-1, y.unsqueeze(-1)).squeeze(-1)

    def _layer_grads(
        self, theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer, (input a (K,S,in), gradient w.r.t. its output d (K,S,out))."""
        raise NotImplementedError


@dataclass(frozen=True)
class LogisticRegression(BatchedModel):
    """Multinomial logistic regression: blocks W (D, classes), c (classes)."""

    @property
    def shapes(self) -> tuple[tuple[int, ...], ...]:
        return ((self.features, self.classes), (self.classes,))

    def logits(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        w, c = self.blocks(theta)
        return torch.baddbmm(c.unsqueeze(1), x, w)

    def _layer_grads(self, theta, x, y):
        return [(x, _error(self.logits(theta, x), y))]


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

    def _forward(self, theta: torch.Tensor, x: torch.Tensor):
        w1, c1, w2, c2 = self.blocks(theta)
        z = torch.baddbmm(c1.unsqueeze(1), x, w1)
        h = _ACT[self.activation](z)
        return z, h, w2, torch.baddbmm(c2.unsqueeze(1), h, w2)

    def logits(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return self._forward(theta, x)[3]

    def _layer_grads(self, theta, x, y):
        z, h, w2, logits = self._forward(theta, x)
        e = _error(logits, y)
        d1 = torch.bmm(e, w2.transpose(1, 2)) * _derivative(self.activation, z, h)
        return [(x, d1), (h, e)]


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
        return (z > 0).to(z.dtype)
    if activation == "tanh":
        return 1.0 - h * h
    return h * (1.0 - h)


def _error(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """d CE / d logits = softmax(logits) - onehot(y), (K, S, classes)."""
    e = torch.softmax(logits, dim=-1)
    return e.scatter_add(-1, y.unsqueeze(-1), -torch.ones_like(e[..., :1]))


def _norms(layers: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """sqrt(sum over layers of (||a||^2 + 1) ||d||^2), (K, S)."""
    total = None
    for a, d in layers:
        term = (a.square().sum(-1) + 1.0) * d.square().sum(-1)
        total = term if total is None else total + term
    return total.sqrt()
