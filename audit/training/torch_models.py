"""Any ``torch.nn.Module`` as an audited model: factories, the canary wrapper, refused layers.

A **model factory** builds the network an audit trains::

    factory(input_shape: tuple[int, ...], num_classes: int) -> torch.nn.Module

``input_shape`` is the shape of one example (:func:`audit.core.data.input_shape`: (1, 8, 8) for
``digits``, (length, vocabulary) for the one-hot ``sequences``, (d,) for tabular data) and
the module maps a float32 batch (S, *input_shape) to logits (S, num_classes). The factory is
called once per audit cell under a seeded torch RNG (``init_seed``), so its default
initialisation gives the shared initial parameters theta_0. A spec names it
``model = "package.module:factory"`` (``audit train --model package.module:factory``);
:data:`BUILTIN_FACTORIES` are built in (``cnn``, ``transformer``).

Per-example gradients must exist: a layer whose output for one example depends on the other
examples of its batch (``BatchNorm1d/2d/3d``, ``SyncBatchNorm``, and any layer updating
running statistics in place, e.g. ``InstanceNorm(track_running_stats=True)``) has no
per-example gradient, so DP-SGD's clipping is undefined; :func:`check_supported` refuses it
and names the usual replacement, ``GroupNorm`` (as Opacus's ``ModuleValidator`` does). The
engine evaluates the module in ``eval()`` mode (dropout is inactive).

The canary needs a parameter coordinate that real data never move (the ``isolated`` pair,
:mod:`audit.training.canaries`). :class:`CanaryModel` wraps the user's module: its input rows are
the flattened example plus one *canary feature* s, 0 for every real example
(:func:`audit.core.data.load_training_rows`), and

    logits(row) = inner(x) + s * w_canary,     w_canary in R^{num_classes}, initialised to 0.

For a real example (s = 0) the per-example gradient with respect to w_canary is
s * (softmax - onehot) = 0 exactly, and the logits equal ``inner(x)`` exactly (adding 0.0),
so real data never touch w_canary and train ``inner`` as if the wrapper were absent. The
Dirac canary's direction is u = -e_label on w_canary (descent raises the probe's logit of
its label, as for logistic regression); the ``ood`` input canary is x = 0 with s = scale.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from audit.core.errors import AuditInputError
from audit.core.validation import check_choice, load_callable

__all__ = [
    "BUILTIN_FACTORIES",
    "CanaryModel",
    "LearnedPosition",
    "ModelFactory",
    "TinyTransformer",
    "build_canary_model",
    "check_supported",
    "cnn",
    "load_factory",
    "transformer",
]

ModelFactory = Callable[[tuple[int, ...], int], nn.Module]
"""``factory(input_shape, num_classes) -> nn.Module`` (see the module docstring)."""

BUILTIN_FACTORIES: dict[str, str] = {
    "cnn": "audit.training.torch_models:cnn",
    "transformer": "audit.training.torch_models:transformer",
}
"""Built-in model names trained through :mod:`audit.training.func_engine` -> ``module:factory``."""


def cnn(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """A small convolutional network for (channels, height, width) images (8x8 digits):
    conv 3x3 stride 2 (8 channels) - GroupNorm(2) - ReLU - conv 3x3 (16 channels) -
    GroupNorm(4) - ReLU - linear head; 3,866 parameters on digits (4x4 feature maps after
    the first layer: per-example gradients of convolutions cost in proportion to the map
    size, and 8x8 maps in the first layer would double the engine's time)."""
    if len(input_shape) != 3:
        raise ValueError(
            "model='cnn' needs images, input shape (channels, height, width); got "
            f"{tuple(input_shape)} (use dataset='digits')"
        )
    channels, height, width = input_shape
    flat = 16 * math.ceil(height / 2) * math.ceil(width / 2)
    return nn.Sequential(
        nn.Conv2d(channels, 8, 3, stride=2, padding=1),
        nn.GroupNorm(2, 8),
        nn.ReLU(),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.GroupNorm(4, 16),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(flat, num_classes),
    )


class LearnedPosition(nn.Module):
    """h + table: learned position embeddings (length, width) added to every sequence (a layer
    of its own, so that the engine's per-example gradient rules recognise it,
    :mod:`audit.training.ghost_norms`)."""

    def __init__(self, length: int, width: int) -> None:
        super().__init__()
        self.table = nn.Parameter(0.1 * torch.randn(length, width))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.table


class TinyTransformer(nn.Module):
    """One pre-norm encoder block over one-hot token sequences (Vaswani et al. 2017,
    arXiv 1706.03762): token embedding (a bias-free linear map of the one-hot tokens) plus
    learned positions, multi-head self-attention, a ReLU feed-forward layer, each with a
    residual connection after LayerNorm, then a final LayerNorm, mean pooling over positions
    and a linear head. Attention is written with plain matmuls (vmap-friendly)."""

    def __init__(self, length: int, vocabulary: int, num_classes: int, *, width: int = 16,
                 heads: int = 2, hidden: int = 32) -> None:
        super().__init__()
        if width % heads:
            raise ValueError(f"width={width} must be a multiple of heads={heads}")
        self.heads = heads
        self.embed = nn.Linear(vocabulary, width, bias=False)
        self.position = LearnedPosition(length, width)  # the same draws as a bare parameter
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.ffn = nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, width))
        self.norm3 = nn.LayerNorm(width)
        self.head = nn.Linear(width, num_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits (S, classes) of one-hot sequences (S, length, vocabulary)."""
        h = self.position(self.embed(tokens))
        s, length, width = h.shape
        q, k, v = self.qkv(self.norm1(h)).chunk(3, dim=-1)
        split = (s, length, self.heads, width // self.heads)
        q, k, v = (t.reshape(split).transpose(1, 2) for t in (q, k, v))
        attention = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(width // self.heads), dim=-1)
        h = h + self.proj((attention @ v).transpose(1, 2).reshape(s, length, width))
        h = h + self.ffn(self.norm2(h))
        return self.head(self.norm3(h).mean(dim=1))


def transformer(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """:class:`TinyTransformer` (width 16, 2 heads, feed-forward 32) for one-hot sequences of
    shape (length, vocabulary); 2,660 parameters on ``sequences``."""
    if len(input_shape) != 2:
        raise ValueError(
            f"model='transformer' needs one-hot sequences, input shape (length, vocabulary); got "
            f"{tuple(input_shape)} (use dataset='sequences')"
        )
    length, vocabulary = input_shape
    return TinyTransformer(length, vocabulary, num_classes)


def load_factory(model: str) -> ModelFactory:
    """The factory of ``model``: a built-in name (:data:`BUILTIN_FACTORIES`) or
    ``"package.module:factory"``."""
    if model in BUILTIN_FACTORIES:
        return load_callable("model", BUILTIN_FACTORIES[model])
    if ":" not in str(model):
        check_choice("model", model, tuple(BUILTIN_FACTORIES))  # raises, naming the closest
    return load_callable("model", model)


class CanaryModel(nn.Module):
    """``inner`` on rows [x, s] (x flattened, s the canary feature): inner(x) + s * w_canary.

    ``canary`` (w_canary) is registered first, so it leads the flat parameter vector:
    coordinates [0, num_classes) are the private block that real data never move.
    """

    def __init__(self, inner: nn.Module, input_shape: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        self.canary = nn.Parameter(torch.zeros(num_classes))
        self.inner = inner
        self.input_shape = tuple(int(d) for d in input_shape)

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        """Logits (S, classes) of rows (S, prod(input_shape) + 1)."""
        x = rows[:, :-1].reshape(rows.shape[0], *self.input_shape)
        return self.inner(x) + rows[:, -1:] * self.canary


def check_supported(module: nn.Module, input_shape: tuple[int, ...], num_classes: int) -> None:
    """Refuse modules whose per-example gradients are undefined, and check the output shape.

    Raises ``ValueError`` for batch-statistics layers (BatchNorm*, SyncBatchNorm,
    InstanceNorm with running statistics), for any layer that changes a buffer in its
    forward pass (running statistics updated in place), and for logits not of shape
    (S, num_classes).
    """
    for name, layer in module.named_modules():
        where = f"layer {name!r} ({type(layer).__name__})" if name else type(layer).__name__
        if isinstance(layer, nn.modules.batchnorm._BatchNorm):
            raise ValueError(
                f"model: {where} normalises each example with statistics of its whole batch, so an "
                "example's gradient depends on the others and per-example gradients (DP-SGD's "
                "clipping) are undefined; replace it with nn.GroupNorm(groups, channels) (e.g. "
                "GroupNorm(min(32, C), C)), as Opacus's ModuleValidator.fix does"
            )
        if isinstance(layer, nn.modules.instancenorm._InstanceNorm) and layer.track_running_stats:
            raise ValueError(
                f"model: {where} updates running statistics from the batch; set "
                "track_running_stats=False or use nn.GroupNorm"
            )
    if not any(p.requires_grad for p in module.parameters()):
        raise ValueError("model: the module has no trainable parameters")
    before = {n: b.clone() for n, b in module.named_buffers()}
    probe = torch.randn(2, *input_shape, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = module.train()(probe)
    module.eval()
    for name, buffer in module.named_buffers():
        if not torch.equal(buffer, before[name]):
            raise ValueError(
                f"model: buffer {name!r} changed in a forward pass (running statistics updated in "
                "place from the batch), so per-example gradients are undefined; use nn.GroupNorm "
                "or layers without batch statistics"
            )
    if tuple(out.shape) != (2, num_classes):
        raise ValueError(
            f"model: the module maps a batch (2, *{tuple(input_shape)}) to shape "
            f"{tuple(out.shape)}; expected logits (2, {num_classes})"
        )


def build_canary_model(
    factory: ModelFactory, input_shape: tuple[int, ...], num_classes: int, *, seed: int
) -> CanaryModel:
    """``factory(input_shape, num_classes)`` built under ``torch.manual_seed(seed)`` (the global
    RNG is restored afterwards), checked (:func:`check_supported`), wrapped in
    :class:`CanaryModel`, in ``eval()`` mode."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            inner = factory(tuple(input_shape), num_classes)
        # the plug-in's fault: one line naming it (audit.core.errors, exit 2)
        except Exception as error:
            name = (
                f"{getattr(factory, '__module__', '?')}:{getattr(factory, '__qualname__', factory)}"
            )
            raise AuditInputError(
                f"model: the factory {name} raised {type(error).__name__}: "
                f"{' '.join(str(error).split())} "
                f"when called as factory({tuple(input_shape)}, {num_classes})",
                culprit="model",
                fix="fix the factory (--debug shows its traceback)",
            ) from error
    if not isinstance(inner, nn.Module):
        raise ValueError(
            f"model: the factory returned {type(inner).__name__}, not a torch.nn.Module"
        )
    check_supported(inner, input_shape, num_classes)
    return CanaryModel(inner.float(), input_shape, num_classes).eval()
