"""Canaries: the one example per training whose membership the audit tests.

One canary per trial, at training-set index :data:`CANARY_INDEX`; IN or OUT under zero-out
adjacency (docs/design.md §3.2): OUT keeps the canary's slot in every batch, with gradient 0.

The engine gives every model one more input feature, 0 for every real example. The
weights leaving it (row ``D-1`` of the first weight matrix, the *private row*) are therefore
never moved by real data: only the canary and the noise touch them, which is what the
``isolated`` threat model needs (the others have exactly 0 along u). Its initial values are
made non-negative (:func:`audit.training.trials.build_problem`), so that the ``ood`` probe below
activates the MLP's ReLU units. A model trained through :mod:`audit.training.func_engine` (any
``nn.Module``) has the same structure: :class:`audit.training.torch_models.CanaryModel` adds
s * w_canary to the logits, s the always-zero feature, so its private block is w_canary
(``model.private_start``, ``model.private_width``) and the Dirac coordinate is w_canary[label].

- ``dirac``: a gradient canary (Nasr et al. 2023, arXiv 2302.07956; white-box). Its clipped
  gradient is injected as exactly C*u, u = -e_j a single coordinate of the private row:
  j = (D-1, label) for logistic regression, (D-1, 0) for the MLP. Gradient descent thus
  raises that weight, i.e. raises the probe's logit (logistic) or first hidden unit (MLP).
- ``input``: a real example that goes through the model (black-box and last-iterate
  audits), of kind
  * ``ood``: the out-of-distribution input x = scale * e_{D-1} (0 on every real feature)
    with label ``label``. Its gradient lies in the private row and the output biases; u is
    its gradient at the initial parameters theta_0, restricted to the private row and
    normalised, so that the others have exactly 0 along u in the isolated threat model and
    one participation shifts y by <clip(g), u>/C <= 1 (about scale/sqrt(scale^2+1) at theta_0,
    less as the model learns the canary);
  * ``mislabeled``: training example 0 with label (y+1) mod classes; u is its full gradient
    direction at theta_0. Real data are not orthogonal to this u, so its all-iterates
    observation also carries the others' (unremoved) components.

  Either way the canary's gradient also moves parameters the others move (output biases,
  hidden layers), so an input canary does not realise the shuffles' isolated pair: with
  ``threat_model = "isolated"`` the shuffles refuse it
  (:func:`audit.sampling.check_canary_isolation`).

Threat models (docs/design.md §3.4): ``adversarial`` replaces every other example's clipped
gradient by exactly -C*u (the worst-case co-batch under zero-out; a crafted dataset, so the
model learns nothing else but noise); ``isolated`` keeps the real data. The attacker knows
the data and the sampler's law but not its randomness, so the all-iterates observation adds
back the *expected* others' count along u (:func:`known_offset`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from audit.core.mechanism import Mechanism
from audit.core.names import CANARIES, CANARY_INDEX, INPUT_CANARIES
from audit.core.validation import check_choice
from audit.sampling import get_sampler
from audit.training.models import MLP, PerExampleModel

__all__ = [
    "CANARIES",
    "CANARY_INDEX",
    "INPUT_CANARIES",
    "Canary",
    "known_offset",
    "make_canary",
    "private_coordinate",
]


@dataclass(frozen=True)
class Canary:
    """The canary example and its direction.

    Attributes:
        kind: ``dirac`` or ``input``.
        x: the canary's input (D,) (for ``dirac`` the probe scale*e_{D-1}, used only for
            the black-box loss).
        label: its label.
        u: unit vector (P,) in parameter space: the audited direction.
        injected: True when the clipped gradient is injected as C*u (``dirac``), False when
            it is computed through the model (``input``).
    """

    kind: str
    x: np.ndarray
    label: int
    u: np.ndarray
    injected: bool


def private_coordinate(model: PerExampleModel, column: int) -> int:
    """Flat index of the weight from the always-zero input feature D-1 to output ``column``
    of the first layer (for a :class:`audit.training.func_engine.TorchModel`, of its private block:
    the canary weights of :class:`audit.training.torch_models.CanaryModel`)."""
    return model.private_start + column


def make_canary(
    kind: str,
    model: PerExampleModel,
    theta0: np.ndarray,
    *,
    input_kind: str = "ood",
    label: int = 0,
    scale: float = 10.0,
    example: tuple[np.ndarray, int] | None = None,
) -> Canary:
    """Build the canary ``kind`` for ``model`` with initial parameters ``theta0`` (P,).

    ``example`` (x, y) is the real example used by the ``mislabeled`` input canary.
    """
    kind = check_choice("canary", kind, CANARIES)
    input_kind = check_choice("input_canary", input_kind, INPUT_CANARIES)
    probe = np.zeros(model.features, dtype=np.float32)
    probe[-1] = scale
    if kind == "dirac":
        u = np.zeros(model.size)
        column = 0 if isinstance(model, MLP) else label
        u[private_coordinate(model, column)] = -1.0
        return Canary(kind=kind, x=probe, label=label, u=u, injected=True)
    if input_kind == "ood":
        x, y = probe, label
    else:
        if example is None:
            raise ValueError("the mislabeled input canary needs a real example")
        x = np.asarray(example[0], dtype=np.float32)
        y = (int(example[1]) + 1) % model.classes
    grad = _gradient(model, theta0, x, y)
    if input_kind == "ood":
        mask = np.zeros(model.size, dtype=bool)
        start = private_coordinate(model, 0)
        mask[start : start + model.private_width] = True
        grad = np.where(mask, grad, 0.0)
    norm = float(np.linalg.norm(grad))
    if norm == 0.0:
        raise ValueError(
            "the input canary has zero gradient at the initial parameters; change its label or "
            "scale"
        )
    return Canary(kind=kind, x=x, label=y, u=grad / norm, injected=False)


def known_offset(mechanism: Mechanism) -> float:
    """What the attacker adds back to each step's projection, in units of C.

    Isolated: 0 (the others have nothing along u). Adversarial: every other example in the
    batch contributes -1; the attacker adds back the expected count of others:
    fixed-size samplers, b (every batch has exactly b slots, one of which may be the
    canary's, so a canary step reads 2 IN / 1 OUT, other steps 0); Poisson, (n-1) q (the
    count is Binomial(n-1, q), unknown to the attacker, so this co-batch only adds
    variance (n-1) q (1-q): for Poisson the adversarial co-batch is not the worst case,
    the isolated pair is); truncated Poisson, (n-1)/n * E[min(Binomial(n, q), B)]. The
    registered sampler owns the formula (:meth:`audit.sampling.Sampler.known_offset`).
    """
    if mechanism.threat_model == "isolated":
        return 0.0
    return get_sampler(mechanism.sampler).known_offset(mechanism)


def _gradient(model: PerExampleModel, theta0: np.ndarray, x: np.ndarray, y: int) -> np.ndarray:
    theta = torch.as_tensor(theta0, dtype=torch.float64).reshape(1, -1)
    xs = torch.as_tensor(x, dtype=torch.float64).reshape(1, 1, -1)
    ys = torch.tensor([[y]])
    return model.per_example_grads(theta, xs, ys)[0, 0].numpy()
