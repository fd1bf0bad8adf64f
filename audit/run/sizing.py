"""The memory of a worker training a shard, and the shard size chosen from it.

Arithmetic on the spec (plus the model's parameter count), shared by :mod:`audit.run.spec` (which
sizes shards when ``shard_size`` is not set) and :mod:`audit.run.resources` (the estimates that
``audit run`` checks against the machine); the formulas are in :mod:`audit.run.resources`'s
docstring. Every figure is an **estimate**.
"""

from __future__ import annotations

from typing import Any

from audit.sampling import get_sampler

__all__ = [
    "AUTO_SHARD_LIMITS",
    "AUTO_SHARD_WORKER_BYTES",
    "BASE_PROCESS_BYTES",
    "MASK_CHUNK_SLOTS",
    "auto_shard_size",
]

BASE_PROCESS_BYTES = 300 * 2**20
"""Resident memory of a worker before its first shard (Python, numpy, torch): measured 280 MB."""

MASK_CHUNK_SLOTS = 2**22
"""The engine's chunk of (model, step, slot) entries whose masks exist at once
(audit.training.engine)."""


AUTO_SHARD_WORKER_BYTES = 3 * 2**29
"""Peak memory per worker (estimate) that :func:`auto_shard_size` plans for: 1.5 GiB, so that two
workers fit an 8 GB laptop; a fixed budget, not the memory free now, because the shard size
decides the shards' seeds and so the results (a spec must give the same audit on every machine)."""

AUTO_SHARD_LIMITS = (100, 5000)
"""The automatic shard size stays within these trials: at least the former default (100), and at
most 5000 (10,000 models in lock-step: the engine's trainings per second no longer grow beyond,
and a shard is the unit of resumption)."""


def auto_shard_size(spec: Any) -> int:
    """The shard size for a spec that does not set ``shard_size`` (``audit.run.spec``): the largest
    multiple of 100 trials, within :data:`AUTO_SHARD_LIMITS`, whose estimated peak memory per worker
    (:func:`estimate_resources`) stays within :data:`AUTO_SHARD_WORKER_BYTES`; never more than the
    spec's trials (then one shard holds them all). The worker estimate is affine in the shard size
    but for the slot masks' cap, so sizes are tried from the top. Depends on the spec only (the
    model's parameter count, the sampler's batch width, the steps), never on the machine."""
    low, high = AUTO_SHARD_LIMITS
    if spec.trials <= low:
        return int(spec.trials)
    shape = _model_shape(spec) if spec.mode.trains else (0, 0, 0)
    size = high
    while size > low and _worker_bytes(spec, size, shape) > AUTO_SHARD_WORKER_BYTES:
        size -= 100
    return int(min(spec.trials, size))


def _model_shape(spec: Any) -> tuple[int, int, int]:
    """(P, D, classes) of the spec's model, built without training (train mode)."""
    from audit.training.trials import build_problem  # imports torch: train mode only

    key = spec.training_keys()[0]
    problem = build_problem(spec.training_config(key))
    return int(problem.model.size), int(problem.x.shape[1]), int(problem.model.classes)


def _slots(spec: Any, sampler: str) -> int:
    """The padded batch width of ``sampler``, asked of the sampler registry: b for the
    fixed-size samplers, B for truncated Poisson, and for Poisson b + 6 sqrt(b) + 6 (the
    largest of millions of Binomial(n, b/n) batches lies below it in practice: an estimate)."""
    t = spec.training
    return get_sampler(sampler).slots(
        n=t.n, batch_size=t.batch_size, max_batch_size=t.max_batch_size
    )


def _observation_bytes(spec: Any, params: int, classes: int) -> float:
    """Bytes that ``store = "observations"`` keeps per training."""
    steps = spec.mechanism(spec.training_keys()[0]).total_steps
    if not spec.mode.trains:
        return 4.0 * steps  # float32 projections (audit.training.simulate)
    # y (float64 per step), final, loss (float64), logits (float64 per class); params when recorded
    return 8.0 * (steps + 2 + classes)


def _worker_bytes(spec: Any, shard_size: int, shape: tuple[int, int, int]) -> int:
    """Peak memory of a worker training one shard of ``shard_size`` trials (module docstring);
    ``shape`` = (P, D, classes) of the model (zeros in simulate mode)."""
    params, features, classes = shape
    steps = spec.mechanism(spec.training_keys()[0]).total_steps
    observation = _observation_bytes(spec, params, classes)
    k = 2 * shard_size
    if spec.mode.trains:
        slots = max(_slots(spec, s) for s in spec.experiment.samplers)
        per_model = (
            steps * slots * 8  # batch indices: the sampler's int32 draw and the engine's int32 copy
            # theta, gradient + noise, both sorted by batch width, a temporary (float32)
            + 5 * params * 4
            # one step's per-example blocks and temporaries
            + 4 * slots * (features + 1 + classes) * 4
            + 3 * steps * 8  # y (float64), y / C, the returned copy
            + steps * 4  # batch sizes (int32)
            + 2 * observation  # the shard's arrays and their copy in the result
        )
        masks = min(k * steps * slots, MASK_CHUNK_SLOTS) * 16
        worker = BASE_PROCESS_BYTES + k * per_model + masks
    else:
        worker = BASE_PROCESS_BYTES + k * (3 * steps * 8 + 2 * observation)
    return int(worker)
