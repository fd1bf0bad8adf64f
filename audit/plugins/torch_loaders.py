"""The torch ``DataLoader`` objects behind :func:`audit.plugins.opacus_loaders.opacus_loader`.

Imported only inside the loaders of :mod:`audit.plugins.opacus_loaders`, so that importing
the table never imports torch or Opacus; only the opacus plug-in asks for a loader. Two forms
(docs/design.md §3.3):

- :func:`index_loader`: ``DataLoader(dataset, batch_size=b, shuffle=...)``, torch's own
  sequential or shuffling loader (a fresh ``torch.randperm`` from ``generator`` every
  epoch), the loader users hand to ``make_private``;
- :func:`batch_loader`: ``DataLoader(dataset, batch_sampler=EpochBatches(...))``, the steps
  of one epoch drawn by the sampler's own draws each time the loader is iterated, batches
  of any size (empty ones included: Opacus's ``wrap_collate_with_empty``, as its Poisson
  ``DPDataLoader`` does), so ``len(loader)`` = T.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

__all__ = ["EpochBatches", "batch_loader", "index_loader"]


class EpochBatches:
    """A torch ``batch_sampler``: every iteration yields one epoch's T index batches.

    Args:
        draw: returns one epoch's batches, ``(T, slots)`` example indices, -1 in padding
            slots (the :class:`audit.sampling.batches.BatchSampler` layout); called once per
            iteration (per epoch).
        steps: T, the number of batches per epoch (``len(loader)``: Opacus's q = 1/T and its
            expected batch size n/T, the b the noisy sum is divided by).
        law: the registered sampler whose law ``draw`` draws (the harness's own loaders say it:
            :func:`audit.inspect_loader` then identifies the sampler by type), None if not
            known.
    """

    def __init__(
        self, draw: Callable[[], np.ndarray], steps: int, law: str | None = None
    ) -> None:
        self.draw = draw
        self.steps = int(steps)
        self.law = law

    def __len__(self) -> int:
        return self.steps

    def __iter__(self) -> Iterator[list[int]]:
        batches = np.asarray(self.draw())
        if batches.shape[0] != self.steps:
            raise ValueError(f"an epoch drew {batches.shape[0]} batches; expected T = {self.steps}")
        for row in batches:
            yield row[row >= 0].tolist()


def index_loader(
    dataset: Any, *, batch_size: int, shuffle: bool, generator: torch.Generator
) -> DataLoader:
    """``DataLoader(dataset, batch_size=b, shuffle=shuffle, generator=generator)``."""
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, generator=generator)


def batch_loader(dataset: Any, batches: EpochBatches, *, generator: torch.Generator) -> DataLoader:
    """``DataLoader(dataset, batch_sampler=batches)`` whose empty batches collate to empty tensors.

    The collate function is Opacus's ``wrap_collate_with_empty`` with the row shapes and
    dtypes of ``dataset[0]`` (what ``DPDataLoader`` passes), so an empty step is a batch of
    zero rows (Opacus then adds only the noise).
    """
    from opacus.data_loader import dtype_safe, shape_safe, wrap_collate_with_empty
    from torch.utils.data._utils.collate import default_collate

    first = dataset[0]
    collate = wrap_collate_with_empty(
        collate_fn=default_collate,
        sample_empty_shapes=[(0, *shape_safe(x)) for x in first],
        dtypes=[dtype_safe(x) for x in first],
    )
    return DataLoader(dataset, batch_sampler=batches, collate_fn=collate, generator=generator)
