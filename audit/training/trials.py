"""Many real DP-SGD trainings with the canary IN and OUT, sharded and run in parallel.

A *shard* trains ``trials`` models with the canary IN and ``trials`` with it OUT, all at
once (:func:`audit.training.engine.train`), from its own seeds: the batches and the noise of the IN
side come from ``seed_sequence(seed, cell, shard, "in", ...)``, those of the OUT side from
``(..., "out", ...)``. :func:`run_shard` is therefore a pure function of its arguments
(one torch thread, deterministic kernels): any shard can be recomputed alone, and
:func:`run_trials` gives identical results whatever ``n_jobs`` or backend.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch

from audit.core.data import input_shape, load_training_rows
from audit.core.observations import Observations
from audit.core.record import Training
from audit.core.seeding import rng_for, seed_sequence, torch_seed
from audit.core.validation import check_choice, check_int
from audit.sampling import get_sampler, validate_training
from audit.sampling.batches import PADDING
from audit.sampling.factory import make_sampler
from audit.training import device_batches
from audit.training.canaries import CANARY_INDEX, known_offset, make_canary, private_coordinate
from audit.training.engine import DPSGDProblem, train
from audit.training.func_engine import TorchModel, torch_model
from audit.training.models import MODELS, BatchedModel, make_model
from audit.training.torch_models import BUILTIN_FACTORIES, load_factory

__all__ = [
    "DEFAULT_SHARD_SIZE",
    "DEVICES",
    "TrainingConfig",
    "build_problem",
    "check_device",
    "one_torch_thread",
    "run_shard",
    "run_trials",
]

DEFAULT_SHARD_SIZE = 500
"""Trials per shard (each shard trains 2x this many models at once)."""

DEVICES: tuple[str, ...] = ("cpu", "cuda")
"""Where the engine trains (``cuda`` needs a CUDA build of torch and a GPU)."""


@dataclass(frozen=True, kw_only=True)
class TrainingConfig(Training):
    """One DP-SGD training of an audit cell as the engine runs it: the record
    :class:`audit.core.record.Training` (validated on construction, its mechanism built once)
    plus the engine's own options.

    Attributes:
        model (and every other field of the record): as :class:`audit.core.record.Training`
            documents them; the engine trains ``logistic`` or ``mlp`` (closed-form per-example
            gradients, :mod:`audit.training.models`), or any ``nn.Module`` through ``torch.func``
            (:mod:`audit.training.func_engine`): a built-in ``cnn`` or ``transformer``, or a factory
            ``"package.module:factory"`` (:mod:`audit.training.torch_models`).
        record_params: also return the final parameters ``params_in``/``params_out``.
        device: ``cpu`` or ``cuda`` (:data:`DEVICES`).
    """

    record_params: bool = False
    device: str = "cpu"

    def _check_options(self) -> None:
        """The sampler's rules (:func:`audit.sampling.validate_training`), then the engine's
        own: a model it can train, a usable device."""
        validate_training(self)
        _check_model(self.model)
        check_device(self.device)


def check_device(device: str) -> str:
    """``device`` if it is one of :data:`DEVICES` and usable here; else a ``ValueError``."""
    check_choice("device", device, DEVICES)
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            "device='cuda' but torch.cuda.is_available() is False here (a CPU-only torch build or "
            "no GPU); use device='cpu' or install a CUDA build of torch on a machine with a GPU"
        )
    return device


def _check_model(model: str) -> None:
    """A closed-form model name, a built-in factory name, or an importable factory path."""
    if not isinstance(model, str) or (
        model not in MODELS and model not in BUILTIN_FACTORIES and ":" not in model
    ):
        check_choice("model", model, (*MODELS, *BUILTIN_FACTORIES))  # raises, naming the closest
        raise AssertionError("unreachable")
    if model not in MODELS:
        load_factory(model)


def build_problem(config: TrainingConfig) -> DPSGDProblem:
    """Data (with the always-zero extra feature), model, shared theta_0 and canary of ``config``."""
    return _build_problem(config)


@functools.lru_cache(maxsize=8)
def _build_problem(config: TrainingConfig) -> DPSGDProblem:
    data = load_training_rows(config.dataset, config.n, seed=config.data_seed)
    x, y = data.x, data.y.copy()
    init_seed = torch_seed(seed_sequence(config.init_seed, "init"))
    model: BatchedModel | TorchModel
    if config.model in MODELS:
        model = make_model(
            config.model,
            features=x.shape[1],
            classes=data.classes,
            hidden=config.hidden,
            activation=config.activation,
        )
        theta0 = model.init(1, torch.Generator().manual_seed(init_seed))[0].numpy()
    else:
        model = torch_model(
            load_factory(config.model), input_shape(config.dataset), data.classes, seed=init_seed
        )
        theta0 = model.initial()
    # The private row (weights from the always-zero feature) starts non-negative, so that the
    # OOD probe scale * e_{D-1} activates ReLU units (real data never see this row).
    private = slice(
        private_coordinate(model, 0), private_coordinate(model, 0) + model.private_width
    )
    theta0[private] = np.abs(theta0[private])
    canary = make_canary(
        config.canary,
        model,
        theta0,
        input_kind=config.input_canary,
        label=config.canary_label,
        scale=config.canary_scale,
        example=(x[CANARY_INDEX], int(y[CANARY_INDEX])),
    )
    x[CANARY_INDEX] = canary.x
    y[CANARY_INDEX] = canary.label
    return DPSGDProblem(
        model=model,
        x=x,
        y=y,
        theta0=theta0,
        canary=canary,
        training=config,
        known=known_offset(config.mechanism),
        device=config.device,
    )


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """One torch thread while a shard runs (docs/design.md §12: one per joblib worker), and one
    BLAS thread (the compiled CNN kernel's GEMMs go through scipy's BLAS,
    :mod:`audit.training.compiled_cnn`; threadpoolctl, scikit-learn's dependency), restored
    afterwards."""
    import scipy.linalg  # noqa: F401  (loads scipy's BLAS, so that the limit reaches it)
    from threadpoolctl import threadpool_limits

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(limits=1, user_api="blas"):
            yield
    finally:
        torch.set_num_threads(previous)


def _stack_batches(parts: list[np.ndarray] | list[torch.Tensor]) -> np.ndarray | torch.Tensor:
    """Concatenate (k_i, steps, slots_i) along models, padding slots with -1 (numpy arrays, or
    tensors drawn on the device, :mod:`audit.training.device_batches`)."""
    slots = max(p.shape[2] for p in parts)
    if isinstance(parts[0], torch.Tensor):
        return torch.cat(
            [torch.nn.functional.pad(p, (0, slots - p.shape[2]), value=PADDING) for p in parts]
        )
    out = np.empty(
        (sum(p.shape[0] for p in parts), parts[0].shape[1], slots), dtype=np.result_type(*parts)
    )
    start = 0
    for p in parts:  # written in place: one pass over the (K, steps, slots) result
        stop = start + p.shape[0]
        out[start:stop, :, : p.shape[2]] = p
        out[start:stop, :, p.shape[2] :] = PADDING
        start = stop
    return out


def run_shard(
    config: TrainingConfig,
    *,
    seed: int,
    shard: int,
    trials: int,
    cell: str = "",
    canaries_per_training: int = 1,
) -> dict[str, np.ndarray]:
    """Train ``trials`` models with the canary IN and ``trials`` with it OUT.

    Returns plain arrays: ``y_in``/``y_out`` (trials, T*E), ``final_in``/``final_out``,
    ``loss_in``/``loss_out`` (trials,), ``logits_in``/``logits_out`` (trials, classes), and
    ``params_in``/``params_out`` (trials, P) when ``config.record_params``. A pure function
    of its arguments: the same call gives identical arrays in any process.

    ``canaries_per_training`` = k > 1 (isolated threat model, Dirac canaries; docs/design.md
    §8.17): examples 0..k-1 of every training are canaries, all IN or all OUT. Canary 0 is the
    engine's own (the private coordinate of the model); canaries 1..k-1 are Dirac canaries on
    k - 1 extra coordinates that the model never reads (as in :mod:`audit.run.one_run_trials`), so
    real data and canary 0 never move them and they move nothing else: per step their
    coordinate gets C per participation (IN) and its own N(0, sigma^2 C^2) noise (a generator
    of its own, ``(..., side, "canaries")``), and the model trains exactly as with their slots
    empty. ``y_in``/``y_out`` then have ``trials * k`` rows (training r's canaries in rows
    r k .. r k + k - 1), ``final_*`` = each row's sum (the last iterate's projection on the
    canary's coordinate); no black-box arrays.
    """
    k = check_int("canaries_per_training", canaries_per_training, minimum=1)
    if k > 1:
        return _run_many_canaries_shard(
            config, seed=seed, shard=shard, trials=trials, cell=cell, canaries=k
        )
    return _run_shard(config, seed=seed, shard=shard, trials=trials, cell=cell)


def _run_shard(
    config: TrainingConfig,
    *,
    seed: int,
    shard: int,
    trials: int,
    cell: str = "",
    progress: Callable[[int], None] | None = None,
) -> dict[str, np.ndarray]:
    """:func:`run_shard`, reporting the steps done to ``progress``."""
    trials = check_int("trials", trials, minimum=1)
    shard = check_int("shard", shard, minimum=0)
    with one_torch_thread():
        problem = build_problem(config)
        sampler = make_sampler(
            config.sampler,
            n=config.n,
            batch_size=config.batch_size,
            epochs=config.epochs,
            max_batch_size=config.max_batch_size,
        )
        parts: list = []  # numpy batches, or tensors drawn on the device (_stack_batches)
        noise = []
        on_device = config.device != "cpu" and device_batches.supported(sampler)
        for side in ("in", "out"):
            if on_device:  # drawn by torch on the GPU (docs/design.md §12.5): no CPU bottleneck
                batch_generator = torch.Generator(device=config.device)
                batch_generator.manual_seed(
                    torch_seed(seed_sequence(seed, cell, shard, side, "batches"))
                )
                parts.append(device_batches.sample(sampler, batch_generator, trials))
            else:
                parts.append(sampler.sample(rng_for(seed, cell, shard, side, "batches"), trials))
            generator = torch.Generator(device=config.device)
            generator.manual_seed(torch_seed(seed_sequence(seed, cell, shard, side, "noise")))
            noise.append((generator, trials))
        canary_in = np.repeat([True, False], trials)
        out = train(problem, _stack_batches(parts), canary_in, noise, progress=progress)
    result = {}
    for name, value in (
        ("y", out.y),
        ("final", out.final),
        ("loss", out.loss),
        ("logits", out.logits),
    ):
        result[f"{name}_in"], result[f"{name}_out"] = value[:trials], value[trials:]
    if config.record_params:
        result["params_in"], result["params_out"] = out.theta[:trials], out.theta[trials:]
    return result


def _run_many_canaries_shard(
    config: TrainingConfig, *, seed: int, shard: int, trials: int, cell: str, canaries: int
) -> dict[str, np.ndarray]:
    """:func:`run_shard` with k = ``canaries`` Dirac canaries per training (see there)."""
    trials = check_int("trials", trials, minimum=1)
    shard = check_int("shard", shard, minimum=0)
    if config.threat_model != "isolated" or config.canary != "dirac":
        raise ValueError(
            "canaries_per_training > 1 trains Dirac canaries under the isolated threat model"
        )
    if canaries >= config.n:
        raise ValueError(f"canaries_per_training={canaries} must be below n={config.n}")
    with one_torch_thread():
        problem = build_problem(config)
        sampler = make_sampler(
            config.sampler, n=config.n, batch_size=config.batch_size, epochs=config.epochs,
            max_batch_size=config.max_batch_size,
        )
        parts, noise, extra, first = [], [], [], None
        for side, inside in (("in", True), ("out", False)):
            batches = sampler.sample(rng_for(seed, cell, shard, side, "batches"), trials)
            first = batches[0] if first is None else first
            generator = torch.Generator(device=config.device)
            generator.manual_seed(torch_seed(seed_sequence(seed, cell, shard, side, "noise")))
            noise.append((generator, trials))
            own = torch.Generator().manual_seed(
                torch_seed(seed_sequence(seed, cell, shard, side, "canaries"))
            )
            extra.append(_extra_canaries(batches, canaries, inside, problem.sigma, own))
            # canaries 1..k-1: not the model's
            others = (batches > CANARY_INDEX) & (batches < canaries)
            parts.append(np.where(others, PADDING, batches))
        out = train(problem, _stack_batches(parts), np.repeat([True, False], trials), noise)
    steps = out.y.shape[1]
    result = {}
    for name, rows, ys in (
        ("in", slice(0, trials), extra[0]),
        ("out", slice(trials, 2 * trials), extra[1]),
    ):
        y = np.concatenate([out.y[rows, None, :], ys], axis=1)  # (trials, k, steps)
        if get_sampler(config.sampler).canary_law == "known_steps":
            assert first is not None  # the first side's batches (the loop above ran)
            y = _known_step_first(y, first, sampler.steps_per_epoch)
        final = y.sum(axis=2)
        final[:, 0] = out.final[rows]  # the engine's last-iterate projection of canary 0
        result[f"y_{name}"], result[f"final_{name}"] = (
            y.reshape(trials * canaries, steps),
            final.reshape(-1),
        )
    return result


def _extra_canaries(
    batches: np.ndarray, canaries: int, inside: bool, sigma: float, generator: torch.Generator
) -> np.ndarray:
    """Observations (trials, k - 1, steps) of canaries 1..k-1 on their own coordinates, in units of
    C: the number of times canary j is in step t's batch (IN; 0 OUT, zero-out) plus N(0,
    sigma^2)."""
    trials, steps, _ = batches.shape
    noise = (
        torch.empty(trials, canaries - 1, steps)
        .normal_(0.0, float(sigma), generator=generator)
        .double()
        .numpy()
    )
    if inside:
        for j in range(1, canaries):
            noise[:, j - 1] += (batches == j).sum(axis=2)
    return noise


def _known_step_first(y: np.ndarray, batches: np.ndarray, steps_per_epoch: int) -> np.ndarray:
    """Deterministic batching: canary j's step is known (the batch holding example j, the same in
    every training and epoch); each canary's epochs are rolled so that its step comes first,
    where the deterministic attack reads it (canary 0 is already there)."""
    out = y.copy()
    rows = out.reshape(out.shape[0], out.shape[1], -1, steps_per_epoch)
    for j in range(1, y.shape[1]):
        step = int(np.flatnonzero((batches[:steps_per_epoch] == j).any(axis=1))[0])
        rows[:, j] = np.roll(rows[:, j], -step, axis=-1)
    return out


def shard_sizes(trials: int, shard_size: int) -> list[int]:
    """Sizes of the shards that split ``trials`` into pieces of ``shard_size`` (last smaller)."""
    full, rest = divmod(trials, shard_size)
    return [shard_size] * full + ([rest] if rest else [])


def run_trials(
    config: TrainingConfig,
    *,
    trials: int,
    seed: int,
    n_jobs: int = 1,
    shard_size: int = DEFAULT_SHARD_SIZE,
    backend: str = "loky",
    progress: bool = True,
    cell: str = "",
) -> Observations:
    """``trials`` IN and ``trials`` OUT trainings, in shards run by joblib.

    Shard i trains ``shard_sizes(trials, shard_size)[i]`` pairs with
    :func:`run_shard(config, seed=seed, shard=i, ...) <run_shard>`; the shards are
    concatenated in order, so the result does not depend on ``n_jobs`` or ``backend``
    (it does depend on ``shard_size``). A progress bar on stderr counts trials: step by step
    with ``n_jobs=1``, shard by shard otherwise.
    """
    trials = check_int("trials", trials, minimum=1)
    shard_size = check_int("shard_size", shard_size, minimum=1)
    n_jobs = check_int("n_jobs", n_jobs)
    if n_jobs == 0:
        raise ValueError("n_jobs=0 is not valid; use a positive count or -1 for all cores")
    sizes = shard_sizes(trials, shard_size)
    from joblib import Parallel, delayed
    from tqdm.auto import tqdm

    bar = tqdm(total=trials, desc=f"train {cell}".strip(), unit="trial", disable=not progress)
    shards = []
    with bar:
        if n_jobs == 1:
            steps = config.mechanism.total_steps
            for i, size in enumerate(sizes):
                done = [0]

                def advance(step: int, size: int = size, done: list[int] = done) -> None:
                    now = size * step // steps
                    bar.update(now - done[0])
                    done[0] = now

                shards.append(
                    _run_shard(config, seed=seed, shard=i, trials=size, cell=cell, progress=advance)
                )
        else:
            parallel = Parallel(n_jobs=n_jobs, backend=backend, return_as="generator")
            tasks = (
                delayed(run_shard)(config, seed=seed, shard=i, trials=size, cell=cell)
                for i, size in enumerate(sizes)
            )
            for result, size in zip(parallel(tasks), sizes, strict=True):
                shards.append(result)
                bar.update(size)
    arrays = {key: np.concatenate([s[key] for s in shards]) for key in shards[0]}
    metadata = {
        "source": "engine",
        "config": config.to_dict(),
        "seed": seed,
        "cell": cell,
        "shard_size": shard_size,
        "shards": len(sizes),
        "known_offset": build_problem(config).known,
        "u_description": _describe_u(config),
    }
    return Observations(mechanism=config.mechanism, metadata=metadata, **arrays)


def _describe_u(config: TrainingConfig) -> str:
    if config.canary == "dirac":
        return (
            "dirac: -e_j, j = weight from the always-zero extra input feature "
            "(audit.training.canaries)"
        )
    if config.input_canary == "ood":
        return (
            "input/ood: canary gradient at theta_0 restricted to the extra feature's weights, "
            "normalised"
        )
    return "input/mislabeled: canary gradient direction at theta_0"

