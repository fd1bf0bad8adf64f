"""Batches drawn by torch on the engine's device: the same laws as :mod:`audit.sampling.factory`, no
CPU bottleneck on a GPU.

On a GPU the engine trains 70,000-160,000 logistic trainings per second while numpy draws the
Poisson batches of about 25,000 per second on one CPU core (docs/design.md §12.2). The
samplers whose draws are masks or permutations are drawn here with torch, on the generator's
device, in the engine's index layout (int32 (trials, T E, slots), ascending example indices,
then ``-1`` padding):

- ``poisson``: every example independently with q = b / n at each step: a Bernoulli(q) mask
  of (rows, n) uniforms (u < q), then the selected indices in ascending order (the smallest
  keys index-or-n, ``topk``); slots = the largest batch drawn.
- ``truncated_poisson``: the same mask; when a batch exceeds B, the B selected examples with
  the smallest independent uniform priorities are kept (a uniformly random B-subset of the
  Poisson batch, Chua et al. 2024, §4), padded to exactly B slots.
- ``persistent_shuffle`` / ``dynamic_shuffle``: uniform permutations as the argsort of
  independent float64 uniform keys (ties, which would favour the lower index, have
  probability below n^2 2^-54), one per trial or per trial and epoch.
- ``deterministic``: index order.

The laws are those of the numpy samplers (tests/test_device_batches.py checks batch sizes,
inclusion frequencies, positions and orders on CPU tensors); the draws differ (torch's
generator, not numpy's), so shards computed this way are fingerprinted apart
(:func:`audit.training.compiled.default_routes`: ``batches = "device"`` off the CPU). Other samplers
(``balls_and_bins``, plug-ins) keep numpy (:func:`supported`).
"""

from __future__ import annotations

import torch

from audit.sampling.batches import (
    PADDING,
    BatchSampler,
    DeterministicSampler,
    DynamicShuffleSampler,
    PersistentShuffleSampler,
    PoissonSampler,
    TruncatedPoissonSampler,
)

__all__ = ["MASK_ELEMENTS", "sample", "supported"]

MASK_ELEMENTS = 2**26
"""Uniforms drawn at once (rows x n): 256 MiB of float32 keys on the device."""

_SUPPORTED = (DeterministicSampler, PersistentShuffleSampler, DynamicShuffleSampler, PoissonSampler)


def supported(sampler: BatchSampler) -> bool:
    """Whether :func:`sample` draws ``sampler``'s batches (its exact type: a subclass may change
    the law)."""
    return type(sampler) in (*_SUPPORTED, TruncatedPoissonSampler)


def sample(sampler: BatchSampler, generator: torch.Generator, trials: int) -> torch.Tensor:
    """The batches of ``trials`` independent runs, int32 (trials, T E, slots) on the
    generator's device, ``-1`` padding: the law of ``sampler.sample`` (module docstring)."""
    if not supported(sampler):
        raise ValueError(f"sampler={sampler.name!r} has no device draw; use sampler.sample (numpy)")
    steps, n = sampler.total_steps, sampler.n
    device = generator.device
    if isinstance(sampler, PoissonSampler):
        limit = sampler.max_batch_size if isinstance(sampler, TruncatedPoissonSampler) else None
        rows = _poisson_rows(generator, trials * steps, n, sampler.sampling_probability, limit)
        return rows.view(trials, steps, rows.shape[1])
    if isinstance(sampler, DeterministicSampler):
        order = torch.arange(n, dtype=torch.int32, device=device).expand(trials, sampler.epochs, n)
    elif isinstance(sampler, PersistentShuffleSampler):
        order = _permutations(generator, trials, n).unsqueeze(1).expand(trials, sampler.epochs, n)
    else:
        order = _permutations(generator, trials * sampler.epochs, n).view(trials, sampler.epochs, n)
    return order.reshape(trials, steps, sampler.batch_size).contiguous()


def _permutations(generator: torch.Generator, rows: int, n: int) -> torch.Tensor:
    """``rows`` independent uniform permutations of 0..n-1 (int32 (rows, n)): argsort of float64
    uniform keys, in chunks of :data:`MASK_ELEMENTS`."""
    out = torch.empty((rows, n), dtype=torch.int32, device=generator.device)
    chunk = max(1, MASK_ELEMENTS // max(1, n))
    for start in range(0, rows, chunk):
        stop = min(rows, start + chunk)
        keys = torch.rand(
            (stop - start, n), generator=generator, dtype=torch.float64, device=generator.device
        )
        out[start:stop] = keys.argsort(dim=1).to(torch.int32)
    return out


def _poisson_rows(
    generator: torch.Generator, rows: int, n: int, q: float, limit: int | None
) -> torch.Tensor:
    """``rows`` Poisson batches (each example with probability q), cut to a uniform ``limit``-
    subset when larger: int32 (rows, slots), ascending indices then -1; slots = the largest
    batch (or ``limit``)."""
    device = generator.device
    chunk = max(1, MASK_ELEMENTS // max(1, n))
    parts = []
    index = torch.arange(n, dtype=torch.int32, device=device)
    for start in range(0, rows, chunk):
        size = min(rows, start + chunk) - start
        mask = torch.rand((size, n), generator=generator, device=device) < q
        if limit is not None and n > limit:
            priority = torch.rand((size, n), generator=generator, device=device)
            priority = torch.where(mask, priority, 2.0)  # unselected examples last
            kept = priority.topk(limit, dim=1, largest=False).indices  # the `limit` smallest
            rank = torch.zeros_like(mask)
            rank.scatter_(1, kept, True)
            mask &= rank
        keys = torch.where(mask, index, n)
        widest = int(mask.sum(1).max()) if size else 0  # one read-back per chunk
        # the selected, ascending
        parts.append(keys.topk(widest, dim=1, largest=False, sorted=True).values)
    slots = limit if limit is not None else max((p.shape[1] for p in parts), default=0)
    out = (
        torch.cat([torch.nn.functional.pad(p, (0, slots - p.shape[1]), value=n) for p in parts])
        if parts
        else (torch.empty((0, slots), dtype=torch.int32, device=device))
    )
    return torch.where(
        out >= n, torch.tensor(PADDING, dtype=torch.int32, device=device), out
    ).contiguous()
