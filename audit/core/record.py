"""One record per training: its :class:`~audit.core.mechanism.Mechanism` plus the training-only
fields.

A training is the mechanism the auditor reasons about (sampler, sigma, n, b, T, E, B, threat
model) and what only a real training needs: the data (``dataset``, ``data_seed``), the model
(``model``, ``hidden``, ``activation``, ``init_seed``), the optimiser (``clip``, ``lr``) and
the canary (``canary``, ``input_canary``, ``canary_label``, ``canary_scale``).
:class:`Training` validates every field once and builds its mechanism once; T = n / b, q and
the T*E steps are read from that mechanism everywhere (docs/design.md §3.1). Like the mechanism,
the record is checked here by what the core knows; its sampler's rules (a registered name, its
parameters, the canaries its isolated theory accepts) are checked by
:func:`audit.sampling.validate_training`, which the views (the engine's ``TrainingConfig``, the
plug-ins' ``TrainingSetup``) and the spec call on construction (docs/design.md §3.3).

The engine's :class:`audit.training.trials.TrainingConfig` and the plug-ins'
:class:`audit.plugins.contract.TrainingSetup` are this record with their own options only
(the engine: ``record_params``, ``device``; a plug-in: ``observation``, ``delta``), and the
spec builds it once per training key (:meth:`audit.run.spec.AuditSpec.training_record`).
"""

from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, fields, replace
from typing import Any, TypeVar

from audit.core.data import DATASETS, dataset_classes, dataset_size
from audit.core.mechanism import Mechanism
from audit.core.names import ACTIVATIONS, CANARIES, INPUT_CANARIES
from audit.core.validation import check_choice, check_int, check_real

__all__ = ["Training"]

_View = TypeVar("_View", bound="Training")


@dataclass(frozen=True, kw_only=True)
class Training:
    """One DP-SGD training (validated on construction; its mechanism built once).

    Attributes:
        dataset: one of :data:`audit.core.data.DATASETS`.
        model: the model to train; which names are valid is the trainer's to say (the engine:
            ``logistic``, ``mlp``, a built-in or importable ``nn.Module`` factory; a plug-in:
            ``logistic`` or ``mlp``). hidden (width, >= 1) and activation: the MLP's.
        sampler: a registered sampler (:func:`audit.sampling.get_sampler`).
        sigma: noise multiplier (> 0); clip: C (> 0); lr: learning rate (> 0).
        batch_size: b, the (expected) batch size; n: training-set size including the
            canary's slot, 2 <= n <= size of the dataset, n = b*T for every sampler (one T for
            the harness, the samplers and Opacus); epochs: E.
        max_batch_size: B of a sampler that pads (required there; ignored, with a warning,
            and set to None elsewhere).
        canary: ``dirac`` or ``input``; input_canary: ``ood`` or ``mislabeled``;
            canary_label (< the dataset's classes), canary_scale (> 0): the canary's label and
            input scale (:mod:`audit.training.canaries`).
        threat_model: ``isolated`` or ``adversarial``.
        data_seed: selects the n examples; init_seed: the shared initial parameters.
        mechanism: (read-only) the :class:`audit.core.mechanism.Mechanism` of the training.
    """

    dataset: str = "digits"
    model: str = "logistic"
    hidden: int = 32
    activation: str = "relu"
    sampler: str
    sigma: float
    clip: float
    lr: float
    batch_size: int
    n: int
    epochs: int = 1
    max_batch_size: int | None = None
    canary: str = "dirac"
    threat_model: str = "isolated"
    input_canary: str = "ood"
    canary_label: int = 0
    canary_scale: float = 10.0
    data_seed: int = 0
    init_seed: int = 0

    def __post_init__(self) -> None:
        self._check_training()
        self._check_options()

    def _check_training(self) -> None:
        """Every field of the record, each checked here once; builds the mechanism."""

        def put(name: str, value: object) -> None:
            object.__setattr__(self, name, value)

        check_choice("dataset", self.dataset, DATASETS)
        check_choice("activation", self.activation, ACTIVATIONS)
        check_choice("canary", self.canary, CANARIES)
        check_choice("input_canary", self.input_canary, INPUT_CANARIES)
        put("hidden", check_int("hidden", self.hidden, minimum=1))
        put("clip", check_real("clip", self.clip, minimum=0.0, strict_minimum=True))
        put("lr", check_real("lr", self.lr, minimum=0.0, strict_minimum=True))
        put(
            "canary_scale",
            check_real("canary_scale", self.canary_scale, minimum=0.0, strict_minimum=True),
        )
        put("data_seed", check_int("data_seed", self.data_seed, minimum=0))
        put("init_seed", check_int("init_seed", self.init_seed, minimum=0))
        size = dataset_size(self.dataset)
        put("n", check_int("n", self.n, minimum=2))
        if self.n > size:
            raise ValueError(
                f"n={self.n} is larger than dataset {self.dataset!r}, which has {size} examples; "
                f"allowed: 2 <= n <= {size}"
            )
        put("batch_size", check_int("batch_size", self.batch_size, minimum=1, maximum=self.n))
        if self.n % self.batch_size:
            # T = n / b must be one number for the harness, the samplers and Opacus
            # (len(loader) = ceil(n / b)), whatever the sampler.
            raise ValueError(
                f"n={self.n} must be a multiple of batch_size={self.batch_size} (n = b*T) for "
                f"every sampler; use n={self.n - self.n % self.batch_size}"
            )
        classes = dataset_classes(self.dataset)
        put(
            "canary_label",
            check_int("canary_label", self.canary_label, minimum=0, maximum=classes - 1),
        )
        # sigma, epochs, threat_model: validated by the mechanism, which computes T = n / b once;
        # the sampler's own rules (its name, max_batch_size, the canaries its isolated theory
        # accepts) by audit.sampling.validate_training, above this layer.
        mechanism = Mechanism(
            sampler=self.sampler,
            sigma=self.sigma,
            epochs=self.epochs,
            threat_model=self.threat_model,
            n=self.n,
            batch_size=self.batch_size,
            max_batch_size=self.max_batch_size,
        )
        for name in ("sigma", "epochs", "max_batch_size"):
            put(name, getattr(mechanism, name))
        put("_mechanism", mechanism)

    def _check_options(self) -> None:
        """A view's own fields and rules (none in the record itself)."""

    @property
    def mechanism(self) -> Mechanism:
        """The :class:`audit.core.mechanism.Mechanism` this training runs (built once)."""
        return self._mechanism  # type: ignore[attr-defined]  # set in __post_init__

    @property
    def steps_per_epoch(self) -> int:
        """T = n / b, the mechanism's."""
        return self.mechanism.steps_per_epoch

    @property
    def total_steps(self) -> int:
        """S = T * E, the mechanism's."""
        return self.mechanism.total_steps

    def with_(self: _View, **changes: Any) -> _View:
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, object]:
        """The fields as plain values (for JSON)."""
        return asdict(self)

    @classmethod
    def view(cls: type[_View], training: Training, **options: Any) -> _View:
        """``training`` seen as ``cls`` (a record with its own options): the record's fields
        and mechanism are taken as they are (validated once, when ``training`` was built);
        only ``options`` (``cls``'s own fields) and ``cls``'s own rules are checked."""
        if not isinstance(training, Training):
            raise ValueError(
                f"{cls.__name__}.view takes a Training record (audit.core.record.Training or a "
                "view of "
                f"it); got {type(training).__name__} (build one with Training(**fields) first)"
            )
        record = {f.name for f in fields(Training)}
        unknown = set(options) - {f.name for f in fields(cls)} | (set(options) & record)
        if unknown:
            raise ValueError(
                f"{cls.__name__}.view takes only {cls.__name__}'s own fields; got {sorted(unknown)}"
            )
        out = object.__new__(cls)
        for f in fields(cls):
            if f.name in record:
                value = getattr(training, f.name)
            elif f.name in options:
                value = options[f.name]
            elif f.default is not MISSING:
                value = f.default
            elif f.default_factory is not MISSING:
                value = f.default_factory()
            else:
                raise ValueError(
                    f"{cls.__name__}.view needs {f.name} (a field of {cls.__name__} without a "
                    "default)"
                )
            object.__setattr__(out, f.name, value)
        object.__setattr__(out, "_mechanism", training.mechanism)
        out._check_options()
        return out
