"""White-box Dirac canaries in the user's own training (docs/design.md §14.3).

The canaries of :mod:`audit.run.one_run_trials` and :func:`audit.plugins.opacus.inject_dirac`,
brought to any ``nn.Module``, any ``Dataset`` and the user's own loop:

- :meth:`DiracCanaries.attach` adds to the model a block of m parameters, the weight (1, m) of an
  ``nn.Linear(m, 1, bias=False)`` (submodule ``audit_canaries.block``) that ``forward`` never calls
  (:class:`CanaryBlock`), so every real example's gradient on it is exactly 0 (Opacus computes no
  per-example gradient for it; ``torch.func`` gives exact zeros). Coordinate j is canary j's.
- :meth:`DiracCanaries.wrap` appends m slots to the user's ``Dataset`` (indices n..n+m-1),
  each a copy of a real row: the loader samples canary slots like any example, with the
  user's sampler. The gradient of a slot is replaced entirely (zero-out adjacency,
  docs/design.md §3.2: the slot stays whether the canary is IN or OUT).
- Per step, before clipping, the per-example gradients of the batch are rewritten
  (Nasr et al. 2023's Dirac canary): a canary slot's row becomes 0 on every parameter but
  ``g * C * e_j`` on its coordinate if IN (0 if OUT), with ``g`` = ``gradient_norm`` >= 1, so
  that correct clipping maps it to exactly C e_j; with ``threat_model = "adversarial"`` (m = 1,
  one canary per training) every other row becomes ``-g * C * e_0`` (the worst-case co-batch
  under zero-out). Which rows are canary slots is read from the loader's batch sampler
  (:meth:`DiracCanaries.watch` records the index batches it yields, in order).
- The noisy gradient of the canary block is recorded once per optimizer step, where the
  privatized gradient is made (below): in units of c (the canary block's clip: C, or its own
  clip under Opacus's per-layer clipping), ``y_{j,t} = grad_j * divisor / c`` with ``divisor``
  the b the noisy sum is divided by, so y_{j,t} = 1[j in B_t, IN] + N(0, (sigma C / c)^2) for
  correct DP-SGD (isolated), whatever the optimizer (SGD, momentum, Adam) then does with it.
- Gradient accumulation (k loader batches -> one optimizer step, or one loader batch processed
  in micro-batches): the rewrites take the loader's index rows in order, as many as the
  per-example gradients have (one batch, several concatenated, or part of one), and each
  optimizer step's batch (:attr:`DiracCanaries.step_batches`) is the union of the rows
  rewritten since the previous step; the divisor is the macro-batch's b (``plain``'s
  ``noise_divisor``; Opacus: ``expected_batch_size`` x ``accumulated_iterations``, as Opacus
  divides). A step within a loader batch, or a step that rewrote no batch, is refused by name
  when the observations are read. Independent Poisson loader batches accumulated into one
  step can hold an example twice (each copy clipped alone: 2 C in that step).

Where the privatized gradient is read (:attr:`DiracCanaries.observed_at`): anything done
to the privatized gradient afterwards (``clip_grad_norm_``, momentum or EMA written on
``p.grad``, weight decay, the optimizer's own state) is post-processing and no privacy bug, so
the canaries read it where it is made:

- ``opacus``: inside ``DPOptimizer.step``, right after its ``pre_step`` clipped, noised and
  divided (a skipped micro-batch step reads nothing), before the wrapped optimizer runs;
- ``marked``: a plain loop with the one line ``canaries.privatized()`` right after the noise
  is added and the sum divided (:meth:`DiracCanaries.privatized`); ``p.grad`` at
  ``optimizer.step()`` is then not used (the steps where it differs are counted,
  :attr:`DiracCanaries.transformed_steps`);
- ``step``: a plain loop without the mark: ``p.grad`` at ``optimizer.step()`` (a step
  pre-hook) is assumed to be the privatized gradient; the one-run audit says so, and states
  the findings a post-processing could cause as inconclusive rather than failed
  (:mod:`audit.deployed.deployed_audit`).

Two trainings are supported as users write them:

- **Opacus**: ``canaries.opacus(model, optimizer, loader)`` with the three objects
  ``make_private`` returned; the rewrite runs inside ``optimizer.step()`` (before Opacus's
  ``pre_step`` clips), the recording after it: no other line changes (``BatchMemoryManager``
  and several backward passes per step included). C, sigma and the divisor are read from the
  optimizer (:class:`OpacusSettings`; a ``clip`` given that disagrees is named). The
  grad-sample modes ``hooks``, ``functorch`` and ``ew`` store per-example gradients, rewritten
  as above; ghost / fast gradient clipping (``grad_sample_mode="ghost"``) never makes them,
  so the canary block's per-example norms and Opacus's clipping coefficients are rewritten
  instead (:meth:`DiracCanaries._ghost`). Per-layer clipping (``clipping="per_layer"``, one
  clip per parameter, the canary block's included): the block is a layer of its own, its
  canaries are clipped to its own c and read in units of c (noise sigma C / c,
  :attr:`DiracCanaries.clip_ratio`);
- **a plain torch DP-SGD loop** (per-example gradients by any means: ``torch.func``,
  microbatches, hooks): ``canaries.plain(optimizer, loader, noise_divisor=b)`` and one call
  ``canaries.inject(per_example_grads)`` on the per-example gradients (a list in
  ``model.parameters()`` order, or a ``torch.func`` dict by name) before clipping, and
  (recommended) ``canaries.privatized()`` right after the noise is added.

Membership: one run (``included`` drawn as independent fair coins from ``seed``, each canary IN
with probability 1/2, Steinke et al. 2023) or one canary per training, IN or OUT as the
multi-run harness says (:meth:`DiracCanaries.result`, whose result carries the
:class:`audit.plugins.contract.CanaryRecord` of every step for the multi-run findings).

:func:`stand_in` makes the next ``DiracCanaries(...)`` a script constructs return a given object
instead (the replay of a multi-run script, :mod:`audit.deployed.replay_script`, hands the
script the replay's canaries that way; nothing else changes in the script).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

from audit.core.names import THREAT_MODELS
from audit.core.validation import check_choice, check_int, check_real

__all__ = [
    "CANARY_MODULE", "CanaryBlock", "CanaryDataset", "DiracCanaries", "OpacusSettings", "StandIn",
    "opacus_settings", "stand_in",
]

CANARY_MODULE = "audit_canaries"
"""Name of the submodule :meth:`DiracCanaries.attach` adds to the user's model."""


class CanaryBlock(nn.Module):
    """The canary parameter block: ``block`` = ``nn.Linear(m, 1, bias=False)``, never called.

    ``forward`` returns its input unchanged, so a model that calls every submodule in order
    (``nn.Sequential``) passes through it; the block's weight takes no part in any output.
    """

    def __init__(self, m: int) -> None:
        super().__init__()
        self.block = nn.Linear(m, 1, bias=False)
        with torch.no_grad():
            self.block.weight.zero_()

    def forward(self, x: Any) -> Any:
        return x


class CanaryDataset(Dataset):
    """The user's dataset with m canary slots appended (indices n..n+m-1).

    Slot j returns ``placeholder[j]`` (a copy of a real row), so the user's model and collate
    accept it; its gradient is replaced before clipping (it is never trained on as data).
    """

    def __init__(self, dataset: Any, slots: int, placeholders: Sequence[int]) -> None:
        self.dataset = dataset
        self.real = len(dataset)
        self.slots = slots
        self.placeholders = list(placeholders)

    def __len__(self) -> int:
        return self.real + self.slots

    def __getitem__(self, index: int) -> Any:
        index = int(index)
        if index < 0:
            index += len(self)
        if index < self.real:
            return self.dataset[index]
        if index >= len(self):
            raise IndexError(f"index {index} out of range for {len(self)} rows")
        return self.dataset[self.placeholders[index - self.real]]


@dataclass(frozen=True)
class OpacusSettings:
    """What an Opacus ``DPOptimizer`` applies, read from it (:meth:`DiracCanaries.opacus`).

    Attributes:
        clip: C, the clip norm the noise is calibrated to (``max_grad_norm``; per-layer:
            sqrt(sum_i c_i^2), as Opacus computes it).
        canary_clip: the canary block's clip (C; per-layer: its own c_i).
        per_layer: the per-layer clips c_i (``clipping="per_layer"``), None for flat clipping.
        noise_multiplier: sigma, the noise's std over C.
        expected_batch_size: the b the noisy sum is divided by (``loss_reduction="mean"``).
        loss_reduction: ``mean`` or ``sum``.
        ghost: ghost / fast gradient clipping (``DPOptimizerFastGradientClipping``).
        optimizer: the DPOptimizer's class name.
        given_clip: the ``clip`` given to :class:`DiracCanaries`, None if none.
    """

    clip: float
    canary_clip: float
    per_layer: tuple[float, ...] | None
    noise_multiplier: float | None
    expected_batch_size: float
    loss_reduction: str
    ghost: bool
    optimizer: str
    given_clip: float | None = None

    def notes(self) -> tuple[str, ...]:
        """Sentences naming a user-given value that disagrees with Opacus's, and what the
        canaries' unit is under per-layer clipping."""
        out = []
        if self.given_clip is not None and not np.isclose(self.given_clip, self.clip,
                                                           rtol=1e-9, atol=0.0):
            out.append(f"DiracCanaries(clip={self.given_clip:g}) disagrees with the clip norm "
                       f"Opacus uses, C = {self.clip:.6g} ({self.optimizer}.max_grad_norm): "
                       "the audit uses Opacus's")
        if self.per_layer is not None:
            out.append(f"per-layer clipping: the canary block is a layer of its own, clipped to "
                       f"c = {self.canary_clip:.6g} of C = sqrt(sum c_i^2) = {self.clip:.6g}; "
                       f"its canaries read in units of c, the noise sigma C / c = "
                       f"{self.clip / self.canary_clip:.4g} sigma")
        return tuple(out)


def opacus_settings(optimizer: Any, canary: torch.Tensor,
                    given_clip: float | None = None) -> OpacusSettings:
    """The :class:`OpacusSettings` of an Opacus ``DPOptimizer`` (``canary``: the canary block's
    parameter, located among the optimizer's parameters for its per-layer clip)."""
    if "AdaClip" in type(optimizer).__name__:
        raise ValueError(
            f"optimizer: {type(optimizer).__name__} (clipping='adaptive') changes C at every "
            "step; the canaries need a fixed clip norm (clipping='flat' or 'per_layer')"
        )
    clip = float(optimizer.max_grad_norm)
    per_layer = getattr(optimizer, "max_grad_norms", None)
    canary_clip = clip
    if per_layer is not None:
        params = list(optimizer.params)
        where = next((i for i, p in enumerate(params) if p is canary), None)
        if where is None or len(per_layer) != len(params):
            raise ValueError(
                "optimizer: per-layer clipping without a clip for the canary block; attach the "
                "canaries before make_private and give max_grad_norm one entry per parameter "
                "(the canary block's included)"
            )
        canary_clip = float(per_layer[where])
    reduction = str(getattr(optimizer, "loss_reduction", "mean"))
    expected = getattr(optimizer, "expected_batch_size", None)
    if reduction == "mean" and expected is None:
        raise ValueError("optimizer: loss_reduction='mean' without an expected_batch_size")
    sigma = getattr(optimizer, "noise_multiplier", None)
    return OpacusSettings(
        clip=clip, canary_clip=canary_clip,
        per_layer=None if per_layer is None else tuple(float(c) for c in per_layer),
        noise_multiplier=None if sigma is None else float(sigma),
        expected_batch_size=float(expected) if expected is not None else 1.0,
        loss_reduction=reduction,
        ghost="FastGradientClipping" in type(optimizer).__name__,
        optimizer=type(optimizer).__name__, given_clip=given_clip,
    )


@dataclass
class StandIn:
    """The object :func:`stand_in` hands out, and whether a construction took it (``used``)."""

    canaries: DiracCanaries
    used: bool = False


_STAND_IN: ContextVar[StandIn | None] = ContextVar("audit_canaries_stand_in", default=None)


@contextmanager
def stand_in(canaries: DiracCanaries) -> Iterator[StandIn]:
    """Within the block, the first ``DiracCanaries(...)`` constructed (by the user's script)
    is ``canaries`` itself, its constructor's arguments ignored; later ones are new objects.
    The :class:`StandIn` yielded says whether it was taken."""
    holder = StandIn(canaries)
    token = _STAND_IN.set(holder)
    try:
        yield holder
    finally:
        _STAND_IN.reset(token)


class DiracCanaries:
    """m Dirac canaries on a parameter block of the user's model (module docstring).

    Args:
        m: the number of canaries (one run: hundreds to thousands; multi-run: 1).
        clip: C, the clipping norm of the training (Opacus: read from the optimizer).
        included: which canaries are IN (m booleans); None draws them from ``seed``.
        seed: the fair coins of ``included`` and the placeholder rows.
        threat_model: ``isolated`` (the others' rows as computed) or ``adversarial``
            (the others' rows set to -g C e_0; needs m = 1).
        gradient_norm: g >= 1, the canary's gradient norm before clipping in units of C.
    """

    def __init__(
        self,
        m: int,
        *,
        clip: float | None = None,
        included: Sequence[bool] | np.ndarray | None = None,
        seed: int = 0,
        threat_model: str = "isolated",
        gradient_norm: float = 2.0,
    ) -> None:
        if self.__dict__.pop("_standing_in", False):  # stand_in: already set up, keep it
            return
        self.m = check_int("m", m, minimum=1)
        self.clip = (
            None if clip is None else check_real("clip", clip, minimum=0.0, strict_minimum=True)
        )
        self.threat_model = check_choice("threat_model", threat_model, THREAT_MODELS)
        if self.threat_model == "adversarial" and self.m != 1:
            raise ValueError(
                "threat_model='adversarial' needs m=1 (one canary per training): the co-batch "
                "rows "
                f"-g C u cannot point along {self.m} canary directions at once under clipping; "
                f"got m={self.m}"
            )
        self.gradient_norm = check_real("gradient_norm", gradient_norm, minimum=1.0)
        self.seed = check_int("seed", seed, minimum=0)
        if included is None:
            included = np.random.default_rng([self.seed, 1]).random(self.m) < 0.5
        self.included = np.asarray(included, dtype=bool).ravel()
        if self.included.size != self.m:
            raise ValueError(f"included has {self.included.size} entries; need m={self.m}")
        self.real: int | None = None
        self.module: nn.Linear | None = None
        self.model: nn.Module | None = None
        self._pending: deque[np.ndarray] = deque()  # yielded, not yet (wholly) rewritten
        self._offset = 0  # rows of _pending[0] already rewritten (a batch in micro-batches)
        self.batches: list[np.ndarray] = []  # every index batch the watched loader yielded
        self._rows: list[np.ndarray] = []
        self._divisor: float | None = None
        self._step_divisor: float | None = None  # Opacus: the divisor of the coming step
        self._steps_injected = 0
        # gradient accumulation: the rows rewritten since the last optimizer step, and per
        # step their union (the step's batch) and how many loader batches it completed
        self._taken: list[np.ndarray] = []
        self._finished = 0
        self.step_batches: list[np.ndarray] = []
        self.batches_per_step: list[int] = []
        self._step_problem: str | None = None
        # where the privatized gradient is read (module docstring, "Where the privatized
        # gradient is read"): "opacus" (inside DPOptimizer, right after its noise and
        # division), "marked" (a plain loop's canaries.privatized() line), "step" (a plain loop
        # without the mark: p.grad at optimizer.step(), assumed to be the privatized gradient)
        self._point: str | None = None
        self._marked: np.ndarray | None = None  # the reading at the mark since the last step
        self.transformed_steps = 0  # steps whose p.grad at optimizer.step() differed from it
        self.canary_clip: float | None = None  # the canary block's clip (per-layer: its own)
        self.opacus_settings: OpacusSettings | None = None
        # replay mode (audit.deployed.replay, docs/design.md §14.7): when set, an object whose
        # ``rewrite(grads, canary_grad, index, canaries)`` replaces the Dirac rewrite of each
        # batch and whose ``on_optimizer(optimizer, canaries)`` is called once per instrumented
        # optimizer (to record what it receives at each step); None: the audit's canaries
        self.replay: Any = None

    def __new__(cls, *args: Any, **kwargs: Any) -> DiracCanaries:
        holder = _STAND_IN.get()
        if holder is not None and not holder.used and isinstance(holder.canaries, cls):
            holder.used = True  # the first construction only
            holder.canaries.__dict__["_standing_in"] = True  # __init__ keeps it as it is
            return holder.canaries
        return super().__new__(cls)

    # -- setting up ------------------------------------------------------------------

    @property
    def parameter(self) -> nn.Parameter:
        """The canary block, the weight (1, m) of the ``audit_canaries`` submodule."""
        if self.module is None:
            raise ValueError("attach(model) first: the canaries have no parameter block yet")
        return cast(nn.Parameter, self.module.weight)  # a Linear's weight is a Parameter

    @property
    def _clip_norm(self) -> float:
        """C, once known (given, or read from Opacus's optimizer before the first step)."""
        assert self.clip is not None  # checked where the canaries' recording starts
        return float(self.clip)

    @property
    def noise_divisor(self) -> float | None:
        """The b the noisy sum is divided by, as the instrument was told (``plain``'s
        ``noise_divisor``; Opacus: ``expected_batch_size`` with ``loss_reduction="mean"``, 1
        with ``"sum"``); None before :meth:`plain` or :meth:`opacus`. With gradient
        accumulation it is the macro-batch's b (one optimizer step's)."""
        return self._divisor

    def attach(self, model: nn.Module) -> nn.Module:
        """Add the canary block to ``model`` (before the optimizer is built); returns ``model``."""
        if not isinstance(model, nn.Module):
            raise ValueError(f"model: a {type(model).__name__} is not a torch.nn.Module")
        if hasattr(model, CANARY_MODULE):
            raise ValueError(f"model already has a submodule {CANARY_MODULE!r}")
        first = next(model.parameters(), None)
        holder = CanaryBlock(self.m)
        if first is not None:
            holder = holder.to(device=first.device, dtype=first.dtype)
        model.add_module(CANARY_MODULE, holder)
        self.module, self.model = holder.block, model
        return model

    def wrap(self, dataset: Any) -> CanaryDataset:
        """The user's dataset with the m canary slots appended (use it for the loader)."""
        if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
            raise ValueError(
                f"dataset: a {type(dataset).__name__} is not a map-style Dataset (len and [i])"
            )
        self.real = len(dataset)
        if self.real < 1:
            raise ValueError("dataset is empty")
        placeholders = np.random.default_rng([self.seed, 2]).integers(0, self.real, self.m)
        return CanaryDataset(dataset, self.m, placeholders.tolist())

    def watch(self, loader: Any) -> Any:
        """Record the index batches ``loader`` yields (in order); returns ``loader``.

        ``loader``: a DataLoader over the wrapped dataset (its batch sampler is recorded) or a
        batch sampler itself (an iterable of index lists, for a loop that indexes the dataset).
        """
        source = getattr(loader, "batch_sampler", None)
        if source is None and hasattr(loader, "dataset"):
            raise ValueError(
                "loader: a DataLoader with a batch sampler (batch_size or batch_sampler) is needed"
            )
        if source is not None and not isinstance(getattr(loader, "dataset", None), CanaryDataset):
            raise ValueError("loader: its dataset is not the one canaries.wrap(dataset) returned")
        source = loader if source is None else source
        if not hasattr(type(source), "__iter__"):
            raise ValueError(f"loader: a {type(source).__name__} yields no index batches")
        pending, history = self._pending, self.batches
        cls = type(source)
        if getattr(cls, "_audit_recording", False):
            return loader

        def __iter__(this: Any) -> Any:
            for batch in cls.__iter__(this):
                index = np.asarray(list(batch), dtype=np.int64)
                pending.append(index)
                history.append(index)
                yield batch

        source.__class__ = type(
            f"Recorded{cls.__name__}", (cls,), {"__iter__": __iter__, "_audit_recording": True}
        )
        return loader

    def opacus(self, model: Any, optimizer: Any, loader: Any) -> DiracCanaries:
        """Instrument an Opacus training: the three objects ``make_private`` returned (its
        criterion too under ghost clipping: nothing to pass, the model holds what is needed;
        with ``wrap_model=False`` the hooks object it returned in the model's place).

        C, the noise multiplier and the divisor are read from the optimizer
        (:attr:`opacus_settings`; a ``clip`` given to the constructor that disagrees is named
        there, Opacus's value is used). The privatized gradient is read inside
        ``DPOptimizer.step``, right after Opacus added the noise and divided (its
        ``pre_step``), before the wrapped optimizer (momentum, Adam, weight decay) uses it.
        Flat and per-layer clipping (the canary block is one layer of its own: its signal is
        its own clip c, :attr:`canary_clip`), the ``hooks`` / ``functorch`` / ``ew`` grad-sample
        modes (the per-example gradients are rewritten before clipping) and ghost / fast
        gradient clipping (``grad_sample_mode="ghost"``: no per-example gradient exists, so
        the per-example norms and clipping coefficients are rewritten, :meth:`_ghost`)."""
        if not hasattr(optimizer, "pre_step") or not hasattr(optimizer, "original_optimizer"):
            raise ValueError(
                "optimizer: not an Opacus DPOptimizer (pass the optimizer make_private returned)"
            )
        # make_private(..., wrap_model=False) returns Opacus's hooks object, which holds the
        # user's model as _module (the model trains unwrapped)
        module = model if isinstance(model, nn.Module) else getattr(model, "_module", model)
        if (self.module is None or not hasattr(module, "parameters")
                or self.parameter not in set(module.parameters())):
            raise ValueError(
                "model: attach the canaries to the model before make_private "
                "(canaries.attach(model))"
            )
        self.opacus_settings = opacus_settings(optimizer, self.parameter, given_clip=self.clip)
        settings = self.opacus_settings
        self.clip = settings.clip
        self.canary_clip = settings.canary_clip
        self._point = "opacus"
        self.watch(loader)
        original = optimizer.pre_step
        params = [p for p in module.parameters() if p.requires_grad]
        mean = settings.loss_reduction == "mean"
        base = settings.expected_batch_size if mean else 1.0
        ghost = settings.ghost
        if ghost:
            self._ghost(model)
        weight = self.parameter

        def pre_step(closure: Any = None) -> Any:
            # Opacus divides by expected_batch_size x the backward passes accumulated since
            # the last step (loss_reduction="mean"; 1 under ghost clipping), or not at all
            # ("sum")
            passes = 1 if ghost else self._inject_opacus(params)
            self._step_divisor = base * passes if mean else base
            stepped = original(closure)
            if stepped:  # noised and divided (not a skipped micro-batch): read it here
                self._marked = self._read(weight.grad)
            return stepped

        optimizer.pre_step = pre_step
        self._record(optimizer.original_optimizer, base)
        return self

    def _ghost(self, model: Any) -> None:
        """Ghost / fast gradient clipping (Opacus's ``GradSampleModuleFastGradientClipping``):
        per-example gradients are never materialised; the loss is backpropagated twice, the
        second time weighted by the clipping coefficients ``model.get_clipping_coef()``
        computes from the per-example norms (``p._norm_sample``). The canary block, which
        ``forward`` never calls, gets its per-example norms here: g C on an IN slot's row
        (its per-example gradient g C e_j), 0 elsewhere; a slot's norms on every other
        parameter are set to 0 (zero-out); Opacus's own coefficients then clip each row; a
        slot's coefficient is set to 0 for the second backward pass (its placeholder row trains
        nothing) and its clipped gradient, coefficient x g C e_j, is the canary block's
        gradient. Adversarial: every row is rewritten so."""
        if self.replay is not None:
            raise ValueError(
                "the replay does not support Opacus's ghost clipping; replay with "
                "grad_sample_mode='hooks'"
            )
        original = getattr(model, "get_clipping_coef", None)
        if original is None:
            raise ValueError(
                "model: ghost clipping needs the module make_private returned "
                "(GradSampleModuleFastGradientClipping)"
            )
        weight = self.parameter

        def get_clipping_coef() -> torch.Tensor:
            norms = [p for p in model.trainable_parameters if p is not weight]
            sample = next((getattr(p, "_norm_sample", None) for p in norms), None)
            rows = 0 if sample is None else int(sample.shape[0])
            index = self._next_batch(rows)
            take, j, value = self._plan(index)
            if self.threat_model == "adversarial":
                take = torch.arange(rows)
                j = torch.zeros(rows, dtype=torch.int64)
                value = torch.full((rows,), -self.gradient_norm * self._clip_norm,
                                   dtype=torch.float64)
                slots, slot_j, slot_value = self._plan(index)
                j[slots], value[slots] = slot_j, slot_value
            device = sample.device if sample is not None else weight.device
            dtype = sample.dtype if sample is not None else weight.dtype
            canary_norm = torch.zeros(rows, dtype=dtype, device=device)
            with torch.no_grad():
                for p in norms:
                    ns = getattr(p, "_norm_sample", None)
                    if ns is not None and take.numel():
                        ns = ns.clone()
                        ns[take.to(ns.device)] = 0.0
                        p._norm_sample = ns
                canary_norm[take.to(device)] = value.abs().to(canary_norm)
                weight._norm_sample = canary_norm  # type: ignore[attr-defined]  # Opacus's
                coef = original()
                grad = torch.zeros(self.m, dtype=torch.float64)
                if take.numel():
                    clipped = coef[take.to(coef.device)].double().cpu() * value
                    grad.index_add_(0, j, clipped)
                    coef = coef.clone()
                    coef[take.to(coef.device)] = 0.0
                new = grad.to(dtype=weight.dtype, device=weight.device).reshape(weight.shape)
                weight.grad = new if weight.grad is None else weight.grad + new
            self._steps_injected += 1
            return coef

        model.get_clipping_coef = get_clipping_coef

    def plain(self, optimizer: Any, loader: Any, *, noise_divisor: float) -> DiracCanaries:
        """Instrument a plain torch DP-SGD loop: record at each ``optimizer.step()``.

        ``noise_divisor``: the b the loop divides the noisy sum by (the step is
        ``(sum_i clip(g_i) + N(0, sigma^2 C^2)) / b``). Call :meth:`inject` on every batch's
        per-example gradients before clipping.
        """
        if self.clip is None:
            raise ValueError(
                "clip: give DiracCanaries(clip=C) for a plain loop (the clipping norm)"
            )
        self.watch(loader)
        self._point = "step"
        self._record(
            optimizer, check_real("noise_divisor", noise_divisor, minimum=0.0, strict_minimum=True)
        )
        return self

    def _record(self, optimizer: Any, divisor: float) -> None:
        self._divisor = divisor
        weight = self.parameter

        def hook(*_: Any) -> None:
            at_step = self._read(weight.grad)
            step = len(self._rows)
            if self._marked is not None:
                row = self._marked
                if not np.array_equal(row, at_step):
                    self.transformed_steps += 1
            elif self._point == "marked" and self._step_problem is None:
                self._step_problem = (
                    f"optimizer step {step}: canaries.privatized() was not called since the "
                    "previous step; once the mark is used, call it at every step, right after "
                    "the noise is added"
                )
                row = at_step
            else:
                row = at_step
            self._marked = None
            step_divisor = divisor if self._step_divisor is None else self._step_divisor
            self._rows.append(row * step_divisor / self._unit)
            self._close_step()

        optimizer.register_step_pre_hook(hook)
        if self.replay is not None:
            self.replay.on_optimizer(optimizer, self)

    def _read(self, grad: torch.Tensor | None) -> np.ndarray:
        """The canary block's gradient as m float64 values (0 where there is none)."""
        if grad is None:
            return np.zeros(self.m)
        values = grad.detach().reshape(-1).double().cpu().numpy().copy()
        if values.size != self.m:
            raise ValueError(
                f"the canary block's gradient has {values.size} values; need m={self.m}"
            )
        return values

    @property
    def _unit(self) -> float:
        """The unit of the observations: the canary block's clip c (C unless per-layer)."""
        return float(self.canary_clip) if self.canary_clip is not None else self._clip_norm

    @property
    def clip_ratio(self) -> float:
        """C / c: the noise's std in units of the canary block's clip c is sigma C / c (1 but
        under Opacus's per-layer clipping, where c is the canary block's own clip)."""
        return self._clip_norm / self._unit if self.clip is not None else 1.0

    @property
    def observed_at(self) -> str:
        """Where the privatized gradient was read: ``opacus`` (inside ``DPOptimizer``, right
        after its noise and division), ``marked`` (:meth:`privatized`), ``step`` (a plain loop
        without the mark: ``p.grad`` at ``optimizer.step()``, assumed to be the privatized
        gradient) or ``none`` (not instrumented)."""
        return self._point or "none"

    def privatized(self, gradients: Any = None) -> Any:
        """Mark where a plain loop's privatized gradient is made: call once per optimizer
        step, right after the noise is added and the sum divided by ``noise_divisor``, before
        any post-processing (``clip_grad_norm_``, momentum or EMA written on ``p.grad``, weight
        decay, ...). The canaries then read the canary block's gradient here, not at
        ``optimizer.step()``. Returns ``gradients``.

        ``gradients``: None or the model (the canary block's ``.grad`` now), or the noisy
        gradients the loop holds: a dict by parameter name (``torch.func``), a list in
        ``model.parameters()`` order, or the canary block's gradient tensor itself.
        """
        if self._point == "opacus":
            raise ValueError(
                "privatized(): an Opacus training is read inside DPOptimizer, right after its "
                "noise; remove the line"
            )
        if self._point is None:
            raise ValueError("privatized(): instrument the loop with canaries.plain(...) first")
        weight = self.parameter
        if gradients is None or isinstance(gradients, nn.Module):
            if gradients is not None and self.model is not None and gradients is not self.model:
                raise ValueError("privatized(model): not the model canaries.attach returned")
            grad = weight.grad
            if grad is None:
                raise ValueError(
                    "privatized(): the canary block has no gradient yet; call it after the "
                    "noisy gradient is assigned to every parameter's .grad (or pass the noisy "
                    "gradients)"
                )
        elif isinstance(gradients, torch.Tensor):
            grad = gradients
        elif isinstance(gradients, dict):
            key = next((k for k in gradients if str(k).endswith(f"{CANARY_MODULE}.block.weight")),
                       None)
            if key is None:
                raise ValueError(
                    f"privatized(gradients): no entry for {CANARY_MODULE}.block.weight; its keys: "
                    f"{sorted(map(str, gradients))[:5]}"
                )
            grad = gradients[key]
        elif isinstance(gradients, (list, tuple)):
            assert self.model is not None  # parameter above: attached
            params = list(self.model.parameters())
            if len(gradients) != len(params):
                raise ValueError(
                    f"privatized(gradients): {len(gradients)} tensors; the model has "
                    f"{len(params)} parameters"
                )
            grad = gradients[next(i for i, p in enumerate(params) if p is weight)]
        else:
            raise ValueError(
                f"privatized(gradients): a {type(gradients).__name__}; pass None, the model, a "
                "dict by name, a list in model.parameters() order or the canary block's tensor"
            )
        if self._point == "step" and self._rows and self._step_problem is None:
            self._step_problem = (
                f"canaries.privatized() was first called after optimizer step "
                f"{len(self._rows) - 1}: call it at every step, from the first"
            )
        self._marked = self._read(grad)
        self._point = "marked"
        return gradients

    # -- the rewrite ---------------------------------------------------------------

    def _next_batch(self, rows: int) -> np.ndarray:
        """The next ``rows`` index rows the loader yielded, in order: one loader batch, several
        (their per-example gradients concatenated) or part of one (a batch processed in
        micro-batches, Opacus's ``BatchMemoryManager``); every batch ends at an optimizer step
        (checked there, :meth:`_close_step`)."""
        if not self._pending:
            raise ValueError(
                "no recorded batch for these per-example gradients: iterate the watched loader "
                "(canaries.watch / plain / opacus) and rewrite each batch it yields once"
            )
        if rows == 0 and self._pending[0].size - self._offset > 0:
            raise ValueError(
                "the step's per-example gradients have 0 rows but its loader batch has "
                f"{self._pending[0].size - self._offset}"
            )
        parts: list[np.ndarray] = []
        need = rows
        while True:
            head = self._pending[0]
            take = min(head.size - self._offset, need)
            parts.append(head[self._offset : self._offset + take])
            self._offset += take
            need -= take
            if self._offset == head.size:
                self._pending.popleft()
                self._offset = 0
                self._finished += 1
            if need == 0:
                break
            if not self._pending:
                raise ValueError(
                    f"the per-example gradients have {rows} rows but the loader's batches not "
                    f"yet rewritten hold {rows - need}: pass the per-example gradients of the "
                    "batches the watched loader yielded, in order"
                )
        index = np.concatenate(parts) if len(parts) > 1 else parts[0]
        self._taken.append(index)
        return index

    def _close_step(self) -> None:
        """One optimizer step: its batch is the union (concatenation, in order) of the rows
        rewritten since the previous step (gradient accumulation: k loader batches -> one
        step; the divisor is then the macro-batch's b)."""
        step = len(self.step_batches)
        if self._step_problem is None:
            if not self._taken:
                self._step_problem = (
                    f"optimizer step {step} rewrote no batch: every step must rewrite the "
                    "batches it takes (Opacus: automatic; a plain loop: call inject on the "
                    "per-example gradients of every batch before the step)"
                )
            elif self._offset:
                self._step_problem = (
                    f"optimizer step {step} took part of loader batch (rows {self._offset} of "
                    f"{self._pending[0].size}): step after the last micro-batch of a batch, "
                    "not within it"
                )
        taken = self._taken
        self.step_batches.append(
            np.concatenate(taken) if len(taken) > 1 else
            taken[0] if taken else np.zeros(0, dtype=np.int64)
        )
        self.batches_per_step.append(self._finished)
        self._taken, self._finished = [], 0

    def _plan(self, index: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(canary rows, their canary index, their value on their coordinate) of one batch."""
        if self.real is None:
            raise ValueError("wrap(dataset) first: the canaries have no slots")
        slot = index - self.real
        rows = np.flatnonzero(slot >= 0)
        j = slot[rows]
        value = self.gradient_norm * self._clip_norm * self.included[j].astype(np.float64)
        return torch.from_numpy(rows), torch.from_numpy(j), torch.from_numpy(value)

    def _rewrite(
        self, grads: list[torch.Tensor], canary_grad: torch.Tensor, index: np.ndarray
    ) -> None:
        if self.replay is not None:  # replay mode: the replay writes the slot and co-batch rows
            self.replay.rewrite(grads, canary_grad, index, self)
            self._steps_injected += 1
            return
        rows, j, value = self._plan(index)
        with torch.no_grad():
            if rows.numel():
                for g in grads:
                    g[rows.to(g.device)] = 0.0
                canary_grad[rows.to(canary_grad.device), 0, j.to(canary_grad.device)] = value.to(
                    canary_grad
                )
            if self.threat_model == "adversarial":
                others = torch.ones(index.size, dtype=torch.bool)
                others[rows] = False
                for g in grads:
                    g[others.to(g.device)] = 0.0
                canary_grad[others.to(canary_grad.device), 0, 0] = (
                    -self.gradient_norm * self._clip_norm
                )
        self._steps_injected += 1

    def _inject_opacus(self, params: list[torch.Tensor]) -> int:
        """Rewrite the per-example gradients Opacus stored; returns the backward passes they
        come from (Opacus's ``accumulated_iterations``)."""
        weight = self.parameter
        others = [p for p in params if p is not weight]
        samples = [getattr(p, "grad_sample", None) for p in others]
        if any(s is None for s in samples):
            raise ValueError(
                "Opacus stored no per-example gradients (grad_sample) for every parameter; the "
                "canaries support grad_sample_mode 'hooks', 'functorch', 'ew' and 'ghost'"
            )
        given = [s for s in samples if s is not None]  # all of them (checked above)
        # gradient accumulation (several backward passes per step): a list per parameter, one
        # tensor per pass; rewritten concatenated, handed back as a list of the same lengths
        lists = [isinstance(s, list) for s in given]
        if any(lists) and not all(lists):
            raise ValueError(
                "Opacus's per-example gradients are a list for some parameters and a tensor for "
                "others; the canaries need the same number of backward passes for every one"
            )
        lengths = [int(t.shape[0]) for t in given[0]] if given and lists[0] else None
        flat = [torch.cat(s) if isinstance(s, list) else s for s in given]
        rows = int(flat[0].shape[0]) if flat else 0
        index = self._next_batch(rows)
        canary_grad = torch.zeros((rows, *weight.shape), dtype=weight.dtype, device=weight.device)
        self._rewrite(flat, canary_grad, index)
        if lengths is None:
            weight.grad_sample = canary_grad  # type: ignore[attr-defined]  # Opacus's attribute
            return 1
        for p, f in zip(others, flat, strict=True):
            p.grad_sample = list(torch.split(f, lengths))  # type: ignore[attr-defined]
        weight.grad_sample = list(torch.split(canary_grad, lengths))  # type: ignore[attr-defined]
        return len(lengths)

    def inject(self, per_example: list[torch.Tensor] | dict[str, torch.Tensor]) -> None:
        """Rewrite a plain loop's per-example gradients of one batch in place (before clipping).

        ``per_example``: a list aligned with ``model.parameters()`` or a dict by parameter name
        (``torch.func``), each (B, *shape), B the batch's rows in the loader's order. Entries
        that are broadcast views (``torch.func`` returns the canary block's zero gradient
        expanded) are replaced in the container by writable copies.
        """
        if self.model is None:
            raise ValueError("attach(model) first")
        if isinstance(per_example, dict):
            key = next(
                (k for k in per_example if k.endswith(f"{CANARY_MODULE}.block.weight")), None
            )
            if key is None:
                raise ValueError(
                    f"per_example has no gradient for {CANARY_MODULE}.block.weight; its keys: "
                    f"{sorted(per_example)[:5]}"
                )
            keys: list[Any] = [key, *[k for k in per_example if k != key]]
        else:
            params = list(self.model.parameters())
            if len(per_example) != len(params):
                raise ValueError(
                    f"per_example has {len(per_example)} tensors; the model has {len(params)} "
                    "parameters"
                )
            position = next(i for i, p in enumerate(params) if p is self.parameter)
            keys = [position, *[i for i in range(len(params)) if i != position]]
        for k in keys:
            g = per_example[k]
            # a broadcast view: writing into it would write every row
            if 0 in g.stride() and g.numel() > 1:
                per_example[k] = g.clone()
        canary = per_example[keys[0]]
        grads = [per_example[k] for k in keys[1:]]
        self._rewrite(grads, canary, self._next_batch(int(canary.shape[0])))

    # -- what was observed --------------------------------------------------------------

    @property
    def unstepped_batches(self) -> int:
        """Loader batches yielded that no optimizer step took (drawn and not stepped on, or
        rewritten after the last step)."""
        return len(self.batches) - sum(self.batches_per_step)

    @property
    def observations(self) -> np.ndarray:
        """y (m, S): each canary's coordinate of the privatized gradient at each step, in units
        of the canary block's clip c (C but under per-layer clipping, :attr:`clip_ratio`)."""
        if not self._rows:
            raise ValueError(
                "no optimizer step was recorded (instrument with opacus() or plain() before "
                "training)"
            )
        if self._step_problem is not None:
            raise ValueError(self._step_problem)
        return np.stack(self._rows, axis=1)

    def scores(
        self, sigma: float | None = None, sampling_probability: float | None = None
    ) -> np.ndarray:
        """One score per canary (higher = IN), a function of the observations only.

        With ``sampling_probability`` q (Poisson-like steps): the log-likelihood ratio of
        "included in each step with probability q" against "never",
        sum_t log(1 - q + q exp((y_t - 1/2) / sigma^2)); else the sum of y_t (the last
        iterate's projection). ``sigma``: the noise multiplier of the score; None estimates
        it from the observations themselves, 1.4826 x the median absolute deviation of every
        y_{j,t} (most are pure noise), so that a training with less noise than claimed is
        scored at its real noise. Any score of the output is sound for the one-run bounds
        (the guesses may be any function of the output; the IN/OUT bits are not used).
        """
        y = self.observations
        if sampling_probability is None:
            return y.sum(axis=1)
        if sigma is None:
            sigma = float(1.4826 * np.median(np.abs(y - np.median(y))))
            if not sigma > 0:
                raise ValueError(
                    "the observations have no spread: cannot estimate sigma; pass sigma="
                )
        sigma = check_real("sigma", sigma, minimum=0.0, strict_minimum=True)
        q = check_real(
            "sampling_probability",
            sampling_probability,
            minimum=0.0,
            maximum=1.0,
            strict_minimum=True,
        )
        return np.logaddexp(
            np.log1p(-q) if q < 1 else -np.inf, np.log(q) + (y - 0.5) / sigma**2
        ).sum(axis=1)

    def result(
        self,
        setup: Any,
        *,
        claimed_epsilon: float | None = None,
        claimed_delta: float | None = None,
    ) -> Any:
        """The multi-run :class:`audit.plugins.contract.TrainingResult` of one training (m = 1).

        The harness reads y_t = (b / (lr C)) Delta_t[k] + known with u = -e_k
        (:func:`audit.plugins.contract.observations_of`); the recorded y_t (before the
        attacker's add-back) are returned as the equivalent SGD updates
        ``Delta_t = (lr C / b) y_t`` of one coordinate (k = 0), with ``setup``'s lr, C and b,
        whatever optimizer the user ran. ``canary_record`` (:meth:`record`) carries the same
        y_t with the rows of the slot and of each step's batch, for the multi-run findings.
        (In a replay, :func:`stand_in`, the first canary's observations, whatever m.)
        """
        from audit.plugins.contract import TrainingResult

        if self.m != 1 and self.replay is None:
            raise ValueError(f"result() is for one canary per training (multi-run); got m={self.m}")
        record = self.record()
        updates = (setup.lr * setup.clip / setup.batch_size) * record.y[:, None]
        return TrainingResult(
            final_params=updates.sum(axis=0),
            initial_params=np.zeros(1),
            updates=updates,
            canary_coordinate=0,
            claimed_epsilon=claimed_epsilon,
            claimed_delta=claimed_delta,
            canary_record=record,
        )

    def record(self, canary: int = 0) -> Any:
        """The :class:`audit.plugins.contract.CanaryRecord` of canary ``canary``: its y_t at
        every recorded step (units of C), the rows of its slot and of the whole batch in the
        step's batch (:attr:`step_batches`: the rows rewritten for step t), and the noise
        divisor."""
        from audit.plugins.contract import CanaryRecord

        canary = check_int("canary", canary, minimum=0, maximum=self.m - 1)
        y = self.observations[canary]
        if self.real is None or len(self.step_batches) < y.size:
            raise ValueError(
                f"{len(self.step_batches)} step batches recorded for {y.size} optimizer steps: "
                "wrap the dataset and iterate the watched loader"
            )
        batches = self.step_batches[: y.size]
        slot = self.real + canary
        return CanaryRecord(
            y=y,
            slot_rows=np.array([int(np.sum(b == slot)) for b in batches], dtype=np.int64),
            batch_rows=np.array([b.size for b in batches], dtype=np.int64),
            noise_divisor=self._divisor,
        )
