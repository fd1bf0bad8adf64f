"""Batched DP-SGD: K independent trainings in lock-step, with the canary's observations.

DP-SGD (Abadi et al. 2016, arXiv 1607.00133, Alg. 1) with the conventions of docs/design.md §3,
for each model k and step t with batch B_t (padding slots contribute 0):

    G_t = sum_{i in B_t} min(1, C/||g_i||) g_i          (zero-out: an OUT canary adds 0)
    N_t ~ N(0, sigma^2 C^2 I_P)
    theta_{t+1} = theta_t - lr * (G_t + N_t) / b        (b = expected batch size)

Observations of the canary (unit direction u, :mod:`audit.training.canaries`):

- all iterates: y_t = <G_t + N_t, u> / C + known, where ``known`` is the attacker's
  add-back of the co-batch's expected contribution (:func:`audit.training.canaries.known_offset`);
- last iterate: final = <theta_0 - theta_T, u> * b / (lr C) + (T E) known, the final
  parameters' projection on u in units of one canary step (plus the attacker's add-back),
  oriented so that each participation of the canary raises it by <clip(g), u>/C (= 1 for
  the Dirac canary); it equals sum_t y_t for the Dirac canary (exactly, up to rounding:
  real data never move u);
- black box: the canary's cross-entropy and logits on the final model.

Every model shares the initial parameters theta_0 (known to the attacker). All arithmetic is float32
on ``problem.device`` (``cpu`` or ``cuda``; every tensor stays there, the noise generators
included): per step, one Gaussian draw per model and parameter and the model's clipped per-example
gradient sum: a few batched matmuls per layer for the closed-form models
(:mod:`audit.training.models`), or for logistic regression on the CPU one compiled loop per model
(:mod:`audit.training.compiled`; ``route`` of :func:`train`), ``torch.func`` per-example gradients
for any ``nn.Module`` (:class:`audit.training.func_engine.TorchModel`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from audit.core.record import Training
from audit.core.validation import check_choice
from audit.training.canaries import CANARY_INDEX, Canary
from audit.training.compiled import available as compiled_available
from audit.training.compiled import (
    gaussian_rows,
    kernel_coordinate,
    kernel_order,
    logistic_step,
    natural_weights,
    padded_rows,
    philox_training,
    step_rules,
    transposed_weights,
)
from audit.training.compiled_mlp import mlp_kernel_order, mlp_philox_training
from audit.training.models import (
    MLP,
    BatchedModel,
    LogisticRegression,
    PerExampleModel,
    augment,
    cross_entropy,
)
from audit.training.philox import noise_key

__all__ = ["ROUTES", "DPSGDProblem", "TrainOutput", "train"]

CHUNK_SLOTS = 2**22
"""Slot masks are built for this many (model, step, slot) entries at a time."""


@dataclass(frozen=True)
class DPSGDProblem:
    """Everything shared by the K trainings of one audit cell.

    Attributes:
        model: the batched model (:class:`audit.training.models.BatchedModel` or
            :class:`audit.training.func_engine.TorchModel`).
        x: training inputs (n, D); row :data:`CANARY_INDEX` is the canary's input.
        y: labels (n,).
        theta0: initial parameters (P,), shared by all models.
        canary: the canary and its direction u.
        training: the record of the training (:class:`audit.core.record.Training`), whose
            hyper-parameters the problem reads: ``threat_model`` (``isolated``, a real co-batch,
            or ``adversarial``, every other example's clipped gradient is -C*u), ``sigma``,
            ``clip``, ``lr`` and ``batch_size`` (noise multiplier, C, learning rate, expected
            batch size b).
        known: the attacker's per-step add-back (units of C).
        device: where the trainings run (``cpu`` or ``cuda``).
    """

    model: PerExampleModel
    x: np.ndarray
    y: np.ndarray
    theta0: np.ndarray
    canary: Canary
    training: Training
    known: float = 0.0
    device: str = "cpu"

    def __post_init__(self) -> None:
        if self.x.shape[1] != self.model.features or self.theta0.shape != (self.model.size,):
            raise ValueError(
                "x, theta0 and the model disagree on the number of features/parameters"
            )

    @property
    def threat_model(self) -> str:
        """The record's threat model."""
        return self.training.threat_model

    @property
    def sigma(self) -> float:
        """The record's noise multiplier."""
        return self.training.sigma

    @property
    def clip(self) -> float:
        """The record's clipping norm C."""
        return self.training.clip

    @property
    def lr(self) -> float:
        """The record's learning rate."""
        return self.training.lr

    @property
    def batch_size(self) -> int:
        """The record's (expected) batch size b."""
        return self.training.batch_size


@dataclass(frozen=True)
class TrainOutput:
    """Per-model results: ``y`` (K, steps) float64, ``final``/``loss`` (K,), ``logits``
    (K, classes), ``theta`` (K, P) final parameters, ``batch_sizes`` (K, steps) the number
    of non-padding slots (the canary's slot counts, IN or OUT)."""

    y: np.ndarray
    final: np.ndarray
    loss: np.ndarray
    logits: np.ndarray
    theta: np.ndarray
    batch_sizes: np.ndarray


def train(
    problem: DPSGDProblem,
    batches: np.ndarray | torch.Tensor,
    canary_in: np.ndarray,
    noise: Sequence[tuple[torch.Generator, int]],
    *,
    progress: Callable[[int], None] | None = None,
    route: str | None = None,
) -> TrainOutput:
    """Train K = len(batches) models with DP-SGD in lock-step.

    Args:
        problem: data, model, canary and hyper-parameters.
        batches: int (K, steps, slots) example indices, -1 = padding (:mod:`audit.sampling.factory`;
            or a tensor drawn on ``problem.device``, :mod:`audit.training.device_batches`).
        canary_in: bool (K,), whether model k trains with the canary IN.
        noise: (generator, rows) pairs, in order, covering the K models: model rows
            draw their Gaussian noise from their own generator (independent IN/OUT streams;
            generators on ``problem.device``); on the ``compiled_philox`` route, model row r of a
            stream draws instead from Philox keyed by the generator's seed (``initial_seed()``)
            at counters (., step, r, .) (:mod:`audit.training.philox`, docs/design.md §12.3).
        progress: called with the number of steps done, every step (on the ``compiled_philox``
            route with a Dirac canary, which trains blocks of models through all their steps:
            after every :data:`PHILOX_CHUNK` models, with T times the fraction of models done).
        route: how the closed-form models' clipped gradient sums are computed (:data:`ROUTES`):
            ``compiled``, one fused loop per model (:mod:`audit.training.compiled`: logistic
            regression on the CPU, with numba); ``compiled_philox``, the same loop with the noise
            drawn in compiled code from Philox (:func:`audit.training.compiled.gaussian_rows`:
            another stream of the same law, by the ziggurat: about 1.5-2.5x faster than torch's
            ``normal_``; with a Dirac canary, blocks of :data:`PHILOX_BLOCK` models through all
            their steps, :func:`audit.training.compiled.philox_training`; for the MLP too, with a
            Dirac canary only: :mod:`audit.training.compiled_mlp`, docs/design.md §12.6);
            ``grouped``, batched torch products over the models sorted by their own batch width
            (below); ``padded``, batched products with every model padded to the step's widest
            batch. None (the default): ``compiled_philox`` where it applies, else ``grouped`` on the
            CPU and ``padded`` on a GPU (grouping reads each step's widths back to the host, one
            synchronisation per step, while padding costs only flops, which a GPU has to spare).
            Every route does the same arithmetic per model: the same results up to float32 summation
            order (the noise, and a Dirac canary's observations, bit for bit), except that
            ``compiled_philox`` draws another noise stream (the same law). Models that are not
            closed-form (:class:`audit.training.func_engine.TorchModel`) always run padded; those
            whose clipped sums run on a compiled kernel (``TorchModel.philox_noise``, the
            ``compiled`` gradient method, :mod:`audit.training.compiled_cnn`) draw their noise
            from Philox as ``compiled_philox`` does, in the flat parameter order.
    """
    on_device = isinstance(batches, torch.Tensor)
    if not on_device:
        batches = np.asarray(batches)
    k, steps, _ = batches.shape
    canary_in = np.asarray(canary_in, dtype=bool)
    if canary_in.shape != (k,):
        raise ValueError(f"canary_in has shape {canary_in.shape}, expected ({k},)")
    if sum(rows for _, rows in noise) != k:
        raise ValueError("the noise streams must cover exactly the K models")
    device = torch.device(problem.device)
    model, canary, clip = problem.model.on(device), problem.canary, float(problem.clip)
    x = torch.as_tensor(problem.x, dtype=torch.float32, device=device)
    xa = augment(x)
    xa_sqnorm = xa.square().sum(-1)
    labels = torch.as_tensor(problem.y, dtype=torch.int64, device=device)
    u = torch.as_tensor(canary.u, dtype=torch.float32, device=device)
    theta0 = torch.as_tensor(problem.theta0, dtype=torch.float32, device=device)
    # a view: the torch routes clone it below, the compiled route copies its own
    theta = theta0.expand(k, -1)
    step_size = float(problem.lr) / problem.batch_size
    adversarial = problem.threat_model == "adversarial"

    if isinstance(batches, torch.Tensor):  # on_device
        index = batches.to(device=device, dtype=torch.int32).contiguous()
    else:
        index = torch.from_numpy(np.ascontiguousarray(batches, dtype=np.int32)).to(device)
    inside = torch.from_numpy(canary_in)[:, None, None].to(device)
    coordinate = _single_coordinate(canary.u)
    # Masks are built for chunks of steps (bounded memory: CHUNK_SLOTS slots at a time).
    chunk = max(1, CHUNK_SLOTS // max(1, k * batches.shape[2]))

    y = torch.empty(k, steps, dtype=torch.float64, device=device)
    batch_sizes = torch.empty(k, steps, dtype=torch.int32, device=device)
    grad = torch.empty(k, model.size, device=device)
    std = float(problem.sigma) * clip

    # Gather buffers reused by every step: a fresh K x slots x (D + 1) gather per step (66 MB at
    # K = 10,000, b = 10, D = 64) is mapped and unmapped by malloc each time (page faults: a
    # quarter of the CPU time in the kernel, bench/README.md).
    slots = batches.shape[2]
    flat_buffer = labels.new_empty(k * slots)
    xa_buffer = xa.new_empty((k * slots, xa.shape[1]))
    label_buffer = labels.new_empty(k * slots)
    sqnorm_buffer = xa_sqnorm.new_empty(k * slots)
    weight_buffer = xa.new_empty(k * slots)
    # The closed-form models run on models sorted by their own batch width (_groups): Poisson
    # batches vary (b = 10: mean 10, widest of 10,000 about 25), and padding every model to the
    # step's widest batch cost 2.5x the matmul work. The parameters stay in the last step's
    # sorted order (row i of theta_rows is model perm[i]): each step gathers them once into the
    # new order and gathers the noise (drawn in model order, the generators' order) to match.
    route = _route(model, device, route, dirac=coordinate is not None)
    grouped = route == "grouped"
    # the MLP's compiled route: every step in compiled calls (compiled_mlp), a Dirac canary
    mlp_compiled = route == "compiled_philox" and isinstance(model, MLP)
    compiled = route in COMPILED_ROUTES and not mlp_compiled
    if mlp_compiled:
        assert coordinate is not None and isinstance(model, MLP)  # _route checked both
        theta = _mlp_philox_training(
            model,
            theta0.numpy(),
            _philox_streams(noise),
            std,
            (padded_rows(xa.numpy()), xa_sqnorm.numpy(), labels.numpy()),
            index.numpy(),
            step_rules(
                CANARY_INDEX,
                canary.injected,
                adversarial,
                kernel_coordinate(coordinate[0], model.hidden, (model.features + 1) * model.hidden),
            ),
            (canary_in, mlp_kernel_order(u.numpy(), model.layers)),
            clip,
            -step_size,
            y,
            batch_sizes,
            progress,
        )
    elif compiled:  # the kernel keeps the parameters in its own layout until the end
        # every model starts at theta_0
        start = transposed_weights(theta0.numpy()[None], model.features + 1)
        weights = np.broadcast_to(start, (k, *start.shape[1:])).copy()
        # the noise of one block of models at a time
        grad = torch.empty(min(k, COMPILED_BLOCK), model.size)  # in the kernel's layout
        philox_streams = _philox_streams(noise) if route == "compiled_philox" else None
        # torch's noise is drawn in the flat layout, then copied into the kernel's
        flat_noise = torch.empty_like(grad) if philox_streams is None else None
        kernel_data = (padded_rows(xa.numpy()), xa_sqnorm.numpy(), labels.numpy())
        kernel_index = index.numpy()  # the step's example indices, as the torch routes read them
        # the kernel's class-major layout of the parameters (compiled.kernel_order)
        kernel_rules = step_rules(
            CANARY_INDEX,
            canary.injected,
            adversarial,
            None
            if coordinate is None
            else kernel_coordinate(coordinate[0], model.classes, model.size),
        )
        kernel_u = (canary_in, kernel_order(u.numpy(), model.classes))
    else:
        theta = theta.clone()  # the torch routes update it in place
    # a torch module whose clipped sums run on its compiled kernel (TorchModel.philox_noise) draws
    # its noise from Philox too, in the flat layout (variate j is parameter j's noise)
    torch_philox = (
        _philox_streams(noise)
        if getattr(model, "philox_noise", False) and device.type == "cpu"
        else None
    )
    perm = None
    theta_rows = theta
    if grouped:
        perm = torch.arange(k, device=device)
        inverse, positions = perm.clone(), perm.clone()
        theta_spare = torch.empty_like(theta)
        grad_rows = torch.empty_like(grad)
        index_rows = index.new_empty((k, slots))
        through_rows = torch.empty((k, slots), dtype=torch.bool, device=device)
    gather = (flat_buffer, xa_buffer, label_buffer, sqnorm_buffer, weight_buffer)
    workspace: dict[str, torch.Tensor] = {}  # the model's scratch buffers, kept across steps
    whole = compiled and philox_streams is not None and kernel_rules[3] >= 0
    if whole:  # a Dirac canary on the compiled_philox route: every step in compiled calls
        assert philox_streams is not None  # whole implies it
        _philox_training(
            weights,
            philox_streams,
            std,
            kernel_data,
            kernel_index,
            kernel_rules,
            kernel_u,
            clip,
            -step_size,
            y,
            batch_sizes,
            progress,
        )
    for t in range(0 if whole or mlp_compiled else steps):
        if compiled:
            _compiled_step(
                weights,
                grad,
                noise,
                std,
                kernel_data,
                kernel_index[:, t],
                kernel_rules,
                kernel_u,
                clip,
                -step_size,
                y[:, t],
                batch_sizes[:, t],
                philox_streams,
                t,
                flat_noise,
            )
            if progress is not None:
                progress(t + 1)
            continue
        if t % chunk == 0:
            plan = _plan(
                index[:, t : t + chunk], inside, canary.injected, adversarial, clip, grouped
            )
            through_model, injected, widths, needs_injection = plan[:4]
            batch_sizes[:, t : t + chunk] = plan[4]
            model_widths = plan[5]
        c = t % chunk
        if torch_philox is not None:  # a torch module on its compiled kernel: Philox noise
            gaussian_rows(grad.numpy(), torch_philox[0], torch_philox[1], t, std)
        else:
            offset = 0
            for generator, count in noise:
                grad[offset : offset + count].normal_(0.0, std, generator=generator)
                offset += count
        current = grad
        if grouped:
            # the grouped route sets both: perm above, the widths by _plan
            assert perm is not None and model_widths is not None
            if widths[c]:
                perm = torch.argsort(model_widths[:, c], stable=True)
                torch.index_select(theta_rows, 0, inverse[perm], out=theta_spare)
                theta_rows, theta_spare = theta_spare, theta_rows
                inverse.index_copy_(0, perm, positions)
            torch.index_select(grad, 0, perm, out=grad_rows)
            current = grad_rows
            if widths[c]:
                counts = torch.bincount(model_widths[:, c], minlength=widths[c] + 1).tolist()
                first = counts[0]  # models without a model gradient this step: noise only
                used = perm[first:]
                torch.index_select(index[:, t], 0, used, out=index_rows[first:])
                torch.index_select(through_model[:, c], 0, used, out=through_rows[first:])
                for lo, hi, width in _groups(counts, first):
                    rows = slice(first + lo, first + hi)
                    _clipped_sum(
                        model,
                        xa,
                        xa_sqnorm,
                        labels,
                        gather,
                        clip,
                        theta_rows[rows],
                        grad_rows[rows],
                        index_rows[rows, :width],
                        through_rows[rows, :width],
                        workspace,
                    )
        elif widths[c]:
            width = widths[c]
            _clipped_sum(
                model, xa, xa_sqnorm, labels, gather, clip, theta, grad,
                index[:, t, :width], through_model[:, c, :width], workspace,
            )
        step_injected = injected[:, c] if perm is None else injected[perm, c]
        if coordinate is None:
            if needs_injection[c]:
                current.addr_(step_injected, u)
            observed = current @ u
        else:
            j, sign = coordinate
            if needs_injection[c]:
                current[:, j] += sign * step_injected
            observed = sign * current[:, j]
        if perm is None:
            y[:, t] = observed
        else:
            y[:, t].index_copy_(0, perm, observed.double())
        theta_rows.add_(current, alpha=-step_size)
        if progress is not None:
            progress(t + 1)
    if grouped:
        theta = theta_rows.index_select(0, inverse)
    if compiled:
        theta = torch.from_numpy(natural_weights(weights, model.features + 1))
    y = y / clip + problem.known

    probe = torch.as_tensor(canary.x, dtype=torch.float32, device=device).expand(k, 1, -1)
    probe_label = torch.full((k, 1), canary.label, dtype=torch.int64, device=device)
    logits = model.logits(theta, probe)
    loss = cross_entropy(logits, probe_label)[:, 0]
    logits = logits[:, 0, :]
    # the projection on u's support only: the other coordinates add exact zeros to the sum
    support = torch.nonzero(u).flatten()
    moved = (theta0[support] - theta[:, support]).double() @ u[support].double()
    final = moved / (step_size * clip) + steps * problem.known
    return TrainOutput(
        y=y.cpu().numpy(),
        final=final.cpu().numpy(),
        loss=loss.double().cpu().numpy(),
        logits=logits.double().cpu().numpy(),
        theta=theta.cpu().numpy(),
        batch_sizes=batch_sizes.cpu().numpy(),
    )


COMPILED_BLOCK = 128
"""The compiled route draws the noise and runs the kernel for this many models at a time, so that
a block's noise (128 x P floats, 338 kB for P = 660) and the kernel's scratch are still in the
core's L2 cache when the kernel reads them (the step's time per block size: bench/README.md).
A multiple of 4, so
that each block's draw is a multiple of 16 floats: torch's ``normal_`` transforms its uniforms in
chunks of 16 (and redraws the last 16 when the size is not a multiple of 16), so consecutive
blocks draw exactly the numbers of one draw over all the generator's rows (tested)."""


def _compiled_step(
    weights: np.ndarray,
    grad: torch.Tensor,
    noise: Sequence[tuple[torch.Generator, int]],
    std: float,
    data: tuple[np.ndarray, ...],
    index: np.ndarray,
    rules: np.ndarray,
    canary: tuple[np.ndarray, np.ndarray],
    clip: float,
    alpha: float,
    y: torch.Tensor,
    batch_sizes: torch.Tensor,
    philox_streams: tuple[np.ndarray, np.ndarray] | None = None,
    step: int = 0,
    flat: torch.Tensor | None = None,
) -> None:
    """One step of the compiled routes (:mod:`audit.training.compiled`), block of models by block:
    draw the block's noise (in model order, from its generator into the flat scratch ``flat``,
    then copied into the kernel's class-major layout, so that every parameter gets the variate
    the torch routes give it; or, given ``philox_streams`` (keys (K, 2), rows (K,)), compiled
    from Philox at ``step`` directly in the kernel's layout:
    :func:`audit.training.compiled.gaussian_rows`), then the kernel: slot rules, injected canary
    gradient, the Dirac canary's observation, clipped sum and update. A general direction u (in
    the kernel's layout) is observed afterwards from the gradient the kernel writes back."""
    canary_in, u = canary
    observed, sizes = y.numpy(), batch_sizes.numpy()
    classes = weights.shape[1]
    start = 0
    for generator, rows in noise:
        for lo in range(start, start + rows, COMPILED_BLOCK):
            hi = min(lo + COMPILED_BLOCK, start + rows)
            block = grad[: hi - lo]
            if philox_streams is None:  # torch's stream is in the flat layout (the torch routes')
                assert flat is not None  # the scratch of torch's draws
                drawn = flat[: hi - lo].normal_(0.0, std, generator=generator)
                block.view(hi - lo, classes, -1).copy_(
                    drawn.view(hi - lo, -1, classes).transpose(1, 2)
                )
            else:
                gaussian_rows(
                    block.numpy(), philox_streams[0][lo:hi], philox_streams[1][lo:hi], step, std
                )
            logistic_step(
                weights[lo:hi],
                block.numpy(),
                *data,
                index[lo:hi],
                canary_in[lo:hi],
                rules,
                u,
                clip,
                np.float32(alpha),
                observed[lo:hi],
                sizes[lo:hi],
            )
            if rules[3] < 0:
                y[lo:hi] = block @ torch.from_numpy(u)
        start += rows


PHILOX_BLOCK = 64
"""The ``compiled_philox`` route trains this many models at a time through all their steps
(:func:`audit.training.compiled.philox_training`): their parameters (64 x 3.2 kB), a step's noise
(64 x 2.6 kB) and the inputs (320 kB) stay in the core's 1 MB L2 cache for the whole training
(block sizes measured: bench/engine_limit.py's note)."""

MLP_PHILOX_BLOCK = 32
"""The MLP's ``compiled_philox`` route trains this many models at a time through all their steps
(:func:`audit.training.compiled_mlp.mlp_philox_training`): for hidden 32 on digits (P = 2442) a
block's parameters (32 x 12 kB) and a step's noise (32 x 9.8 kB) fit the 1 MB L2 cache. Per model
and step on one core, 4,000 models: blocks of 8 13.7 us, 16 14.8, 32 13.7, 64 16.8 (the grouped
torch route 36.5-45 us)."""

PHILOX_CHUNK = 1024
"""Models per compiled call of the ``compiled_philox`` route (progress is reported between
calls, as the equivalent number of steps done)."""


def _philox_training(
    weights: np.ndarray,
    streams: tuple[np.ndarray, np.ndarray],
    std: float,
    data: tuple[np.ndarray, ...],
    index: np.ndarray,
    rules: np.ndarray,
    canary: tuple[np.ndarray, np.ndarray],
    clip: float,
    alpha: float,
    y: torch.Tensor,
    batch_sizes: torch.Tensor,
    progress: Callable[[int], None] | None,
) -> None:
    """Every step of the ``compiled_philox`` route with a Dirac canary: chunks of
    :data:`PHILOX_CHUNK` models trained through all their steps by
    :func:`audit.training.compiled.philox_training` (blocks of :data:`PHILOX_BLOCK` models: the
    same arithmetic per model as the step-by-step loop, bit for bit), ``progress`` told the steps
    done as the fraction of models done times T."""
    canary_in, u = canary
    observed, sizes = y.numpy(), batch_sizes.numpy()
    keys, rows = streams
    xa, sqnorm, labels = data
    models, steps = observed.shape
    noise = np.empty((min(models, PHILOX_BLOCK), u.shape[0]), np.float32)

    def train_chunk(lo: int, hi: int) -> None:
        philox_training(
            PHILOX_BLOCK, weights[lo:hi], noise, keys[lo:hi], rows[lo:hi], std, xa, sqnorm,
            labels, index[lo:hi], canary_in[lo:hi], rules, u, clip, np.float32(alpha),
            observed[lo:hi], sizes[lo:hi],
        )

    _in_chunks(models, steps, train_chunk, progress)


def _in_chunks(
    models: int, steps: int, train_chunk: Callable[[int, int], None],
    progress: Callable[[int], None] | None,
) -> None:
    """``train_chunk(lo, hi)`` for consecutive chunks of :data:`PHILOX_CHUNK` models (each trained
    through all its steps), ``progress`` told the steps done as the fraction of models done
    times T after each (the compiled routes' loop, logistic regression's and the MLP's)."""
    for lo in range(0, models, PHILOX_CHUNK):
        hi = min(lo + PHILOX_CHUNK, models)
        train_chunk(lo, hi)
        if progress is not None:
            progress(steps * hi // models)


def _mlp_philox_training(
    model: MLP,
    theta0: np.ndarray,
    streams: tuple[np.ndarray, np.ndarray],
    std: float,
    data: tuple[np.ndarray, ...],
    index: np.ndarray,
    rules: np.ndarray,
    canary: tuple[np.ndarray, np.ndarray],
    clip: float,
    alpha: float,
    y: torch.Tensor,
    batch_sizes: torch.Tensor,
    progress: Callable[[int], None] | None,
) -> torch.Tensor:
    """Every step of the MLP's ``compiled_philox`` route (a Dirac canary): chunks of
    :data:`PHILOX_CHUNK` models through all their steps
    (:func:`audit.training.compiled_mlp.mlp_philox_training`, blocks of :data:`MLP_PHILOX_BLOCK`
    models), from theta_0 (P,); returns the final parameters (K, P) in the flat layout."""
    canary_in, u = canary
    observed, sizes = y.numpy(), batch_sizes.numpy()
    keys, rows = streams
    xa, sqnorm, labels = data
    models, steps = observed.shape
    (fan_in, hidden), _ = model.layers
    split = (fan_in + 1) * hidden
    layers = []
    for block, rows_in in ((theta0[None, :split], fan_in + 1), (theta0[None, split:], hidden + 1)):
        start = transposed_weights(block, rows_in)
        layers.append(np.broadcast_to(start, (models, *start.shape[1:])).copy())
    weights1, weights2 = layers
    noise = np.empty((min(models, MLP_PHILOX_BLOCK), model.size), np.float32)

    def train_chunk(lo: int, hi: int) -> None:
        mlp_philox_training(
            MLP_PHILOX_BLOCK, weights1[lo:hi], weights2[lo:hi], noise, keys[lo:hi], rows[lo:hi],
            std, xa, sqnorm, labels, index[lo:hi], canary_in[lo:hi], rules, u, clip,
            np.float32(alpha), observed[lo:hi], sizes[lo:hi], model.activation,
        )

    _in_chunks(models, steps, train_chunk, progress)
    flat = np.concatenate(
        [natural_weights(weights1, fan_in + 1), natural_weights(weights2, hidden + 1)], axis=1
    )
    return torch.from_numpy(flat)

ROUTES: tuple[str, ...] = ("compiled", "compiled_philox", "grouped", "padded")
"""The engine's ways of computing the closed-form models' clipped sums (:func:`train`'s
``route``)."""

COMPILED_ROUTES: tuple[str, ...] = ("compiled", "compiled_philox")
"""The routes of the compiled kernel (:mod:`audit.training.compiled`): torch's noise, or its own."""


def _philox_streams(noise: Sequence[tuple[torch.Generator, int]]) -> tuple[np.ndarray, np.ndarray]:
    """Per model, the Philox key of its noise stream (:func:`audit.training.philox.noise_key` of the
    generator's seed) and its row in the stream: (K, 2) and (K,) uint32."""
    keys = np.concatenate(
        [np.tile(noise_key(generator.initial_seed()), (rows, 1)) for generator, rows in noise]
    )
    if max(rows for _, rows in noise) > 2**32:
        raise ValueError(
            "route='compiled_philox': a noise stream covers more than 2^32 models (a counter word)"
        )
    rows = np.concatenate([np.arange(rows, dtype=np.uint32) for _, rows in noise])
    return keys.reshape(-1, 2), rows


def _route(
    model: PerExampleModel, device: torch.device, route: str | None, *, dirac: bool = True
) -> str:
    """The route :func:`train` takes: ``route`` if given (checked), else the fastest that
    applies. The MLP has a compiled route too (:mod:`audit.training.compiled_mlp`), for a Dirac
    canary (``dirac``) and with the Philox noise only."""
    cpu = device.type == "cpu" and compiled_available()
    compilable = isinstance(model, LogisticRegression) and cpu
    mlp_compilable = isinstance(model, MLP) and cpu and dirac
    if route is None:
        if compilable or mlp_compilable:
            return "compiled_philox"
        return "grouped" if isinstance(model, BatchedModel) and device.type == "cpu" else "padded"
    check_choice("route", route, ROUTES)
    if route == "compiled_philox" and mlp_compilable:
        return route
    if route in COMPILED_ROUTES and isinstance(model, MLP) and cpu:
        raise ValueError(
            f"route={route!r}: the MLP's compiled route is 'compiled_philox' with a Dirac canary "
            f"(here: route {route!r}, Dirac canary: {dirac})"
        )
    if route in COMPILED_ROUTES and not compilable:
        raise ValueError(
            f"route={route!r} runs logistic regression on the CPU with numba installed "
            f"(here: {type(model).__name__} on {device.type}, numba usable: {compiled_available()})"
        )
    if route == "grouped" and not isinstance(model, BatchedModel):
        return "padded"
    return route


MIN_GROUP = 256
"""Models sorted by batch width are processed in groups of at least this many (the last may be
smaller): each group costs a dozen kernel calls, each padding slot a few hundred flops."""


def _groups(counts: list[int], first: int) -> list[tuple[int, int, int]]:
    """(start, stop, width) of consecutive groups of the models sorted by width.

    ``counts[w]`` is the number of models of width w; ``first`` = counts[0] (skipped: no model
    gradient). A group closes once it holds :data:`MIN_GROUP` models; its width is that of its
    widest model, so the padding is only within a group's small range of widths.
    """
    out, lo, hi = [], first, first
    for width in range(1, len(counts)):
        hi += counts[width]
        if hi - lo >= MIN_GROUP or (width == len(counts) - 1 and hi > lo):
            out.append((lo - first, hi - first, width))
            lo = hi
    return out


def _clipped_sum(
    model: PerExampleModel,
    xa: torch.Tensor,
    xa_sqnorm: torch.Tensor,
    labels: torch.Tensor,
    gather: tuple[torch.Tensor, ...],
    clip: float,
    theta: torch.Tensor,
    grad: torch.Tensor,
    index: torch.Tensor,
    through: torch.Tensor,
    workspace: dict[str, torch.Tensor],
) -> None:
    """Add the clipped per-example gradient sums of models ``theta`` (R, P), whose batches are
    ``index`` (R, width) with weights ``through`` (R, width), to ``grad`` (R, P); the gathered
    rows go to the preallocated ``gather`` buffers, the model's scratch to ``workspace``."""
    flat_buffer, xa_buffer, label_buffer, sqnorm_buffer, weight_buffer = gather
    rows, width = index.shape
    size = rows * width
    flat = flat_buffer[:size]
    flat.view(rows, width).copy_(index).clamp_(min=0)
    weight = weight_buffer[:size].view(rows, width)
    weight.copy_(through)
    model.clipped_grad_sum_augmented(
        theta,
        torch.index_select(xa, 0, flat, out=xa_buffer[:size]).view(rows, width, -1),
        torch.index_select(labels, 0, flat, out=label_buffer[:size]).view(rows, width),
        weight,
        clip,
        xa_sqnorm=torch.index_select(xa_sqnorm, 0, flat, out=sqnorm_buffer[:size]).view(
            rows, width
        ),
        out=grad,
        accumulate=True,
        workspace=workspace,
    )


def _single_coordinate(u: np.ndarray) -> tuple[int, float] | None:
    """(j, u_j) when u = u_j e_j (a Dirac direction), else None."""
    nonzero = np.flatnonzero(u)
    return (int(nonzero[0]), float(u[nonzero[0]])) if nonzero.size == 1 else None


def _plan(
    index: torch.Tensor,
    inside: torch.Tensor,
    injected_canary: bool,
    adversarial: bool,
    clip: float,
    model_widths: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, list[int], list[bool], torch.Tensor, torch.Tensor | None]:
    """What each slot of a chunk of steps (K, c, slots) contributes.

    Returns ``through_model`` (K, c, slots): slots whose gradient is computed through the
    model (real others under ``isolated``; an IN input canary); ``injected`` (K, c): the
    coefficient added along u (+C per IN Dirac canary, -C per other example under
    ``adversarial``); per step the number of leading slots that any model uses (0 = no
    model gradient at all) and whether anything is injected; the batch sizes (K, c)
    (non-padding slots, the canary's slot included, IN or OUT: zero-out); each model's width
    per step (K, c) int64: its last slot whose gradient goes through the model, + 1 (0: none);
    None unless ``model_widths`` (only the grouped route sorts models by width).
    """
    is_canary = index == CANARY_INDEX
    real = index >= 0
    others = real & ~is_canary
    through = (is_canary & inside) if not injected_canary else torch.zeros_like(is_canary)
    if not adversarial:
        through |= others
    injected = torch.zeros(index.shape[:2], device=index.device)
    if injected_canary:
        injected += (is_canary & inside).sum(-1, dtype=torch.int32) * clip
    if adversarial:
        injected -= others.sum(-1, dtype=torch.int32) * clip
    used = through.any(0)  # (c, slots)
    if used.shape[1] == 0:  # every batch empty (Poisson, tiny q)
        widths = [0] * used.shape[0]
    else:
        slot = torch.arange(1, used.shape[1] + 1, device=used.device)
        widths = torch.where(used, slot, 0).amax(-1).tolist()
    if not model_widths:
        return (
            through,
            injected,
            widths,
            (injected != 0).any(0).tolist(),
            real.sum(-1, dtype=torch.int32),
            None,
        )
    if through.shape[2] == 0:
        per_model = torch.zeros(through.shape[:2], dtype=torch.int64, device=through.device)
    else:
        slot = torch.arange(1, through.shape[2] + 1, device=through.device)
        per_model = torch.where(through, slot, 0).amax(-1)
    return (
        through,
        injected,
        widths,
        (injected != 0).any(0).tolist(),
        real.sum(-1, dtype=torch.int32),
        per_model,
    )
