"""Plug-in training implementations: audit the DP-SGD code people deploy, not only our engine.

An *implementation* is any callable that trains one model with DP-SGD::

    train(data: TrainingData, canary: Canary, setup: TrainingSetup, seed: int) -> TrainingResult |
    dict

named in an audit spec as ``implementation = "package.module:function"``, as a user's script
``implementation = "path/to/train.py:train"`` (loaded from the file), or by a built-in name
(:data:`BUILTINS`: ``opacus``, ``opacus-rdp``, ``numpy-reference``). A script may train any
model on any data with any loader: it may ignore ``data`` (the harness's examples, with the
canary feature column) and the setup's ``model``, train its own, and carry the canary with
:class:`audit.deployed.instrument.DiracCanaries` (one canary, IN or OUT as ``canary`` says;
``canaries.result(setup)`` is its result). The harness's data sets, the canary feature and
``logistic``/``mlp`` are then one case of this contract (docs/design.md §14.5). The harness owns
everything else: it loads the data, places the canary, derives one seed per training from
the audit seed (:mod:`audit.core.seeding`), runs K IN and K OUT trainings per shard
(:func:`run_implementation_shard`, sharded over joblib workers by the runner), turns the
results into the observations of the threat model, scores them with the attacks, and
computes the statistics, the verdict and the report.

The contract of ``train(data, canary, setup, seed)`` in brief (each item is detailed in the
next section; the DP-SGD it must implement is docs/design.md §3.1, the adjacency §3.2, the
canaries and threat models §3.4, the observations §3.5):

Args:
    data (TrainingData): the n - 1 real examples (``x`` float32 (n-1, D), ``y``,
        ``classes``); feature D - 1 is the canary feature, 0 for every real example.
    canary (Canary): IN (``weight = 1``) or zeroed OUT (``weight = 0``);
        ``canary.place(data)`` gives the n rows ``(x, y, weight)`` with the canary at index 0.
    setup (TrainingSetup): the configuration to train with (sampler, sigma, clip, lr, batch
        size, n, epochs, model, init_seed, threat model, delta, ...).
    seed (int): in [0, 2**63), different for every training, for every random choice other
        than theta_0 (batches, noise).

Returns:
    result (TrainingResult | dict): a :class:`TrainingResult` or a dict with its keys:
        ``final_params`` (required), the canary direction (``canary_coordinate`` or
        ``canary_direction``), ``initial_params`` unless ``iterates`` are given, and optionally
        ``iterates`` or ``updates`` (white box), ``canary_loss`` and ``canary_logits`` (black
        box), ``claimed_epsilon`` at ``claimed_delta``.

Raises:
    Exception: whatever the implementation raises propagates: the shard fails, nothing of it
        is stored, and a re-run recomputes it (shards already stored stay valid). An
        implementation should raise ``ValueError`` naming the setup field it cannot honour (as
        the built-ins do, e.g. a model it does not train).
    ValueError: raised by the harness when the result breaks the contract
        (:func:`coerce_result`: unknown keys, no ``final_params``, sizes that differ from
        ``final_params``, a ``canary_direction`` that is not a unit vector, iterates of the
        wrong shape) or lacks what the spec's observation needs
        (:func:`run_implementation_shard`).

The contract, argument by argument
----------------------------------

``data`` (:class:`TrainingData`): the n - 1 non-canary examples, ``x`` float32 (n-1, D) and integer
labels ``y`` (n-1,), ``classes`` labels in all: the same examples as the engine's
(:func:`audit.core.data.load_dataset` with ``setup.data_seed``, rows 1..n-1). The last input feature
(index D - 1) is the *canary feature*: 0 for every real example, so the first-layer weights leaving
it (the *private row*) are moved by the canary alone (:mod:`audit.training.canaries`).

``canary`` (:class:`Canary`): the example that is IN (``weight = 1``) or zeroed OUT (``weight =
0``). Adjacency is zero-out (docs/design.md §3.2): the canary's slot stays in the data in both
worlds, so n and every fixed batch size are the same, and only its per-example gradient is
multiplied by ``weight``. ``canary.place(data)`` returns the n training rows ``(x, y, weight)`` with
the canary at index 0 (as in the engine); train on those n rows with your sampler and multiply each
per-example loss (or gradient, before clipping) by its weight.
Two kinds:

- ``kind = "input"``: a real example ``(canary.x, canary.y)`` that goes through the model:
  the out-of-distribution input ``x = scale * e_{D-1}`` with label ``canary_label``.
- ``kind = "dirac"``: a gradient canary (Nasr et al. 2023; white-box). Let k be the flat index
  of the first-layer weight from the canary feature to output unit ``canary.unit`` and
  u = -e_k. After computing the per-example gradients of a batch and *before clipping*,
  replace the canary's row by ``weight * gradient_norm * C * u``; with ``threat_model =
  "adversarial"`` replace every other row by ``-gradient_norm * C * u`` (the worst-case
  co-batch data under zero-out). Since ``gradient_norm >= 1``, correct clipping maps them
  to exactly +-C u. :func:`audit.plugins.opacus.inject_dirac` does it for Opacus.

``setup`` (:class:`TrainingSetup`): the configuration to train with (sampler, sigma, clip C,
lr, batch size b, n, epochs, model, init_seed, ...) and ``delta`` for the claimed epsilon.
The harness assumes plain DP-SGD, ``theta_t = theta_{t-1} - lr (sum_i clip_C(g_i) + N(0,
sigma^2 C^2 I)) / b`` with b the expected batch size (Opacus's ``loss_reduction="mean"``),
started from parameters drawn with ``setup.init_seed`` (the same theta_0 in every training,
known to the attacker, as in the engine).

``seed``: an int in [0, 2**63) for every other random choice (batches, noise), different in
every training, so that each training is reproducible.

The result (:class:`TrainingResult`, or a dict with the same keys):

- ``final_params`` (P,): the flat final parameters;
- the canary direction u, as ``canary_coordinate`` k (u = -e_k, the Dirac convention) or
  ``canary_direction`` (P,) (e.g. the input canary's gradient at theta_0 on the private row);
- ``initial_params`` (P,) theta_0, unless ``iterates`` are given;
- optionally ``iterates`` (S+1, P), the parameters before the first and after every step,
  or ``updates`` (S, P) = ``iterates[1:] - iterates[:-1]`` (white-box, all iterates);
  :class:`IterateRecorder` records them with a hook after ``optimizer.step()``;
- optionally ``canary_loss`` and ``canary_logits`` on the final model (black box);
- optionally ``claimed_epsilon`` at ``claimed_delta`` (default ``setup.delta``), what the
  implementation's own accountant reports. An implementation may also carry an attribute
  ``claimed_epsilon(setup, delta) -> float`` that gives it without training;
- optionally ``canary_record`` (:class:`CanaryRecord`, or a dict of its fields): what the
  instrument recorded of the canary at every optimizer step (the canary coordinate of what the
  optimizer received, in units of C; the rows of the canary's slot and of the whole batch).
  :meth:`audit.deployed.instrument.DiracCanaries.result` fills it in; the harness stores it in
  the shard (:data:`RECORD_PREFIX` arrays) and the multi-run findings
  (:mod:`audit.deployed.multi_run`, docs/design/multi-run-diagnostics.md) test the OUT
  trainings' pure noise against the setup's sigma, steps and q. A script that returns none
  is audited as before, without those findings.

Observations: the exact conversion (same as :mod:`audit.training.engine`)
----------------------------------------------------------------

With Delta_t = theta_t - theta_{t-1}, S = T*E steps and ``known`` the attacker's per-step
add-back (:func:`audit.training.canaries.known_offset`: 0 isolated; under adversarial b for the
fixed-size samplers, (n-1) q for Poisson), since Delta_t = -(lr / b) (G_t + N_t) with G_t the
clipped sum:

    y_t   = <G_t + N_t, u> / C + known = -(b / (lr C)) <Delta_t, u> + known,
    final = (b / (lr C)) <theta_0 - theta_S, u> + S known   (= sum_t y_t),
    loss  = canary_loss.

One participation of the IN canary moves y_t by +1 (a batch holding it reads 2 IN, 1 OUT and
any other batch 0 under adversarial fixed-size sampling: Chua et al. 2024's MoG(2) vs MoG(1)).

Example: a user implementation (numpy logistic regression, Poisson batches; the spec names it
``implementation = "mytrain:train"``)::

    import numpy as np

    def train(data, canary, setup, seed):
        rng, (x, y, w) = np.random.default_rng(seed), canary.place(data)   # canary at row 0
        theta = np.zeros((data.classes, x.shape[1]))                       # W (classes, D)
        for _ in range(setup.total_steps):                                 # Poisson, q = b/n
            batch = np.flatnonzero(rng.random(len(x)) < setup.batch_size / len(x)) e =
            np.exp(x[batch] @ theta.T); e = e / e.sum(1, keepdims=True) -
            np.eye(data.classes)[y[batch]]
            g = w[batch, None, None] * e[:, :, None] * x[batch, None, :]   # zero-out: weight 0 OUT
            g *= np.minimum(1, setup.clip / np.maximum(np.linalg.norm(g, axis=(1, 2)), 1e-12))[:,
            None, None] theta -= setup.lr * (g.sum(0) + rng.normal(0, setup.sigma * setup.clip,
            theta.shape)) / setup.batch_size
        return {"final_params": theta.ravel(), "initial_params": np.zeros(theta.size),
                "canary_coordinate": canary.coordinate(data)}                 # u = -e_k
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

import numpy as np

from audit.core.data import load_training_rows
from audit.core.errors import AuditInputError
from audit.core.names import CANARIES, CANARY_INDEX, MODELS, OBSERVATIONS, THREAT_MODELS
from audit.core.record import Training
from audit.core.seeding import seed_sequence, torch_seed
from audit.core.validation import (
    check_choice,
    check_int,
    check_real,
    load_callable,
)
from audit.sampling import validate_training

__all__ = [
    "BUILTINS",
    "CANARY_INDEX",
    "CANARY_KINDS",
    "RECORD_PREFIX",
    "Canary",
    "CanaryRecord",
    "Implementation",
    "IterateRecorder",
    "TrainingData",
    "TrainingResult",
    "TrainingSetup",
    "claimed_epsilon",
    "coerce_result",
    "load_implementation",
    "make_canary",
    "observations_of",
    "record_arrays",
    "records_of",
    "run_implementation_shard",
    "setup_from",
    "training_data",
    "trial_seed",
]

BUILTINS: dict[str, str] = {
    "opacus": "audit.plugins.opacus:train",
    "opacus-rdp": "audit.plugins.opacus:train_rdp",
    "numpy-reference": "audit.plugins.broken:correct",
}
"""Built-in implementation names -> ``module:function``."""

CANARY_KINDS: tuple[str, ...] = CANARIES
"""``dirac``: a gradient canary (white-box); ``input``: a real example through the model."""


@dataclass(frozen=True, kw_only=True)
class TrainingSetup(Training):
    """The training configuration an implementation receives: the record
    :class:`audit.core.record.Training` (validated, its mechanism built once; names as the
    engine's) plus what only a plug-in needs.

    Attributes:
        sampler: the batch sampler to train with (what the accountant is told is ``sampler``
            too, unless the implementation's own accountant says otherwise).
        sigma: noise multiplier; the noise is N(0, sigma^2 C^2 I) per step.
        clip: clipping norm C.  lr: learning rate of plain SGD.
        batch_size: b, the (expected) batch size; the noisy sum is divided by b.
        n: number of training rows including the canary's slot (n = b*T for every sampler).
        epochs: E.  max_batch_size: B of a sampler that pads (truncated Poisson; else None).
        dataset, model, hidden, activation: the data and the model (:mod:`audit.training.models`;
            a plug-in trains ``logistic`` or ``mlp``).
        threat_model: ``isolated`` or ``adversarial``.  canary: ``dirac`` or ``input``.
        input_canary: ``ood`` (the only input canary a plug-in receives).
        canary_label, canary_scale: the input canary's label and feature value.
        data_seed: selects the n examples; init_seed: the shared initial parameters theta_0.
        observation: what the audit observes (implementations may skip recording the rest).
        delta: the delta at which an implementation reports its claimed epsilon.
        mechanism, steps_per_epoch, total_steps: (read-only) the mechanism, T and S = T*E.
    """

    observation: str = "all_iterates"
    delta: float = 1e-5

    def _check_options(self) -> None:
        """The sampler's rules (:func:`audit.sampling.validate_training`), then a plug-in's own
        fields and rules: observation, delta, model, the input canary."""
        validate_training(self)
        check_choice("observation", self.observation, OBSERVATIONS)
        check_real(
            "delta", self.delta, minimum=0.0, maximum=1.0, strict_minimum=True, strict_maximum=True
        )
        check_choice("model", self.model, MODELS)
        if self.canary == "input" and self.input_canary != "ood":
            raise ValueError(
                f"input_canary={self.input_canary!r} is not supported by training "
                "implementations; allowed: ood "
                "(the out-of-distribution input canary_scale * e_(D-1))"
            )
        if self.canary == "input" and self.threat_model == "adversarial":
            # The adversarial co-batch (every other row -C u) is part of the Dirac protocol only;
            # without it the attacker's add-back (known_offset) would shift every y_t by b.
            raise ValueError(
                "threat_model='adversarial' needs canary='dirac' in a training implementation "
                "(the adversarial co-batch is injected by the Dirac protocol); allowed with "
                "canary='input': threat_model='isolated'"
            )


def setup_from(config: object, **overrides: Any) -> TrainingSetup:
    """A :class:`TrainingSetup` from the engine's ``TrainingConfig``, a mapping, or a setup.

    Fields are read by name (missing optional ones take the defaults of
    :class:`TrainingSetup`; unknown ones are ignored); ``overrides`` that are not None win.
    A record (:class:`audit.core.record.Training`, e.g. a ``TrainingConfig``) whose record
    fields are not overridden is viewed as it is (:meth:`Training.view`: not validated again).
    """
    changes = {k: v for k, v in overrides.items() if v is not None}
    record = {f.name for f in fields(Training)}
    if isinstance(config, Training) and not changes.keys() & record:
        options = {
            f.name: getattr(config, f.name)
            for f in fields(TrainingSetup)
            if f.name not in record and hasattr(config, f.name)
        }
        return TrainingSetup.view(config, **{**options, **changes})
    values: dict[str, Any] = {}
    for f in fields(TrainingSetup):
        value = config.get(f.name) if isinstance(config, Mapping) else getattr(config, f.name, None)
        if value is not None:
            values[f.name] = value
    values.update(changes)
    missing = [
        f.name for f in fields(TrainingSetup) if f.default is MISSING and f.name not in values
    ]
    if missing:
        raise ValueError(
            f"the training configuration lacks {', '.join(missing)} (needed by an implementation)"
        )
    return TrainingSetup(**values)


@dataclass(frozen=True)
class TrainingData:
    """The n - 1 non-canary examples: ``x`` float32 (n-1, D), the last feature 0; ``y`` int64."""

    x: np.ndarray
    y: np.ndarray
    classes: int

    @property
    def features(self) -> int:
        """D, including the canary feature (the last one)."""
        return int(self.x.shape[1])

    @property
    def canary_feature(self) -> int:
        """Index of the canary feature, D - 1."""
        return self.features - 1


@dataclass(frozen=True)
class Canary:
    """The canary, IN (``weight = 1``) or zeroed OUT (``weight = 0``); see the module docstring.

    Attributes:
        kind: ``dirac`` (gradient canary) or ``input`` (a real example).
        x, y: the canary's input (D,) and label (for ``dirac``, a probe that occupies the slot).
        weight: 1.0 IN, 0.0 OUT (zero-out: the slot stays, its gradient is multiplied by 0).
        unit: the output unit of the first layer that u points to (u = -e_k, k the weight
            from the canary feature to ``unit``): the label for logistic regression, 0 for the MLP.
        threat_model: ``isolated`` or ``adversarial`` (what the Dirac protocol does to the others).
        gradient_norm: the Dirac canary's gradient norm before clipping, in units of C (>= 1).
    """

    kind: str
    x: np.ndarray
    y: int
    weight: float
    unit: int = 0
    threat_model: str = "isolated"
    gradient_norm: float = 2.0

    def __post_init__(self) -> None:
        check_choice("canary kind", self.kind, CANARY_KINDS)
        check_choice("threat_model", self.threat_model, THREAT_MODELS)
        if self.weight not in (0.0, 1.0):
            raise ValueError(f"canary weight={self.weight!r} must be 1.0 (IN) or 0.0 (OUT)")
        check_real("gradient_norm", self.gradient_norm, minimum=1.0)

    @property
    def is_in(self) -> bool:
        """True in the IN world."""
        return self.weight == 1.0

    def place(self, data: TrainingData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The n training rows ``(x, y, weight)``: the canary at row 0, then the data."""
        x = np.concatenate([self.x[None, :].astype(data.x.dtype), data.x], axis=0)
        y = np.concatenate([np.array([self.y], dtype=data.y.dtype), data.y])
        weight = np.ones(len(y), dtype=np.float32)
        weight[CANARY_INDEX] = self.weight
        return x, y, weight

    def coordinate(self, data: TrainingData) -> int:
        """k for a first layer stored first as an (outputs, D) matrix (``torch.nn.Linear``)."""
        return self.unit * data.features + data.canary_feature


@dataclass(frozen=True)
class CanaryRecord:
    """What the instrument recorded of one training's canary, step by step (multi-run findings,
    docs/design/multi-run-diagnostics.md).

    Attributes:
        y: (S,) float64, the canary coordinate of what the optimizer received at step t, in
            units of C: ``grad * noise_divisor / C`` (before the attacker's add-back). For correct
            DP-SGD, isolated: ``y_t = slot_rows_t * 1[IN] + N(0, sigma^2)``; adversarial (every
            other row -C on the coordinate): minus ``batch_rows_t - slot_rows_t`` more.
        slot_rows: (S,) int64, the rows of the canary's slot in step t's batch (0: not in it).
        batch_rows: (S,) int64, the rows of step t's batch.
        noise_divisor: the b the instrument was told the noisy sum is divided by (None: unknown).
    """

    y: np.ndarray
    slot_rows: np.ndarray
    batch_rows: np.ndarray
    noise_divisor: float | None = None

    def __post_init__(self) -> None:
        y = np.asarray(self.y, dtype=np.float64).ravel()
        slot = np.asarray(self.slot_rows).ravel()
        rows = np.asarray(self.batch_rows).ravel()
        for name, value in (("slot_rows", slot), ("batch_rows", rows)):
            if value.size != y.size:
                raise ValueError(
                    f"canary_record.{name} has {value.size} entries; need one per recorded step "
                    f"(y has {y.size})"
                )
            if value.size and (not np.array_equal(value, np.round(value)) or value.min() < 0):
                raise ValueError(f"canary_record.{name} must hold counts (integers >= 0)")
        if slot.size and np.any(slot > rows):
            raise ValueError("canary_record.slot_rows exceeds batch_rows at some step")
        object.__setattr__(self, "y", y)
        object.__setattr__(self, "slot_rows", slot.astype(np.int64))
        object.__setattr__(self, "batch_rows", rows.astype(np.int64))
        if self.noise_divisor is not None:
            divisor = check_real(
                "canary_record.noise_divisor", self.noise_divisor, minimum=0.0,
                strict_minimum=True,
            )
            object.__setattr__(self, "noise_divisor", divisor)

    @property
    def steps(self) -> int:
        """S, the optimizer steps recorded."""
        return int(self.y.size)

    @property
    def in_batch(self) -> np.ndarray:
        """(S,) booleans: the canary's slot was in step t's batch."""
        return self.slot_rows > 0

    @classmethod
    def of(cls, value: object) -> CanaryRecord:
        """A record from a :class:`CanaryRecord` or a mapping of its fields (ValueError naming
        an unknown field)."""
        if isinstance(value, CanaryRecord):
            return value
        if isinstance(value, Mapping):
            allowed = {f.name for f in fields(cls)}
            unknown = set(value) - allowed
            missing = {"y", "slot_rows", "batch_rows"} - set(value)
            if unknown or missing:
                raise ValueError(
                    f"canary_record: unknown keys {sorted(unknown)}, missing {sorted(missing)}; "
                    f"allowed: {sorted(allowed)}"
                )
            return cls(**value)
        raise ValueError(
            f"canary_record must be a CanaryRecord or a dict, got {type(value).__name__}"
        )


RECORD_PREFIX = "canary_record."
"""Prefix of the shard arrays that hold the trainings' :class:`CanaryRecord`:
``canary_record.<field>.<world>`` (world ``in``/``out``; ``y`` float64, ``slot_rows`` and
``batch_rows`` int32, each (trials, S); ``noise_divisor`` (trials,), NaN when unknown). They
end neither in ``_in`` nor ``_out``, so the scoring (:func:`audit.run.scoring.observations_of`)
does not read them."""

_RECORD_FIELDS = ("y", "slot_rows", "batch_rows", "noise_divisor")


def record_arrays(records: Sequence[CanaryRecord], world: str) -> dict[str, np.ndarray]:
    """The shard arrays of one world's records (:data:`RECORD_PREFIX`), one row per training.

    Raises:
        ValueError: the trainings recorded different numbers of optimizer steps (the steps must
            not depend on the seed or on the canary).
    """
    check_choice("world", world, ("in", "out"))
    if not records:
        return {}
    steps = sorted({r.steps for r in records})
    if len(steps) > 1:
        raise ValueError(
            f"the {world.upper()} trainings recorded different numbers of optimizer steps "
            f"({steps[0]} to {steps[-1]}): the number of steps must not depend on the seed or "
            "on the canary"
        )
    return {
        f"{RECORD_PREFIX}y.{world}": np.stack([r.y for r in records]),
        # counts as int32 (a batch of 2^31 rows is not a batch), half the bytes of int64
        f"{RECORD_PREFIX}slot_rows.{world}": np.stack([r.slot_rows for r in records]).astype(
            np.int32
        ),
        f"{RECORD_PREFIX}batch_rows.{world}": np.stack([r.batch_rows for r in records]).astype(
            np.int32
        ),
        f"{RECORD_PREFIX}noise_divisor.{world}": np.array(
            [np.nan if r.noise_divisor is None else r.noise_divisor for r in records]
        ),
    }


def records_of(arrays: Mapping[str, np.ndarray], world: str) -> list[CanaryRecord]:
    """The records of one world from shard arrays (:func:`record_arrays`); [] when the shard
    holds none (an implementation that returned no ``canary_record``)."""
    check_choice("world", world, ("in", "out"))
    keys = {name: f"{RECORD_PREFIX}{name}.{world}" for name in _RECORD_FIELDS}
    if keys["y"] not in arrays:
        return []
    y, slot, rows = (np.asarray(arrays[keys[k]]) for k in ("y", "slot_rows", "batch_rows"))
    divisors = np.asarray(arrays.get(keys["noise_divisor"], np.full(len(y), np.nan)))
    return [
        CanaryRecord(
            y=y[i], slot_rows=slot[i], batch_rows=rows[i],
            noise_divisor=None if not np.isfinite(divisors[i]) else float(divisors[i]),
        )
        for i in range(len(y))
    ]


@dataclass
class TrainingResult:
    """What one training returns (see the module docstring)."""

    final_params: np.ndarray
    canary_coordinate: int | None = None
    canary_direction: np.ndarray | None = None
    initial_params: np.ndarray | None = None
    iterates: np.ndarray | None = None
    updates: np.ndarray | None = None
    canary_loss: float | None = None
    canary_logits: np.ndarray | None = None
    claimed_epsilon: float | None = None
    claimed_delta: float | None = None
    canary_record: CanaryRecord | None = None
    metadata: Mapping[str, object] = field(default_factory=dict)

    def direction(self) -> np.ndarray | None:
        """u (P,): ``canary_direction``, or -e_k for ``canary_coordinate`` k, or None."""
        if self.canary_direction is not None:
            return self.canary_direction
        if self.canary_coordinate is None:
            return None
        u = np.zeros(self.final_params.size)
        u[self.canary_coordinate] = -1.0
        return u

    def step_updates(self) -> np.ndarray | None:
        """Delta_t = theta_t - theta_{t-1}, (S, P), from ``updates`` or ``iterates``."""
        if self.updates is not None:
            return self.updates
        if self.iterates is not None:
            return np.diff(self.iterates, axis=0)
        return None

    def theta0(self) -> np.ndarray | None:
        """theta_0: ``initial_params``, else the first iterate."""
        if self.initial_params is not None:
            return self.initial_params
        return None if self.iterates is None else self.iterates[0]


_RESULT_KEYS = {f.name for f in fields(TrainingResult)}


def coerce_result(result: object) -> TrainingResult:
    """A validated :class:`TrainingResult` from what an implementation returned."""
    if isinstance(result, Mapping):
        unknown = set(result) - _RESULT_KEYS
        if unknown:
            raise ValueError(
                f"an implementation returned unknown keys {sorted(unknown)}; allowed: "
                f"{sorted(_RESULT_KEYS)}"
            )
        if "final_params" not in result:
            raise ValueError("an implementation's result must contain 'final_params'")
        result = TrainingResult(**result)
    if not isinstance(result, TrainingResult):
        raise ValueError(
            f"an implementation must return a TrainingResult or a dict, got {type(result).__name__}"
        )
    result.final_params = np.asarray(result.final_params, dtype=np.float64).ravel()
    size = result.final_params.size
    if result.canary_record is not None:
        result.canary_record = CanaryRecord.of(result.canary_record)
    if result.canary_coordinate is not None:
        result.canary_coordinate = check_int(
            "canary_coordinate", result.canary_coordinate, minimum=0, maximum=size - 1
        )
    for name in ("canary_direction", "initial_params"):
        value = getattr(result, name)
        if value is not None:
            value = np.asarray(value, dtype=np.float64).ravel()
            if value.size != size:
                raise ValueError(
                    f"{name} must have {size} entries (as final_params); got {value.size}"
                )
            setattr(result, name, value)
    if result.canary_direction is not None:
        norm = float(np.linalg.norm(result.canary_direction))
        if not np.isclose(norm, 1.0, atol=1e-6):
            raise ValueError(f"canary_direction must be a unit vector; its norm is {norm:.6g}")
    for name in ("iterates", "updates"):
        value = getattr(result, name)
        if value is not None:
            value = np.asarray(value, dtype=np.float64)
            if value.ndim != 2 or value.shape[1] != size:
                raise ValueError(f"{name} must have shape (steps, {size}); got {value.shape}")
            setattr(result, name, value)
    return result


Implementation = Callable[..., Any]
"""``train(data, canary, setup, seed) -> TrainingResult | dict``."""


def load_implementation(name_or_path: str | Callable[..., Any]) -> Callable[..., Any]:
    """The training callable named ``name_or_path``: a built-in name, ``package.module:function``
    or a user's script ``path/to/train.py:function`` (loaded from the file, relative paths
    from the working directory: :func:`audit.core.validation.load_callable`).

    Raises:
        ValueError: an unknown built-in name (with the closest one), a module that cannot be
            imported (naming the extra to install for opacus), or an attribute that is missing
            or not callable.
    """
    if callable(name_or_path):
        return name_or_path
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise ValueError(
            f"implementation={name_or_path!r} must be a built-in name ({', '.join(BUILTINS)}), "
            "'package.module:function' or 'path/to/train.py:function'"
        )
    path = BUILTINS.get(name_or_path, name_or_path)
    if ":" not in path:
        check_choice("implementation", name_or_path, tuple(BUILTINS))  # raises, with a suggestion
    return load_callable("implementation", path, hint=_opacus_hint)


def _opacus_hint(error: ImportError) -> str:
    return (
        " (install the 'accountants' extra: pip install 'dpsgd-audit[accountants]')"
        if "opacus" in str(error)
        else ""
    )


def claimed_epsilon(
    implementation: str | Callable[..., Any], config: object, delta: float
) -> float | None:
    """The implementation's own claimed epsilon at ``delta`` without training, or None.

    Uses the implementation's ``claimed_epsilon(setup, delta)`` attribute when it has one.
    """
    train = load_implementation(implementation)
    function = getattr(train, "claimed_epsilon", None)
    if function is None:
        return None
    return float(function(setup_from(config, delta=delta), delta))


class IterateRecorder:
    """Record the flat parameters after every ``optimizer.step()`` (white-box audits).

    ``recorder = IterateRecorder(model.parameters()).attach(optimizer)`` stores the
    parameters now, then after each step through torch's ``register_step_post_hook`` (on the
    wrapped optimizer of an Opacus ``DPOptimizer``, whose ``step`` clips, noises and then
    calls it; a step Opacus skips, e.g. during gradient accumulation, records nothing).
    ``recorder.iterates`` is (steps + 1, P).
    """

    def __init__(self, parameters: Any) -> None:
        self.parameters = list(parameters)
        self._rows: list[np.ndarray] = [self.snapshot()]
        self._handle: Any = None

    def snapshot(self) -> np.ndarray:
        """The current flat parameters, float64."""
        import torch

        with torch.no_grad():
            return (
                torch.cat([p.detach().reshape(-1) for p in self.parameters]).double().numpy().copy()
            )

    def attach(self, optimizer: Any) -> IterateRecorder:
        """Hook ``optimizer`` (a torch optimizer, or an Opacus DPOptimizer)."""
        inner = getattr(optimizer, "original_optimizer", optimizer)
        self._handle = inner.register_step_post_hook(lambda *_: self._rows.append(self.snapshot()))
        return self

    def detach(self) -> None:
        """Remove the hook."""
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    @property
    def iterates(self) -> np.ndarray:
        """(steps + 1, P): the parameters before the first step and after every step."""
        return np.stack(self._rows)


def training_data(setup: TrainingSetup) -> TrainingData:
    """The engine's examples 1..n-1 of ``setup.dataset`` (``data_seed``), canary feature
    appended."""
    rows = load_training_rows(setup.dataset, setup.n, seed=setup.data_seed)
    keep = np.arange(rows.n) != CANARY_INDEX
    return TrainingData(x=rows.x[keep], y=rows.y[keep], classes=rows.classes)


def make_canary(setup: TrainingSetup, data: TrainingData, *, is_in: bool) -> Canary:
    """The canary of ``setup``, IN or OUT (as :func:`audit.training.canaries.make_canary`).

    Both kinds carry the probe ``x = canary_scale * e_{D-1}`` with label ``canary_label``
    (for ``input`` it is the example trained on; for ``dirac`` only its loss is defined). u
    points to output ``canary_label`` (logistic regression) or hidden unit 0 (MLP).
    """
    x = np.zeros(data.features, dtype=np.float32)
    x[data.canary_feature] = setup.canary_scale
    return Canary(
        kind=setup.canary,
        x=x,
        y=setup.canary_label,
        weight=1.0 if is_in else 0.0,
        unit=setup.canary_label if setup.model == "logistic" else 0,
        threat_model=setup.threat_model,
    )


def trial_seed(seed: int, cell: str, shard: int, trial: int, world: str) -> int:
    """The int seed of one training: child (cell, "implementation", shard, trial, world) of
    ``seed``."""
    return torch_seed(seed_sequence(seed, cell or "cell", "implementation", shard, trial, world))


def known_offset(setup: TrainingSetup) -> float:
    """The attacker's per-step add-back (units of C),
    :func:`audit.training.canaries.known_offset`."""
    # audit.training.canaries imports torch; this module must import without it (e.g. for the
    # report)
    from audit.training.canaries import known_offset as engine_known_offset

    return float(engine_known_offset(setup.mechanism))


def observations_of(
    result: TrainingResult, setup: TrainingSetup, known: float | None = None
) -> dict[str, np.ndarray | float]:
    """The observations of one training (see "Observations" in the module docstring).

    Returns ``y`` (S,) when the result has iterates or updates, ``final`` when it has a
    direction and theta_0, ``loss``/``logits`` when it has them, ``claimed_epsilon`` when it
    reports one.
    """
    known = known_offset(setup) if known is None else known
    scale = setup.batch_size / (setup.lr * setup.clip)
    observed: dict[str, np.ndarray | float] = {}
    u = result.direction()
    updates = result.step_updates()
    if updates is not None and u is not None:
        if updates.shape[0] != setup.total_steps:
            raise ValueError(
                f"the implementation returned {updates.shape[0]} steps; the setup has T*E = "
                f"{setup.total_steps} (sampler={setup.sampler!r}, n={setup.n}, "
                f"batch_size={setup.batch_size}, epochs={setup.epochs})"
            )
        observed["y"] = -scale * (updates @ u) + known
    theta0 = result.theta0()
    if u is not None and theta0 is not None:
        observed["final"] = (
            scale * float((theta0 - result.final_params) @ u) + setup.total_steps * known
        )
    if result.canary_loss is not None:
        observed["loss"] = float(result.canary_loss)
    if result.canary_logits is not None:
        observed["logits"] = np.asarray(result.canary_logits, dtype=np.float64).ravel()
    if result.claimed_epsilon is not None:
        observed["claimed_epsilon"] = float(result.claimed_epsilon)
    return observed


_NEEDS = {"all_iterates": "y", "last_iterate": "final", "black_box": "loss"}
_HOW = {
    "all_iterates": "'iterates' or 'updates' and the canary direction",
    "last_iterate": "the canary direction and theta_0 ('initial_params' or 'iterates')",
    "black_box": "'canary_loss'",
}


def run_implementation_shard(
    implementation: str | Callable[..., Any],
    config: object,
    *,
    seed: int,
    shard: int,
    trials: int,
    cell: str = "",
    delta: float | None = None,
    observation: str | None = None,
) -> dict[str, np.ndarray]:
    """Run ``trials`` IN and ``trials`` OUT trainings of ``implementation``: the engine's shard
    dict.

    ``config`` is the engine's ``TrainingConfig`` (or anything :func:`setup_from` reads);
    ``delta``/``observation`` override the setup's (an explicit ``observation`` must be among the
    returned ones, else a ValueError names what the implementation must return). Returns, like
    :func:`audit.training.trials.run_shard`: ``y_in``/``y_out`` (trials, T*E),
    ``final_in``/``final_out`` and ``loss_in``/``loss_out`` (trials,), ``logits_in``/``logits_out``
    (trials, classes), as far as the implementation returns what they need (``observation`` must be
    among them), plus ``claimed_epsilon`` (trials,), the IN trainings' own claims, when it reports
    one, and the trainings' :class:`CanaryRecord` (:func:`record_arrays`) when every training
    returns one.

    Training (trial i, world w in {"in", "out"}) of shard s gets the seed
    :func:`trial_seed` (seed, cell, s, i, w): a shard is a pure function of its arguments.
    """
    from audit.training.trials import (
        one_torch_thread,  # imports torch, which this module must not need
    )

    setup = setup_from(config, delta=delta, observation=observation)
    train = load_implementation(implementation)
    trials = check_int("trials", trials, minimum=1)
    shard = check_int("shard", shard, minimum=0)
    data = training_data(setup)
    known = known_offset(setup)
    # checked after the first training, not after the shard
    observation = observation or setup.observation
    required = _NEEDS.get(observation)
    rows: dict[str, list[np.ndarray | float]] = {}
    records: dict[str, list[CanaryRecord]] = {"in": [], "out": []}
    with one_torch_thread():
        for world in ("in", "out"):
            canary = make_canary(setup, data, is_in=world == "in")
            for trial in range(trials):
                try:
                    returned = train(
                        data, canary, setup, trial_seed(seed, cell, shard, trial, world)
                    )
                except (
                    Exception
                ) as error:  # the plug-in's fault: name the training (audit.core.errors, exit 2)
                    raise AuditInputError(
                        f"implementation {implementation!r} raised {type(error).__name__}: "
                        f"{' '.join(str(error).split())} in trial {trial} ({world.upper()})",
                        culprit=str(implementation),
                        fix="fix the implementation (--debug shows its traceback)",
                    ) from error
                result = coerce_result(returned)
                observed = observations_of(result, setup, known)
                if observation is not None and required is not None and required not in observed:
                    raise ValueError(
                        f"observation={observation!r} needs implementation {implementation!r} to "
                        f"return {_HOW[observation]}"
                    )
                for key, value in observed.items():
                    rows.setdefault(f"{key}_{world}", []).append(value)
                if result.canary_record is not None:
                    records[world].append(result.canary_record)
    out = {key: np.asarray(values, dtype=np.float64) for key, values in rows.items()}
    if any(len(value) != trials for value in out.values()) or any(
        0 < len(r) < trials for r in records.values()
    ) or (bool(records["in"]) != bool(records["out"])):
        raise ValueError(
            f"implementation {implementation!r} returned different fields in different trainings"
        )
    for world, kept in records.items():
        out.update(record_arrays(kept, world))
    if "claimed_epsilon_in" in out:
        out["claimed_epsilon"] = out.pop("claimed_epsilon_in")
        out.pop("claimed_epsilon_out", None)
    return out
