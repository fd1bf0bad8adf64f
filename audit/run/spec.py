"""The audit spec: ``runs/<name>/audit.toml``, read with :mod:`tomllib` and validated whole.

A spec states what is audited (dataset, model, training hyper-parameters, the batch
samplers, the threat models, the canary, what the attacker observes, the attacks), how
much evidence is gathered (trials IN and OUT, delta, alpha), which privacy **claim** is
audited, and how the work is run (mode, seed, n_jobs, backend). Example::

    mode = "train"                # "train": real DP-SGD trainings; "simulate": the mechanism
    seed = 2024
    dataset = "digits"
    model = "logistic"
    samplers = ["poisson", "persistent_shuffle", "dynamic_shuffle"]
    threat_models = ["adversarial"]
    canary = "dirac"
    observation = "all_iterates"
    attacks = ["default"]         # "default": the sampler's own likelihood-ratio attack
    trials_in = 1000
    trials_out = 1000
    shard_size = 100              # trials per shard: the unit of work, storage and resumption
                                  # (train mode, unset: sized from the memory estimate, <= 5000)
    # store = "scores"            # shards keep the attacks' scores only
                                  # (default: simulate, and train above 1e5 trials)
    delta = 1e-5
    alpha = 0.05
    confidence = "cell"           # "cell": 1 - alpha per cell;
                                  # "family": every cell at once (alpha / cells)
    claim = "poisson"             # "poisson", "sampler", or an explicit epsilon (a number)
    n_jobs = 2
    backend = "loky"              # "loky", "threading" or "dask"
    # scheduler = "tcp://host:8786"   # backend = "dask": a scheduler address
    #                                  # (else a local cluster); backend = "ray": a Ray
    #                                  # address, e.g. "auto" (else a local Ray)
    # implementation = "opacus"       # train with a plug-in ("package.module:function" or built-in)

    [training]
    sigma = 0.8
    batch_size = 1
    n = 1000
    epochs = 1
    lr = 0.1
    clip = 1.0

Everything is checked before anything runs: an unknown key (with the closest valid one, or
the table it belongs in), a wrong type, a value outside its range, and the impossible
combinations (a fixed-size sampler with n not a multiple of the batch size, truncated Poisson
without ``max_batch_size``, an observation the simulator does not record, ...) each raise a
``ValueError`` naming the key and the fix.

The keys live in six frozen sections (docs/design.md §2.6), each key declared once with its default,
its meaning and its :class:`Role` (what it changes, which decides the shard identity):
:class:`ExperimentSection`, :class:`EvidenceSection`, :class:`ClaimSection`,
:class:`ExecutionSection`, :class:`OneRunSection` and the ``[training]`` table
:class:`TrainingSection`; ``spec.training.sigma``, ``spec.claim.delta``, ... The mode and the audit
kind are the types :class:`Mode` and :class:`AuditKind` (``spec.mode``, ``spec.kind``).
:data:`TOP_LEVEL_KEYS` and :data:`TRAINING_KEYS`, derived from the sections, list every key with its
meaning. A **cell** is one (sampler, threat model, attack). All attacks of the same (sampler, threat
model) score the same trainings, so trainings are keyed by :meth:`AuditSpec.training_keys`.
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
import numbers
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, Field, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from audit.core.mechanism import Mechanism
from audit.core.names import (
    BACKENDS,
    OBSERVATIONS,
    SAMPLER_ALIASES,
    SAMPLERS,
    THREAT_MODELS,
)
from audit.core.names import THRESHOLD_STRATEGIES as THRESHOLDS
from audit.core.record import Training
from audit.core.validation import check_choice, check_int, check_probability, check_real, closest
from audit.sampling import get_sampler, sampler_names, validate, validate_training
from audit.stats.binary import threshold_strategy
from audit.stats.many_canaries import DEPENDENT_THRESHOLDS
from audit.stats.one_run import GUESS_STRATEGIES
from audit.training.one_run_canaries import ONE_RUN_INPUT_CANARIES, ONE_RUN_OBSERVATIONS

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 reads TOML with the tomli backport
    import tomli as tomllib

__all__ = [
    "BACKENDS",
    "CLAIMS",
    "CONFIDENCE_SCOPES",
    "DEFAULT_ATTACK",
    "MODES",
    "SPEC_FILE",
    "STORES",
    "AuditKind",
    "AuditSpec",
    "Cell",
    "ClaimSection",
    "EvidenceSection",
    "ExecutionSection",
    "ExperimentSection",
    "Mode",
    "OneRunSection",
    "Role",
    "TrainingKey",
    "TrainingSection",
    "load_spec",
    "parse_spec",
]

SPEC_FILE = "audit.toml"
"""File name of the spec inside a run folder."""


class Mode(enum.Enum):
    """How the observations are made: ``train``, real DP-SGD trainings
    (:mod:`audit.training.trials`, or a user implementation); ``simulate``, the mechanism's
    observations drawn directly (:mod:`audit.training.simulate`). A type, not a string: comparing it
    with a string raises."""

    TRAIN = "train"
    SIMULATE = "simulate"

    @property
    def trains(self) -> bool:
        """Whether models are trained (torch, the engine or a plug-in)."""
        return self is Mode.TRAIN

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            raise TypeError(
                f"{self!r} compared with the string {other!r}: compare with Mode members"
            )
        return self is other

    __hash__ = enum.Enum.__hash__


class AuditKind(enum.Enum):
    """``multi_run``: trials_in / trials_out trainings with and without one canary; ``one_run``:
    m canaries in one training (shards of ``shard_size`` canaries), :mod:`audit.stats.one_run`.
    A type, not a string: comparing it with a string raises."""

    MULTI_RUN = "multi_run"
    ONE_RUN = "one_run"

    @property
    def one_run(self) -> bool:
        """Whether one training's m canaries stand for the trials (docs/design.md §8.8)."""
        return self is AuditKind.ONE_RUN

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            raise TypeError(
                f"{self!r} compared with the string {other!r}: compare with AuditKind members"
            )
        return self is other

    __hash__ = enum.Enum.__hash__


MODES: tuple[str, ...] = tuple(mode.value for mode in Mode)
AUDITS: tuple[str, ...] = tuple(kind.value for kind in AuditKind)

CLAIMS: tuple[str, ...] = ("poisson", "sampler", "implementation")
"""Named claims: ``poisson`` is the epsilon a Poisson accountant reports for the same q,
sigma and T*E steps (what most shuffled trainings claim); ``sampler`` is the upper bound of
the sampler actually used; ``implementation`` is the epsilon that the audited training
implementation's own accountant reports (e.g. Opacus's ``get_epsilon``; needs
``implementation``). A number is an explicit (epsilon, delta) claim."""

CLUSTER_BACKENDS: tuple[str, ...] = ("dask", "ray")
"""Backends that run on a cluster named by ``scheduler`` (or start a local one)."""

DEVICES: tuple[str, ...] = ("cpu", "cuda")
"""Where the engine trains (mode = "train"); ``cuda`` is checked to be available when the
trainings are configured (:func:`audit.training.trials.check_device`)."""

CONFIDENCE_SCOPES: tuple[str, ...] = ("cell", "family")
"""What 1 - alpha covers: ``cell``, each cell's eps_lb and verdict alone; ``family``, every cell
of the report at once, by Bonferroni's inequality: each cell is computed at alpha / (number of
cells), so the probability that any cell's eps_lb (or any verdict) is wrong is at most alpha."""

STOPS: tuple[str, ...] = ("decided",)
"""``stop`` values: ``decided``, a sequential audit (docs/design.md §8.18); unset: a fixed size."""
STORES: tuple[str, ...] = ("scores", "observations")
"""What a shard keeps: ``scores``, one score per trial of every attack the spec names (what the
statistics need: bytes per training = 8 x attacks); ``observations``, every observation (needed to
re-score with another attack later)."""

SCORES_STORE_ABOVE = 100_000
"""``store`` defaults to ``scores`` in ``mode = "simulate"`` (a multi-run audit: the simulator
redraws any observation exactly from its seed, so keeping them buys nothing) and in
``mode = "train"`` when max(trials_in, trials_out) exceeds this, else to ``observations``."""

DEFAULT_ATTACK = "default"
"""Attack name that stands for :func:`attacks.default_attack` of each cell's mechanism."""

SIMULATED_OBSERVATIONS: tuple[str, ...] = ("all_iterates",)
"""Observations the mechanism simulator records (it draws the projections y_t only)."""


# ---------------------------------------------------------------------------------------
# the sections: one frozen type per group of keys, each key written once with its default,
# its meaning and its role (docs/design.md §2.6)
# ---------------------------------------------------------------------------------------


class Role(enum.Enum):
    """What a key changes, which decides the shard identity (:meth:`AuditSpec.shard_identity`)."""

    SHARD = "shard"
    """The content of a shard: in the shard identity (a change refuses to resume)."""
    ADDED = "added"
    """The content of a shard, a key added after runs were stored: in the identity only when
    set to another value than its default, so the hashes of specs written before it stay valid."""
    SCORING = "scoring"
    """Which shards are used or how they are scored, never a shard's content (shard files name
    their training key, index and trial count): more trials or another attack reuse every
    finished shard."""
    EXECUTION = "execution"
    """Never a result (parallelism, the free text)."""


REQUIRED: Any = MISSING
"""The default of a key that every spec must give."""


def key(default: Any, role: Role, meaning: str, *, needed_by: Mode | None = None) -> Any:
    """One spec key of a section: its ``default`` (:data:`REQUIRED` for none), its ``role`` and
    its ``meaning`` (shown in the error for a missing or misplaced key); ``needed_by``: the mode
    in which a key with a default must still be given."""
    metadata = {"role": role, "meaning": meaning, "needed_by": needed_by}
    return field(default=default, metadata=metadata)


@dataclass(frozen=True, kw_only=True)
class ExperimentSection:
    """What is audited: the mode, the seed, the model and its data, the cells' samplers and
    threat models, the canary, what the attacker observes, the attacks."""

    description: str = key("", Role.EXECUTION, "free text shown at the top of report.md")
    mode: Mode = key(  # noqa: RUF009 - key() is a field
        Mode.TRAIN, Role.SHARD, "'train' or 'simulate'"
    )
    seed: int = key(0, Role.SHARD, "one non-negative integer seed for the whole audit")
    dataset: str = key("digits", Role.SHARD, "the training data (train mode)")
    model: str = key(
        "logistic",
        Role.SHARD,
        "the model trained (train mode): 'logistic', 'mlp', 'cnn', 'transformer' or a factory "
        "'package.module:factory'",
    )
    hidden: int | None = key(None, Role.SHARD, "hidden width of an MLP model")
    activation: str | None = key(None, Role.SHARD, "activation of an MLP model")
    implementation: str | None = key(
        None, Role.SHARD, "a training implementation, 'package.module:function' or a built-in name"
    )
    samplers: tuple[str, ...] = key(
        REQUIRED, Role.SCORING, f"list of batch samplers among {', '.join(SAMPLERS)}"
    )
    threat_models: tuple[str, ...] = key(
        ("adversarial",), Role.SCORING, f"list among {', '.join(THREAT_MODELS)}"
    )
    canary: str = key(
        "dirac",
        Role.SHARD,
        "the canary inserted IN and zeroed OUT ('dirac' gradient canary or 'input')",
    )
    input_canary: str | None = key(
        None, Role.SHARD, "kind of input canary ('ood' or 'mislabeled'; canary = 'input')"
    )
    canary_label: int | None = key(None, Role.SHARD, "label of the input canary")
    canary_scale: float | None = key(None, Role.SHARD, "input scale of the input canary")
    observation: str = key(
        "all_iterates", Role.SCORING, f"what the attacker sees: {', '.join(OBSERVATIONS)}"
    )
    attacks: tuple[str, ...] = key(
        (DEFAULT_ATTACK,),
        Role.SCORING,
        "list of attack names ('default' = the sampler's own attack)",
    )
    score_family: bool = key(
        False,
        Role.SCORING,
        "also score the cell <sampler>/<threat model>/score_family: the score family chosen on "
        "half the trainings, its bound on the other half (docs/design/attacks.md §7.4)",
    )


@dataclass(frozen=True, kw_only=True)
class EvidenceSection:
    """How much evidence is gathered and how it is kept: the trials IN and OUT, the shards."""

    trials_in: int = key(REQUIRED, Role.SCORING, "number of trainings with the canary")
    trials_out: int = key(REQUIRED, Role.SCORING, "number of trainings without the canary")
    shard_size: int = key(100, Role.SHARD, "trials per shard (the unit of work and of resumption)")
    store: str = key(
        "observations",
        Role.SHARD,
        "what a shard keeps: 'scores' (of every attack named) or 'observations' (default: "
        "'scores' in simulate mode and in train mode above 1e5 trials)",
    )
    canaries_per_training: int = key(
        1,
        Role.ADDED,
        "k Dirac canaries per multi-run training on k disjoint coordinates (default 1; isolated "
        "threat model)",
    )
    stop: str | None = key(
        None,
        Role.SCORING,
        "'decided': add shards until the verdict is decided at anytime-valid confidence or "
        "max_trials is spent",
    )
    max_trials: int | None = key(
        None, Role.SCORING, "stop = 'decided': the budget, trainings per side (IN and OUT each)"
    )


@dataclass(frozen=True, kw_only=True)
class ClaimSection:
    """The claim audited and how it is tested: delta, alpha, what 1 - alpha covers, how the
    threshold is chosen."""

    delta: float = key(1e-5, Role.SCORING, "the delta of the (epsilon, delta) bounds")
    alpha: float = key(0.05, Role.SCORING, "1 - confidence of the lower bounds and verdicts")
    confidence: str = key(
        "cell",
        Role.SCORING,
        "what 1 - alpha covers: 'cell' (each cell alone) or 'family' (all cells at once: alpha / "
        "cells)",
    )
    threshold: str = key(
        "planned",
        Role.SCORING,
        "how the attack threshold is chosen soundly: 'planned' (default: fixed before the scores "
        "are seen, from the theory or a pilot; docs/design.md §8.12), 'split' (held-out half), "
        "'bonferroni' or 'multisplit' (median of 11 splits at alpha/2)",
    )
    claim: str | float = key(
        "poisson", Role.SCORING, "'poisson', 'sampler', 'implementation' or an explicit epsilon"
    )


@dataclass(frozen=True, kw_only=True)
class ExecutionSection:
    """How the work is run: never a result, except the device (floating point differs)."""

    n_jobs: int = key(1, Role.EXECUTION, "number of parallel workers (-1 = all cores)")
    backend: str = key("loky", Role.EXECUTION, f"joblib backend: {', '.join(BACKENDS)}")
    device: str = key("cpu", Role.ADDED, "where the engine trains: 'cpu' or 'cuda'")
    scheduler: str | None = key(
        None,
        Role.EXECUTION,
        "cluster address: a Dask scheduler (backend = 'dask') or a Ray address (backend = 'ray'); "
        "absent = a local cluster",
    )


@dataclass(frozen=True, kw_only=True)
class OneRunSection:
    """The audit kind, and the one-run audit's canaries and guesses (docs/design.md §8.8)."""

    audit: AuditKind = key(  # noqa: RUF009 - key() is a field
        AuditKind.MULTI_RUN,
        Role.ADDED,
        "'multi_run' (trainings IN and OUT, the default) or 'one_run' (m canaries in one training)",
    )
    canaries: int | None = key(
        None,
        Role.ADDED,
        "audit = 'one_run': the number m of canaries, each included with probability 1/2",
    )
    guesses: str | tuple[int, int] = key(
        "bonferroni",
        Role.SCORING,
        "audit = 'one_run': [k_plus, k_minus] fixed in advance, 'bonferroni' (default) or 'split'",
    )


@dataclass(frozen=True, kw_only=True)
class TrainingSection:
    """The ``[training]`` table: the DP-SGD hyper-parameters of every training key."""

    sigma: float = key(REQUIRED, Role.SHARD, "noise multiplier")
    batch_size: int = key(REQUIRED, Role.SHARD, "(expected) batch size b")
    n: int = key(REQUIRED, Role.SHARD, "dataset size (n = b*T for the fixed-size samplers)")
    epochs: int = key(1, Role.SHARD, "number of epochs E")
    max_batch_size: int | None = key(None, Role.SHARD, "padded batch size B of truncated_poisson")
    lr: float | None = key(None, Role.SHARD, "learning rate", needed_by=Mode.TRAIN)
    clip: float = key(1.0, Role.SHARD, "clipping norm C")

    def to_dict(self) -> dict[str, object]:
        """The table as plain data, in the order summary.json has always written it."""
        first = {name: getattr(self, name) for name in ("sigma", "n", "batch_size")}
        return {
            **first,
            **{f.name: getattr(self, f.name) for f in fields(self) if f.name not in first},
        }


TOP_LEVEL_SECTIONS: dict[str, type] = {
    "experiment": ExperimentSection,
    "evidence": EvidenceSection,
    "claim": ClaimSection,
    "execution": ExecutionSection,
    "one_run": OneRunSection,
}
"""The sections of the keys written at the top level of audit.toml, in the order they are listed."""
TABLES: dict[str, type] = {"training": TrainingSection}
"""The sections written as TOML tables (``[training]``)."""


def _keys(section: type) -> dict[str, Field[Any]]:
    return {f.name: f for f in fields(section)}


def _toml_default(value: object) -> object:
    """A default as TOML would give it (lists, the enums' strings)."""
    if isinstance(value, enum.Enum):
        return value.value
    return list(value) if isinstance(value, tuple) else value


SECTION_OF: dict[str, str] = {
    name: s for s, section in TOP_LEVEL_SECTIONS.items() for name in _keys(section)
}
"""The section of every top-level key."""
TOP_LEVEL_KEYS: dict[str, str] = {
    name: f.metadata["meaning"]
    for section in TOP_LEVEL_SECTIONS.values()
    for name, f in _keys(section).items()
}
"""Every top-level key with its meaning."""
TRAINING_KEYS: dict[str, str] = {
    name: f.metadata["meaning"] for name, f in _keys(TrainingSection).items()
}
"""Every [training] key with its meaning."""
TABLE_KEYS: dict[str, dict[str, str]] = {"training": TRAINING_KEYS}
DEFAULTS: dict[str, object] = {
    name: _toml_default(f.default)
    for section in TOP_LEVEL_SECTIONS.values()
    for name, f in _keys(section).items()
    if f.default is not MISSING
}
"""The default of every optional top-level key, as TOML would give it (from the sections)."""
TRAINING_DEFAULTS: dict[str, object] = {
    name: f.default for name, f in _keys(TrainingSection).items() if f.default is not MISSING
}
REQUIRED_TOP_LEVEL: tuple[str, ...] = tuple(k for k in TOP_LEVEL_KEYS if k not in DEFAULTS)
REQUIRED_TRAINING: tuple[str, ...] = tuple(k for k in TRAINING_KEYS if k not in TRAINING_DEFAULTS)
REQUIRED_FOR_TRAINING: tuple[str, ...] = tuple(
    name for name, f in _keys(TrainingSection).items() if f.metadata["needed_by"] is Mode.TRAIN
)
"""[training] keys that only mode = "train" needs (the simulator draws normalised projections)."""
_SUMMARY_ORDER: tuple[str, ...] = (
    "name",
    "samplers",
    "trials_in",
    "trials_out",
    "training",
    "description",
    "mode",
    "seed",
    "dataset",
    "model",
    "hidden",
    "activation",
    "implementation",
    "threat_models",
    "canary",
    "input_canary",
    "canary_label",
    "canary_scale",
    "observation",
    "attacks",
    "shard_size",
    "store",
    "delta",
    "alpha",
    "confidence",
    "threshold",
    "claim",
    "n_jobs",
    "backend",
    "scheduler",
    "audit",
    "canaries",
    "guesses",
)
"""The order of the keys of summary.json's ``spec`` as it has always been written (keys not
listed follow, in section order): committed summaries stay byte-identical."""
_LISTED_WHEN_SET: dict[str, object] = {"canaries_per_training": 1, "stop": None, "max_trials": None}
"""Keys of issue 22 that summary.json's ``spec`` lists only when set to another value than
their default (docs/design.md §8.17, §8.18): the summaries of audits without them stay
byte-identical."""


class ShardSizes(Sequence[int]):
    """The trial counts of the shards that split ``trials`` into pieces of ``shard_size`` (the
    last one the remainder), computed from the index: a sequence of any length in constant
    memory (compares equal to the list of the same counts)."""

    def __init__(self, trials: int, shard_size: int) -> None:
        self.trials, self.shard_size = trials, shard_size

    def __len__(self) -> int:
        return -(-self.trials // self.shard_size)

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> list[int]: ...
    def __getitem__(self, index: int | slice) -> int | list[int]:
        if isinstance(index, slice):
            return [self[i] for i in range(len(self))[index]]
        count = len(self)
        if not -count <= index < count:
            raise IndexError(f"shard index {index} is outside 0..{count - 1}")
        index %= count
        return min(self.shard_size, self.trials - index * self.shard_size)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ShardSizes):
            return (self.trials, self.shard_size) == (other.trials, other.shard_size)
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ShardSizes(trials={self.trials}, shard_size={self.shard_size})"


@dataclass(frozen=True)
class TrainingKey:
    """The trainings shared by all attacks of one (sampler, threat model)."""

    sampler: str
    threat_model: str

    @property
    def name(self) -> str:
        """``<sampler>-<threat_model>``, used in shard file names and seeds."""
        return f"{self.sampler}-{self.threat_model}"


@dataclass(frozen=True)
class Cell:
    """One audited cell: a (sampler, threat model) and one attack on its observations."""

    sampler: str
    threat_model: str
    attack: str

    @property
    def training(self) -> TrainingKey:
        """The trainings this cell scores."""
        return TrainingKey(self.sampler, self.threat_model)

    @property
    def name(self) -> str:
        """``<sampler>-<threat_model>-<attack>``, used in file names (``tradeoff_<name>.png``)."""
        return f"{self.training.name}-{self.attack}"


@dataclass(frozen=True)
class AuditSpec:
    """A validated audit spec (see the module docstring for the keys)."""

    name: str
    experiment: ExperimentSection
    training: TrainingSection
    evidence: EvidenceSection
    claim: ClaimSection
    execution: ExecutionSection
    one_run: OneRunSection = OneRunSection()
    source: str = field(default=SPEC_FILE, compare=False)

    @classmethod
    def from_keys(cls, keys: Mapping[str, object], training: TrainingSection, *, name: str,
                  source: str = SPEC_FILE) -> AuditSpec:
        """The spec of checked top-level ``keys`` and the ``[training]`` section, each key put in
        its section (:data:`SECTION_OF`); a key left out keeps its section's default."""
        grouped: dict[str, dict[str, object]] = {section: {} for section in TOP_LEVEL_SECTIONS}
        for k, value in keys.items():
            grouped[SECTION_OF[k]][k] = value
        sections = {s: section(**grouped[s]) for s, section in TOP_LEVEL_SECTIONS.items()}
        return cls(name=name, training=training, source=source, **sections)

    @property
    def mode(self) -> Mode:
        """How the observations are made (``experiment.mode``)."""
        return self.experiment.mode

    @property
    def kind(self) -> AuditKind:
        """The audit kind (``one_run.audit``)."""
        return self.one_run.audit

    # -- the grid -------------------------------------------------------------------------

    def training_keys(self) -> list[TrainingKey]:
        """Every (sampler, threat model), in spec order."""
        return [
            TrainingKey(s, t)
            for s in self.experiment.samplers
            for t in self.experiment.threat_models
        ]

    def cells(self) -> list[Cell]:
        """Every (sampler, threat model, attack) as named in the spec ('default' unresolved)."""
        return [
            Cell(k.sampler, k.threat_model, a)
            for k in self.training_keys()
            for a in self.experiment.attacks
        ]

    @property
    def trials(self) -> int:
        """Trainings per training key: the shards hold ``trials`` IN and ``trials`` OUT."""
        return max(self.evidence.trials_in, self.evidence.trials_out)

    def shard_count(self) -> int:
        """Number of shards of one training key: ceil(trials / shard_size)."""
        return -(-self.trials // self.evidence.shard_size)

    def shard_trials(self, index: int) -> int:
        """Trial count of shard ``index`` of one training key: ``shard_size``, the last one
        the remainder (arithmetic on the index: no list of shards is ever built)."""
        if not 0 <= index < self.shard_count():
            raise ValueError(f"shard index {index} is outside 0..{self.shard_count() - 1}")
        return min(self.evidence.shard_size, self.trials - index * self.evidence.shard_size)

    def shard_sizes(self) -> ShardSizes:
        """Trial count of each shard of one training key: full shards, then the remainder; a
        lazy sequence (a spec may plan more shards than a list could hold)."""
        return ShardSizes(self.trials, self.evidence.shard_size)

    def cell_alpha(self, cells: int) -> float:
        """The alpha each of ``cells`` cells is computed at: ``alpha`` (confidence = "cell"), or
        ``alpha / cells`` (confidence = "family", Bonferroni: P(any of the cells' statements
        fails) <= sum of the cells' alphas = alpha)."""
        alpha = self.claim.alpha
        return alpha / max(1, cells) if self.claim.confidence == "family" else alpha

    # -- what a training key describes ----------------------------------------------------

    @property
    def steps_per_epoch(self) -> int:
        """T = n / b, read from the mechanism (every training key has the same n and b)."""
        return self.mechanism(self.training_keys()[0]).steps_per_epoch

    def mechanism(self, key: TrainingKey) -> Mechanism:
        """The :class:`~audit.core.mechanism.Mechanism` of the trainings of ``key``: the training
        record's (:meth:`training_record`) in train mode; in simulate mode, where nothing is
        trained, the mechanism alone (T = n / b computed by it)."""
        if self.mode.trains:
            return self.training_record(key).mechanism

        def build() -> Mechanism:
            t = self.training
            return validate(Mechanism(
                sampler=key.sampler,
                sigma=t.sigma,
                epochs=t.epochs,
                threat_model=key.threat_model,
                n=t.n,
                batch_size=t.batch_size,
                max_batch_size=t.max_batch_size if _uses_max_batch_size(key.sampler) else None,
            ))

        return self._built("mechanism", key, build)

    def training_record(self, key: TrainingKey) -> Training:
        """The record of the trainings of ``key`` (train mode; :class:`audit.core.record.Training`),
        built once from the spec's keys and its ``[training]`` table; fields left unset in the
        spec keep the record's defaults."""

        def build() -> Training:
            e = self.experiment
            record: dict[str, object] = {  # each value of its Training field's type
                "dataset": e.dataset,
                "model": e.model,
                "sampler": key.sampler,
                "threat_model": key.threat_model,
                "canary": e.canary,
                "input_canary": e.input_canary,
                "canary_label": e.canary_label,
                "canary_scale": e.canary_scale,
                "hidden": e.hidden,
                "activation": e.activation,
            }
            for name in ("sigma", "batch_size", "n", "epochs", "lr", "clip"):
                record[name] = getattr(self.training, name)
            if _uses_max_batch_size(key.sampler):
                record["max_batch_size"] = self.training.max_batch_size
            given = {k: v for k, v in record.items() if v is not None}
            return validate_training(Training(**given))  # type: ignore[arg-type]

        return self._built("record", key, build)

    def training_config(self, key: TrainingKey) -> Any:
        """The engine's ``TrainingConfig`` of ``key`` (train mode): :meth:`training_record`
        seen by the engine, with the spec's ``device``."""
        from audit.training.trials import TrainingConfig  # imports torch: train mode only

        return self._built(
            "config",
            key,
            lambda: TrainingConfig.view(self.training_record(key), device=self.execution.device),
        )

    def _built(self, kind: str, key: TrainingKey, build: Callable[[], Any]) -> Any:
        """``build()`` once per (kind, key) for this spec (kept outside the dataclass fields:
        a copy made by ``replace`` builds its own)."""
        cache = self.__dict__.setdefault("_built_records", {})
        if (kind, key) not in cache:
            cache[kind, key] = build()
        return cache[kind, key]

    # -- identity -------------------------------------------------------------------------

    def to_dict(self) -> dict[str, object]:
        """The spec as plain data (every default filled in, but for :data:`_LISTED_WHEN_SET`;
        lists, the enums' strings), its keys flat as in audit.toml, in the order summary.json has
        always written them."""
        data: dict[str, object] = {"name": self.name, "training": self.training.to_dict()}
        for section in TOP_LEVEL_SECTIONS:
            data.update(
                {name: _toml_default(v) for name, v in _values(getattr(self, section)).items()}
            )
        for name, default in _LISTED_WHEN_SET.items():
            if data[name] == default:
                del data[name]
        order = {name: i for i, name in enumerate(_SUMMARY_ORDER)}
        return dict(sorted(data.items(), key=lambda item: order.get(item[0], len(order))))

    def with_execution(self, *, n_jobs: int | None = None, backend: str | None = None) -> AuditSpec:
        """A copy run with another ``n_jobs`` or ``backend`` (checked like the spec's own;
        a backend without a cluster drops the scheduler). Results never depend on them."""
        execution = self.execution
        if n_jobs is not None:
            execution = replace(execution, n_jobs=_n_jobs(n_jobs))
        if backend is not None:
            backend = check_choice("backend", backend, BACKENDS)
            scheduler = execution.scheduler if backend in CLUSTER_BACKENDS else None
            execution = replace(execution, backend=backend, scheduler=scheduler)
        if execution is self.execution:
            return self
        spec = replace(self, execution=execution)
        _check_combinations(spec)
        return spec

    def until_decided(self) -> AuditSpec:
        """A sequential copy (``audit run --until-decided``): stop = 'decided' with the spec's
        trials as the budget (docs/design.md §8.18)."""
        if self.evidence.stop is not None:
            return self
        evidence = replace(
            self.evidence,
            stop="decided",
            max_trials=self.trials,
            trials_in=self.trials,
            trials_out=self.trials,
        )
        spec = replace(self, evidence=evidence)
        _check_combinations(spec)
        return spec

    def with_trials_used(self, trials: int) -> AuditSpec:
        """A sequential audit's spec restricted to the first ``trials`` trials a side, the shards
        it used before its verdict was decided (the budget max_trials is kept)."""
        trials = check_int("trials", trials, minimum=1, maximum=self.trials)
        return replace(self, evidence=replace(self.evidence, trials_in=trials, trials_out=trials))

    def shard_identity(self) -> dict[str, object]:
        """Every spec value that changes the content of a shard, from the keys' roles
        (:class:`Role`): the ``SHARD`` keys, the ``ADDED`` ones set to another value than their
        default, and the whole ``[training]`` table."""
        identity: dict[str, object] = {}
        for section in TOP_LEVEL_SECTIONS:
            values = getattr(self, section)
            for f in fields(values):
                value, role = getattr(values, f.name), f.metadata["role"]
                if role is Role.SHARD or (role is Role.ADDED and value != f.default):
                    identity[f.name] = _toml_default(value)
        identity["training"] = self.training.to_dict()
        return identity

    def shard_hash(self) -> str:
        """SHA-256 of :meth:`shard_identity`.

        Stored in ``runs/<name>/shards/``; a run whose spec hashes differently refuses to
        resume (a silently mixed result would be wrong) and asks for ``--fresh``.
        """
        text = json.dumps(self.shard_identity(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


def _values(section: DataclassInstance) -> dict[str, object]:
    """The keys of a section with their values (in the section's order)."""
    return {f.name: getattr(section, f.name) for f in fields(section)}


# ---------------------------------------------------------------------------------------
# reading and validating
# ---------------------------------------------------------------------------------------


def load_spec(path: str | Path) -> AuditSpec:
    """Read and validate a spec: a run folder (``<folder>/audit.toml``) or a TOML file."""
    path = Path(path)
    file = path / SPEC_FILE if path.is_dir() else path
    if not file.is_file():
        where = f"{path} has no {SPEC_FILE}" if path.is_dir() else f"{path} does not exist"
        raise ValueError(f"{where}; an audit run folder holds its spec in {SPEC_FILE}")
    try:
        with file.open("rb") as handle:
            data = tomllib.load(handle)
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"{file}: not valid TOML: {error}") from None
    except UnicodeDecodeError as error:  # TOML is UTF-8 (a UTF-16 file from some editors is not)
        raise ValueError(
            f"{file}: not UTF-8 text ({error.reason} at byte {error.start}); save it as UTF-8"
        ) from None
    name = file.parent.name if file.name == SPEC_FILE else file.stem
    return parse_spec(data, name=name, source=str(file))


def parse_spec(
    data: Mapping[str, object], *, name: str = "audit", source: str = SPEC_FILE
) -> AuditSpec:
    """Validate the parsed TOML ``data``; a ``ValueError`` prefixed by ``source`` names the
    key and the fix."""
    try:
        return _parse(data, name=name, source=source)
    except ValueError as error:
        raise ValueError(f"{source}: {error}") from None


TRAINING_ALIASES: dict[str, str] = {"noise_multiplier": "sigma", "max_grad_norm": "clip"}
"""[training] keys in Opacus's and jax_privacy's names -> the spec's canonical name."""

SAMPLE_RATE = "sample_rate"
"""Opacus's name for the sampling rate q = b / n (``DPDataLoader(sample_rate=...)``,
``PrivacyEngine.make_private``): accepted in [training] beside ``n`` and converted to the
spec's canonical ``batch_size = sample_rate * n`` (the expected batch size b), which must be an
integer (:func:`_batch_size_of_rate`)."""

TRAINING_CONVERSIONS: dict[str, str] = {SAMPLE_RATE: "batch_size"}
"""[training] aliases that are converted rather than renamed -> the canonical key they give."""

TOP_LEVEL_ALIASES: dict[str, str] = {
    "epsilon": "claim", "target_epsilon": "claim", "target_delta": "delta",
}
"""Top-level keys in the ecosystem's names -> the canonical name: ``epsilon`` /
``target_epsilon`` an explicit epsilon claim, ``target_delta`` (Opacus's
``make_private_with_epsilon``) the delta."""

_ALL_ALIASES: dict[str, str] = {**TRAINING_ALIASES, **TRAINING_CONVERSIONS, **TOP_LEVEL_ALIASES}
_ALIASES_OF: dict[str, tuple[str, ...]] = {
    canonical: tuple(alias for alias, target in _ALL_ALIASES.items() if target == canonical)
    for canonical in _ALL_ALIASES.values()
}
"""Each canonical key with the aliases that give it (named in the errors for a missing key)."""


def resolve_aliases(data: Mapping[str, object]) -> dict[str, object]:
    """``data`` with every alias renamed to its canonical key (outputs show only canonical
    names): ``noise_multiplier`` -> ``sigma``, ``max_grad_norm`` -> ``clip``, ``sample_rate``
    -> ``batch_size = sample_rate * n`` in [training]; ``epsilon`` / ``target_epsilon`` ->
    ``claim`` (an explicit epsilon, a number) and ``target_delta`` -> ``delta`` at the top.

    Raises:
        ValueError: an alias given beside its canonical key (or two aliases of one key), an
            epsilon alias that is not a number, or a ``sample_rate`` that is not in (0, 1],
            lacks ``n`` or gives no integer batch size (:func:`_batch_size_of_rate`).
    """
    out = dict(data)
    _rename(out, TOP_LEVEL_ALIASES, "the top level")
    for alias in ("epsilon", "target_epsilon"):
        value = data.get(alias)
        number = isinstance(value, numbers.Real) and not isinstance(value, bool)
        if alias in data and not number:
            raise ValueError(
                f"{alias}={data[alias]!r} must be a number (the claimed epsilon, an alias of "
                "claim = epsilon)"
            )
    training = out.get("training")
    if isinstance(training, Mapping):
        table = dict(training)
        _rename(table, TRAINING_ALIASES, "[training]")
        if SAMPLE_RATE in table:
            if "batch_size" in table:
                raise ValueError(
                    "'sample_rate' and 'batch_size' at [training] state the same thing "
                    "(sample_rate = q = batch_size / n); keep one"
                )
            table["batch_size"] = _batch_size_of_rate(table.pop(SAMPLE_RATE), table.get("n"))
        out["training"] = table
    return out


def _batch_size_of_rate(rate: object, n: object) -> int:
    """The spec's ``batch_size`` b of Opacus's ``sample_rate`` q: b = q n, the expected batch
    size of Poisson subsampling at rate q over n examples (the harness's q = b / n, for every
    sampler). b must be an integer (the fixed-size samplers draw b examples, and T = n / b);
    q n is accepted as one within 1e-9 relative (q written in decimal is off by at most one
    float64 ulp, the product by one more: ~2e-16 relative), so q = 0.001 with n = 60000 gives
    b = 60 and q = 0.0123 with n = 1000 (12.3) is refused, naming the nearest integer b.

    Raises:
        ValueError: q not a number in (0, 1], n not given as an integer, or q n no integer.
    """
    if isinstance(rate, bool) or not isinstance(rate, numbers.Real) or not 0 < float(rate) <= 1:
        raise ValueError(
            f"training.sample_rate={rate!r} must be a number in (0, 1] (Opacus's sample_rate q "
            "= batch_size / n)"
        )
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(
            f"training.sample_rate={rate!r} needs training.n, an integer >= 1 (got n={n!r}): the "
            "spec states batch_size = sample_rate * n, the expected batch size b"
        )
    b = float(rate) * n
    nearest = max(1, round(b))
    if abs(b - nearest) > 1e-9 * max(1.0, b):
        raise ValueError(
            f"training.sample_rate={rate!r} with n={n} gives batch_size = sample_rate * n = "
            f"{b:g}, not an integer (the spec's expected batch size b is one: T = n / b); give "
            f"batch_size = {nearest} (sample_rate {nearest / n:g}) instead, or an n with "
            "sample_rate * n an integer"
        )
    return nearest


def _rename(table: dict[str, object], aliases: Mapping[str, str], where: str) -> None:
    for alias, canonical in aliases.items():
        if alias not in table:
            continue
        if canonical in table:
            raise ValueError(
                f"{alias!r} and {canonical!r} at {where} name the same key ({alias} is an alias "
                f"of {canonical}); keep one"
            )
        table[canonical] = table.pop(alias)


def _parse(data: Mapping[str, object], *, name: str, source: str) -> AuditSpec:
    data = resolve_aliases(data)
    _check_keys(data)
    top = {**DEFAULTS, **{k: v for k, v in data.items() if k not in TABLES}}
    one_run = AuditKind(check_choice("audit", data.get("audit", DEFAULTS["audit"]), AUDITS)).one_run
    if one_run:  # one training's m canaries stand for the trials
        if "canaries" not in data:
            raise ValueError(
                "audit='one_run' needs canaries = m (the number of canaries in the training, e.g. "
                "1000)"
            )
        top.setdefault("trials_in", data["canaries"])
        top.setdefault("trials_out", data["canaries"])
    sequential = _stop_keys(data, top)
    for key in REQUIRED_TOP_LEVEL:
        if key not in data and not ((one_run or sequential) and key in ("trials_in", "trials_out")):
            raise ValueError(f"missing key {key!r} ({TOP_LEVEL_KEYS[key]}{_also(key)})")
    training = data.get("training", {})
    if not isinstance(training, Mapping):
        raise ValueError("'training' must be a table: [training] with sigma, batch_size, n, ...")
    for key in REQUIRED_TRAINING:
        if key not in training:
            raise ValueError(
                f"missing key {key!r} in [training] ({TRAINING_KEYS[key]}{_also(key)})"
            )
    if data.get("mode", DEFAULTS["mode"]) == Mode.TRAIN.value:  # the raw TOML value, checked below
        for key in REQUIRED_FOR_TRAINING:
            if key not in training:
                raise ValueError(
                    f"missing key {key!r} in [training] ({TRAINING_KEYS[key]}{_also(key)}; "
                    "needed by mode='train')"
                )
    training = {**TRAINING_DEFAULTS, **training}

    spec: dict[str, object] = {}
    if not isinstance(top["description"], str):
        raise ValueError(f"description={top['description']!r} must be a string")
    spec["description"] = top["description"]
    mode = spec["mode"] = Mode(check_choice("mode", top["mode"], MODES))
    spec["seed"] = check_int("seed", _integer("seed", top["seed"]), minimum=0)
    spec["dataset"] = _string("dataset", top["dataset"])
    spec["model"] = _string("model", top["model"])
    spec["hidden"] = (
        None
        if top["hidden"] is None
        else check_int("hidden", _integer("hidden", top["hidden"]), minimum=1)
    )
    spec["activation"] = (
        None if top["activation"] is None else _string("activation", top["activation"])
    )
    spec["implementation"] = (
        None if top["implementation"] is None else _string("implementation", top["implementation"])
    )
    spec["samplers"] = _choices("samplers", _sampler_aliases(top["samplers"]), sampler_names())
    spec["threat_models"] = _choices("threat_models", top["threat_models"], THREAT_MODELS)
    spec["canary"] = _string("canary", top["canary"])
    spec["input_canary"] = (
        None if top["input_canary"] is None else _string("input_canary", top["input_canary"])
    )
    spec["canary_label"] = (
        None if top["canary_label"] is None
        else check_int("canary_label", _integer("canary_label", top["canary_label"]), minimum=0)
    )
    spec["canary_scale"] = (
        None
        if top["canary_scale"] is None
        else check_real(
            "canary_scale",
            _number("canary_scale", top["canary_scale"]),
            minimum=0.0,
            strict_minimum=True,
        )
    )
    spec["observation"] = check_choice("observation", top["observation"], OBSERVATIONS)
    spec["attacks"] = _strings("attacks", top["attacks"])
    spec["score_family"] = _boolean("score_family", top["score_family"])
    trials_in = spec["trials_in"] = check_int(
        "trials_in", _integer("trials_in", top["trials_in"]), minimum=2
    )
    trials_out = spec["trials_out"] = check_int(
        "trials_out", _integer("trials_out", top["trials_out"]), minimum=2
    )
    spec["shard_size"] = check_int(
        "shard_size", _integer("shard_size", top["shard_size"]), minimum=1
    )
    if "store" not in data:
        large = max(trials_in, trials_out) > SCORES_STORE_ABOVE
        simulated = not mode.trains and top["audit"] != "one_run"  # redrawn exactly at will
        spec["store"] = "scores" if simulated or (mode.trains and large) else "observations"
    else:
        spec["store"] = check_choice("store", top["store"], STORES)
    spec["delta"] = check_probability("delta", _number("delta", top["delta"]))
    spec["alpha"] = check_probability("alpha", _number("alpha", top["alpha"]))
    spec["confidence"] = check_choice("confidence", top["confidence"], CONFIDENCE_SCOPES)
    threshold = top["threshold"]
    if not isinstance(threshold, str):  # a spec stores a strategy's name, never an object
        threshold = check_choice("threshold", threshold, THRESHOLDS)  # raises: not a name
    spec["threshold"] = threshold_strategy(threshold).name
    spec["claim"] = _claim(top["claim"])
    spec["n_jobs"] = _n_jobs(top["n_jobs"])
    spec["backend"] = check_choice("backend", top["backend"], BACKENDS)
    spec["scheduler"] = None if top["scheduler"] is None else _string("scheduler", top["scheduler"])
    spec.update(_values(_one_run_keys(top)))
    spec["device"] = check_choice("device", top["device"], DEVICES)
    spec["canaries_per_training"] = check_int(
        "canaries_per_training",
        _integer("canaries_per_training", top["canaries_per_training"]),
        minimum=1,
    )
    spec["stop"], spec["max_trials"] = top["stop"], top["max_trials"]

    b = training["max_batch_size"]
    t = TrainingSection(
        sigma=check_real(
            "training.sigma",
            _number("training.sigma", training["sigma"]),
            minimum=0.0,
            strict_minimum=True,
        ),
        n=check_int("training.n", _integer("training.n", training["n"]), minimum=1),
        batch_size=check_int(
            "training.batch_size",
            _integer("training.batch_size", training["batch_size"]),
            minimum=1,
        ),
        epochs=check_int(
            "training.epochs", _integer("training.epochs", training["epochs"]), minimum=1
        ),
        max_batch_size=None if b is None else check_int(
            "training.max_batch_size", _integer("training.max_batch_size", b), minimum=1
        ),
        lr=None if training["lr"] is None else check_real(
            "training.lr", _number("training.lr", training["lr"]), minimum=0.0, strict_minimum=True
        ),
        clip=check_real(
            "training.clip",
            _number("training.clip", training["clip"]),
            minimum=0.0,
            strict_minimum=True,
        ),
    )
    result = AuditSpec.from_keys(spec, t, name=name, source=source)
    if "shard_size" not in data and result.mode.trains and not result.kind.one_run:
        from audit.run.sizing import auto_shard_size  # sized from the memory estimate

        result = replace(
            result, evidence=replace(result.evidence, shard_size=auto_shard_size(result))
        )
    _check_combinations(result)
    return result


def _also(key: str) -> str:
    """``'; or noise_multiplier'``: the aliases accepted for a canonical ``key`` (or '')."""
    aliases = _ALIASES_OF.get(key, ())
    return f"; or {' / '.join(aliases)}" if aliases else ""


def _with_aliases(keys: Mapping[str, str], aliases: Mapping[str, str]) -> dict[str, str]:
    """``keys`` (name -> meaning) and the aliases of those keys (alias -> its key's meaning)."""
    return {
        **keys,
        **{alias: keys[canonical] for alias, canonical in aliases.items() if canonical in keys},
    }


def _check_keys(data: Mapping[str, object]) -> None:
    """Unknown keys: name the closest valid one, or the table a misplaced key (or alias) belongs
    in (a top-level ``noise_multiplier`` is told to move under [training])."""
    training_names = _with_aliases(TRAINING_KEYS, {**TRAINING_ALIASES, **TRAINING_CONVERSIONS})
    top_names = _with_aliases(TOP_LEVEL_KEYS, TOP_LEVEL_ALIASES)
    for key, value in data.items():
        if key in TABLES:
            if isinstance(value, Mapping):
                for inner in value:
                    if inner not in TABLE_KEYS[key]:
                        _unknown(f"[{key}]", inner, TABLE_KEYS[key], elsewhere=top_names)
            continue
        if key not in TOP_LEVEL_KEYS:
            _unknown("the top level", key, TOP_LEVEL_KEYS, elsewhere=training_names,
                     table="training")


def _unknown(
    where: str,
    key: str,
    allowed: Mapping[str, str],
    *,
    elsewhere: Mapping[str, str],
    table: str | None = None,
) -> None:
    if key in elsewhere:
        fix = f"move it under [{table}]" if table else "move it to the top level, above any [table]"
        alias = f" (an alias of {_ALL_ALIASES[key]!r})" if key in _ALL_ALIASES else ""
        raise ValueError(f"key {key!r}{alias} does not belong at {where}; {fix}")
    aliases = {  # the aliases this table accepts: those of its own keys
        alias: canonical for alias, canonical in _ALL_ALIASES.items() if canonical in allowed
    }
    hint = closest(key, [*allowed, *aliases])
    suggestion = f" Did you mean {hint!r}?" if hint else ""
    if hint in aliases:
        suggestion = f" Did you mean {hint!r} (an alias of {aliases[hint]!r})?"
    raise ValueError(
        f"unknown key {key!r} at {where}; valid keys: {', '.join(allowed)}.{suggestion}"
    )


def _uses_max_batch_size(sampler: str) -> bool:
    """Whether ``sampler`` takes the padded batch size B (a parameter it declares)."""
    return "max_batch_size" in get_sampler(sampler).parameters


def _check_combinations(spec: AuditSpec) -> None:
    """The combinations that cannot run, each with its fix."""
    t = spec.training
    if t.batch_size > t.n:
        raise ValueError(f"training.batch_size={t.batch_size} must be <= training.n={t.n}")
    fixed = [s for s in spec.experiment.samplers if get_sampler(s).fixed_size]
    if fixed and t.n % t.batch_size:
        n, b = t.n, t.batch_size
        raise ValueError(
            f"samplers {', '.join(fixed)} need training.n to be a multiple of training.batch_size "
            f"(n = b*T); got n={n}, batch_size={b}. Use n={n - n % b} or a batch_size that "
            f"divides {n}"
        )
    padded = [s for s in spec.experiment.samplers if _uses_max_batch_size(s)]
    if padded and t.max_batch_size is None:
        raise ValueError(
            f"sampler {padded[0]!r} needs training.max_batch_size (the padded batch size B, "
            "an integer >= 1); add it under [training]"
        )
    if t.max_batch_size is not None and not padded:
        users = ", ".join(repr(s) for s in sampler_names() if _uses_max_batch_size(s))
        raise ValueError(
            f"training.max_batch_size={t.max_batch_size} is only used by sampler {users}, "
            "which is not in samplers; remove it or add the sampler"
        )
    isolated_shuffles = [s for s in spec.experiment.samplers if get_sampler(s).isolated_needs_dirac]
    if (
        spec.mode.trains
        and spec.experiment.canary == "input"
        and "isolated" in spec.experiment.threat_models
        and isolated_shuffles
    ):
        raise ValueError(
            "canary='input' with 'isolated' in threat_models and samplers "
            f"{', '.join(isolated_shuffles)} "
            "is refused: the shuffles' isolated theory assumes that no other example moves the "
            "canary's "
            "parameters, which only canary='dirac' guarantees. Allowed: canary='dirac' with "
            "threat_models=['isolated'], or canary='input' with threat_models=['adversarial'] or "
            "with samplers "
            f"{', '.join(s for s in sampler_names() if not get_sampler(s).isolated_needs_dirac)} "
            "(worst-case guarantees under both)"
        )
    if not spec.mode.trains:
        if spec.experiment.observation not in SIMULATED_OBSERVATIONS:
            raise ValueError(
                f"mode='simulate' records only observation {', '.join(SIMULATED_OBSERVATIONS)}; "
                f"observation={spec.experiment.observation!r} needs mode='train'"
            )
        if spec.experiment.implementation is not None:
            raise ValueError(
                f"implementation={spec.experiment.implementation!r} trains models, so it needs "
                "mode='train' "
                "(mode='simulate' draws the mechanism directly)"
            )
    if spec.claim.claim == "implementation" and spec.experiment.implementation is None:
        raise ValueError(
            "claim='implementation' audits the epsilon that a training implementation reports, "
            "so it needs implementation = 'package.module:function' or a built-in name (e.g. "
            "'opacus'); otherwise use claim='poisson', 'sampler' or an explicit epsilon"
        )
    if spec.experiment.model != "mlp" and (
        spec.experiment.hidden is not None or spec.experiment.activation is not None
    ):
        raise ValueError(
            f"hidden and activation describe an MLP; model={spec.experiment.model!r} has neither "
            "(remove them or set model='mlp')"
        )
    if spec.execution.scheduler is not None and spec.execution.backend not in CLUSTER_BACKENDS:
        raise ValueError(
            f"scheduler={spec.execution.scheduler!r} is a cluster address; it needs "
            "backend='dask' or 'ray' "
            f"(got backend={spec.execution.backend!r})"
        )
    # whether the backend's package is installed is checked when shards run (audit.run.runner), not
    # here: `audit report` reads stored scores and needs no backend
    if spec.kind.one_run:
        if spec.experiment.threat_models != ("isolated",):
            raise ValueError(
                "audit='one_run' needs threat_models = ['isolated']: an adversarial co-batch at "
                "-C along each of m canary directions cannot exist under clipping"
            )
        if spec.mode.trains and spec.experiment.implementation not in (None, "opacus"):
            raise ValueError(
                "audit='one_run' trains with the built-in engine or implementation = 'opacus'"
            )
        _check_one_run_canary(spec)
        m = spec.one_run.canaries
        assert m is not None  # a one-run spec names its canaries (read with the spec, above)
        if min(spec.evidence.shard_size, m) >= t.n:
            raise ValueError(
                f"audit='one_run': each training holds min(shard_size, canaries) = "
                f"{min(spec.evidence.shard_size, m)} canaries among its n = "
                f"{t.n} examples; "
                "raise training.n or lower shard_size"
            )
    _check_many_canaries(spec)
    if spec.evidence.stop is not None and spec.kind.one_run:
        raise ValueError("stop='decided' runs a multi-run audit (audit = 'multi_run'); remove stop")
    if spec.evidence.stop is not None and spec.shard_count() < 2:
        raise ValueError(
            f"stop='decided' tests after a pilot shard: max_trials={spec.evidence.max_trials} "
            "must exceed "
            f"shard_size={spec.evidence.shard_size} (at least one shard beyond the pilot)"
        )
    if len(spec.experiment.attacks) != len(set(spec.experiment.attacks)):
        raise ValueError(f"attacks={list(spec.experiment.attacks)} lists an attack twice")
    for key in spec.training_keys():
        try:
            spec.mechanism(key)
        except ValueError as error:
            raise ValueError(
                f"sampler {key.sampler!r}, threat model {key.threat_model!r}: {error}"
            ) from None


def _check_many_canaries(spec: AuditSpec) -> None:
    """canaries_per_training = k > 1 (docs/design.md §8.17): k Dirac canaries on k disjoint
    coordinates of a multi-run training, isolated threat model, a sampler with their joint law."""
    k = spec.evidence.canaries_per_training
    if k == 1:
        return
    where = f"canaries_per_training={k}"
    if spec.kind.one_run:
        raise ValueError(
            f"{where} is a key of the multi-run audit; audit='one_run' places its canaries with "
            "canaries = m"
        )
    if spec.experiment.threat_models != ("isolated",):
        raise ValueError(
            f"{where} needs threat_models = ['isolated']: an adversarial co-batch at -C along "
            "each of k "
            "canary directions cannot exist under clipping"
        )
    if spec.experiment.canary != "dirac":
        raise ValueError(
            f"{where} places k Dirac canaries on k disjoint coordinates; set canary = 'dirac'"
        )
    if spec.experiment.implementation is not None:
        raise ValueError(
            f"{where} trains with the built-in engine; remove "
            f"implementation={spec.experiment.implementation!r}"
        )
    if spec.mode.trains and spec.experiment.observation not in ("all_iterates", "last_iterate"):
        raise ValueError(
            f"{where} observes the canaries' coordinates (observation 'all_iterates' or "
            "'last_iterate'); "
            f"got observation={spec.experiment.observation!r}"
        )
    if k >= spec.training.n:
        raise ValueError(
            f"{where}: the k canaries are examples of the n = {spec.training.n}; need k < n"
        )
    for sampler in spec.experiment.samplers:
        chosen = get_sampler(sampler)
        if not chosen.has_canaries_law():
            raise ValueError(
                f"{where}: sampler {sampler!r} has no joint law of k canaries per training; use k "
                "= 1"
            )
        strategy = threshold_strategy(spec.claim.threshold)
        if not chosen.independent_canaries and strategy.needs_independent_trials:
            allowed = " or ".join(repr(name) for name in DEPENDENT_THRESHOLDS)
            raise ValueError(
                f"{where} with sampler {sampler!r} (dependent canaries) needs threshold {allowed}; "
                f"got threshold={spec.claim.threshold!r}"
            )


def _stop_keys(data: Mapping[str, object], top: dict[str, object]) -> bool:
    """stop and max_trials, checked together; with stop = 'decided' the budget max_trials stands for
    trials_in and trials_out (filled into ``top``). Returns whether the audit is sequential."""
    if top["stop"] is None:
        if top["max_trials"] is not None:
            raise ValueError(
                "max_trials is the budget of stop = 'decided'; add stop = 'decided' or remove it"
            )
        return False
    top["stop"] = check_choice("stop", top["stop"], STOPS)
    if top["max_trials"] is None:
        raise ValueError(
            "stop='decided' needs max_trials = N, the budget of trainings per side (IN and OUT "
            "each)"
        )
    budget = check_int("max_trials", _integer("max_trials", top["max_trials"]), minimum=2)
    if "trials_in" in data or "trials_out" in data:
        raise ValueError(
            f"stop='decided' spends up to max_trials={budget} trainings a side; remove trials_in "
            "/ trials_out"
        )
    top["max_trials"] = top["trials_in"] = top["trials_out"] = budget
    return True


def _check_one_run_canary(spec: AuditSpec) -> None:
    """audit = 'one_run': which observation goes with which canary (and implementation).

    Dirac canaries are observed white box (all iterates or the last one) on their own coordinates;
    input canaries (``ood`` or ``mislabeled``, :mod:`audit.training.one_run_canaries`) by their loss
    on the final model (black box) or their last-iterate projection. Opacus trains the Dirac
    canaries on a logistic regression, input canaries on either model.
    """
    canary = check_choice("canary", spec.experiment.canary, tuple(ONE_RUN_OBSERVATIONS))
    allowed = ONE_RUN_OBSERVATIONS[canary]
    if spec.experiment.observation not in allowed:
        other = next(
            c
            for c, kinds in ONE_RUN_OBSERVATIONS.items()
            if spec.experiment.observation in kinds and c != canary
        )
        raise ValueError(
            f"audit='one_run' with canary={canary!r} observes {' or '.join(allowed)}; got "
            f"observation={spec.experiment.observation!r}, which needs canary={other!r}"
        )
    if canary == "input":
        check_choice(
            "input_canary (audit='one_run', canary='input')",
            spec.experiment.input_canary or "ood",
            ONE_RUN_INPUT_CANARIES,
        )
    elif spec.experiment.input_canary is not None:
        raise ValueError(
            f"input_canary={spec.experiment.input_canary!r} describes canary='input'; "
            "audit='one_run' with canary='dirac' "
            "has no input canary (remove input_canary or set canary='input')"
        )
    if (
        spec.experiment.implementation == "opacus"
        and canary == "dirac"
        and spec.experiment.model != "logistic"
    ):
        raise ValueError(
            "audit='one_run' with implementation='opacus' and canary='dirac' trains "
            "model='logistic' "
            f"(got model={spec.experiment.model!r}); canary='input' trains model='logistic' or "
            "'mlp'"
        )


# -- typed readers ------------------------------------------------------------------------


def _string(field: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{field}={value!r} must be a non-empty string")
    return value


def _strings(field: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        raise ValueError(f"{field}={value!r} must be a list, e.g. {field} = [{value!r}]")
    if not isinstance(value, list) or not value:
        raise ValueError(f"{field}={value!r} must be a non-empty list of strings")
    return tuple(_string(f"{field}[{i}]", v) for i, v in enumerate(value))


def _sampler_aliases(value: object) -> object:
    """``samplers`` with each alias users type (``wor``, ``fixed_size``...,
    :data:`audit.core.names.SAMPLER_ALIASES`) replaced by the registered name it stands for;
    anything else as given (checked, with the closest name, by :func:`_choices`)."""
    if not isinstance(value, (list, tuple)):
        return value
    return [
        SAMPLER_ALIASES[s] if isinstance(s, str) and s in SAMPLER_ALIASES
        and s not in sampler_names() else s
        for s in value
    ]


def _choices(field: str, value: object, allowed: tuple[str, ...]) -> tuple[str, ...]:
    names = _strings(field, value)
    for i, name in enumerate(names):
        check_choice(f"{field}[{i}]", name, allowed)
    if len(set(names)) != len(names):
        raise ValueError(f"{field}={list(names)} lists a name twice")
    return names


def _boolean(field: str, value: object) -> bool:
    """A TOML boolean; anything else is refused by name (a 0/1 or a ``"true"`` string would
    otherwise pass as truthy)."""
    if not isinstance(value, bool):
        raise ValueError(f"{field}={value!r} must be true or false (TOML: no quotes)")
    return value


def _integer(field: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(
            f"{field}={value!r} must be an integer (TOML: no quotes, no decimal point)"
        )
    return value


def _number(field: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{field}={value!r} must be a number (TOML: no quotes)")
    return float(value)


def _claim(value: object) -> str | float:
    if isinstance(value, str):
        return check_choice("claim", value, CLAIMS)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(
            f"claim={value!r} must be 'poisson', 'sampler', 'implementation' or an explicit "
            "epsilon > 0"
        )
    eps = float(value)
    if not math.isfinite(eps) or eps <= 0:
        raise ValueError(f"claim={value!r}: an explicit epsilon must be finite and > 0")
    return eps


def _one_run_keys(top: Mapping[str, object]) -> OneRunSection:
    """audit, canaries, guesses: checked together (one_run needs canaries; its trials are them)."""
    audit = AuditKind(check_choice("audit", top["audit"], AUDITS))
    if not audit.one_run:
        for key in ("canaries", "guesses"):
            if top[key] != DEFAULTS[key]:
                raise ValueError(
                    f"{key}={top[key]!r} is a key of the one-run audit; set audit = 'one_run' or "
                    "remove it"
                )
        return OneRunSection(audit=audit)
    if top["canaries"] is None:
        raise ValueError(
            "audit='one_run' needs canaries = m (the number of canaries in the training, e.g. 1000)"
        )
    m = check_int("canaries", _integer("canaries", top["canaries"]), minimum=4)
    if top["trials_in"] != m or top["trials_out"] != m:
        raise ValueError(
            f"audit='one_run' uses its canaries as trials: remove trials_in / trials_out (got "
            f"{top['trials_in']}, {top['trials_out']} with canaries={m})"
        )
    guesses = top["guesses"]
    if isinstance(guesses, str):
        return OneRunSection(
            audit=audit, canaries=m, guesses=check_choice("guesses", guesses, GUESS_STRATEGIES)
        )
    if not isinstance(guesses, list) or len(guesses) != 2:
        raise ValueError(
            f"guesses={guesses!r} must be [k_plus, k_minus], 'bonferroni' or 'split'"
        )
    kp = check_int(
        "guesses[0] (k_plus)", _integer("guesses[0]", guesses[0]), minimum=0, maximum=m
    )
    km = check_int(
        "guesses[1] (k_minus)", _integer("guesses[1]", guesses[1]), minimum=0, maximum=m
    )
    if not 1 <= kp + km <= m:
        raise ValueError(f"guesses={guesses!r}: need 1 <= k_plus + k_minus <= canaries={m}")
    return OneRunSection(audit=audit, canaries=m, guesses=(kp, km))


def _n_jobs(value: object) -> int:
    n_jobs = _integer("n_jobs", value)
    if n_jobs == 0 or n_jobs < -1:
        raise ValueError(f"n_jobs={n_jobs} must be >= 1, or -1 for all cores")
    return n_jobs
