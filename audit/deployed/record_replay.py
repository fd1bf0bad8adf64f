"""Record-replay sensitivity of a deployed training, gray box (docs/design.md §14.7).

After Re:cord-play (Cebere et al. 2026): the user's training ``train(canaries, seed)`` (the
lines of docs/auditing-your-training.md wrapped in a function: ``canaries.wrap``,
``canaries.attach``, ``canaries.opacus`` or ``canaries.plain`` + ``canaries.inject``) is run
several times with the same ``seed``, i.e. the same batches and the same noise, with one canary
slot's per-example gradient set to a chosen content ("IN") or to 0 ("zeroed"). A pre-step hook
on the torch optimizer records every parameter's ``.grad`` at every step (what the optimizer
receives: after the user's clipping, summing, noising and division by b) and then sets it to 0,
so the model stays at its initial parameters and every step of every run sees the same
parameters (the comparison is per step, as DP-SGD's per-step sensitivity is, for the same
previous outputs). With the same noise,

    received_IN,t - received_zeroed,t = (clip(slot row) - 0) / b,   ||.|| <= C / b

for correct DP-SGD; ``sensitivity`` is max_t ||difference_t|| * b / C, in units of C.

Probes (each an IN run against its zeroed run, same seed):

- ``crafted``: the slot's row is g C v, v a fixed unit vector spread over every parameter tensor
  with unequal shares w_k proportional to k + 1 (k the tensor's position), and g = 2 / min_k w_k,
  so every tensor's part is at least 2 C: correct clipping gives exactly C; per-tensor clipping
  gives C on every tensor (sqrt(K) C in all: its signature, every tensor's part equal to C);
  no clipping gives g C;
- ``real``: the slot keeps the gradient of the real example the slot holds (the user's data);
- ``co-batch``: the batch's other rows are set to C u / (B - 1) each (their sum is C u, each row
  far below C, so per-example clipping leaves them) and the slot's row to -g C u: clipping each
  example gives a difference of C (the slot clipped to -C u); clipping the batch's summed gradient
  gives C u for the zeroed run and -C u for the IN run (the sum (1 - g) C u clipped), a
  difference of 2 C, which no co-batch of real data need show;
- ``absent``: the slot is removed from every batch's index list (add/remove adjacency) and
  compared with the zeroed run (the slot present, its gradient 0): correct DP-SGD receives the
  same (the slot's zero row adds nothing; the divisor b is a constant), so any difference beyond
  rounding means that the slot's presence reaches the other examples' terms: the sum divided by
  the batch's actual size (Opacus issue #571: the normaliser leaks the cardinality; the
  difference is then parallel to what the optimizer receives); the noise (the difference then
  reaches the canary block, whose gradient is 0 in both runs), rescaled when the absent run's
  block vector is the zeroed run's times r != 1 within rounding (its standard deviation follows
  the batch's size, Opacus issue #753: :func:`_noise_change`), else redrawn (a generator seeded
  or advanced from the batch); or the other examples' gradients: a BatchNorm layer computing
  batch statistics when the model runs one (named by its module path, seen by a forward hook),
  else rows mixed across examples before clipping (a micro-batch's mean as each row's gradient,
  TensorFlow Privacy issue #81, named when several rows of distinct examples carry exactly the
  same gradient; inputs normalised with the batch's statistics). When it fails, its failure is
  the one reported (its kind names the bug; the other probes' failures follow it in one clause).

Two probes see what the comparisons above cannot (issue 42): the noise is the same in every
run, so it cancels, and only the rows the watched loader yields vary.

- ``noise``: every row's per-example gradient set to 0, so what the optimizer receives is the
  noise alone, on every trained tensor: none at a step, on part of a tensor only (sparse),
  less than on the canary block, shared between tensors or steps, or on a coarse float lattice
  (:func:`tensor_noise_finding`). Only when noise is missing there (a tensor silent at a step,
  exact zeros, the canary block without noise) one more run, the lit run, writes a constant
  kappa < C on every entry of every row (:func:`_lit_constant`): noise that now appears on the
  silent entries was drawn only where the batch's gradient is nonzero (sparse noise, Opacus
  issue #350: entries no example touched are released exactly), none that still does not
  (:func:`_lit_noise`);
- ``data``: the slots' rows changed in the data set itself (:class:`_ChangedCanaries`), with
  every example's gradient 0 (the model held) and with the slots' gradients 0 (the model
  trained): a parameter that then moves or receives something else is stepped without
  clipping/noise (a second optimizer, a loss after the noise), and steps, loader passes or
  learning rates that differ are control flow on the data (early stopping, LR on plateau)
  (:func:`_data_used_elsewhere`).

A slot that occurs several times in one batch (augmentation multiplicity: the sampler yields
each example's copies as rows with the same index) is written on every one of its rows, so
copies clipped alone show as a contribution of k C for k copies.

Also checked: two zeroed runs agree (else "not reproducible from the seed": inconclusive, no
difference can be attributed to the slot); the number of steps and each step's index batch do
not depend on the slot (control flow); the canary block, which only the noise reaches in a
zeroed run, receives fresh noise at every step (no two steps' noise vectors aligned beyond what
independent draws allow).

A correct training is never FAILED (issue 41, docs/design.md §14.7); where a comparison cannot
be made the probe leaves the step out and says why (``inconclusive_steps``, ``note``):

- C, b and sigma are read from Opacus's DPOptimizer when ``canaries.opacus`` instruments the
  training (:class:`_ReplayCanaries`): ``clip`` and ``noise_divisor`` become optional, a given
  value that disagrees is named in ``notes`` and Opacus's is used;
- the ``absent`` run has one row less, so a training drawing random numbers per row (dropout,
  stochastic depth, augmentation) draws fewer and every later draw moves: a step is compared
  only when the global generators' digests (:func:`_rng_fingerprint`) agree before and after it;
- post-processing written on ``p.grad`` before ``optimizer.step()`` with state (momentum) makes
  a step's input depend on earlier steps: one more run writes the slot in one step only; when a
  later step still differs, each probe is compared at its first step holding the slot (the
  same history in both runs) and the noise's freshness on its AR(1) innovations;
- reduced precision (autocast: bfloat16 per-example gradients, a forward in bfloat16) widens
  the rounding allowance (:func:`_rows_allowance`, :func:`_forward_allowance`);
- Opacus's ghost clipping has no per-example gradient: the slots' clipping factors are set
  instead (the ``real`` and ``absent`` probes run, ``crafted`` and ``co-batch`` cannot).
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from audit.core.validation import check_int, check_real
from audit.deployed.instrument import CANARY_MODULE, CanaryDataset, DiracCanaries
from audit.stats.float_collisions import (
    FLOAT32_BITS,
    equal_draw_bound,
    equal_draw_probability,
    largest_cell_bound,
    total_coincidence_tail,
)

__all__ = [
    "PROBES", "ProbeResult", "ReplayFailure", "ReplayResult", "TensorNoise", "replay",
    "tensor_noise_finding",
]

PROBES = ("crafted", "real", "co-batch", "absent", "noise", "data")
"""The replay's probes, in the order they are run (module docstring); the reported failure is the
``absent`` probe's when it fails (its kind names the bug), else the earliest step's. ``noise``
(one run, every example's gradient 0: the noise on every trained tensor) and ``data`` (the
slots' data changed in the dataset: four runs, the noise run among them) are issue 42's; a
finding of ``data`` is reported before the others', one of ``noise`` after theirs."""

SENSITIVITY_PROBES = PROBES[:4]

NOISE_LEVEL = 1e-6
"""Family-wise level of the fresh-noise check (a false alarm under fresh Gaussian noise)."""

_BLOCK = f"{CANARY_MODULE}.block.weight"


@dataclass(frozen=True)
class ReplayFailure:
    """The first step where a probe's difference exceeded C / b (beyond rounding).

    ``tensors``: the parameters carrying the difference, largest part first;
    ``sensitivity``: ||difference|| * b / C at that step, in units of C.
    """

    probe: str
    step: int
    tensors: tuple[str, ...]
    sensitivity: float
    tolerance: float


@dataclass(frozen=True)
class ProbeResult:
    """One probe: its largest per-step sensitivity (units of C) and the steps it tested."""

    probe: str
    sensitivity: float
    per_step: tuple[float, ...]
    tested_steps: int
    passed: bool
    inconclusive_steps: int = 0
    """Steps holding the slot where this probe's runs could not be compared (nan in
    ``per_step``): the random stream moved (the ``absent`` probe), or the optimizer's input
    carries earlier steps (post-processing state: only the first step holding the slot is
    compared)."""
    note: str = ""
    """Why steps were not compared ('' when every step was)."""


@dataclass(frozen=True)
class ReplayResult:
    """What the replay found (module docstring).

    ``sensitivity``: max over probes and steps of ||difference|| * b / C (nan when the runs are
    not reproducible: then no difference can be attributed to the slot); ``per_step``: per step,
    the max over probes; ``tolerance``: the largest rounding allowance used (units of C);
    ``noise_multiplier``: an estimate, the canary block's received noise's standard deviation
    * b / C in a zeroed run (nan if no step); ``max_noise_correlation``: the largest |cosine|
    between two steps' noise vectors on the canary block, against ``noise_threshold``.
    """

    passed: bool
    sensitivity: float
    first_failure: ReplayFailure | None
    message: str
    reproducible: bool
    control_flow_independent: bool
    fresh_noise: bool
    steps: int
    per_step: tuple[float, ...]
    probes: tuple[ProbeResult, ...]
    tolerance: float
    noise_multiplier: float
    max_noise_correlation: float
    noise_threshold: float
    crafted_norm: float
    seed: int
    clip: float
    noise_divisor: float
    runs: int = field(default=0)
    inconclusive: bool = False
    """True when nothing failed but the replay could not conclude (not reproducible from the
    seed, nothing tested, every probe's comparison impossible): ``passed`` is then False, and
    ``failed`` too. Never a bug found."""
    notes: tuple[str, ...] = ()
    """What the replay read or could not compare, one sentence each: values read from Opacus
    (and a given value that disagrees), comparisons left out and why."""
    noise_per_tensor: tuple[TensorNoise, ...] = ()
    """Each trained tensor's noise in the noise run (every example's gradient 0): root mean
    square in units of C / b, values, exact zeros, steps without noise (issue 42)."""
    settings_from: str = "arguments"
    """Where C and b came from: ``"opacus"`` (read from the DPOptimizer), ``"arguments"``
    (``clip=`` and ``noise_divisor=``), or ``"plain"`` (b from ``canaries.plain``'s
    ``noise_divisor``)."""

    @property
    def failed(self) -> bool:
        """A check failed: evidence of a bug (neither passed nor inconclusive)."""
        return not self.passed and not self.inconclusive

    @property
    def verdict(self) -> str:
        """``"passed"``, ``"failed"`` or ``"inconclusive"``."""
        return "passed" if self.passed else "inconclusive" if self.inconclusive else "failed"

    def summary(self) -> str:
        """The result in a few lines, the verdict first."""
        lines = [self.verdict.upper() + ": " + self.message]
        lines.append(
            f"  steps {self.steps}, runs {self.runs}, seed {self.seed}, C {self.clip:g}, "
            f"b {self.noise_divisor:g}; reproducible: {self.reproducible}; control flow "
            f"independent of the slot: {self.control_flow_independent}; fresh noise: "
            f"{self.fresh_noise} (max |cos| {self.max_noise_correlation:.3f} vs "
            f"{self.noise_threshold:.3f}); noise multiplier (estimate) "
            f"{self.noise_multiplier:.3f}"
        )
        for probe in self.probes:
            state = "ok" if probe.passed else "exceeds its bound"
            lines.append(
                f"  probe {probe.probe}: sensitivity {probe.sensitivity:.4f} C over "
                f"{probe.tested_steps} steps holding the slot ({state})"
                + (f"; {probe.inconclusive_steps} not compared: {probe.note}"
                   if probe.inconclusive_steps else "")
            )
        if self.noise_per_tensor:
            lines.append("  noise per trained tensor (root mean square, units of C / b): "
                         + ", ".join(f"{t.name} {t.rms:.3g}" for t in self.noise_per_tensor))
        lines.extend(f"  note: {note}" for note in self.notes)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready dict (nan as None)."""

        def clean(value: object) -> object:
            if isinstance(value, float) and not math.isfinite(value):
                return None
            if isinstance(value, dict):
                return {k: clean(v) for k, v in value.items()}
            if isinstance(value, (list, tuple)):
                return [clean(v) for v in value]
            return value

        cleaned = clean({**asdict(self), "verdict": self.verdict})
        assert isinstance(cleaned, dict)
        return cleaned


# -- the probe attached to the canaries (DiracCanaries.replay) ------------------------------


def _rng_fingerprint(extra: Sequence[Any] = ()) -> bytes:
    """A digest of the random streams a training draws from without naming a generator: torch's
    default CPU generator (and CUDA's, once initialised), numpy's and Python's global ones, and
    ``extra`` ``torch.Generator`` objects (Opacus's noise generator when one is given). Two runs
    with equal digests before and after a stretch of code drew the same random numbers there."""
    digest = hashlib.sha1(torch.random.get_rng_state().numpy().tobytes())
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for state in torch.cuda.get_rng_state_all():
            digest.update(state.numpy().tobytes())
    _, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)  # noqa: NPY002
    digest.update(np.asarray(keys).tobytes() + repr((pos, has_gauss, cached)).encode())
    digest.update(repr(random.getstate()).encode())
    for generator in extra:
        digest.update(generator.get_state().numpy().tobytes())
    return digest.digest()


class _Probe:
    """One run's slot content and its recording: ``canaries.replay`` during one training.

    ``once``: the slot's content is written only in the first optimizer step that holds a slot
    (0 in every later step), so that the IN run and the zeroed run share their history before
    that step (post-processing with state, momentum written on ``p.grad``: module docstring)."""

    def __init__(
        self, slot: str, cobatch: bool, clip: float | None, divisor: float | None,
        direction_seed: int, once: bool = False,
    ) -> None:
        self.slot, self.cobatch, self.once = slot, cobatch, once
        self.clip = math.nan if clip is None else float(clip)  # C once known (the canaries')
        self.divisor = math.nan if divisor is None else float(divisor)
        self.direction_seed = direction_seed
        self.received: list[dict[str, np.ndarray]] = []
        self.batches: list[np.ndarray] = []  # every rewritten loader batch (control flow)
        self.step_batches: list[np.ndarray] = []  # step t's rows: its batches' union
        self.chosen: list[int] = []  # the slot chosen at each optimizer step, -1 if none
        self.copies: list[int] = []  # how many rows the chosen slot has in each step
        self.divisors: list[float] = []  # the b of each step, as the instrument divides
        self.prints: list[tuple[bytes, ...]] = []  # random streams' digests: rewrites, step
        self.mass: list[float] = []  # sum_i min(||g_i||, C) / C over the step's other rows
        self.slot_norms: list[float] = []  # the real slot row's norm / C per step (nan: none)
        self._step_norm = math.nan
        # gradient accumulation (several batches per step): one slot per step, the first
        # slot the step's first batches hold, its rows in every batch of that step
        self._step_slot: int | None = None
        self._step_copies = 0
        self._step_holding = 0  # the step's batches that hold the chosen slot
        self._step_prints: list[bytes] = []
        self._step_mass = 0.0
        self.holding: list[int] = []  # per optimizer step
        self._pending: list[np.ndarray] = []
        self.dtype: torch.dtype = torch.float32
        self.forward_eps = 0.0  # the largest eps of a floating output in the forward
        self.row_eps = 0.0  # the largest eps of the per-example gradients' dtypes
        self.reduced_modules: set[int] = set()  # modules with a reduced-precision output
        self.gain = 2.0  # g, set from the tensors' shares at the first batch
        self._directions: list[torch.Tensor] | None = None
        self._generators: list[Any] = []
        self.batch_counts: list[int] = []  # loader batches per optimizer step
        self._marked: dict[str, np.ndarray] | None = None  # canaries.privatized()'s record
        self.workers = 0  # the watched DataLoader's worker processes (their streams unseen)
        self.marked_steps = 0
        self.real = 0  # the data set's real rows (slots are the indices from here)
        self.settings: _OpacusSettings | None = None  # Opacus's, when it instruments
        # the noise and data runs (issue 42): every row zeroed (what the optimizer receives is
        # the noise), the model left to train (not frozen), what moves outside the optimizer
        self.zero_all = False
        self.frozen = True
        # the lit run (issue 42): every row's every entry a small constant, not 0, so that
        # noise drawn only where the batch's gradient is nonzero shows (:func:`_lit_noise`)
        self.lit = False
        self.lit_value = math.nan  # kappa, the constant written (a power of 2, below C)
        # the model's layers that mix the batch's examples (BatchNorm computing batch
        # statistics): module path -> class name, seen in the forward (:meth:`_watch_mixing`)
        self.mixing: dict[str, str] = {}
        self.equal_rows = 0  # the most rows of distinct examples with the same gradient
        self.param_prints: list[dict[str, bytes]] = []  # per step: each parameter's digest
        # after train returns: each parameter's digest and the random streams' (an update after
        # the last watched step, e.g. a second optimizer's, shows only here)
        self.final_prints: dict[str, bytes] = {}
        # the noise runs: what each parameter's .grad holds at optimizer.step() (after what the
        # loop writes on p.grad past canaries.privatized(): a loss added after the noise shows
        # here, not in the marked record)
        self.at_step: list[dict[str, np.ndarray]] = []
        self.final_stream: bytes | None = None
        self.outside: list[dict[str, float]] = []  # per step: ||p moved since the last step||
        self.lrs: list[tuple[float, ...]] = []  # per step: the watched optimizer's lr
        self.watched: set[str] = set()  # the parameters the watched optimizer steps
        self.changed_rows = 0  # slot rows whose data the data probe changed
        self.passes = 0  # passes over the watched loader started so far
        self.step_passes: list[int] = []  # per step: the pass its first batch came from
        self._step_pass = -1
        self._post: dict[str, torch.Tensor] = {}

    def on_optimizer(self, optimizer: Any, canaries: DiracCanaries) -> None:
        """Record every parameter's .grad at each step, then zero it (the model stays put)."""
        assert canaries.model is not None  # attach() precedes the optimizer
        named = list(canaries.model.named_parameters())
        if named:
            self.dtype = named[0][1].dtype
        generator = getattr(getattr(canaries, "replay_settings", None), "generator", None)
        self._generators = [] if generator is None else [generator]
        self._watch_precision(canaries.model)
        self._watch_mixing(canaries.model)
        groups = getattr(optimizer, "param_groups", [])
        ids = {id(p) for group in groups for p in group.get("params", [])}
        self.watched = {name for name, p in named if id(p) in ids}

        def post(*_: Any) -> None:
            self._post = {name: p.detach().clone() for name, p in named}

        def hook(*_: Any) -> None:
            self._snapshot(named, groups)
            record: dict[str, np.ndarray] = {}
            stepped: dict[str, np.ndarray] = {}
            marked = self._marked
            for name, p in named:
                grad = p.grad
                stepped[name] = (np.zeros(p.numel()) if grad is None
                                 else grad.detach().reshape(-1).double().cpu().numpy().copy())
                record[name] = (marked[name] if marked is not None and name in marked
                                else stepped[name])
                if grad is not None and self.frozen:
                    with torch.no_grad():
                        grad.zero_()
            self._marked = None
            self.received.append(record)
            if self.zero_all:
                self.at_step.append(stepped)
            self.chosen.append(-1 if self._step_slot is None else self._step_slot)
            self.copies.append(self._step_copies)
            self.holding.append(self._step_holding)
            self.step_batches.append(
                np.concatenate(self._pending) if self._pending else np.zeros(0, dtype=np.int64)
            )
            self.step_passes.append(self._step_pass)
            self._step_pass = -1
            step_divisor = getattr(canaries, "_step_divisor", None)
            divisor = canaries.noise_divisor if step_divisor is None else step_divisor
            self.divisors.append(math.nan if divisor is None else float(divisor))
            self.prints.append((*self._step_prints, _rng_fingerprint(self._generators)))
            self.mass.append(self._step_mass)
            self.batch_counts.append(len(self._pending))
            self.slot_norms.append(self._step_norm if self._step_copies == 1 else math.nan)
            self._step_slot, self._step_copies, self._step_holding = None, 0, 0
            self._pending, self._step_prints, self._step_mass = [], [], 0.0
            self._step_norm = math.nan

        optimizer.register_step_pre_hook(hook)
        optimizer.register_step_post_hook(post)

    def _snapshot(self, named: list[tuple[str, Any]], groups: Any) -> None:
        """Before a step: each parameter's digest, how far it moved since the previous step
        ended (outside the watched optimizer) and the learning rates."""
        moved: dict[str, float] = {}
        with torch.no_grad():
            for name, p in named:
                before = self._post.get(name)
                moved[name] = (0.0 if before is None else
                               float((p.detach().double() - before.double()).norm()))
        self.param_prints.append(_parameter_digests(named))
        self.outside.append(moved)
        self.lrs.append(tuple(_learning_rate(g) for g in groups))

    def finish(self, canaries: DiracCanaries) -> None:
        """After ``train`` returns: the parameters' and the random streams' digests."""
        if canaries.model is not None:
            self.final_prints = _parameter_digests(list(canaries.model.named_parameters()))
        self.final_stream = _rng_fingerprint(self._generators)

    def mark(self, canaries: DiracCanaries, gradients: Any = None) -> None:
        """``canaries.privatized(gradients)``: record the privatized gradient here (every
        parameter's: from ``gradients``, a dict by name or a list in ``model.parameters()``
        order, else each parameter's ``.grad`` now); the step's hook uses it."""
        assert canaries.model is not None
        named = list(canaries.model.named_parameters())
        given: dict[str, Any] = {}
        if isinstance(gradients, dict):
            given = {str(k): v for k, v in gradients.items()}
        elif isinstance(gradients, (list, tuple)) and len(gradients) == len(named):
            given = {name: g for (name, _), g in zip(named, gradients, strict=True)}
        marked: dict[str, np.ndarray] = {}
        for name, p in named:
            grad = given.get(name, p.grad)
            if isinstance(grad, torch.Tensor):
                marked[name] = grad.detach().reshape(-1).double().cpu().numpy().copy()
        self._marked = marked
        self.marked_steps += 1

    def _watch_precision(self, model: Any) -> None:
        """Forward hooks noting outputs in a lower precision than the parameters (autocast):
        the ``absent`` probe's rounding allowance then covers the forward's precision."""
        low = self.dtype

        def note(module: Any, _: Any, output: Any) -> None:
            outputs = output if isinstance(output, (tuple, list)) else (output,)
            for t in outputs:
                if isinstance(t, torch.Tensor) and t.is_floating_point():
                    eps = float(torch.finfo(t.dtype).eps)
                    self.forward_eps = max(self.forward_eps, eps)
                    if eps > float(torch.finfo(low).eps):
                        self.reduced_modules.add(id(module))

        for module in model.modules():
            module.register_forward_hook(note)

    def _watch_mixing(self, model: Any) -> None:
        """Forward hooks on the model's known batch-mixing layers: a BatchNorm (any subclass
        of ``torch.nn.modules.batchnorm._BatchNorm``: BatchNorm1d/2d/3d, their lazy forms,
        SyncBatchNorm) that normalises with the batch's statistics when it runs (in train mode,
        or without running statistics), so that each row's output depends on the other rows.
        The absent probe's sentence names them (:func:`_kind`)."""
        from torch.nn.modules.batchnorm import _BatchNorm

        def note(path: str) -> Callable[..., None]:
            def hook(module: Any, *_: Any) -> None:
                batch_statistics = module.training or (
                    module.running_mean is None and module.running_var is None)
                if batch_statistics:
                    self.mixing.setdefault(path, type(module).__name__)
            return hook

        for path, module in model.named_modules():
            if isinstance(module, _BatchNorm):
                module.register_forward_hook(note(path))

    def _unit(self, grads: list[torch.Tensor]) -> list[torch.Tensor]:
        """v: a fixed unit vector over the tensors, tensor k's share w_k proportional to k+1."""
        if self._directions is None:
            rng = np.random.default_rng([self.direction_seed, 7])
            shares = np.arange(1, len(grads) + 1, dtype=np.float64)
            shares /= np.linalg.norm(shares)
            out = []
            for g, share in zip(grads, shares, strict=True):
                v = rng.standard_normal(tuple(g.shape[1:]))
                v *= share / np.linalg.norm(v)
                out.append(torch.from_numpy(v).to(dtype=g.dtype, device=g.device))
            self._directions = out
            self.gain = 2.0 / float(shares.min()) if len(grads) else 2.0
        return self._directions

    def _choose(self, index: np.ndarray, canaries: DiracCanaries) -> tuple[np.ndarray, np.ndarray]:
        """Book one rewritten batch: (its canary-slot rows, the chosen slot's rows).

        One slot per optimizer step: the first slot of the step's first batch holding one;
        under gradient accumulation (several batches rewritten before one step) its rows in
        the step's later batches are the slot's too."""
        assert canaries.real is not None
        self.real = int(canaries.real)
        self._step_prints.append(_rng_fingerprint(self._generators))
        if self._step_pass < 0:
            self._step_pass = self.passes
        self.batches.append(np.asarray(index).copy())
        self._pending.append(np.asarray(index).copy())
        index = np.asarray(index)
        slots = np.flatnonzero(index >= canaries.real)
        if self._step_slot is None and slots.size:
            self._step_slot = int(index[slots[0]])
        # every row of the chosen slot (its copies, when the sampler repeats an example)
        rows_of_slot = (np.flatnonzero(index == self._step_slot) if self._step_slot is not None
                        else np.zeros(0, dtype=np.int64))
        self._step_copies += int(rows_of_slot.size)
        self._step_holding += int(rows_of_slot.size > 0)
        return slots, rows_of_slot

    def _content(self) -> str:
        """This step's slot content: the probe's, or "zero" after the first step (``once``)."""
        if self.once and any(c >= 0 for c in self.chosen):
            return "zero"
        return self.slot

    def rewrite(
        self,
        grads: list[torch.Tensor],
        canary_grad: torch.Tensor,
        index: np.ndarray,
        canaries: DiracCanaries,
    ) -> None:
        """Set the batch's canary-slot rows: 0 but the chosen slot's (this run's content).

        The co-batch design applies to the batch holding the slot."""
        clip = float(canaries._clip_norm)
        self.clip = clip
        slots, rows_of_slot = self._choose(index, canaries)
        if self.zero_all:  # the noise runs: no example contributes, the optimizer gets noise
            with torch.no_grad():
                if self.lit:  # every entry kappa: a known sum, no entry's gradient 0
                    if math.isnan(self.lit_value):
                        dims = sum(int(g[0].numel()) for g in grads if len(g)) + (
                            int(canary_grad[0].numel()) if len(canary_grad) else 0)
                        self.lit_value = _lit_constant(clip, dims)
                    canary_grad.fill_(self.lit_value)
                    for g in grads:
                        g.fill_(self.lit_value)
                    return
                canary_grad.zero_()
                for g in grads:
                    g.zero_()
            return
        chosen = int(rows_of_slot[0]) if rows_of_slot.size else -1
        mine = torch.from_numpy(rows_of_slot)
        content = self._content()
        for g in grads:
            self.row_eps = max(self.row_eps, float(torch.finfo(g.dtype).eps))
        with torch.no_grad():
            if grads:
                norms = torch.stack(
                    [g.flatten(1).double().pow(2).sum(1) for g in grads]).sum(0).sqrt()
                real = torch.ones(len(index), dtype=torch.bool)
                real[torch.from_numpy(slots)] = False
                self._step_mass += float(
                    torch.clamp(norms[real.to(norms.device)] / clip, max=1.0).sum())
            self.equal_rows = max(self.equal_rows, _equal_rows(grads, index, self.real))
            canary_grad.zero_()  # the canary block receives the noise only
            kept = [g[mine.to(g.device)].clone() for g in grads] if chosen >= 0 else []
            if kept and content == "real" and math.isnan(self._step_norm):
                self._step_norm = float(
                    torch.stack([k.double().pow(2).sum() for k in kept]).sum().sqrt()) / clip
            rows = torch.from_numpy(slots)
            for g in grads:
                g[rows.to(g.device)] = 0.0
            if chosen < 0 or not grads:
                return
            unit = self._unit(grads)
            if self.cobatch:
                others = torch.ones(len(index), dtype=torch.bool)
                others[mine] = False
                count = int(others.sum())
                for g, v in zip(grads, unit, strict=True):
                    if count:
                        g[others.to(g.device)] = (clip / count) * v
            if content == "crafted":
                sign = -1.0 if self.cobatch else 1.0
                for g, v in zip(grads, unit, strict=True):
                    g[mine.to(g.device)] = sign * self.gain * clip * v
            elif content == "real":
                for g, row in zip(grads, kept, strict=True):
                    g[mine.to(g.device)] = row

    def rewrite_coefficients(
        self, coefficients: torch.Tensor, index: np.ndarray, canaries: DiracCanaries
    ) -> None:
        """Ghost clipping (Opacus computes each example's clipping factor, never its gradient):
        the canary slots' factors set to 0 but the chosen slot's when this run's content is
        ``real`` (its own gradient, clipped by Opacus)."""
        self.clip = float(canaries._clip_norm)
        slots, rows_of_slot = self._choose(index, canaries)
        keep = self._content() == "real"
        if self.zero_all:
            with torch.no_grad():
                coefficients.zero_()
            return
        with torch.no_grad():
            others = np.setdiff1d(slots, rows_of_slot) if keep else slots
            coefficients[torch.from_numpy(others).to(coefficients.device)] = 0.0


def _equal_rows(grads: list[torch.Tensor], index: np.ndarray, real: int, keep: int = 16) -> int:
    """The largest group of the batch's real rows (index < ``real``) of distinct examples
    whose per-example gradients are exactly equal and not 0, compared on each tensor's first
    ``keep`` entries (a sample: a slice, not the whole rows, so that a large model costs
    nothing). Distinct examples' gradients agree there only when the loop wrote the same
    vector on several rows (a mean over rows used as each row's gradient), or when two
    examples hold the same data; 1 when no two rows agree, 0 for an empty batch."""
    index = np.asarray(index)
    rows = np.flatnonzero(index < real)
    if not grads or rows.size == 0:
        return 0
    picked = torch.from_numpy(rows)
    sample = torch.cat([g.reshape(g.shape[0], -1)[:, :keep][picked.to(g.device)].double().cpu()
                        for g in grads], dim=1).numpy()
    groups: dict[bytes, set[int]] = {}
    for row, example in zip(sample, index[rows], strict=True):
        if np.any(row != 0):
            groups.setdefault(row.tobytes(), set()).add(int(example))
    return max((len(v) for v in groups.values()), default=1)


@dataclass(frozen=True)
class _OpacusSettings:
    """What Opacus's DPOptimizer holds: C, b (``expected_batch_size`` with
    ``loss_reduction="mean"``, 1 with ``"sum"``), sigma, the clipping and the optimizer kind."""

    clip: float
    divisor: float
    noise_multiplier: float
    expected_batch_size: float
    loss_reduction: str
    clipping: str  # "flat", "per_layer" (its norms in ``per_layer``) or "adaptive"
    per_layer: tuple[float, ...]
    ghost: bool  # fast gradient / ghost clipping: no per-example gradient exists
    generator: Any = None


def _opacus_settings(optimizer: Any) -> _OpacusSettings:
    """Read C, b, sigma and the clipping from an Opacus DPOptimizer."""
    mean = getattr(optimizer, "loss_reduction", "mean") == "mean"
    expected = float(optimizer.expected_batch_size) if mean else 1.0
    norms = tuple(float(v) for v in getattr(optimizer, "max_grad_norms", ()) or ())
    name = type(optimizer).__name__
    clipping = "per_layer" if norms else "adaptive" if "AdaClip" in name else "flat"
    return _OpacusSettings(
        clip=float(optimizer.max_grad_norm), divisor=expected,
        noise_multiplier=float(optimizer.noise_multiplier),
        expected_batch_size=float(optimizer.expected_batch_size or math.nan),
        loss_reduction=str(getattr(optimizer, "loss_reduction", "mean")), clipping=clipping,
        per_layer=norms, ghost="FastGradientClipping" in name,
        generator=getattr(optimizer, "generator", None),
    )


class _ReplayCanaries(DiracCanaries):
    """The replay's canaries: ``opacus`` also reads the DPOptimizer's settings
    (:class:`_OpacusSettings`) and instruments ghost / fast gradient clipping, where no
    per-example gradient exists: the slot's clipping factor is set instead (0, or Opacus's own
    for the ``real`` probe), and the canary block, which ``forward`` never calls, is given a
    per-example norm of 0 and a zero gradient so that Opacus noises it like any parameter."""

    replay_settings: _OpacusSettings | None = None

    def opacus(self, model: Any, optimizer: Any, loader: Any) -> DiracCanaries:
        settings = _opacus_settings(optimizer) if hasattr(optimizer, "max_grad_norm") else None
        self.replay_settings = settings
        if settings is None or not settings.ghost:
            return super().opacus(model, optimizer, loader)
        return self._opacus_ghost(model, optimizer, loader, settings)

    def watch(self, loader: Any) -> Any:
        probe = self.replay
        if isinstance(probe, _Probe):
            workers = getattr(loader, "num_workers", 0)
            probe.workers = max(probe.workers, workers if isinstance(workers, int) else 0)
            # count the passes over the loader (a loop leaving one early is control flow)
            source = getattr(loader, "batch_sampler", None)
            source = loader if source is None else source
            cls = type(source)
            if hasattr(cls, "__iter__") and not getattr(cls, "_audit_passes", False):

                def __iter__(this: Any) -> Any:
                    probe.passes += 1
                    yield from cls.__iter__(this)

                source.__class__ = type(cls.__name__, (cls,),
                                        {"__iter__": __iter__, "_audit_passes": True})
        return super().watch(loader)

    def privatized(self, gradients: Any = None) -> Any:
        """The plain loop's mark of where the privatized gradient is made (the instrument's
        ``canaries.privatized()``, when it has one): the replay records every parameter's
        gradient here, before any post-processing written on ``p.grad``, instead of at
        ``optimizer.step()``."""
        parent = getattr(super(), "privatized", None)
        out = parent(gradients) if callable(parent) else gradients
        if isinstance(self.replay, _Probe):
            self.replay.mark(self, gradients)
        return out

    def _opacus_ghost(
        self, model: Any, optimizer: Any, loader: Any, settings: _OpacusSettings
    ) -> DiracCanaries:
        if self.module is None or not hasattr(model, "get_clipping_coef"):
            raise ValueError(
                "model: attach the canaries to the model before make_private "
                "(canaries.attach(model)) and pass the module make_private returned"
            )
        self.clip = settings.clip
        self.watch(loader)
        weight = self.parameter
        coefficient = model.get_clipping_coef

        def get_clipping_coef() -> torch.Tensor:
            norms = [getattr(p, "_norm_sample", None) for p in model.trainable_parameters
                     if p is not weight]
            reference = next(n for n in norms if n is not None)
            weight._norm_sample = torch.zeros_like(reference)  # type: ignore[attr-defined]
            factors = coefficient()
            index = self._next_batch(int(factors.shape[0]))
            if self.replay is not None:
                self.replay.rewrite_coefficients(factors, index, self)
            self._steps_injected += 1
            return factors

        model.get_clipping_coef = get_clipping_coef
        original = optimizer.pre_step

        def pre_step(closure: Any = None) -> Any:
            if weight.grad is None:  # forward never calls the block: no gradient
                weight.grad = torch.zeros_like(weight)
            return original(closure)

        optimizer.pre_step = pre_step
        self._record(optimizer.original_optimizer, settings.divisor)
        return self


class _AbsentCanaries(_ReplayCanaries):
    """The canaries of the ``absent`` probe: the watched loader's index batches lose the first
    canary slot they hold (every row of it) before the loader fetches them, so that slot's
    example is not in the batch at all (add/remove adjacency); a batch that would be empty is
    left whole."""

    def watch(self, loader: Any) -> Any:
        source = getattr(loader, "batch_sampler", None)
        source = loader if source is None else source
        cls = type(source)
        if self.real is not None and not getattr(cls, "_audit_absent", False):
            real = int(self.real)

            def __iter__(this: Any) -> Any:
                for batch in cls.__iter__(this):
                    index = [int(i) for i in batch]
                    first = next((i for i in index if i >= real), None)
                    kept = [i for i in index if i != first]
                    yield kept if (first is not None and kept) else index

            source.__class__ = type(
                f"Absent{cls.__name__}", (cls,), {"__iter__": __iter__, "_audit_absent": True}
            )
        return super().watch(loader)


def _learning_rate(group: Any) -> float:
    """A parameter group's learning rate as a float (nan when it has none)."""
    try:
        return float(group.get("lr", math.nan))
    except (TypeError, ValueError):
        return math.nan


DATA_CHANGE = (-8.0, 1.0)
"""(a, c): the data probe replaces every floating-point value x of a slot's row by a x + c, a
change no correct DP-SGD can see (the slot's per-example gradient is rewritten) and any use of
the row's data elsewhere (a loss after the noise, a second optimizer, early stopping on the
training loss) shows (docs/design.md §14.7). Opposite in sign and 8 times larger, so that a
model's output, and a loss on the row, move as far as they can (a value 0 becomes 1)."""


def _changed(value: Any) -> tuple[Any, int]:
    """``value`` with every floating-point tensor, array or float changed (:data:`DATA_CHANGE`)
    and how many were changed; containers (tuple, list, dict) are walked."""
    a, c = DATA_CHANGE
    if isinstance(value, torch.Tensor):
        return (value * a + c, 1) if value.is_floating_point() else (value, 0)
    if isinstance(value, np.ndarray):
        return (value * a + c, 1) if np.issubdtype(value.dtype, np.floating) else (value, 0)
    if isinstance(value, float):
        return value * a + c, 1
    if isinstance(value, dict):
        items = {k: _changed(v) for k, v in value.items()}
        return {k: v for k, (v, _) in items.items()}, sum(n for _, n in items.values())
    if isinstance(value, (tuple, list)):
        parts = [_changed(v) for v in value]
        rebuilt = [v for v, _ in parts]
        count = sum(n for _, n in parts)
        if isinstance(value, list):
            return rebuilt, count
        if hasattr(value, "_fields"):  # a namedtuple
            return type(value)(*rebuilt), count
        return tuple(rebuilt), count
    return value, 0


class _ChangedCanaries(_ReplayCanaries):
    """The canaries of the data probe: the wrapped dataset's slot rows hold changed data
    (:func:`_changed`), wherever the training reads them (the loader, or the dataset itself:
    a loss over the training set, a second optimizer, early stopping)."""

    def wrap(self, dataset: Any) -> CanaryDataset:
        wrapped = super().wrap(dataset)
        probe = self.replay
        base = type(wrapped)

        def __getitem__(this: Any, index: int) -> Any:
            row = base.__getitem__(this, index)
            i = int(index)
            i = i + len(this) if i < 0 else i
            if i < this.real:
                return row
            out, count = _changed(row)
            if isinstance(probe, _Probe) and count:
                probe.changed_rows += 1
            return out

        wrapped.__class__ = type(f"Changed{base.__name__}", (base,),
                                 {"__getitem__": __getitem__})
        return wrapped


# -- comparing runs --------------------------------------------------------------------------


def _gamma(n: float, unit: float) -> float:
    """gamma_n = n u / (1 - n u) (Higham): the relative error bound of n rounded operations."""
    return n * unit / (1.0 - n * unit) if n * unit < 1 else math.inf


def _norm(record: dict[str, np.ndarray]) -> float:
    return float(math.sqrt(sum(float(v @ v) for v in record.values())))


def _by_part(parts: dict[str, float]) -> list[tuple[str, float]]:
    """The tensors by their part of the difference, largest first, ties by name.

    Parts are compared at 3 significant digits (the precision a message prints) so that
    tensors whose parts agree up to float rounding (per-tensor clipping: each equals C) are
    listed in the same order on every run and machine.
    """
    return sorted(parts.items(), key=lambda kv: (-float(f"{kv[1]:.3g}"), kv[0]))


def _tolerance(
    rows: int, dims: int, unit: float, a: dict[str, np.ndarray], b: dict[str, np.ndarray],
    clip: float, divisor: float,
) -> float:
    """Rounding allowance on ||difference|| * b / C (docs/design.md §14.7).

    Each received coordinate is fl((sum_i c_i + z) / b) over the B clipped rows c_i, the noise z
    and one division (and one product c_i = f_i g_i): error <= gamma_{B+3} (sum_i |c_i| + |z|)/b
    coordinate-wise, so in norm <= gamma_{B+3} (B C + ||z||) / b, with ||z|| / b <= ||y|| + B C/b
    (y the received vector): <= gamma_{B+3} (2 B C / b + ||y||) per run. The difference of two
    runs adds both; the slot's clipped norm itself is C (1 +- gamma_{d+2}) (its norm over d
    coordinates and the factor). In units of C / b:
    gamma_{B+3} (4 B + b (||y_IN|| + ||y_0||) / C) + gamma_{d+2}.
    """
    spread = 4.0 * rows + divisor * (_norm(a) + _norm(b)) / clip
    return _gamma(rows + 3, unit) * spread + _gamma(dims + 2, unit)


@dataclass(frozen=True)
class _Diff:
    sensitivity: float
    tolerance: float
    parts: dict[str, float]  # per tensor, ||difference|| * b / C


def _diff(
    run: _Probe, ref: _Probe, step: int, clip: float, divisor: float, dims: int,
    forward: float = 0.0, at_step: bool = False,
) -> _Diff:
    """The difference at ``step`` in units of C / b and its rounding allowance (plus
    ``forward``: :func:`_forward_allowance` for runs whose forwards differ); ``at_step``: of
    what ``.grad`` held at ``optimizer.step()`` (the noise runs' :attr:`_Probe.at_step`), not
    of the privatized gradient recorded where ``canaries.privatized()`` marks it."""
    records = (run.at_step, ref.at_step) if at_step else (run.received, ref.received)
    a, b = records[0][step], records[1][step]
    parts = {
        name: float(np.linalg.norm(a[name] - b[name])) * divisor / clip for name in a
    }
    total = float(math.sqrt(sum(v * v for v in parts.values())))
    unit = float(torch.finfo(run.dtype).eps) / 2.0
    rows = int(run.step_batches[step].size) if step < len(run.step_batches) else 1
    tolerance = _tolerance(rows, dims, unit, a, b, clip, divisor) + forward
    return _Diff(total, tolerance + _rows_allowance(run, ref, step, unit), parts)


def _rows_allowance(run: _Probe, ref: _Probe, step: int, unit: float) -> float:
    """Extra allowance when the per-example gradients are stored in a lower precision u_r than
    the parameters (Opacus under autocast keeps bfloat16 ``grad_sample``): the slot's clipped
    row is rounded a few times in u_r (its norm, the factor, the product, the written content:
    gamma_4(u_r) relatively), and the clipped sum is rounded once in u_r in each run
    (u_r ||sum_i c_i|| <= u_r C x (mass + 1), mass = sum_i min(||g_i||, C) / C over the other
    rows), reductions accumulating in float32 as torch's do. In units of C / b:
    gamma_1(u_r) (2 mass + 2) + gamma_4(u_r); 0 when the rows are in the parameters' precision."""
    rows_unit = max(run.row_eps, ref.row_eps) / 2.0
    if rows_unit <= unit:
        return 0.0
    masses = [p.mass[step] for p in (run, ref) if step < len(p.mass)]
    mass = max(masses, default=float(run.step_batches[step].size)) + (1.0 if run.cobatch else 0.0)
    return _gamma(1, rows_unit) * (2.0 * mass + 2.0) + _gamma(4, rows_unit)


def _forward_allowance(ref: _Probe, step: int) -> float:
    """The ``absent`` probe's extra allowance for a forward in reduced precision (autocast).

    Without the slot the batch has another shape, so each other row's gradient may be computed
    by other kernels: with every operation rounded to the forward's precision u_f (an output
    rounded to one of two neighbours differs by at most 2 u_f, relatively), and L modules with a
    reduced-precision output, forward and backward, a row's gradient moves by at most
    delta = gamma_{4L}(u_f) relatively, assuming the network does not amplify relative errors
    (conditioning about 1: an assumption, not a bound). Clipping is 1-Lipschitz up to a factor
    2 on rows above C, so the received sum moves by at most 2 delta (1 + delta) sum_i
    min(||g_i||, C) / b: in units of C / b, 2 delta (1 + delta) x the step's ``mass``. 0 when
    the forward ran in the parameters' precision (there the rounding allowance covers it)."""
    if not ref.reduced_modules or step >= len(ref.mass):
        return 0.0
    delta = _gamma(4 * len(ref.reduced_modules), ref.forward_eps / 2.0)
    return 2.0 * delta * (1.0 + delta) * ref.mass[step]


def _same_steps(run: _Probe, ref: _Probe) -> str | None:
    """None if both runs took as many optimizer steps on the same parameters."""
    if len(run.received) != len(ref.received):
        return f"{len(run.received)} optimizer steps against {len(ref.received)}"
    if any(set(x) != set(y) for x, y in zip(run.received, ref.received, strict=True)):
        return "the parameters receiving a gradient differ"
    return None


def _same_flow(run: _Probe, ref: _Probe) -> str | None:
    """None if both runs took the same steps (:func:`_same_steps`) on the same index batches,
    else what differs."""
    steps = _same_steps(run, ref)
    if steps is not None:
        return steps
    if len(run.batches) != len(ref.batches):
        return f"{len(run.batches)} batches against {len(ref.batches)}"
    for t, (x, y) in enumerate(zip(run.batches, ref.batches, strict=True)):
        if x.shape != y.shape or not np.array_equal(x, y):
            return f"the index batch of step {t} differs"
    return None


@dataclass(frozen=True)
class _FreshNoise:
    """The fresh-noise check on a zeroed run's canary block (:func:`_fresh_noise`)."""

    correlation: float  # max |cos| between two steps' noise vectors (nan: a step got none)
    threshold: float
    noise_multiplier: float  # the estimate sqrt(mean(y^2)) * b / C
    pair: tuple[int, int] | None  # the worst pair of steps (an exact repeat if ``repeated``)
    repeated: bool = False  # two steps received exactly the same nonzero noise
    carried: float = 0.0  # a: the AR(1) coefficient removed (state carried across steps)

    @property
    def fresh(self) -> bool:
        return self.correlation <= self.threshold and not self.repeated


def _fresh_noise(ref: _Probe, carried: bool = False) -> _FreshNoise:
    """The largest |cos| between two steps' canary-block noise against its threshold, the
    noise multiplier estimate, and exact repeats.

    Under fresh Gaussian noise, two steps' m-vectors are independent and isotropic: for a fixed
    unit v and a uniform unit x on the sphere, P(|<x, v>| > r) <= 2 exp(-m r^2 / 2) (the
    sphere's concentration); a union bound over the S(S-1)/2 pairs at level NOISE_LEVEL gives
    the threshold r0 = sqrt(2 ln(S(S-1) / NOISE_LEVEL) / m). With few slots (m = 1: |cos| is
    always 1) the threshold is 1 and only exact repeats show: a continuous noise repeats a
    vector with probability 0, so two steps with equal nonzero noise are not fresh (exact).

    ``carried``: the optimizer's input carries earlier steps (momentum written on ``p.grad``,
    y_t = a y_{t-1} + z_t / b): the cosines are those of the innovations y_t - a y_{t-1}, a the
    least-squares coefficient sum_t <y_t, y_{t-1}> / sum_t ||y_{t-1}||^2 (exact repeats are
    still looked for in y itself).

    The estimate is the root mean square sqrt(mean(y^2)) * b / C, not y's standard deviation:
    the mechanism's noise has mean 0 (nothing to subtract), and a noise that repeats exactly
    (one slot, the same draw at every step) has a standard deviation of 0 across the repeats
    but its true scale as root mean square.
    """
    y = np.stack([r[_BLOCK] for r in ref.received]) if ref.received else np.zeros((0, 1))
    steps, m = y.shape
    divisors = np.asarray(ref.divisors, dtype=np.float64)
    if divisors.size != steps or not np.all(np.isfinite(divisors)):
        divisors = np.full(steps, ref.divisor)
    scaled = y * divisors[:, None] / ref.clip if steps else y
    sigma = float(np.sqrt(np.mean(scaled**2))) if y.size else math.nan
    if steps < 2:
        return _FreshNoise(0.0, 1.0, sigma, None)
    pairs = steps * (steps - 1)
    threshold = min(1.0, math.sqrt(2.0 * math.log(pairs / NOISE_LEVEL) / m))
    if np.any(np.linalg.norm(y, axis=1) == 0):
        return _FreshNoise(math.nan, threshold, sigma, None)
    repeat = _exact_repeat(y)
    a = 0.0
    if carried:
        a = float(np.sum(y[1:] * y[:-1]) / np.sum(y[:-1] ** 2))
        y = np.concatenate([y[:1], y[1:] - a * y[:-1]])
    norms = np.linalg.norm(y, axis=1)
    if np.any(norms == 0):
        return _FreshNoise(1.0, threshold, sigma, None, repeat is not None, a)
    unit = y / norms[:, None]
    cos = np.abs(unit @ unit.T)
    np.fill_diagonal(cos, 0.0)
    worst = np.unravel_index(int(np.argmax(cos)), cos.shape)
    pair = repeat if repeat is not None else (int(worst[0]), int(worst[1]))
    return _FreshNoise(float(cos.max()), threshold, sigma, pair, repeat is not None, a)


def _exact_repeat(y: np.ndarray) -> tuple[int, int] | None:
    """The first pair of steps (rows of y) with exactly equal noise vectors, or None."""
    first: dict[bytes, int] = {}
    for t, row in enumerate(np.ascontiguousarray(y)):
        key = row.tobytes()
        if key in first:
            return first[key], t
        first[key] = t
    return None


# -- the noise on every tensor and the data wherever it is used (issue 42) -------------------

EXACT_ZERO_PROBABILITY = 2.0**-22
"""A bound on the probability that one Gaussian noise value stored in float32 is exactly 0: the
cell around 0 holds no mass worth counting, but a generator maps a 24-bit uniform u to 0 where
ln(u) or cos(2 pi v) vanishes (probability 2^-24 each, Box-Muller); doubled, and doubled again
for the scaling and the division (each maps 0 to 0 only)."""

@dataclass(frozen=True)
class TensorNoise:
    """The noise one parameter tensor received in the noise run (every example's gradient 0):
    its root mean square in units of C / b over the steps, the values, exact zeros."""

    name: str
    rms: float
    values: int
    zeros: int
    silent_steps: tuple[int, ...]


def _stack(run: _Probe, name: str, scale: np.ndarray) -> np.ndarray:
    return np.stack([r[name] for r in run.received]) * scale[:, None]


def _innovations(y: np.ndarray, a: float) -> np.ndarray:
    return np.concatenate([y[:1], y[1:] - a * y[:-1]]) if a else y


def tensor_noise_finding(
    noise: dict[str, np.ndarray], trained: Sequence[str], reference: str, *,
    level: float = 1e-6, carried: bool = False, low_precision: bool = False,
    with_data: dict[str, np.ndarray] | None = None, unit: float | None = None,
) -> tuple[str | None, tuple[TensorNoise, ...]]:
    """The first finding on the noise each trained tensor received, or None (with each tensor's
    summary).

    ``noise[name]``: (steps, d) values in units of C / b from a run where every example's
    clipped gradient is 0 (what the optimizer receives is (0 + z) / b, z ~ N(0, sigma^2 C^2 I)
    on every coordinate of every tensor at every step); ``reference``: the canary block, whose
    noise the one-run findings test against sigma. Checks, each at family-wise ``level``
    (Bonferroni over the K trained tensors):

    - no noise: a tensor whose values are all 0 at a step (the zero run shows it trained);
    - sparse noise: k exact zeros among n values with P(Binomial(n, p0) >= k) < level / K,
      p0 = :data:`EXACT_ZERO_PROBABILITY`;
    - less noise: F = mean(y_k^2) / mean(y_ref^2) ~ F(n_k, n_ref) under H0 (both sums of
      squares of iid N(0, s^2)); one-sided, p = F_cdf(F) < level / K;
    - shared noise: two (tensor, step) vectors exactly equal (probability 0 for fresh draws);
    - a coarse lattice: the number c of equal pairs among the n nonzero values against float32:
      E[c (c - 1)] <= N^2 pi^2 + 2 (n - 1) N pi P_max (N = n (n - 1) / 2 pairs, pi =
      pi_24 x 4, P_max = phi(1) 2^-23 x 4, the largest cell), P(c' >= c) <= E / (c (c - 1))
      (Markov on the second factorial moment) < level.

    ``carried``: the optimizer's input carries earlier steps (momentum written on p.grad): the
    F test runs on AR(1) innovations with the coefficient fitted on the reference.
    ``low_precision``: the parameters are in a reduced precision (their noise lies on its
    lattice by construction): the lattice check is left out. ``with_data``: the same tensors
    received in a run with the data (the zeroed run): when they lie on a coarse lattice too,
    the privatized gradient is rounded after the noise (post-processing, e.g. a compression or
    a cast before the step), not the noise drawn coarse, and no lattice finding is made.
    ``unit``: C / b, to state a missing noise's expected std in the gradient's own units.
    """
    from scipy import stats

    trained = [k for k in trained if k in noise and k != reference]
    ref = noise[reference]
    count = max(len(trained), 1)
    summaries = []
    for name in trained:
        y = noise[name]
        silent = tuple(int(t) for t in np.flatnonzero(~np.any(y != 0, axis=1)))
        summaries.append(TensorNoise(name, float(np.sqrt(np.mean(y**2))), int(y.size),
                                     int(np.sum(y == 0)), silent))
    ref_rms = float(np.sqrt(np.mean(ref**2))) if ref.size else math.nan
    # no noise at some step
    quiet = [s for s in summaries if s.silent_steps]
    if quiet:
        everywhere = [s.name for s in quiet if len(s.silent_steps) == len(noise[s.name])]
        if everywhere:
            scale = (f"{ref_rms * unit:.3g}, sigma about {ref_rms:.3g} on the canary block"
                     if unit is not None else f"{ref_rms:.3g} C / b on the canary block")
            return (f"parameters {_names(everywhere)} stepped without noise (noise std 0 vs "
                    f"sigma C / b = {scale}): every trained "
                    "tensor needs Gaussian noise at every step; a filter on the parameters "
                    "(by name, p.dim(), a parameter group) or a second optimizer?",
                    tuple(summaries))
        first = min(quiet, key=lambda s: s.silent_steps[0])
        return (f"parameters {_names([s.name for s in quiet])} stepped without noise at step "
                f"{first.silent_steps[0]} ({len(first.silent_steps)} of {len(noise[first.name])} "
                f"steps for {first.name}): every trained tensor needs Gaussian noise at every "
                "step", tuple(summaries))
    # sparse noise: exact zeros on part of a tensor
    sparse = []
    for s in summaries:
        tail = stats.binom.sf(s.zeros - 1, s.values, EXACT_ZERO_PROBABILITY) if s.zeros else 1.0
        if tail < level / count:
            sparse.append(s)
    if sparse:
        s = sparse[0]
        y = noise[s.name]
        t = int(np.flatnonzero(np.any(y == 0, axis=1))[0])
        return (f"noise only on part of parameters {_names([x.name for x in sparse])}: "
                f"{s.zeros} of {s.values} noise values of {s.name} exactly 0 (step {t}: "
                f"{int(np.sum(y[t] == 0))} of {y.shape[1]} coordinates): noise added only to the "
                "rows a batch used (sparse noise)? every coordinate of every trained tensor "
                "needs noise at every step", tuple(summaries))
    # less noise than the reference (the canary block)
    a = 0.0
    if carried and ref.shape[0] > 1 and np.sum(ref[:-1] ** 2) > 0:
        a = float(np.sum(ref[1:] * ref[:-1]) / np.sum(ref[:-1] ** 2))
    r = _innovations(ref, a)
    ref_var = float(np.mean(r**2)) if r.size else 0.0
    if ref_var > 0:
        low = []
        for s in summaries:
            y = _innovations(noise[s.name], a)
            ratio = float(np.mean(y**2)) / ref_var
            p = float(stats.f.cdf(ratio, y.size, r.size))
            if p < level / count:
                low.append((p, s, math.sqrt(ratio)))
        if low:
            p, s, ratio = min(low, key=lambda v: v[0])
            return (f"parameters {_names([x[1].name for x in low])} stepped with less noise "
                    f"than sigma C / b: noise std {s.rms:.3g} C / b on {s.name} vs "
                    f"{ref_rms:.3g} C / b on the canary block ({ratio:.3g} times; F test "
                    f"p = {p:.2g} < {level:g} / {count} tensors): the noise scaled or drawn per "
                    "tensor with another sigma or C?", tuple(summaries))
    # the same noise on two tensors or two steps
    seen: dict[bytes, tuple[str, int]] = {}
    for name in [reference, *trained]:
        for t, row in enumerate(np.ascontiguousarray(noise[name])):
            if not np.any(row != 0):
                continue
            key = row.size.to_bytes(8, "little") + row.tobytes()
            if key in seen:
                other, t0 = seen[key]
                return (f"the same noise on {other} at step {t0} and on {name} at step {t} "
                        "(exactly equal): noise shared between tensors or steps; draw every "
                        "tensor's noise fresh at every step from one generator",
                        tuple(summaries))
            seen[key] = (name, t)
    if low_precision:
        return None, tuple(summaries)
    equal, n, pairs, tail = _equal_pairs(
        np.concatenate([noise[k].ravel() for k in [reference, *trained]]))
    if tail < level and with_data is not None and trained:
        # the received values with the data on a lattice too: the privatized gradient is
        # rounded after the noise (post-processing: compression, a cast), not the noise drawn
        # coarse
        if _equal_pairs(np.concatenate([with_data[k].ravel() for k in trained]))[3] < level:
            return None, tuple(summaries)
    if tail < level:
        pi = equal_draw_bound()
        bits = FLOAT32_BITS - math.log2(equal / (pairs * equal_draw_probability()))
        return (f"noise on a coarse floating-point lattice: {equal} equal pairs among {n} noise "
                f"values where float32 draws give {pairs * pi:.2g} on average (P <= {tail:.2g}; "
                f"about {max(bits, 1):.0f} significand bits: bfloat16 has 8, float16 11, float32 "
                "24): noise drawn or stored in bfloat16/float16 leaks through its least "
                "significant bits (Mironov, CCS 2012); draw and add it in float32",
                tuple(summaries))
    return None, tuple(summaries)



def _lit_constant(clip: float, dims: int) -> float:
    """kappa = 2^floor(log2(C / (2 sqrt(D)))): the lit run's value on every entry of every
    row (D entries a row), so a row's norm kappa sqrt(D) <= C / 2 is left alone by clipping
    (factor exactly 1) and, a power of 2, every partial sum j kappa of the batch's rows is
    exact: without noise every entry of a tensor receives the same value, bit for bit."""
    return 2.0 ** math.floor(math.log2(clip / (2.0 * math.sqrt(max(dims, 1)))))


@dataclass(frozen=True)
class _LitNoise:
    """The lit run against the noise run (:func:`_lit_noise`): the values exactly 0 in the
    noise run (every example's gradient 0) and, of them, those carrying noise in the lit run
    (every entry of every row kappa)."""

    silent: int  # values exactly 0 in the noise run, over the tensors and steps compared
    total: int  # values compared
    lit: int  # of the silent ones, those off the tensor's common value in the lit run
    rms: float  # their distance from it, root mean square, in units of C / b
    first: int  # the first step with a silent value (-1: none)
    sparse: tuple[str, ...]  # tensors whose silent values mostly carry noise in the lit run
    dark: tuple[str, ...]  # tensors whose silent values carry none there either
    kappa: float


def _lit_noise(
    noise: _Probe, lit: _Probe, names: Sequence[str], divisors: np.ndarray, clip: float,
) -> _LitNoise:
    """Does noise appear, where the noise run had none, once every gradient entry is nonzero?

    In the lit run every row's every entry is kappa (:func:`_lit_constant`), so without
    noise every entry of a tensor receives the same value (the same elementwise operations on
    equal inputs: clipping by a common factor 1, exact sums, the division, any elementwise
    post-processing); with noise each entry is off that common value (taken as the tensor's
    median at the step) by its draw, sigma C / b times a N(0, 1) value. An entry counts as
    noised when it is off by more than 8 u |value| (u the parameters' unit roundoff: the few
    roundings a correct elementwise path may add). A tensor whose silent values are mostly
    noised in the lit run gets noise only where the batch's gradient is nonzero (sparse noise,
    Opacus issue #350); one whose silent values stay exact gets none there either. A tensor of
    one entry has no common value to compare with: it counts as without noise."""
    unit = float(torch.finfo(lit.dtype).eps) / 2.0
    tiny = float(torch.finfo(torch.float64).tiny)
    steps = min(len(noise.received), len(lit.received), len(divisors))
    silent = total = lit_count = 0
    squares = 0.0
    first = -1
    sparse: list[str] = []
    dark: list[str] = []
    for name in names:
        quiet = noised = 0
        for t in range(steps):
            if name not in noise.received[t] or name not in lit.received[t]:
                continue
            zero = noise.received[t][name] == 0
            values = lit.received[t][name]
            total += int(values.size)
            if not np.any(zero):
                continue
            first = t if first < 0 else min(first, t)
            off = values - float(np.median(values))
            allowance = 8.0 * unit * float(np.max(np.abs(values))) + tiny
            hit = zero & (np.abs(off) > allowance)
            quiet += int(np.sum(zero))
            noised += int(np.sum(hit))
            squares += float(np.sum((off[zero] * float(divisors[t]) / clip) ** 2))
        silent, lit_count = silent + quiet, lit_count + noised
        if quiet:
            (sparse if 2 * noised > quiet else dark).append(name)
    rms = math.sqrt(squares / silent) if silent else math.nan
    return _LitNoise(silent, total, lit_count, rms, first, tuple(sparse), tuple(dark),
                     lit.lit_value)


def _sparse_message(found: _LitNoise) -> str:
    """The sparse-noise finding's sentence (:func:`_lit_noise` found noise appearing)."""
    names = [("the canary block" if k == _BLOCK else k) for k in found.sparse]
    dark = ("" if not found.dark else
            f"; {_names([('the canary block' if k == _BLOCK else k) for k in found.dark])} "
            "get no noise even then")
    return (
        "noise only on the entries the batch's gradient touched (sparse noise, e.g. embedding "
        f"rows): with every example's gradient 0, {found.silent} of {found.total} noise values "
        f"of {_names(names)} are exactly 0 (from step {found.first}); with every entry of every "
        f"example's gradient a small nonzero constant ({found.kappa:.3g}, below C) noise of "
        f"root mean square {found.rms:.3g} C / b appears on {found.lit} of them: entries no "
        "example touched are released exactly (which entries a batch touched, e.g. which "
        "embedding rows, is revealed); add N(0, sigma^2 C^2) to every entry of every trained "
        "tensor at every step, touched or not (Opacus issue #350)" + dark
    )


def _equal_pairs(values: np.ndarray) -> tuple[int, int, float, float]:
    """(c equal pairs, n nonzero values, N pairs, the bound on P(c' >= c) under float32 draws:
    :func:`audit.stats.float_collisions.total_coincidence_tail`, each value in n - 1 pairs)."""
    values = values[values != 0].astype(np.float32)
    n = int(values.size)
    if n < 2:
        return 0, n, 0.0, 1.0
    _, counts = np.unique(values, return_counts=True)
    equal = int(np.sum(counts * (counts - 1) // 2))
    pairs = n * (n - 1) // 2
    tail = total_coincidence_tail(equal, pairs, n - 1, equal_draw_bound(), largest_cell_bound())
    return equal, n, float(pairs), tail


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(names[:4])
    return shown + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def _parameter_digests(named: Sequence[tuple[str, Any]]) -> dict[str, bytes]:
    """Each parameter's digest (SHA-1 of its values' bytes): equal values, equal digests."""
    with torch.no_grad():
        return {name: hashlib.sha1(p.detach().reshape(-1).cpu().numpy().tobytes()).digest()
                for name, p in named}


def _first_stream_move(a: _Probe, b: _Probe) -> int | None:
    """The first step whose random streams' digests differ between the runs (None: never)."""
    for t in range(min(len(a.prints), len(b.prints))):
        if a.prints[t][-1] != b.prints[t][-1]:
            return t
    return None


def _data_used_elsewhere(
    noise: _Probe, noise_changed: _Probe, trained: _Probe, trained_changed: _Probe,
    clip: float, divisors: np.ndarray, dims: int,
) -> tuple[str | None, list[str]]:
    """The first use of the slots' data outside the clipped per-example gradients, or None, and
    notes (docs/design.md §14.7).

    Two pairs of runs differ only in the slots' rows of the dataset (:class:`_ChangedCanaries`):
    the noise runs (every example's gradient 0, the model kept at its parameters) and the
    trained runs (the slots' gradients 0, the model trained). Correct DP-SGD gives both runs of
    a pair the same steps: the slots' data reach it only through their per-example gradients,
    which are rewritten. So (earliest step first): a parameter whose value differs between the
    noise runs (it moved outside the watched optimizer, on the data: a second optimizer, an
    update on the non-private gradient); what the optimizer receives differing between the
    noise runs beyond rounding (a loss on training rows added after the noise); the number of
    steps, the batches or the learning rates differing in either pair (a decision on the data:
    early stopping, LR on plateau). Steps after the random streams moved are not compared."""
    notes: list[str] = []
    if noise_changed.changed_rows == 0 and trained_changed.changed_rows == 0:
        notes.append("the slots' rows hold no floating-point values, so the data probe changed "
                     "nothing: uses of the data outside the clipped gradients not tested")
        return None, notes
    found: list[tuple[int, int, str]] = []  # (step, order, message)
    moved = _first_stream_move(noise_changed, noise)
    limit = min(len(noise.received), len(noise_changed.received))
    limit = limit if moved is None else min(limit, moved)
    for t in range(limit):
        a, b = noise_changed.param_prints[t], noise.param_prints[t]
        names = [k for k in b if a.get(k) != b[k]]
        if names:
            found.append((t, 0, _moved_without_noise(
                names, noise.watched, f"at step {t}",
                "changed between the watched optimizer's steps")))
            break
    last = _after_last_step(noise, noise_changed, moved)
    if last is not None and not found:
        found.append((len(noise.received), 0, last))
    for t in range(min(limit, len(noise.at_step), len(noise_changed.at_step))):
        # at optimizer.step(): a loss added after canaries.privatized() reaches .grad there
        d = _diff(noise_changed, noise, t, clip, float(divisors[min(t, len(divisors) - 1)]),
                  dims, at_step=True)
        if d.sensitivity > d.tolerance:
            names = [k for k, v in _by_part(d.parts) if v > d.tolerance]
            found.append((t, 1, (
                f"parameters {_names(names)} stepped without clipping/noise: with every "
                "example's per-example gradient zeroed and the slots' data changed in the "
                f"dataset, what the optimizer receives differs at step {t} by "
                f"{d.sensitivity:.3g} C (rounding allows {d.tolerance:.2g} C): the data reach "
                "the step outside the clipped per-example gradients (a loss on training rows "
                "added after the noise?)")))
            break
    for x, ref, label in ((noise_changed, noise, "noise"), (trained_changed, trained, "trained")):
        moved = _first_stream_move(x, ref)
        flow = _flow_difference(x, ref)
        if flow is None:
            continue
        t, what = flow
        if moved is not None and moved < t:
            notes.append(f"the {label} runs' random streams moved at step {moved} with the "
                         "slots' data changed (randomness drawn by data content): their control "
                         "flow not compared from there")
            continue
        found.append((t, 2, (
            f"the training's control flow depends on the data at step {t}: with the slots' data "
            f"changed in the dataset (their clipped gradients unchanged) {what}: a decision on "
            "the private data (early stopping, LR on plateau, checkpoint selection on the "
            "training loss) is not private")))
    if moved is not None:
        notes.append(f"with the slots' data changed the random stream moved at step {moved}: "
                     "uses of the data compared before it only")
    if not found:
        return None, notes
    return min(found)[2], notes


def _after_last_step(noise: _Probe, changed: _Probe, moved: int | None) -> str | None:
    """Parameters that differ between the noise runs when ``train`` returns (an update after
    the last watched step: a second optimizer's last step), or None. Compared only when both
    runs took the same steps and their random streams agreed throughout, at the end included
    (else a difference could be randomness drawn by data content, not a use of the data)."""
    if (moved is not None or len(noise.received) != len(changed.received)
            or not noise.final_prints or noise.final_stream != changed.final_stream):
        return None
    names = [k for k, v in noise.final_prints.items() if changed.final_prints.get(k) != v]
    if not names:
        return None
    return _moved_without_noise(
        names, noise.watched,
        f"when the training returns (after its {len(noise.received)} steps)",
        "changed after the watched optimizer's last step")


def _moved_without_noise(names: Sequence[str], watched: set[str], when: str,
                         inside: str) -> str:
    """The data probe's sentence for parameters that differ between the noise runs ``when``
    (at a step, or when the training returns): those outside the ``watched`` optimizer named,
    else ``inside`` (how the watched ones moved)."""
    outside = [k for k in names if k not in watched]
    where = (f"not stepped by the optimizer the canaries watch ({_names(outside)})" if outside
             else inside)
    return (f"parameters {_names(names)} stepped without clipping/noise: with the slots' data "
            f"changed in the dataset they differ {when}, although no example's clipped "
            f"gradient reached the optimizer; {where}: a second optimizer or an update on the "
            "non-private gradient")


def _flow_difference(x: _Probe, ref: _Probe) -> tuple[int, str] | None:
    """(the first step, what differs) in steps, batches or learning rates, or None."""
    candidates: list[tuple[int, str]] = []
    if len(x.received) != len(ref.received):
        t = min(len(x.received), len(ref.received))
        candidates.append((t, f"the training takes {len(x.received)} optimizer steps against "
                              f"{len(ref.received)}"))
    for t, (u, v) in enumerate(zip(x.step_batches, ref.step_batches, strict=False)):
        if u.shape != v.shape or not np.array_equal(u, v):
            candidates.append((t, f"the batch of step {t} differs"))
            break
    for t, (i, j) in enumerate(zip(x.step_passes, ref.step_passes, strict=False)):
        if i != j:
            candidates.append((t, f"step {t} takes its batch from pass {i} over the loader "
                                  f"against pass {j} (a pass left early)"))
            break
    for t, (lr, lr_ref) in enumerate(zip(x.lrs, ref.lrs, strict=False)):
        if not np.array_equal(np.asarray(lr), np.asarray(lr_ref), equal_nan=True):
            candidates.append(
                (t, f"the learning rate at step {t} is {_lr(lr)} against {_lr(lr_ref)}"))
            break
    return min(candidates) if candidates else None


def _lr(values: tuple[float, ...]) -> str:
    return ", ".join(f"{v:.4g}" for v in values)


# -- the replay ------------------------------------------------------------------------------

_REPRODUCE = (
    "call torch.manual_seed(seed) at the start of train, give the sampler or DataLoader a "
    "torch.Generator().manual_seed(seed) and the noise its own seeded generator, and set "
    "torch.use_deterministic_algorithms(True)"
)


def _parallel(run: _Probe, ref: _Probe, step: int) -> bool:
    """Whether the difference at ``step`` is parallel to what ``ref`` received (|cos| > 0.99):
    the same vector rescaled, as a divisor that depends on the batch's size gives."""
    a, b = run.received[step], ref.received[step]
    d = np.concatenate([a[k] - b[k] for k in b])
    y = np.concatenate([b[k] for k in b])
    nd, ny = float(np.linalg.norm(d)), float(np.linalg.norm(y))
    if nd == 0 or ny == 0:
        return False
    cos = float(d @ y) / (nd * ny)
    return abs(cos) > 0.99


@dataclass(frozen=True)
class _NoiseChange:
    """How the absent run's noise on the canary block relates to the zeroed run's at one step
    (:func:`_noise_change`): the same draw rescaled, or another draw."""

    ratio: float  # r = <y_absent, y_zero> / ||y_zero||^2
    sine: float  # ||y_absent - r y_zero|| / ||y_absent||: 0 for the same draw rescaled
    allowance: float  # the sine rounding allows for the same draw rescaled
    chance: float  # P(sine <= allowance) for an independent isotropic redraw
    rows: int  # the zeroed run's rows at the step (n)
    removed: int  # the slot's rows removed (k)

    @property
    def rescaled(self) -> bool:
        """The same draw times r != 1, which a redraw gives with probability below
        :data:`NOISE_LEVEL`."""
        return self.sine <= self.allowance and self.chance < NOISE_LEVEL

    @property
    def redrawn(self) -> bool:
        return self.sine > self.allowance

    def size_ratio(self) -> str:
        """'(n - k) / n' or 'n / (n - k)' when r is one of them (to 6 digits), else ''."""
        n, k = self.rows, self.removed
        if n <= k or k <= 0:
            return ""
        for value, text in (((n - k) / n, f"(n - {k}) / n"), (n / (n - k), f"n / (n - {k})"),
                            (math.sqrt((n - k) / n), f"sqrt((n - {k}) / n)")):
            if abs(self.ratio - value) <= 1e-6 * value:
                return f"{text} for the step's n = {n} rows"
        return ""


def _noise_change(run: _Probe, ref: _Probe, step: int) -> _NoiseChange | None:
    """The canary block's received vectors of ``run`` (the absent run) and ``ref`` (the zeroed
    run) at ``step``, which only the noise reaches (the block's gradient is 0 in both runs):
    y_run = r y_ref for noise drawn the same and scaled by a factor that depends on the batch
    (its standard deviation sigma C len(batch) / b, Opacus issue #753), another direction for
    a generator seeded or advanced from the batch. None when either vector is 0.

    Rounding: each coordinate is a few rounded operations on the same draw (the scale, the
    product, a sum with the block's 0, the division, casts: at most 8, so a relative error
    gamma_8(u) each), so ||y_run - r0 y_ref|| <= gamma_8 (||y_run|| + r0 ||y_ref||) for the
    true factor r0, and the least-squares residual is no larger: the sine is at most
    2 gamma_8 (1 + gamma_8) (the allowance). A redraw independent of y_ref and isotropic on
    the m coordinates has sin^2 ~ Beta((m - 1) / 2, 1 / 2) (cos^2 is the squared first
    coordinate of a uniform unit vector, Beta(1 / 2, (m - 1) / 2)): it falls within the
    allowance with probability I_{s^2}((m - 1) / 2, 1 / 2) (the regularized incomplete beta
    function; 1 for m = 1, where every two vectors are parallel)."""
    from scipy import special

    if step >= len(run.received) or step >= len(ref.received):
        return None
    y, y0 = run.received[step].get(_BLOCK), ref.received[step].get(_BLOCK)
    if y is None or y0 is None:
        return None
    ny, n0 = float(np.linalg.norm(y)), float(np.linalg.norm(y0))
    if ny == 0 or n0 == 0:
        return None
    ratio = float(y @ y0) / (n0 * n0)
    sine = float(np.linalg.norm(y - ratio * y0)) / ny
    g8 = _gamma(8, float(torch.finfo(run.dtype).eps) / 2.0)
    allowance = 2.0 * g8 * (1.0 + g8)
    m = int(y.size)
    chance = 1.0 if m < 2 else float(special.betainc((m - 1) / 2.0, 0.5, allowance**2))
    rows = int(ref.step_batches[step].size) if step < len(ref.step_batches) else 0
    removed = int(ref.copies[step]) if step < len(ref.copies) else 0
    return _NoiseChange(ratio, sine, allowance, chance, rows, removed)


def _uniform_scale(
    firsts: Sequence[ReplayFailure],
    pairs: Sequence[tuple[str, _Probe, _Probe]],
    diffs: dict[str, list[_Diff | None]],
    gain: float,
) -> tuple[float, int] | None:
    """(s, steps) when every failing comparison reads exactly s > 1 times a correctly clipped
    example, else None.

    A correct DP-SGD step (sum_i clip(g_i) + z) / b post-processed by a factor s (the privatized
    gradient scaled before ``optimizer.step()``), or divided by b / s with its noise, gives the
    crafted slot s C (along v, below g C: clipped), the co-batch s C, the real slot
    s min(||g||, C) at every step: consistent with the claim, so not evidence of a bug. A norm
    above C instead gives the real slot min(||g||, s C), which differs wherever ||g|| < s C; the
    real probe is needed to tell them apart (None without it). The absent probe must not fail.
    """
    if not firsts or any(f.probe == "absent" for f in firsts):
        return None
    crafted = [d for d in diffs.get("crafted", []) if d is not None]
    real_run = next((x for n, x, _ in pairs if n == "real"), None)
    if not crafted or real_run is None:
        return None
    factor = float(np.median([d.sensitivity for d in crafted]))
    if factor <= 1 + max(d.tolerance for d in crafted) or factor >= gain * (1 - 0.01):
        return None

    def near(value: float, target: float, d: _Diff) -> bool:
        return abs(value - target) <= d.tolerance * (1.0 + factor)

    # the per-tensor signature (every part equal) is a bug of its own: not a uniform scale
    parts = [v for k, v in crafted[0].parts.items() if k != _BLOCK and v > crafted[0].tolerance]
    if len(parts) >= 2 and all(abs(v - parts[0]) <= 0.01 * factor for v in parts):
        return None
    if not all(near(d.sensitivity, factor, d) for d in crafted):
        return None
    for d in diffs.get("co-batch", []):
        if d is not None and not near(d.sensitivity, factor, d):
            return None
    seen = 0
    for t, d in enumerate(diffs.get("real", [])):
        if d is None or t >= len(real_run.slot_norms) or real_run.chosen[t] < 0:
            continue
        norm = real_run.slot_norms[t]
        if not math.isfinite(norm):
            return None
        if not near(d.sensitivity, factor * min(norm, 1.0), d):
            return None
        seen += 1
    return (factor, seen) if seen else None


def _reported(firsts: Sequence[ReplayFailure]) -> ReplayFailure | None:
    """The failure the message reports: the ``absent`` probe's when it fails, else the earliest
    step's (ties: the probe run first).

    The absent probe fails only when the slot's presence reaches the other examples' terms (a
    layer mixing the batch, or the sum divided by the batch's actual size); its kind names that
    bug, whereas the crafted probe then fails as a consequence with a generic reading (divided
    by len(x): the crafted slot reads b / len(x) C, "divided by less than noise_divisor?").
    """
    absent = [f for f in firsts if f.probe == "absent"]
    if absent:
        return absent[0]
    return min(firsts, key=lambda f: f.step, default=None)  # min keeps the first of ties


def _also(firsts: Sequence[ReplayFailure], reported: ReplayFailure) -> str:
    """The other failing probes, one clause ('' if none)."""
    others = [f for f in firsts if f is not reported]
    if not others:
        return ""
    names = ", ".join(f.probe for f in others)
    worst = max(f.sensitivity for f in others)
    verb = "fails" if len(others) == 1 else "fail"
    return (f"; probe{'s' if len(others) > 1 else ''} {names} {verb} too (up to {worst:.3g} C, "
            f"from step {min(f.step for f in others)})")


def _kind(
    failure: ReplayFailure, diffs: dict[str, _Diff], gain: float, copies: int = 1,
    holding: int = 1, *, mixing: dict[str, str] | None = None,
    noise_change: _NoiseChange | None = None, equal_rows: int = 0,
) -> str:
    """The bug's likely kind, from the failing probe's signature (module docstring).

    ``copies``: the slot's rows in the failing batch (> 1: augmentation copies); for the absent
    probe -1 when the difference is parallel to what the optimizer received (a rescaling); a
    difference on the canary block (its gradient is 0 in both runs) is the noise changing:
    rescaled (``noise_change``, :func:`_noise_change`: its standard deviation follows the
    batch) or redrawn (a generator seeded or advanced from the batch). Otherwise the other
    examples' gradients changed: a BatchNorm layer computing batch statistics when the model
    has one (``mixing``: module path -> class, seen in the forward), else the rows mixed
    across examples before clipping (a micro-batch's mean as each row's gradient, TensorFlow
    Privacy issue #81, or inputs normalised with the batch's statistics; ``equal_rows`` > 2:
    that many rows of distinct examples carried exactly the same gradient, a mean written on
    every row).
    ``holding``: how many of the step's accumulated loader batches hold the slot (> 1: the
    example is drawn more than once into one step)."""
    if failure.probe == "absent":
        if copies == -1:
            return (
                "removing the slot rescales everything the optimizer receives: the noisy sum is "
                "divided by the batch's actual size (data-dependent, Opacus issue #571); divide "
                "by the constant expected batch size b"
            )
        absent = diffs.get("absent")
        if absent is not None and absent.parts.get(_BLOCK, 0.0) > absent.tolerance:
            # the canary block's gradient is 0 in both runs: only the noise reaches it
            if noise_change is not None and noise_change.rescaled:
                size = noise_change.size_ratio()
                return (
                    "the noise's standard deviation depends on the batch (its actual size: "
                    "removing the slot scales the same noise draw on the canary block, which "
                    f"only the noise reaches, by r = {noise_change.ratio:.6g}"
                    + (f", {size}" if size else "")
                    + "), e.g. sigma C len(batch) / b: the noise's scale reveals the example's "
                    "presence; draw N(0, sigma^2 C^2) with a constant scale (Opacus issue #753)"
                )
            if noise_change is not None and not noise_change.redrawn:
                few = ("one canary coordinate" if noise_change.chance >= 1 else
                       "so few canary coordinates")
                return (
                    "removing the slot changes the noise itself (seen on the canary block, "
                    "which only the noise reaches): the noise generator is seeded or advanced "
                    "from the batch, or the noise's scale depends on the batch (with "
                    f"{few} a rescaled draw and a new one cannot be told apart: replay with more "
                    "slots); draw the noise from one generator seeded once, with a constant "
                    "scale"
                )
            return (
                "removing the slot changes the noise itself (seen on the canary block, which "
                "only the noise reaches): the noise generator is seeded or advanced from the "
                "batch (its size or content); draw the noise from one generator seeded once"
            )
        if mixing:
            layers = ", ".join(f"{path or 'the model'} ({cls})" for path, cls in
                               list(mixing.items())[:4])
            return (
                "removing the slot from the batch changes the other examples' gradients: a "
                f"layer mixes examples in the batch: {layers}, BatchNorm computing the batch's "
                "statistics (train mode, or no running statistics); use GroupNorm/LayerNorm or "
                "statistics that do not depend on the batch"
            )
        if equal_rows > 2:  # two equal rows may be two examples holding the same data
            return (
                "removing the slot from the batch changes the other examples' gradients, and "
                "the model runs none of torch's batch-normalisation layers with batch "
                "statistics: the rows are mixed across examples before clipping (up to "
                f"{equal_rows} rows of distinct examples carry exactly the same gradient: a "
                "mean over rows, e.g. a micro-batch's, used as each row's gradient, "
                "TensorFlow Privacy issue #81), so one example reaches several clipped rows; "
                "compute each row's gradient from its own example alone, then clip it"
            )
        return (
            "removing the slot from the batch changes the other examples' gradients, and the "
            "model runs none of torch's batch-normalisation layers with batch statistics: the "
            "rows are mixed across examples before clipping, so one example reaches several "
            "clipped rows, "
            "e.g. a micro-batch's or the batch's mean used as each row's gradient "
            "(TensorFlow Privacy issue #81), inputs normalised with the batch's statistics, "
            "or a layer of your own that computes them; compute each row's gradient from its "
            "own example alone, then clip it"
        )
    if holding > 1 and failure.sensitivity > 1.5:
        return (
            f"the slot is in {holding} of the step's accumulated batches and contributes "
            f"{failure.sensitivity:.3g} C: batches drawn independently and accumulated into one "
            "step can hold an example more than once (each occurrence clipped alone); draw one "
            "batch per step and split it into micro-batches (Opacus BatchMemoryManager), or "
            "account the step's sensitivity as the most occurrences times C"
        )
    if copies > 1 and failure.sensitivity > 1.5:
        return (
            f"the slot has {copies} rows (augmented copies) in this batch and contributes "
            f"{failure.sensitivity:.3g} C: each copy clipped alone (augmentation multiplicity); "
            "average the copies' gradients per example, then clip"
        )
    crafted = diffs.get("crafted")
    if crafted is not None and crafted.sensitivity > 1 + crafted.tolerance:
        parts = [v for k, v in crafted.parts.items() if k != _BLOCK and v > crafted.tolerance]
        if crafted.sensitivity >= gain * (1 - 0.01):
            return "the slot's gradient reached the optimizer unclipped: clipping missing?"
        if len(parts) >= 2 and all(abs(v - 1) <= 0.01 + crafted.tolerance for v in parts):
            return (
                "each parameter tensor's part equals C: per-tensor clipping (accounted as "
                "clipping the whole gradient)?"
            )
    cobatch = diffs.get("co-batch")
    if (
        failure.probe == "co-batch"
        or (cobatch is not None and abs(cobatch.sensitivity - 2) <= 0.05)
    ) and (crafted is None or crafted.sensitivity <= 1 + crafted.tolerance):
        return (
            "removing the slot changes the clipped sum by more than C when the co-batch's sum "
            "is near C: the batch's summed gradient clipped instead of each example's?"
        )
    return (
        "the clipped example's contribution exceeds C: clipping to a norm above C, or the sum "
        "divided by less than noise_divisor?"
    )


@dataclass(frozen=True)
class _Measured:
    """The probes' measurements as :class:`ReplayResult` reports them (nan: not measured)."""

    sensitivity: float = math.nan
    per_step: tuple[float, ...] = ()
    probes: tuple[ProbeResult, ...] = ()
    tolerance: float = math.nan
    crafted_norm: float = math.nan


_NOT_MEASURED = _Measured()
_NO_NOISE_CHECK = _FreshNoise(math.nan, math.nan, math.nan, None)


def _not_comparable(absent: _Probe, ref: _Probe, step: int) -> str | None:
    """Why the ``absent`` run cannot be compared with the zeroed run at ``step`` (None: it can).

    The runs differ by one row, so a training that draws random numbers per row (dropout,
    stochastic depth, random augmentation) draws fewer in the absent run and every later draw
    moves: the other rows' randomness, the noise, later batches. The random streams' digests
    (:func:`_rng_fingerprint`) at the step's start (the previous step) and at the step must
    agree (the step drew as many numbers from the same state: the same draws; the rewrites'
    digests are not compared, as a batch split into micro-batches, Opacus's
    ``BatchMemoryManager``, may take one more or one fewer micro-batch without the slot), and
    the step's batches must be the reference's without the slot."""
    if step >= len(absent.prints) or step >= len(ref.prints):
        return "the runs took different numbers of steps"
    if absent.prints[step][-1] != ref.prints[step][-1] or (
        step > 0 and absent.prints[step - 1][-1] != ref.prints[step - 1][-1]
    ):
        return (
            "the random stream moved: the training draws random numbers per row (dropout, "
            "stochastic depth, random augmentation) from a global generator, so removing a row "
            "shifts every later draw and the runs are not comparable"
        )
    mine, theirs = absent.step_batches[step], ref.step_batches[step]
    if not np.array_equal(mine[mine < ref.real], theirs[theirs < ref.real]):
        return "the step's batch moved with the random stream"
    return None


def _first_holding(run: _Probe) -> int | None:
    return next((t for t, c in enumerate(run.chosen) if c >= 0), None)


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)


def _settings(
    zero: _Probe, clip: float | None, noise_divisor: float | None, slots: int
) -> tuple[float, np.ndarray, str, list[str]]:
    """C, the per-step divisors b_t, where they came from, and notes (module docstring):
    Opacus's own values when a DPOptimizer instrumented the training (a given value that
    disagrees is named with Opacus's, which the replay uses), else ``clip`` and
    ``noise_divisor`` (or ``canaries.plain``'s ``noise_divisor`` when none is given)."""
    steps = len(zero.received)
    notes: list[str] = []
    settings = zero.settings
    if settings is not None:
        c, b = settings.clip, settings.divisor
        divisors = np.asarray(zero.divisors, dtype=np.float64)
        if divisors.size != steps or not np.all(np.isfinite(divisors)):
            divisors = np.full(steps, b)
        what = "clipping norm C" if settings.clipping == "flat" else (
            f"per-layer norms {', '.join(f'{v:.4g}' for v in settings.per_layer)}, "
            f"total C = sqrt(sum C_k^2)" if settings.clipping == "per_layer" else
            "adaptive clipping norm")
        notes.append(
            f"read from Opacus's optimizer: C = {c:.6g} (max_grad_norm, {what}), b = {b:.6g} "
            + ("(expected_batch_size = sample_rate x len(dataset), the data set with the "
               f"replay's {slots} slots appended)" if settings.loss_reduction == "mean"
               else "(loss_reduction='sum': the sum is not divided)")
            + f", sigma = {settings.noise_multiplier:.6g}"
        )
        if clip is not None and not _close(clip, c):
            notes.append(
                f"clip={clip:g} was given but Opacus clips to max_grad_norm = {c:.6g}: the "
                "replay uses Opacus's value"
            )
        if noise_divisor is not None and not _close(noise_divisor, b):
            notes.append(
                f"noise_divisor={noise_divisor:g} was given but Opacus divides the noisy sum by "
                f"{b:.6g} (its expected_batch_size over the wrapped data set, not the "
                "DataLoader's batch_size): the replay uses Opacus's value"
            )
        return c, divisors, "opacus", notes
    assert clip is not None  # a plain loop without clip= stopped at canaries.plain
    line = zero.divisors[0] if zero.divisors else math.nan
    if noise_divisor is None:
        if not math.isfinite(line):
            raise ValueError(
                "noise_divisor: not given and the training's canaries did not say it (give "
                "noise_divisor=b, or canaries.plain(optimizer, loader, noise_divisor=b))"
            )
        return clip, np.full(steps, line), "plain", notes
    if math.isfinite(line) and not _close(line, noise_divisor):
        notes.append(
            f"noise_divisor={noise_divisor:g} was given but the training's canaries.plain line "
            f"says {line:g}: the replay uses the given {noise_divisor:g}"
        )
    return clip, np.full(steps, noise_divisor), "arguments", notes


def replay(
    train: Callable[[DiracCanaries, int], Any],
    *,
    seed: int,
    clip: float | None = None,
    noise_divisor: float | None = None,
    slots: int = 64,
    probes: Sequence[str] = PROBES,
) -> ReplayResult:
    """Replay ``train(canaries, seed)`` with the canary slot IN and zeroed (module docstring).

    Args:
        train: the user's training, instrumented as docs/auditing-your-training.md shows.
        seed: the randomness of every run (the user's train must derive all of it from seed).
        clip: C, the clipping norm the accountant assumed. Optional with Opacus (read from its
            optimizer's ``max_grad_norm``; a value that disagrees is named in ``notes``);
            required for a plain loop.
        noise_divisor: b, what the noisy sum is divided by. Optional: Opacus's
            ``expected_batch_size`` (times the backward passes of a step, as Opacus divides)
            is read from its optimizer (a value that disagrees is named in ``notes``); a plain
            loop's is ``canaries.plain``'s ``noise_divisor`` unless given here.
        slots: canary slots appended to the dataset (the first one in each batch is the slot;
            the others are zeroed); also the dimension of the fresh-noise check.
        probes: a subset of :data:`PROBES`.

    Returns: a :class:`ReplayResult`; the training runs 2 + (number of sensitivity probes) +
    (one more zeroed run for ``co-batch``) + 1 (the crafted slot in one step only: state
    carried across steps) times, once more per probe when the optimizer's input carries
    state, once for ``noise`` and four times for ``data`` (the noise run shared), and once
    more (the lit run) only when the noise run finds noise missing.
    """
    seed = check_int("seed", seed, minimum=0)
    if clip is not None:
        clip = check_real("clip", clip, minimum=0.0, strict_minimum=True)
    if noise_divisor is not None:
        noise_divisor = check_real(
            "noise_divisor", noise_divisor, minimum=0.0, strict_minimum=True)
    slots = check_int("slots", slots, minimum=1)
    wanted = tuple(probes)
    bad = [p for p in wanted if p not in PROBES]
    if bad or not wanted:
        raise ValueError(f"probes: {bad or 'none'} not allowed; choose among {list(PROBES)}")
    if not callable(train):
        raise ValueError(f"train: a {type(train).__name__} is not callable")
    runs = 0

    def run(
        slot: str, cobatch: bool, absent: bool = False, once: bool = False, *,
        zero_all: bool = False, frozen: bool = True, changed: bool = False, lit: bool = False,
    ) -> _Probe:
        nonlocal runs
        probe = _Probe(slot, cobatch, clip, noise_divisor, seed, once)
        probe.zero_all, probe.frozen, probe.lit = zero_all, frozen, lit
        kind = _AbsentCanaries if absent else _ChangedCanaries if changed else _ReplayCanaries
        canaries = kind(slots, clip=clip, seed=seed)
        canaries.replay = probe
        try:
            train(canaries, seed)
        except ValueError as error:
            if clip is None and canaries.replay_settings is None and canaries.clip is None:
                raise ValueError(
                    "clip: required for a plain loop (give clip=C, --clip C); only an Opacus "
                    f"training's is read from its optimizer ({error})"
                ) from error
            raise
        probe.settings = canaries.replay_settings
        probe.finish(canaries)
        runs += 1
        return probe

    zero = run("zero", False)
    settings = zero.settings
    c_used = clip if clip is not None else math.nan
    b_used = noise_divisor if noise_divisor is not None else math.nan
    notes: list[str] = []
    source = "arguments"
    per_tensor: tuple[TensorNoise, ...] = ()

    def result(
        passed: bool,
        message: str,
        *,
        first_failure: ReplayFailure | None = None,
        reproducible: bool = True,
        control_flow_independent: bool = True,
        fresh_noise: bool = True,
        noise: _FreshNoise = _NO_NOISE_CHECK,
        measured: _Measured = _NOT_MEASURED,
        inconclusive: bool = False,
    ) -> ReplayResult:
        return ReplayResult(
            passed=passed, sensitivity=measured.sensitivity, first_failure=first_failure,
            message=message, reproducible=reproducible,
            control_flow_independent=control_flow_independent, fresh_noise=fresh_noise,
            steps=len(zero.received), per_step=measured.per_step, probes=measured.probes,
            tolerance=measured.tolerance, noise_multiplier=noise.noise_multiplier,
            max_noise_correlation=noise.correlation, noise_threshold=noise.threshold,
            crafted_norm=measured.crafted_norm, seed=seed, clip=c_used,
            noise_divisor=b_used, runs=runs, inconclusive=inconclusive and not passed,
            notes=tuple(notes), settings_from=source, noise_per_tensor=per_tensor,
        )

    if not zero.received:
        return result(
            False,
            "no optimizer step was recorded: instrument the optimizer with canaries.opacus or "
            "canaries.plain inside train (inconclusive: nothing was tested)",
            inconclusive=True,
        )
    c_used, divisors, source, read = _settings(zero, clip, noise_divisor, slots)
    notes.extend(read)
    if zero.marked_steps:
        notes.append(
            f"recorded where canaries.privatized() marks the privatized gradient "
            f"({zero.marked_steps} of {len(zero.received)} steps), before what the loop writes "
            "on p.grad afterwards"
        )
    elif settings is None:
        notes.append(
            "recorded at optimizer.step() (the loop has no canaries.privatized() mark): p.grad "
            "there is assumed to be the privatized gradient; if the loop transforms p.grad after "
            "adding the noise, mark the point with canaries.privatized()"
        )
    b_used = float(divisors[0])
    for probe_run in (zero,):
        probe_run.clip, probe_run.divisor = c_used, b_used
        probe_run.divisors = [float(v) for v in divisors]
    if settings is not None and settings.ghost:
        skipped = [p for p in wanted if p in ("crafted", "co-batch")]
        wanted = tuple(p for p in wanted if p not in ("crafted", "co-batch")) or ("real",)
        notes.append(
            "Opacus ghost / fast gradient clipping computes each example's clipping factor, "
            "never its gradient: the replay sets the slot's factor (0, or Opacus's own for the "
            "real probe), so the probes " + (", ".join(skipped) or "crafted, co-batch")
            + " cannot run (they write the slot's gradient)"
        )
    again = run("zero", False)
    dims = sum(v.size for v in zero.received[0].values())
    steps = len(zero.received)

    def diff(x: _Probe, ref: _Probe, t: int, forward: float = 0.0) -> _Diff:
        return _diff(x, ref, t, c_used, float(divisors[t]), dims, forward)

    flow = _same_flow(again, zero)
    if flow is None:
        for t in range(steps):
            d = diff(again, zero, t)
            if d.sensitivity > d.tolerance:
                flow = (
                    f"what the optimizer receives differs at step {t} by {d.sensitivity:.3g} C "
                    f"(rounding allows {d.tolerance:.2g} C)"
                )
                break
    if flow is not None:
        return result(
            False,
            f"not reproducible from the seed: two identical runs with seed={seed} differ "
            f"({flow}), so no difference can be attributed to the slot (inconclusive, not a "
            f"bug found); {_REPRODUCE}",
            reproducible=False, inconclusive=True,
        )

    # the noise alone, and the slots' data changed in the dataset (issue 42)
    noise_run = run("zero", False, zero_all=True) if {"noise", "data"} & set(wanted) else None
    if "data" in wanted:
        assert noise_run is not None
        noise_changed = run("zero", False, zero_all=True, changed=True)
        trained_run = run("zero", False, frozen=False)
        trained_changed = run("zero", False, frozen=False, changed=True)
        elsewhere, seen = _data_used_elsewhere(
            noise_run, noise_changed, trained_run, trained_changed, c_used, divisors, dims)
        notes.extend(seen)
        if elsewhere is not None:
            flow_found = elsewhere.startswith("the training's control flow")
            return result(False, elsewhere, control_flow_independent=not flow_found)

    pairs: list[tuple[str, _Probe, _Probe]] = []
    for name in (p for p in wanted if p in SENSITIVITY_PROBES):
        if name == "co-batch":
            ref = run("zero", True)
            pairs.append((name, run("crafted", True), ref))
        elif name == "absent":
            pairs.append((name, run("zero", False, absent=True), zero))
        else:
            pairs.append((name, run(name, False), zero))
    state_probe = next((p for p in ("crafted", "real") if p in wanted), None)
    once = run(state_probe, False, once=True) if state_probe is not None else None
    checked = [*pairs, *([("state", once, zero)] if once is not None else [])]

    stream_notes: dict[str, str] = {}
    for name, x, ref in checked:
        # the absent probe's batches lack the slot by design: only the steps must agree
        flow = _same_steps(x, ref) if name == "absent" else _same_flow(x, ref)
        if flow is not None and name == "absent":
            moved = next((r for t in range(min(len(x.prints), len(ref.prints)))
                          if (r := _not_comparable(x, ref, t)) is not None), None)
            if moved is not None:  # the stream moved first: the step count followed it
                stream_notes[name] = f"{moved}; then {flow}"
                continue
        if flow is not None:
            return result(
                False,
                f"control flow depends on the slot (probe {name}): {flow}; the batches and "
                "the number of steps must not depend on any example's gradient",
                control_flow_independent=False,
            )

    # state carried across steps: the slot written in one step changes later steps
    carried_at: int | None = None
    if once is not None:
        t0 = _first_holding(once)
        for t in range(t0 + 1 if t0 is not None else steps, steps):
            d = diff(once, zero, t)
            if d.sensitivity > d.tolerance:
                carried_at = t
                break
    compare_only: dict[str, int | None] = {}
    if carried_at is not None:
        assert once is not None and state_probe is not None
        notes.append(
            f"the optimizer's input carries earlier steps (the slot written at step "
            f"{_first_holding(once)} only still changes step {carried_at}): momentum or "
            "another state written on p.grad before optimizer.step() (post-processing of the "
            "privatized gradients); each probe is compared at the first step holding the "
            "slot, where both runs share their history, and the noise's freshness on its "
            "innovations"
        )
        fresh_pairs: list[tuple[str, _Probe, _Probe]] = []
        for name, x, ref in pairs:
            if name == "absent":
                fresh_pairs.append((name, x, ref))
                continue
            single = once if name == state_probe else run(
                "crafted" if name == "co-batch" else name, name == "co-batch", once=True)
            flow = _same_flow(single, ref)
            if flow is not None:
                return result(
                    False,
                    f"control flow depends on the slot (probe {name}): {flow}; the batches "
                    "and the number of steps must not depend on any example's gradient",
                    control_flow_independent=False,
                )
            fresh_pairs.append((name, single, ref))
            compare_only[name] = _first_holding(single)
        pairs = fresh_pairs

    noise = _fresh_noise(zero, carried=carried_at is not None)
    tensor_finding: str | None = None
    trained_names = [k for k in zero.received[0] if k != _BLOCK and any(
        np.any(r[k] != 0) for r in zero.received)]
    shared = min(len(noise_run.received), len(divisors)) if noise_run is not None else 0
    if noise_run is not None and shared and _BLOCK in noise_run.received[0]:
        units = np.asarray(divisors[:shared], dtype=np.float64) / c_used
        cut = _Probe("zero", False, None, None, seed)
        cut.received = noise_run.received[:shared]
        noise_values = {k: _stack(cut, k, units) for k in noise_run.received[0]}
        low = float(torch.finfo(zero.dtype).eps) > float(torch.finfo(torch.float32).eps)
        data_cut = _Probe("zero", False, None, None, seed)
        data_cut.received = zero.received[:shared]
        tensor_finding, per_tensor = tensor_noise_finding(
            noise_values, trained_names, _BLOCK, level=NOISE_LEVEL,
            carried=carried_at is not None, low_precision=low,
            unit=c_used / float(np.mean(divisors[:shared])),
            with_data={k: _stack(data_cut, k, units[: len(data_cut.received)])
                       for k in trained_names})
    silent_block = not math.isfinite(noise.correlation) or noise.noise_multiplier == 0.0
    noise_missing = tensor_finding is not None and (
        any(s.silent_steps for s in per_tensor)
        or tensor_finding.startswith("noise only on part"))
    sparse_found: _LitNoise | None = None
    if (
        (silent_block or noise_missing) and noise_run is not None and shared
        and _BLOCK in noise_run.received[0] and not (settings is not None and settings.ghost)
    ):
        # noise missing where every gradient is 0: one more run, every gradient entry kappa,
        # tells noise drawn only where the batch's gradient is nonzero (sparse) from none
        lit = run("zero", False, zero_all=True, lit=True)
        found = _lit_noise(noise_run, lit, [_BLOCK, *trained_names], divisors, c_used)
        notes.append(
            f"the lit run (every example's gradient {found.kappa:.3g} on every entry) showed "
            f"noise on {found.lit} of the {found.silent} values the noise run left exactly 0"
            + ("" if found.sparse else ": noise missing whatever the gradient, not sparse"))
        if found.sparse:
            sparse_found = found
            tensor_finding = _sparse_message(found)
    if silent_block:
        if sparse_found is not None and tensor_finding is not None:
            return result(False, tensor_finding, fresh_noise=False, noise=noise)
        return result(
            False,
            "no noise reached the optimizer on the canary block at some step: every trained "
            "parameter needs Gaussian noise at every step",
            fresh_noise=False, noise=noise,
        )

    per_probe: list[ProbeResult] = []
    per_step = np.full(steps, np.nan)
    firsts: list[ReplayFailure] = []  # each failing probe's first failing step
    diffs: dict[str, list[_Diff | None]] = {}
    tolerance = 0.0
    bound_c_tolerance = 0.0  # the probes bounded by C (the absent probe's may be larger)
    gain = 2.0
    for name, x, ref in pairs:
        values = np.full(steps, np.nan)
        ok = True
        gain = max(gain, x.gain) if name == "crafted" else gain
        holding = ref.chosen if name == "absent" else x.chosen
        diffs[name] = []
        skipped_steps = 0
        why = stream_notes.get(name, "")
        for t in range(steps):
            reason = None
            if name in stream_notes:
                reason = stream_notes[name]
            elif name == "absent":
                reason = _not_comparable(x, ref, t)
            elif name in compare_only and t != compare_only[name]:
                reason = ("state carried across steps (post-processing): compared at the first "
                          "step holding the slot only")
            if reason is not None:
                diffs[name].append(None)
                if t < len(holding) and holding[t] >= 0:
                    skipped_steps += 1
                    why = why or reason
                continue
            forward = _forward_allowance(ref, t) if name == "absent" else 0.0
            d = diff(x, ref, t, forward)
            if name == "absent" and d.sensitivity > d.tolerance and max(x.workers, ref.workers):
                # the loader's worker processes draw their own random numbers (augmentation in
                # the Dataset), which no digest sees: a difference is not evidence
                diffs[name].append(None)
                if t < len(holding) and holding[t] >= 0:
                    skipped_steps += 1
                    why = why or (
                        "the DataLoader's worker processes (num_workers > 0) draw random numbers "
                        "the replay cannot see, so a moved stream cannot be told from a layer "
                        "mixing examples; replay with num_workers=0 to compare"
                    )
                continue
            diffs[name].append(d)
            values[t] = d.sensitivity
            tolerance = max(tolerance, d.tolerance)
            if name != "absent":
                bound_c_tolerance = max(bound_c_tolerance, d.tolerance)
            # the bound: C (one clipped example), or 0 for the absent probe (its slot's row is
            # 0 in the zeroed run it is compared with)
            bound = 0.0 if name == "absent" else 1.0
            if d.sensitivity > bound + d.tolerance:
                if ok:
                    tensors = tuple(k for k, v in _by_part(d.parts) if v > d.tolerance)
                    firsts.append(ReplayFailure(name, t, tensors, d.sensitivity, d.tolerance))
                ok = False
        per_step = np.fmax(per_step, values)
        tested = sum(1 for t, c in enumerate(holding) if c >= 0 and not np.isnan(values[t]))
        compared = values[~np.isnan(values)]
        per_probe.append(ProbeResult(
            name, float(compared.max()) if compared.size else math.nan,
            tuple(float(v) for v in values), tested, ok, skipped_steps,
            why if skipped_steps else "",
        ))
        if skipped_steps:
            notes.append(f"probe {name}: {skipped_steps} step(s) holding the slot not compared "
                         f"(inconclusive there): {why}")
    tested = max((p.tested_steps for p in per_probe), default=0)
    fresh = noise.fresh
    finite = per_step[~np.isnan(per_step)]
    sensitivity = float(finite.max()) if finite.size else math.nan
    common = _Measured(
        sensitivity, tuple(float(v) for v in per_step), tuple(per_probe), tolerance, gain
    )
    failure = _reported(firsts)
    scale = _uniform_scale(firsts, pairs, diffs, gain) if failure is not None else None
    if scale is not None:
        factor, steps_seen = scale
        b_scaled = b_used / factor
        return result(
            False,
            f"every probe reads exactly {factor:.4g} times one correctly clipped example "
            f"(crafted {factor:.4g} C, real {factor:.4g} x min(||g||, C), co-batch "
            f"{factor:.4g} C, at each of {steps_seen} steps): the step is scaled after the "
            f"clipping, by the noisy sum divided by {b_scaled:.4g} instead of b = {b_used:g} "
            "or the privatized gradient scaled before optimizer.step() (post-processing). "
            "With the noise scaled alike this is correct DP-SGD; with the noise not scaled it "
            "is a leak of the same size: the replay does not see the noise's scale (the noise "
            "is the same in both runs; the one-run findings' noise_multiplier does). If the "
            f"divisor is {b_scaled:.4g}, give noise_divisor={b_scaled:.4g} (inconclusive, not "
            "a bug found)",
            measured=common, noise=noise, fresh_noise=noise.fresh, inconclusive=True,
        )
    if failure is not None and carried_at is not None and not zero.marked_steps:
        return result(
            False,
            f"the loop transforms p.grad with state before optimizer.step() (the slot written "
            f"at one step still changes step {carried_at}) and the probe {failure.probe} reads "
            f"{failure.sensitivity:.3g} C at step {failure.step}, the first holding the slot: "
            "more than a correct step post-processed linearly (momentum, an EMA) gives, but "
            "another transform of the privatized gradient (a normalisation, Adam written on "
            "p.grad) can; mark the privatized gradient with canaries.privatized() right after "
            "the noise to compare it there (inconclusive, not a bug found)",
            measured=common, noise=noise, fresh_noise=noise.fresh, inconclusive=True,
        )
    if failure is not None and failure.probe == "absent" and tensor_finding is not None and (
        noise_missing
    ):
        # noise missing on part of the tensors makes the absent run differ where the batch's
        # rows decide which coordinates get noise: the noise is the cause, not a layer
        return result(
            False, tensor_finding + f"; the absent probe differs too ({failure.sensitivity:.3g} "
            f"C at step {failure.step} in {', '.join(failure.tensors[:4])})",
            first_failure=failure, measured=common, noise=noise, fresh_noise=fresh,
        )
    if failure is not None:
        copies = max(
            (x.copies[failure.step] for n, x, _ in pairs
             if n == failure.probe and failure.step < len(x.copies)), default=1,
        )
        holding_batches = max(
            (x.holding[failure.step] for n, x, _ in pairs
             if n == failure.probe and failure.step < len(x.holding)), default=1,
        )
        change: _NoiseChange | None = None
        if failure.probe == "absent":
            absent = next(x for n, x, _ in pairs if n == "absent")
            copies = -1 if _parallel(absent, zero, failure.step) else 0
            change = _noise_change(absent, zero, failure.step)
        where = ", ".join(failure.tensors[:4]) + (" ..." if len(failure.tensors) > 4 else "")
        step_diffs = {k: v[failure.step] for k, v in diffs.items()}
        message = (
            f"sensitivity {failure.sensitivity:.3g} C at step {failure.step} in {where} "
            f"(probe {failure.probe}): "
            + _kind(failure, {k: v for k, v in step_diffs.items() if v is not None}, gain,
                    copies, holding_batches, mixing=zero.mixing, noise_change=change,
                    equal_rows=zero.equal_rows)
            + _also(firsts, failure)
        )
        return result(
            False, message, first_failure=failure, measured=common, noise=noise,
            fresh_noise=fresh,
        )
    if not fresh:
        assert noise.pair is not None
        if noise.repeated or carried_at is None:
            how = (
                "exactly equal on the canary block" if noise.repeated else
                f"|cos| {noise.correlation:.3f} > {noise.threshold:.3f} on the canary block"
            )
            return result(
                False,
                f"the same noise at steps {noise.pair[0]} and {noise.pair[1]} ({how}): noise "
                "re-created or re-seeded inside the loop? draw it from one generator seeded "
                "once",
                measured=common, noise=noise, fresh_noise=fresh,
            )
        notes.append(
            f"fresh noise not shown: the innovations of the carried state (coefficient "
            f"{noise.carried:.3f}) still correlate, |cos| {noise.correlation:.3f} > "
            f"{noise.threshold:.3f} at steps {noise.pair[0]} and {noise.pair[1]}; a "
            "post-processing that is not linear in the past gradients is not modelled "
            "(inconclusive, not a bug found)"
        )
        fresh = True
    if tensor_finding is not None:
        return result(False, tensor_finding, measured=common, noise=noise, fresh_noise=fresh)
    if tested == 0:
        skipped_any = any(p.inconclusive_steps for p in per_probe)
        return result(
            False,
            (f"no step could be compared: {next(p.note for p in per_probe if p.note)}"
             if skipped_any else
             f"the slot was in no batch of the {steps} steps: nothing was tested; give more "
             "slots or more steps") + " (inconclusive, not a bug found)",
            measured=common, noise=noise, fresh_noise=fresh, inconclusive=True,
        )
    left = [p for p in per_probe if p.tested_steps == 0]
    return result(
        True,
        f"sensitivity at most {sensitivity:.4f} C (rounding allowance "
        f"{bound_c_tolerance if bound_c_tolerance > 0 else tolerance:.2g} C"
        + (f"; the absent probe's {tolerance:.2g} C, a forward in reduced precision"
           if tolerance > 2 * bound_c_tolerance > 0 else "")
        + f") over {steps} steps, {tested} holding the slot; batches and control flow "
        "independent of "
        "the slot; reproducible from the seed; fresh noise at every step"
        + (f"; inconclusive: probe{'s' if len(left) > 1 else ''} "
           f"{', '.join(p.probe for p in left)} could not be compared (see notes)"
           if left else ""),
        measured=common, noise=noise, fresh_noise=fresh,
    )
