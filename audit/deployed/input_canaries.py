"""Input canaries in the user's own data set, scored black-box (docs/design.md §14.4).

m canary examples made from the user's ``Dataset`` (or given by the user), each IN with
probability 1/2 (independent fair coins, Steinke et al. 2023's one-run game); the IN ones are
appended to the data set through :meth:`InputCanaries.wrap`, the OUT ones are left out
(add/remove adjacency, the one Opacus's accountants use). Kinds:

- ``mislabeled``: m distinct real examples (copies) with the next label, (y + 1) mod classes;
- ``ood``: out-of-distribution inputs of the data's shape, ``scale`` times i.i.d. signs
  (+-1) per coordinate, with uniformly random labels;
- ``given``: the user's own list of (x, y) examples.

After training, :meth:`InputCanaries.scores` evaluates every canary (IN and OUT) on the final
model, black box: the score is minus its loss (higher = IN; Yeom et al. 2018), and the logits
are kept (:attr:`InputCanaries.logits`). Any score of the output is sound for the one-run
bounds (the guesses may be any function of the output).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from audit.core.validation import check_choice, check_int, check_real

__all__ = ["INPUT_CANARY_KINDS", "InputCanaries", "InputCanaryDataset"]

INPUT_CANARY_KINDS: tuple[str, ...] = ("mislabeled", "ood", "given")
"""How the canaries are made (module docstring)."""


class InputCanaryDataset(Dataset):
    """The user's dataset followed by the IN canaries (rows n..n+k-1)."""

    def __init__(self, dataset: Any, canaries: list[tuple[Any, Any]]) -> None:
        self.dataset = dataset
        self.real = len(dataset)
        self.canaries = canaries

    def __len__(self) -> int:
        return self.real + len(self.canaries)

    def __getitem__(self, index: int) -> Any:
        index = int(index)
        if index < 0:
            index += len(self)
        if index < self.real:
            return self.dataset[index]
        if index >= len(self):
            raise IndexError(f"index {index} out of range for {len(self)} rows")
        return self.canaries[index - self.real]


def _label(y: Any) -> int:
    return int(y.item() if hasattr(y, "item") else y)


def _like(label: int, template: Any) -> Any:
    """``label`` in the type of the data set's labels."""
    if isinstance(template, torch.Tensor):
        return torch.tensor(label, dtype=template.dtype)
    return label


class InputCanaries:
    """m input canaries from the user's data set (module docstring).

    Args:
        dataset: the user's map-style dataset of (x, y) rows with integer labels.
        m: number of canaries.  kind: ``mislabeled``, ``ood`` or ``given``.
        classes: number of labels (default: 1 + the largest label among 1000 rows read).
        examples: the (x, y) canaries for ``kind="given"``.
        scale: the ``ood`` inputs' magnitude per coordinate.
        seed: the coins (IN/OUT), the chosen rows, the ``ood`` inputs.
        included: which canaries are IN (default: fair coins from ``seed``).
    """

    def __init__(
        self, dataset: Any, m: int, *, kind: str = "mislabeled", classes: int | None = None,
        examples: Sequence[tuple[Any, Any]] | None = None, scale: float = 1.0, seed: int = 0,
        included: Sequence[bool] | np.ndarray | None = None,
    ) -> None:
        self.kind = check_choice("kind", kind, INPUT_CANARY_KINDS)
        self.m = check_int("m", m, minimum=1)
        self.dataset = dataset
        n = len(dataset)
        rng = np.random.default_rng([check_int("seed", seed, minimum=0), 3])
        first = dataset[0]
        if not isinstance(first, (tuple, list)) or len(first) != 2:
            raise ValueError("dataset: its rows must be (x, y) pairs with an integer label y")
        if classes is None:
            classes = 1 + max(_label(dataset[i][1]) for i in range(min(n, 1000)))
        self.classes = check_int("classes", classes, minimum=2)
        if self.kind == "given":
            if examples is None or len(examples) != self.m:
                raise ValueError(f"kind='given' needs examples: a list of m={self.m} (x, y) pairs")
            self.examples = [(x, y) for x, y in examples]
        elif self.kind == "mislabeled":
            if self.m > n:
                raise ValueError(
                    f"m={self.m} mislabeled canaries need at least m rows; the dataset has {n}"
                )
            rows = rng.choice(n, self.m, replace=False)
            self.examples = []
            for i in rows:
                x, y = dataset[int(i)]
                self.examples.append((x, _like((_label(y) + 1) % self.classes, y)))
        else:
            scale = check_real("scale", scale, minimum=0.0, strict_minimum=True)
            x0, y0 = first
            shape = tuple(x0.shape) if hasattr(x0, "shape") else np.shape(x0)
            self.examples = []
            for _ in range(self.m):
                x = torch.as_tensor(
                    scale * rng.choice([-1.0, 1.0], size=shape),
                    dtype=getattr(x0, "dtype", torch.float32),
                )
                self.examples.append((x, _like(int(rng.integers(self.classes)), y0)))
        if included is None:
            included = rng.random(self.m) < 0.5
        self.included = np.asarray(included, dtype=bool).ravel()
        if self.included.size != self.m:
            raise ValueError(f"included has {self.included.size} entries; need m={self.m}")
        self.logits: np.ndarray | None = None

    def wrap(self) -> InputCanaryDataset:
        """The user's dataset with the IN canaries appended (train on it)."""
        return InputCanaryDataset(
            self.dataset, [self.examples[j] for j in np.flatnonzero(self.included)]
        )

    def scores(
        self, model: Any, *, loss: Callable[..., torch.Tensor] | None = None, batch_size: int = 256,
    ) -> np.ndarray:
        """Minus each canary's loss on the final ``model`` (higher = IN); keeps the logits.

        ``loss(logits, labels)`` per example (default: cross-entropy with ``reduction='none'``).
        """
        loss = loss or (lambda out, y: torch.nn.functional.cross_entropy(out, y, reduction="none"))
        xs = torch.stack([torch.as_tensor(x) for x, _ in self.examples])
        ys = torch.as_tensor([_label(y) for _, y in self.examples], dtype=torch.long)
        device = next(model.parameters()).device
        losses, logits = [], []
        was_training = model.training
        model.eval()
        with torch.no_grad():
            for start in range(0, self.m, batch_size):
                out = model(xs[start : start + batch_size].to(device))
                losses.append(loss(out, ys[start : start + batch_size].to(device)).double().cpu())
                logits.append(out.double().cpu())
        model.train(was_training)
        self.logits = torch.cat(logits).numpy()
        return -torch.cat(losses).numpy()
