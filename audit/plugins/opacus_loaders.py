"""The Opacus DataLoader of each sampler: what the opacus plug-in hands to ``make_private``
(docs/design.md §3.3).

A sampler's law lives in :mod:`audit.sampling`; the torch loader that reproduces it under
Opacus is registered here, in :data:`OPACUS_LOADERS`, against the sampler's class
(:class:`audit.sampling.attachments.Attachments`). The built-ins:

- ``deterministic``: ``DataLoader(shuffle=False)``, batches in index order every epoch;
- ``persistent_shuffle``: one permutation ``rng.permutation(n)`` per training cut into the same
  T batches every epoch;
- ``dynamic_shuffle``: ``DataLoader(shuffle=True)``, a fresh ``torch.randperm`` every epoch;
- ``poisson``: Opacus's own: ``make_private(poisson_sampling=True)`` replaces the loader of T
  batches by its Poisson ``DPDataLoader`` (q = 1 / len(loader) = b / n);
- ``balls_and_bins``: a batch sampler drawing, every epoch, each example's step uniformly;
- ``sampled_without_replacement``: a batch sampler drawing, at every step, a uniform b-subset
  independently of the other steps.

Truncated Poisson has none (Opacus cannot pad to B): :func:`opacus_loader` refuses it by name.
Every loader imports torch only when called (:mod:`audit.plugins.torch_loaders`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from audit.sampling.attachments import Attachments
from audit.sampling.balls_and_bins import BallsAndBins, BallsAndBinsSampler
from audit.sampling.base import Sampler
from audit.sampling.deterministic import Deterministic
from audit.sampling.dynamic_shuffle import DynamicShuffle
from audit.sampling.persistent_shuffle import PersistentShuffle
from audit.sampling.poisson import Poisson
from audit.sampling.sampled_without_replacement import (
    SampledWithoutReplacement,
    SampledWithoutReplacementSampler,
)

__all__ = ["OPACUS_LOADERS", "LoaderFactory", "OpacusLoader", "has_opacus_loader", "opacus_loader"]


@dataclass(frozen=True)
class OpacusLoader:
    """What :func:`opacus_loader` returns.

    Attributes:
        loader: the torch ``DataLoader`` (T batches per epoch) passed to ``make_private``.
        poisson_sampling: ``make_private(poisson_sampling=...)``: True lets Opacus replace
            the loader by its Poisson ``DPDataLoader`` (q = 1 / len(loader)).
    """

    loader: Any
    poisson_sampling: bool = False


LoaderFactory = Callable[..., OpacusLoader]
"""``f(dataset, *, batch_size, epochs, generator, rng) -> OpacusLoader`` (see
:func:`opacus_loader`)."""

OPACUS_LOADERS: Attachments[LoaderFactory] = Attachments("Opacus DataLoader")
"""The Opacus DataLoader of each sampler class."""


def has_opacus_loader(sampler: Sampler | str) -> bool:
    """Whether ``sampler`` has an Opacus DataLoader (the opacus plug-in can run it)."""
    return OPACUS_LOADERS.find(sampler) is not None


def opacus_loader(
    sampler: Sampler | str,
    dataset: Any,
    *,
    batch_size: int,
    epochs: int,
    generator: Any,
    rng: np.random.Generator,
) -> OpacusLoader:
    """The torch ``DataLoader`` the opacus plug-in hands to ``make_private`` for ``sampler``.

    Args:
        sampler: a registered sampler (name or object).
        dataset: a map-style torch dataset of the n rows (row i is example i).
        batch_size: b (the loader must have T = n / b batches per epoch: Opacus divides
            the noisy sum by its expected batch size n / len(loader)).
        epochs: E (the plug-in iterates the loader once per epoch).
        generator: the loader's ``torch.Generator`` (torch's shuffles and Opacus's own
            Poisson draws read it).
        rng: a numpy Generator for the sampler's own draws.

    Returns:
        :class:`OpacusLoader`: the loader, and whether ``make_private`` replaces it by
        Opacus's Poisson ``DPDataLoader`` (``poisson_sampling=True``).

    Raises:
        ValueError: naming the sampler, when it has no Opacus counterpart.
    """
    factory = OPACUS_LOADERS.get(sampler, "the opacus plug-in cannot reproduce it")
    return factory(dataset, batch_size=batch_size, epochs=epochs, generator=generator, rng=rng)


# -- the built-ins -----------------------------------------------------------------------


def _deterministic(
    dataset: Any, *, batch_size: int, epochs: int, generator: Any, rng: np.random.Generator
) -> OpacusLoader:
    """``DataLoader(shuffle=False)``: batches in index order, every epoch."""
    from audit.plugins.torch_loaders import index_loader  # torch only when Opacus asks

    return OpacusLoader(
        index_loader(dataset, batch_size=batch_size, shuffle=False, generator=generator)
    )


def _persistent_shuffle(
    dataset: Any, *, batch_size: int, epochs: int, generator: Any, rng: np.random.Generator
) -> OpacusLoader:
    """One uniform permutation ``rng.permutation(n)`` per training, cut into consecutive
    batches of b, the same in every epoch (a sequential loader over rows permuted once).
    The same law as :class:`audit.sampling.batches.PersistentShuffleSampler`'s draws, drawn as
    the plug-in always drew it, so that earlier Opacus audits reproduce bit for bit."""
    from audit.plugins.torch_loaders import (  # torch only when Opacus asks
        EpochBatches,
        batch_loader,
    )

    n = len(dataset)
    batches = rng.permutation(n).reshape(-1, batch_size)  # n = b T (fixed size)
    return OpacusLoader(
        batch_loader(
            dataset,
            EpochBatches(lambda: batches, len(batches), "persistent_shuffle"),
            generator=generator,
        )
    )


def _dynamic_shuffle(
    dataset: Any, *, batch_size: int, epochs: int, generator: Any, rng: np.random.Generator
) -> OpacusLoader:
    """``DataLoader(shuffle=True)``: a fresh ``torch.randperm`` from ``generator`` every epoch
    (the common deployed configuration; Opacus accounts it as Poisson, q = 1/T)."""
    from audit.plugins.torch_loaders import index_loader  # torch only when Opacus asks

    return OpacusLoader(
        index_loader(dataset, batch_size=batch_size, shuffle=True, generator=generator)
    )


def _poisson(
    dataset: Any, *, batch_size: int, epochs: int, generator: Any, rng: np.random.Generator
) -> OpacusLoader:
    """Opacus's own: ``make_private(poisson_sampling=True)`` replaces the loader of T batches by
    its ``DPDataLoader`` (q = 1 / len(loader) = b/n), drawing from ``generator``."""
    from audit.plugins.torch_loaders import index_loader  # torch only when Opacus asks

    loader = index_loader(dataset, batch_size=batch_size, shuffle=False, generator=generator)
    return OpacusLoader(loader, poisson_sampling=True)


def _balls_and_bins(
    dataset: Any, *, batch_size: int, epochs: int, generator: Any, rng: np.random.Generator
) -> OpacusLoader:
    """A batch sampler drawing each epoch with :class:`BallsAndBinsSampler` (one epoch, from
    ``rng``) every time the loader is iterated: each example in one uniform step, T = n / b
    batches of Binomial(n, 1/T) sizes, empty ones included. ``len(loader)`` = T, so Opacus
    divides the noisy sum by n / T = b and accounts q = 1/T (as for a shuffling loader)."""
    from audit.plugins.torch_loaders import (  # torch only when Opacus asks
        EpochBatches,
        batch_loader,
    )

    epoch = BallsAndBinsSampler(n=len(dataset), batch_size=batch_size, epochs=1)
    batches = EpochBatches(
        lambda: epoch.sample(rng, 1)[0], epoch.steps_per_epoch, "balls_and_bins"
    )
    return OpacusLoader(batch_loader(dataset, batches, generator=generator))


def _sampled_without_replacement(
    dataset: Any, *, batch_size: int, epochs: int, generator: Any, rng: np.random.Generator
) -> OpacusLoader:
    """A batch sampler drawing each epoch's T = n / b batches with
    :class:`SampledWithoutReplacementSampler` (one epoch, from ``rng``) every time the loader is
    iterated: a uniform b-subset at each step, independently. ``len(loader)`` = T, so Opacus
    divides by b and accounts q = 1/T as Poisson (which this sampler is not: docs/design.md
    §6.11)."""
    from audit.plugins.torch_loaders import (  # torch only when Opacus asks
        EpochBatches,
        batch_loader,
    )

    epoch = SampledWithoutReplacementSampler(n=len(dataset), batch_size=batch_size, epochs=1)
    batches = EpochBatches(
        lambda: epoch.sample(rng, 1)[0], epoch.steps_per_epoch, "sampled_without_replacement"
    )
    return OpacusLoader(batch_loader(dataset, batches, generator=generator))


for _sampler, _factory in {
    Deterministic: _deterministic,
    PersistentShuffle: _persistent_shuffle,
    DynamicShuffle: _dynamic_shuffle,
    Poisson: _poisson,
    BallsAndBins: _balls_and_bins,
    SampledWithoutReplacement: _sampled_without_replacement,
}.items():
    OPACUS_LOADERS.register(_sampler, _factory, replace=True)
