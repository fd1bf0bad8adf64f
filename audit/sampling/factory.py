"""The DP-SGD batch samplers, drawn for many trials at once: the five of Chua et al. (2024)
and balls-and-bins (Chua et al. 2025).

Chua, Ghazi, Kamath, Kumar, Manurangsi, Sinha, Zhang, *Scalable DP-SGD: Shuffling vs.
Poisson Subsampling*, NeurIPS 2024, arXiv 2411.04205, §2 (Algorithms 1-3):

- ``deterministic``: batches in index order, ``B_t = {t b, ..., t b + b - 1}``, every epoch.
- ``persistent_shuffle``: one uniform permutation per run, reused in every epoch.
- ``dynamic_shuffle``: a fresh uniform permutation for every epoch.
- ``poisson``: each example independently with probability ``q = b/n`` at each of T*E steps.
- ``truncated_poisson``: Poisson, then a uniformly random subset of size B when the batch
  is larger, padded with weight-0 dummies to exactly B slots (Chua et al. 2024, §4).
- ``balls_and_bins``: in each epoch every example goes to one of the T steps uniformly at
  random, independently; batch sizes Binomial(n, 1/T), padded with ``-1`` (Chua et al.,
  *Balls-and-Bins Sampling for DP-SGD*, AISTATS 2025, arXiv 2412.16802; its draws live in
  :mod:`audit.sampling.balls_and_bins`, built through :func:`make_sampler`).

A sampler draws the whole run for ``trials`` independent trainings at once:
``sample(rng, trials)`` returns an int32 array of shape ``(trials, total_steps, slots)``
holding example indices, with ``-1`` in padding slots. Everything is vectorised numpy.

This module builds a sampler's draws by its registered name (:func:`make_sampler`); the
registry is :mod:`audit.sampling`, the draws :mod:`audit.sampling.batches`.
"""

from __future__ import annotations

import warnings

from audit.core.validation import check_int
from audit.sampling import get_sampler
from audit.sampling.batches import BatchSampler

__all__ = ["make_sampler"]


def make_sampler(
    name: str,
    *,
    n: int,
    batch_size: int,
    epochs: int = 1,
    max_batch_size: int | None = None,
) -> BatchSampler:
    """Build the sampler ``name`` over ``n`` examples with (expected) batch size ``batch_size``.

    Raises:
        ValueError: naming the field, the value and what is allowed: an unknown name (with
            the closest valid one), ``batch_size`` outside [1, n], ``epochs < 1``, ``n`` not
            a multiple of ``batch_size`` for the fixed-size samplers, a missing or
            non-positive ``max_batch_size`` for ``truncated_poisson``.

    Warns:
        UserWarning: when ``max_batch_size`` is given to a sampler that ignores it.
    """
    sampler = get_sampler(name)
    name = sampler.name
    n = check_int("n", n, minimum=1)
    batch_size = check_int("batch_size", batch_size, minimum=1, maximum=n)
    epochs = check_int("epochs", epochs, minimum=1)
    sampler.check_divisible(n, batch_size)
    if "max_batch_size" in sampler.parameters:
        return sampler.batch_sampler(
            n=n, batch_size=batch_size, epochs=epochs, max_batch_size=max_batch_size
        )
    if max_batch_size is not None:
        warnings.warn(
            f"max_batch_size={max_batch_size} is ignored by sampler={name!r}; "
            "only a sampler with a max_batch_size parameter pads batches to a fixed size",
            UserWarning,
            stacklevel=2,
        )
    return sampler.batch_sampler(n=n, batch_size=batch_size, epochs=epochs, max_batch_size=None)
